"""The OpenAPI 3.1 description of the whole /v0 surface, served at ``GET /v0/openapi.json``.

The document is built from the route table (:func:`build_document`): each API route
names its operation in ``Route.op``, and the operations and schemas are declared per area
in this package (``topic``, ``records``, ``routers``, ``watch``, ``ws``, ``queues``,
``cursors``, ``probes``; ``schema``, ``errors``, ``operation``, ``parameters``,
``frames`` are shared; ``builder`` joins routes to operations). ``docs/openapi.json`` is a generated copy;
rebuild it (and docs/ENDPOINTS.md) with::

    python -m topics.frontends.http.openapi > docs/openapi.json
    python scripts/gen_endpoints.py

Where a new route's documentation goes: give its ``Route(...)`` an ``op="<operationId>"``
and declare that :class:`~.operation.Operation` in the area module's ``OPERATIONS`` (its
request/response schemas in the same module's ``schemas()``). The builder refuses a route
without an operation and an operation without a route (``builder`` rule 1).

Rules:
1. The document covers every route of the table (spec/004: §1-§3, §5, §6 routers, §7
   watch + SSE, §7.x WebSocket, §8 probes, §10 queues) plus this route itself; the
   console (``Route.api`` false) is not part of the API. Path templates are the route
   table's patterns (``/v0/topics/{topic}/claim``, never ``{q}``).
2. Every operation lists every error code it can answer, grouped by status; each status's
   schema accepts exactly those codes (one ``Error.<code>`` schema per code, each the §0.5
   envelope with ``error.code`` pinned). The codes and their statuses come from the
   registry of :mod:`topics.errors`, so a code cannot be missing or drift to another
   status here. 404 ``not_found`` (no route) and 405
   ``method_not_allowed`` (route, wrong method) can answer any path: every code has its
   entry in ``components.responses`` (operations refer to it when one code is alone at its
   status).
3. Request bodies the server checks member by member (topic config, write, diff, delete)
   say ``additionalProperties: false``; responses never do (clients must ignore unknown
   response fields, §0.1).
4. Security: bearer keys everywhere (the role names of each requirement are the scopes
   the route needs, ``Route.needed_scopes``); the dev-only ``?token=`` query credential
   only on the routes that accept it (``Route.query_token``: the two SSE stream GETs); the
   probes and this document need a key only with ``TOPICS_PROBE_AUTH``. With no keys
   configured (dev mode) nothing needs one.
5. ``GET /v0/openapi.json`` is unauthenticated by default (it is a probe-class route: no
   readiness check, never shed) and, unlike the API's JSON answers, carries no
   ``performance`` object: the body is exactly the document of the serving app's table.
6. The generated copy carries the banner ``"x-generated-by"`` naming the command above;
   ``tests/integration/test_openapi.py`` fails when the copy and the served document
   disagree, or when the route table and the document do.
"""

from __future__ import annotations

from topics.wire.envelope import json_bytes

from ..routing import Route
from ..state import Reply, RequestContext
from .builder import GENERATED_BY, DocumentError, build_document, document_text
from .errors import error_codes, status_of, stream_error_codes

__all__ = [
    "GENERATED_BY",
    "ROUTES",
    "DocumentError",
    "build_document",
    "document_text",
    "error_codes",
    "status_of",
    "stream_error_codes",
]

#: The served document's bytes, for the one route table it was built from.
_served: tuple[tuple[Route, ...], bytes] | None = None


async def get_openapi(ctx: RequestContext) -> Reply:
    """GET /v0/openapi.json — the document of the serving app's routes (rule 5)."""
    global _served
    routes = ctx.state.routes
    if _served is None or _served[0] is not routes:
        _served = (routes, json_bytes(build_document(routes)))
    return Reply(200, _served[1])


ROUTES = (Route("GET", "/v0/openapi.json", get_openapi, probe=True, op="openapi"),)
