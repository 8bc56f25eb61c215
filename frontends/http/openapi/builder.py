"""The builder: the OpenAPI document of a route table, each route joined to its operation.

Rules:
1. ``paths`` are made by walking the route table: every API route (``Route.api``) names
   the operationId of exactly one :class:`.operation.Operation` of an area module
   (:data:`AREAS`) in ``Route.op``, and every operation is named by exactly one route.
   Anything else raises :class:`DocumentError` when the document is built, so a route
   cannot be served undocumented nor an operation documented without a route.
2. What the route declares is not repeated in the operation: the method, the path (and
   its path parameter), the security requirement (the route's scopes; ``probe``,
   ``always_auth`` and ``query_token`` choose the alternatives).
3. ``components.schemas`` come from each area's ``schemas()``, in :data:`AREAS` order.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any

from topics import __version__

from ..query_params import QUERY_PARAMS, TOKEN
from ..routing import Route
from . import (
    cursors,
    errors,
    parameters,
    probes,
    queues,
    records,
    routers,
    schema,
    topic,
    watch,
    ws,
)
from .errors import error_codes, error_response, error_responses, status_of
from .operation import Operation, param_refs
from .schema import Schema

__all__ = ["AREAS", "GENERATED_BY", "DocumentError", "build_document", "document_text"]

#: The banner of the generated copy: the command that rebuilds it.
GENERATED_BY = "python -m topics.frontends.http.openapi > docs/openapi.json"

#: The area modules, in the order of their schemas in ``components.schemas``.
AREAS = (schema, errors, topic, records, routers, watch, ws, queues, cursors, probes)

#: Path parameters that are documented from the path template itself.
_PATH_PARAMS = ("topic", "router", "wid")


class DocumentError(ValueError):
    """The route table and the operations do not match one to one (rule 1)."""


TAGS = [
    ("topics", "Create, configure, inspect, list and delete topics (§1)."),
    ("records", "Append, read (diff) and delete records (§2, §3, §5)."),
    ("routers", "Server-side forwarding rules between topics (§6)."),
    ("watch", "Multiplexed SSE watch sessions (§7)."),
    ("websocket", "The JSON-over-WebSocket data plane (§7.x)."),
    ("queues", "Lease-based job delivery on type:queue topics (§10)."),
    ("cursors", "Named consumer cursors: a consumer group's position kept by the server."),
    ("probes", "Liveness, readiness and metrics (§8); online backup."),
    ("meta", "This document."),
]

DESCRIPTION = """\
A persistent event engine exposed as a JSON-first HTTP API (contract spec/004): append-only \
topics with exact seq cursors, tombstones for involuntary loss, routers, watch streams, \
a WebSocket data plane and lease-based queues.

Conventions (§0): request bodies are `application/json` (utf-8), optionally gzip-encoded; \
success bodies are bare objects plus a `performance` object; every non-2xx answer is the \
error envelope `{"error": {"code", "message", "detail"?, "request_id"}, "performance"}` \
and every response carries `X-Request-ID`. 429 and 503 carry `Retry-After`, 401 carries \
`WWW-Authenticate: Bearer`, 405 carries `Allow`. Any path may answer 404 `not_found` (no \
such route) or 405 `method_not_allowed` (components.responses not_found and \
method_not_allowed). Unknown query parameters are ignored; booleans are true/false/1/0. \
Responses may gain members (clients must ignore unknown ones).

