"""Parameters, response headers and security schemes shared by the operations."""

from __future__ import annotations

from typing import Any

from ..query_params import QUERY_PARAMS, QueryParam
from .schema import REQUEST_ID_PATTERN, ref


def _query(param: QueryParam) -> dict[str, Any]:
    """A query parameter's entry, from its declaration (frontends/http/query_params.py)."""
    return {
        "name": param.name,
        "in": "query",
        "required": param.required,
        "schema": param.json_schema(),
        "description": param.description,
    }


def parameters() -> dict[str, Any]:
    """``components.parameters``: the header and path parameters operations name, then
    every query parameter a route reads (declared in frontends/http/query_params.py).

    Kept whole: a declarative table, read top to bottom like the document it makes.
    """

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
        "Idempotency-Key": {
            "name": "Idempotency-Key",
            "in": "header",
            "required": False,
            "description": "Dedupe key used when the body has no idempotency_key (§0.8).",
            "schema": {"type": "string", "minLength": 1, "maxLength": 256},
        },
        "Last-Event-ID": {
            "name": "Last-Event-ID",
            "in": "header",
            "required": False,
            "description": "Rewind the session to this composite cursor (never advances it).",
            "schema": {"type": "string"},
        },
        **{param.key: _query(param) for param in QUERY_PARAMS},
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
