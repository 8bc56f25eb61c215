"""Each route lists exactly the query parameters its handler reads (query_params.py).

The OpenAPI document lists a route's query parameters from ``Route.query``; this reads
each handler's code (and the module's functions it calls) for ``ctx.query_bool``,
``query_int`` and ``query_str`` and checks that the declarations read are the ones the
route lists, each read by the reader its ``kind`` names (``query_str`` may also test a
parameter's presence).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from types import FunctionType
from typing import Any

import pytest

from topics.frontends.http import ROUTE_MODULES
from topics.frontends.http.query_params import QUERY_PARAMS, QueryParam
from topics.frontends.http.state import Route

_READERS = {"query_bool": "bool", "query_int": "int", "query_str": "str"}
API_ROUTES = [route for module in ROUTE_MODULES for route in module.ROUTES]


def _reads(fn: Callable[..., Any], seen: set[Any]) -> set[tuple[str, QueryParam]]:
    """(reader, declaration) of every query read in ``fn`` and the module functions it
    calls."""
    fn = inspect.unwrap(fn)
    if fn in seen or not isinstance(fn, FunctionType):
        return set()
    seen.add(fn)
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    out: set[tuple[str, QueryParam]] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _READERS:
            arg = node.args[0]
            assert isinstance(arg, ast.Name), f"{fn.__name__}: read a declaration by name"
            param = fn.__globals__[arg.id]
            assert isinstance(param, QueryParam), f"{fn.__name__}: {arg.id}"
            out.add((func.attr, param))
        elif isinstance(func, ast.Name):
            callee = fn.__globals__.get(func.id)
            if isinstance(callee, FunctionType) and callee.__module__ == fn.__module__:
                out |= _reads(callee, seen)
    return out


@pytest.mark.parametrize("route", API_ROUTES, ids=lambda r: f"{r.method} {r.pattern}")
def test_a_route_lists_the_query_parameters_its_handler_reads(route: Route) -> None:
    reads = _reads(route.handler, set())
    assert {param for _, param in reads} == set(route.query), (
        f"{route.method} {route.pattern}: its handler reads "
        f"{sorted(p.key for _, p in reads)}, its Route lists {[p.key for p in route.query]}"
    )
    for reader, param in reads:
        assert reader == "query_str" or _READERS[reader] == param.kind, (reader, param.key)


def test_every_declared_parameter_is_read_somewhere() -> None:
    read = {param for route in API_ROUTES for param in route.query}
    read |= {param for param in QUERY_PARAMS if param.key == "token"}  # the dispatcher's
    assert read == set(QUERY_PARAMS)