Auth: `Authorization: Bearer <key>` when keys are configured (scopes and name-prefix \
allowlists per key); dev mode (no keys, loopback bind) needs none. The probes and this \
document need a key only with TOPICS_PROBE_AUTH.
"""


def operations() -> dict[str, Operation]:
    """Every declared operation by operationId (raises on a repeated id)."""
    out: dict[str, Operation] = {}
    for area in AREAS:
        for operation in getattr(area, "OPERATIONS", ()):
            if operation.op_id in out:
                raise DocumentError(f"operationId {operation.op_id!r} is declared twice")
            out[operation.op_id] = operation
    return out


def _security(route: Route) -> list[dict[str, list[str]]]:
    if route.probe and not route.always_auth:
        return [{}, {"bearerAuth": []}]
    scopes: list[str] = sorted(route.needed_scopes)
    out: list[dict[str, list[str]]] = [{"bearerAuth": scopes}]
    if route.query_token:
        out.append({"queryToken": scopes})
    return out


def _parameters(route: Route, op: Operation) -> list[dict[str, str]]:
    """The operation's parameters: the path's, the query parameters its handler reads
    (``Route.query``), the headers the operation names, and ``?token=`` where the route
    accepts it."""
    path_params = [p for p in _PATH_PARAMS if "{" + p + "}" in route.pattern]
    listed = sorted(set(op.params) & {param.key for param in QUERY_PARAMS})
    if listed:
        raise DocumentError(
            f"operation {op.op_id} lists query parameters {listed}: give them to its "
            "Route's query= (the handler reads them through those declarations)"
        )
    token = [TOKEN.key] if route.query_token else []
    return param_refs(*path_params, *(p.key for p in route.query), *op.params, *token)


def _operation(route: Route, op: Operation) -> dict[str, Any]:
    """The operation object of ``route`` (rule 2): the route's part, then the declared one."""
    out: dict[str, Any] = {
        "operationId": op.op_id,
        "tags": [op.tag],
        "summary": op.summary,
        "description": op.description,
        "security": _security(route),
        "parameters": _parameters(route, op),
    }
    if op.body is not None:
        out["requestBody"] = copy.deepcopy(dict(op.body))
    out["responses"] = {**copy.deepcopy(dict(op.ok)), **error_responses(op.errors)}
    if op.extra:
        out.update(copy.deepcopy(dict(op.extra)))
    return out


def build_paths(routes: Iterable[Route]) -> dict[str, dict[str, Any]]:
    """``paths`` of the API routes among ``routes``, in table order (rule 1).

    Raises:
        DocumentError: an API route without an operation (or naming an unknown one), two
            routes naming one operation, or an operation no route names.
    """
    declared = operations()
    used: dict[str, Route] = {}
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        where = f"{route.method} {route.pattern}"
        if not route.api:
            if route.op:
                raise DocumentError(f"{where} is outside the API but names operation {route.op}")
            continue
        if not route.op:
            raise DocumentError(f"{where} has no operation: give its Route an op=")
        op = declared.get(route.op)
        if op is None:
            raise DocumentError(f"{where} names operation {route.op!r}, which is not declared")
        if route.op in used:
            other = used[route.op]
            raise DocumentError(
                f"{where} and {other.method} {other.pattern} both name operation {route.op!r}"
            )
        used[route.op] = route
        paths.setdefault(route.pattern, {})[route.method.lower()] = _operation(route, op)
    unused = sorted(set(declared) - set(used))
    if unused:
        raise DocumentError(f"operations without a route: {', '.join(unused)}")
    return paths


def build_document(routes: Iterable[Route]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the /v0 routes among ``routes``, as a fresh dict.

    Returns:
        The document, banner included.

    Raises:
        DocumentError: the routes and the operations do not match one to one.

    Example::

        doc = build_document(r for m in ROUTE_MODULES for r in m.ROUTES)
        doc["paths"]["/v0/topics/{topic}"]["post"]["responses"]["422"]
    """
    paths = build_paths(routes)
    codes = error_codes()
    schemas: dict[str, Schema] = {}
    for area in AREAS:
        schemas.update(area.schemas())
    return {
        "openapi": "3.1.0",
        "x-generated-by": GENERATED_BY,
        "info": {
            "title": "topics /v0",
            "version": __version__,
            "summary": "Persistent event engine: topics, records, routers, watch, queues.",
            "description": DESCRIPTION,
            "license": {"name": "MIT", "identifier": "MIT"},
        },
        "jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
        "servers": [
            {
                "url": "http://{host}:{port}",
                "description": "topics-server (plain HTTP; terminate TLS at a proxy).",
                "variables": {
                    "host": {"default": "127.0.0.1", "description": "TOPICS_HOST"},
                    "port": {"default": "4000", "description": "TOPICS_PORT"},
                },
            }
        ],
        "security": [{"bearerAuth": []}],
        "tags": [{"name": name, "description": text} for name, text in TAGS],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "parameters": parameters.parameters(),
            "headers": parameters.headers(),
            "securitySchemes": parameters.security_schemes(),
            # One response per error code; not_found and method_not_allowed can answer any
            # path (rule 2).
            "responses": {code: error_response((code,)) for code in codes},
        },
        "x-error-codes": {code: status_of(code) for code in codes},
    }


def document_text(routes: Iterable[Route]) -> str:
    """The generated copy's text: the document, indented, with a final newline."""
    return json.dumps(build_document(routes), indent=2, ensure_ascii=False) + "\n"
