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

from collections.abc import Iterable

from topics.errors import MethodNotAllowedError, NotFoundError

# Route lives beside the request context its handler takes (state.py imports nothing
# from here: issue 29); it is re-exported here, where the route modules take it from.
from .state import TAIL_KEY, Handler, Route

__all__ = ["Handler", "Route", "RouteTable"]


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
                            methods = by_suffix.get(f"/{base}/{TAIL_KEY}")
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
