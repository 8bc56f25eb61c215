"""The route table: every HTTP route of /v0, declared once, matched once per request.

A routes module exposes ``ROUTES: tuple[Route, ...]``; ``app.ROUTE_MODULES`` lists the
modules (add yours there: routers, watch, queues). The dispatcher matches each request
here once, runs the gate (auth, scopes, prefixes, caps, readiness, pressure) and calls
the route's handler. ``fast=True`` marks the routes the fast lane may serve on its own
connections (hot POSTs and the stream GETs); every route runs the same way either way.

Rules:
1. Patterns are literal segments with at most one ``{param}`` segment, followed by an
   optional literal suffix (``/v0/topics/{topic}/diff``). A parameter never contains '/'.
   The suffix may end in one more parameter segment (``/v0/topics/{topic}/cursors/{cursor}``):
   ``param`` is still the first, the handler reads the last segment of the path itself.
2. A path that matches no pattern is ``404 not_found``; a pattern matched with a method it
   does not declare is ``405 method_not_allowed`` with an ``Allow`` header.
3. The scopes a route needs come from :data:`topics.auth.ROUTE_SCOPES` (one table for
   every frontend) unless the route says otherwise.
4. Every API route names its OpenAPI operation (``op``), declared once in the area module
   of ``frontends/http/openapi``; the document's ``paths`` are made from this table, and
   building it fails on a route without an operation or an operation without a route.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from topics.auth import Scope, required_scopes
from topics.errors import MethodNotAllowedError, NotFoundError

from .state import Reply, RequestContext

__all__ = ["Handler", "Route", "RouteTable"]

Handler = Callable[[RequestContext], Awaitable[Reply]]
#: How a tail parameter segment is keyed in the table.
_TAIL = "{}"


@dataclass(frozen=True, slots=True)
class Route:
    """One method + path pattern and how the dispatcher treats it.

    Attributes:
        method: "GET", "PUT", "POST", "DELETE".
        pattern: e.g. "/v0/topics/{topic}/diff" (rule 1).
        handler: ``async (ctx) -> Reply``.
        fast: the fast lane may serve it (a hot POST, or a stream GET).
        body: the dispatcher reads the (bounded, decoded) body into ``ctx.body`` first.
        probe: liveness/readiness/metrics: no readiness or pressure check, and auth only
            when ``TOPICS_PROBE_AUTH`` is set (metrics sets ``always_auth``).
        always_auth: with ``probe``, still authenticate whenever keys are configured.
        pressure: "gate" sheds in the dispatcher under CPU pressure; "handler" leaves it to
            the handler (a write may opt out with ``disable_backpressure``); "never".
        query_token: accept the dev-only ``?token=`` credential (SSE streams only).
        scopes: the scopes needed (default: ``topics.auth.ROUTE_SCOPES``).
        op: the operationId of the route's entry in the OpenAPI document: an
            ``Operation`` of an area module of ``frontends/http/openapi`` (rule 4).
        api: False for a route outside the /v0 API (the web console), which has no ``op``.
    """

    method: str
    pattern: str
    handler: Handler
    fast: bool = False
    body: bool = False
    probe: bool = False
    always_auth: bool = False
    pressure: Literal["gate", "handler", "never"] = "gate"
    query_token: bool = False
    scopes: frozenset[Scope] | None = None
    op: str = ""
    api: bool = True
    param: str = field(init=False, default="")
    prefix: str = field(init=False, default="")
    suffix: str = field(init=False, default="")

    def __post_init__(self) -> None:
        if self.scopes is None:
            object.__setattr__(self, "scopes", required_scopes(self.method, self.pattern))
        head, brace, rest = self.pattern.partition("{")
        if brace:
            param, close, suffix = rest.partition("}")
            base, _, last = suffix.rpartition("/")
            if base and last.startswith("{") and last.endswith("}"):
                suffix = base + "/" + _TAIL  # a tail parameter (rule 1)
            else:
                base = suffix
            if not close or not head.endswith("/") or "{" in base or "}" in base:
                raise ValueError(f"route pattern {self.pattern!r}: one {{param}} segment at most")
            if suffix and not suffix.startswith("/"):
                raise ValueError(
                    f"route pattern {self.pattern!r}: the parameter is a whole segment"
                )
            object.__setattr__(self, "param", param)
            object.__setattr__(self, "prefix", head)
            object.__setattr__(self, "suffix", suffix)

    @property
    def needed_scopes(self) -> frozenset[Scope]:
        return self.scopes or frozenset()


class RouteTable:
    """Exact-path routes in a dict, parameterised ones indexed by (prefix, suffix)."""

    def __init__(self, routes: Iterable[Route] = ()) -> None:
        self._static: dict[str, dict[str, Route]] = {}
        self._dynamic: dict[str, dict[str, dict[str, Route]]] = {}
        self.routes: list[Route] = []
        for route in routes:
            self.add(route)

    def add(self, route: Route) -> None:
        if route.param:
            by_suffix = self._dynamic.setdefault(route.prefix, {})
            methods = by_suffix.setdefault(route.suffix, {})
        else:
            methods = self._static.setdefault(route.pattern, {})
        if route.method in methods:
            raise ValueError(f"duplicate route {route.method} {route.pattern}")
        methods[route.method] = route
        self.routes.append(route)

    def _lookup(self, path: str) -> tuple[dict[str, Route] | None, str]:
        """The routes by method whose pattern matches ``path``, and the parameter value."""
        methods = self._static.get(path)
        if methods is not None:
            return methods, ""
        for prefix, by_suffix in self._dynamic.items():
            if path.startswith(prefix):
                value, slash, tail = path[len(prefix) :].partition("/")
                if value:
                    methods = by_suffix.get(slash + tail)
                    if methods is None and tail:
                        base, _, last = tail.rpartition("/")
                        if last and base:
                            methods = by_suffix.get(f"/{base}/{_TAIL}")
                    if methods is not None:
                        return methods, value
        return None, ""

    def find(self, method: str, path: str) -> tuple[Route, str] | None:
        """The route for ``method path`` and its parameter value, or None (no error built:
        the lane asks this of every request head, hostile ones included)."""
        methods, param = self._lookup(path)
        if methods is None:
            return None
        route = methods.get(method)
        return None if route is None else (route, param)

    def match(self, method: str, path: str) -> tuple[Route, str]:
        """The route for ``method path`` and its parameter value ("" when none).

        Raises:
            NotFoundError: no pattern matches the path (404 not_found).
            MethodNotAllowedError: the path matches, the method does not (405).
        """
        methods, param = self._lookup(path)
        if methods is None:
            raise NotFoundError(
                f"no route for {_shown(path)}; see the /v0 endpoint list",
                detail={"path": path[:1024]},
            )
        route = methods.get(method)
        if route is None:
            allowed = sorted(methods)
            raise MethodNotAllowedError(
                f"{method} is not allowed on {_shown(path)}; use {', '.join(allowed)}",
                detail={"method": method, "allowed": allowed},
            )
        return route, param


def _shown(path: str, limit: int = 200) -> str:
    """``path`` as an error quotes it: bounded, so a 60 KB path is not echoed whole."""
    return repr(path) if len(path) <= limit else repr(path[:limit]) + "..."
