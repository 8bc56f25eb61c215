"""The OpenAPI document is made from the route table (frontends/http/openapi/builder.py).

Building it fails when a route and an operation are not joined one to one: a route
without an operation, a route naming an operation nobody declared, two routes naming one
operation, an operation no route names. A route outside the API (the console) is left out.
"""

from __future__ import annotations

import re

import pytest

from topics.frontends.http import ROUTE_MODULES
from topics.frontends.http.openapi import DocumentError, build_document
from topics.frontends.http.routing import Route
from topics.frontends.http.state import Reply, RequestContext

ROUTES = tuple(route for module in ROUTE_MODULES for route in module.ROUTES)


async def _handler(ctx: RequestContext) -> Reply:
    raise AssertionError("never called")


def test_the_app_table_builds_and_every_api_route_is_a_path() -> None:
    doc = build_document(ROUTES)
    for route in ROUTES:
        documented = route.method.lower() in doc["paths"].get(route.pattern, {})
        assert documented == route.api, (route.method, route.pattern)
        if route.api:
            assert doc["paths"][route.pattern][route.method.lower()]["operationId"] == route.op


def test_a_route_without_an_operation_is_refused() -> None:
    extra = Route("GET", "/v0/topics/{topic}/stats", _handler)
    with pytest.raises(
        DocumentError, match=re.escape("GET /v0/topics/{topic}/stats has no operation")
    ):
        build_document((*ROUTES, extra))


def test_a_route_naming_an_undeclared_operation_is_refused() -> None:
    extra = Route("GET", "/v0/topics/{topic}/stats", _handler, op="topicStats")
    with pytest.raises(DocumentError, match="'topicStats', which is not declared"):
        build_document((*ROUTES, extra))


def test_two_routes_naming_one_operation_are_refused() -> None:
    extra = Route("GET", "/v0/topics/{topic}/stats", _handler, op="getTopic")
    with pytest.raises(DocumentError, match="both name operation 'getTopic'"):
        build_document((*ROUTES, extra))


def test_an_operation_without_a_route_is_refused() -> None:
    without_delete = [r for r in ROUTES if r.op != "deleteTopic"]
    with pytest.raises(DocumentError, match="operations without a route: deleteTopic"):
        build_document(without_delete)


def test_a_route_outside_the_api_is_left_out_and_has_no_operation() -> None:
    page = Route("GET", "/console/extra", _handler, api=False)
    assert build_document((*ROUTES, page)) == build_document(ROUTES)
    named = Route("GET", "/console/extra", _handler, api=False, op="getTopic")
    with pytest.raises(DocumentError, match="outside the API"):
        build_document((*ROUTES, named))
