"""Parameters, response headers and security schemes shared by the operations."""

from __future__ import annotations

from typing import Any

from .schema import REQUEST_ID_PATTERN, Schema, ref


def parameters() -> dict[str, Any]:
    """``components.parameters``: the query, header and path parameters operations name.

    Kept whole: a declarative table, read top to bottom like the document it makes.
    """

    def query(name: str, schema: Schema, description: str) -> dict[str, Any]:
        return {
            "name": name,
            "in": "query",
            "required": False,
            "schema": schema,
            "description": description,
        }

    qbool = {"type": "string", "enum": ["true", "false", "1", "0"]}
    qint = {"type": "string", "pattern": "^[0-9]+$"}
    return {
        "X-Request-ID": {
            "name": "X-Request-ID",
            "in": "header",
            "required": False,
            "description": "Echoed in the response (and error.request_id) when it is 1-128 "
            "chars of [A-Za-z0-9._-]; otherwise the server assigns a UUID4.",
            "schema": {"type": "string"},
        },
        "Content-Encoding": {
            "name": "Content-Encoding",
            "in": "header",
            "required": False,
            "description": "gzip bodies are decoded (the decoded size counts against "
            "TOPICS_MAX_BODY_BYTES); anything but gzip/identity is 415.",
            "schema": {"type": "string", "enum": ["gzip", "x-gzip", "identity"]},
        },
        "topic": {
            "name": "topic",
            "in": "path",
            "required": True,
            "description": "Topic name (a bad one is 400 invalid_request).",
            "schema": ref("TopicName"),
        },
        "router": {
            "name": "router",
            "in": "path",
            "required": True,
            "description": "Router name (percent-encode '>' as %3E).",
            "schema": ref("RouterName"),
        },
        "cursor_name": {
            "name": "cursor",
            "in": "path",
            "required": True,
            "description": "The named cursor (a consumer group): the topic-name charset.",
            "schema": ref("CursorName"),
        },
        "wid": {
            "name": "wid",
            "in": "path",
            "required": True,
            "description": "The watch session id from POST /v0/watch.",
            "schema": {"type": "string"},
        },
        "touch": query("touch", qbool, "Bump the topic's auto-priority recency clock."),
        "prefix": query("prefix", {"type": "string"}, "Only names starting with this."),
        "page_size": query(
            "page_size",
            qint,
            "Page size; default 100, at most 1000 (larger values are clamped); 0 is 400.",
        ),
        "cursor": query(
            "cursor",
            {"type": "string"},
            "next_cursor of the previous page (opaque; a corrupt one is 400).",
        ),
        "if_empty": query(
            "if_empty",
            qbool,
            "Delete only when the topic holds no records (else 409 topic_not_empty).",
        ),
        "return_seqs": query(
            "return_seqs", qbool, "false omits seqs from the answer (the body member wins)."
        ),
        "Idempotency-Key": {
            "name": "Idempotency-Key",
            "in": "header",
            "required": False,
            "description": "Dedupe key used when the body has no idempotency_key (§0.8).",
            "schema": {"type": "string", "minLength": 1, "maxLength": 256},
        },
        "lenient": query(
            "lenient",
            qbool,
            "Drop unknown topics instead of answering 404 (at least one must exist).",
        ),
        "Last-Event-ID": {
            "name": "Last-Event-ID",
            "in": "header",
            "required": False,
            "description": "Rewind the session to this composite cursor (never advances it).",
            "schema": {"type": "string"},
        },
        "token": query(
            "token",
            {"type": "string"},
            "DEV-ONLY bearer fallback for browser EventSource (accepted only on the SSE stream "
            "GETs; refused with 401 everywhere else). Leaks via logs, history and proxies.",
        ),
        "work_node": {
            "name": "node",
            "in": "query",
            "required": True,
            "description": "The worker identity the pushed jobs are leased to.",
            "schema": ref("NodeId"),
        },
        "work_max": query(
            "max", qint, "Target in-flight depth (default 1, clamped to TOPICS_MAX_CLAIM)."
        ),
        "work_lease_ms": query("lease_ms", qint, "Lease of pushed jobs (default: the topic's)."),
        "router_source": query("source", ref("TopicName"), "Only routers from this source topic."),
        "router_dest": query("dest", ref("TopicName"), "Only routers into this dest topic."),
    }


def headers() -> dict[str, Any]:
    """``components.headers``: the response headers the error statuses carry."""
    return {
        "X-Request-ID": {
            "description": "On every response: the client's well-formed id, or a fresh UUID4.",
            "required": True,
            "schema": {"type": "string", "pattern": REQUEST_ID_PATTERN},
        },
        "Retry-After": {
            "description": "Whole seconds (at least 1) before retrying (429, 503).",
            "required": True,
            "schema": {"type": "string", "pattern": "^[1-9][0-9]*$"},
        },
        "WWW-Authenticate": {
            "description": "Bearer challenge on every 401.",
            "required": True,
            "schema": {"type": "string", "pattern": "^Bearer"},
        },
        "Allow": {
            "description": "The methods the path does allow (405).",
            "required": True,
            "schema": {"type": "string"},
        },
    }


def security_schemes() -> dict[str, Any]:
    """``components.securitySchemes``: the bearer key and the dev-only query token."""
    return {
        "bearerAuth": {
            "type": "http",
            "scheme": "bearer",
            "description": "Authorization: Bearer <key> (§0.2). Keys come from "
            "TOPICS_API_KEYS as key[:scopes[:prefixes]]; the role names of a security "
            "requirement are the scopes the route needs (read, write, delete, admin). A "
            "key's prefix allowlist also applies to the path's topic/router name (403). With "
            "no keys configured (dev mode, loopback only) auth is off and the header is "
            "ignored. Missing/unknown key: 401 unauthorized; lacking scope or prefix: 403.",
        },
        "queryToken": {
            "type": "apiKey",
            "in": "query",
            "name": "token",
            "description": "DEV-ONLY fallback for browser EventSource, accepted only on GET "
            "/v0/watch/{wid} and GET /v0/topics/{topic}/work; on any other route it is "
            "refused with 401. A URL leaks via logs, history and proxies: prefer the header.",
        },
    }
