"""How one operation is declared (:class:`Operation`) and its response helpers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import response_headers
from .schema import ref

#: Appended to the description of every operation that takes a JSON body.
BODY_NOTE = (
    " A body needs Content-Type: application/json (charset utf-8 if given) and may be gzip-encoded."
)


@dataclass(frozen=True, slots=True)
class Operation:
    """What the document says of one route, beyond what the route itself declares.

    The route (:class:`..routing.Route`) gives the method, the path, the path parameter and
    the security (its scopes, ``probe``, ``always_auth``, ``query_token``); its ``op`` names
    the :attr:`op_id` of one Operation here, and :func:`.builder.build_document` joins the two.

    Attributes:
        op_id: the operationId, unique in the document (``Route.op`` refers to it).
        tag: the document section (``builder.TAGS``).
        summary: one line (also the line of docs/ENDPOINTS.md).
        description: the rest, contract section first.
        ok: the success responses by status (:func:`ok_response`, :func:`sse_ok`).
        errors: every error code the route can answer (grouped by status when built).
        params: ``components.parameters`` names besides ``X-Request-ID``, the path's own
            and the route's query parameters (``Route.query``): the headers it reads.
        body: the request body object (:func:`json_body`), None when the route reads none.
        extra: members merged into the operation last (``x-sse-events``, a WebSocket's
            security).
    """

    op_id: str
    tag: str
    summary: str
    description: str
    ok: Mapping[str, Any]
    errors: Sequence[str]
    params: Sequence[str] = ()
    body: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] | None = None


def json_body(schema_name: str, *, required: bool, description: str) -> dict[str, Any]:
    """A JSON request body whose schema is ``components.schemas[schema_name]``."""
    return {
        "required": required,
        "description": description,
        "content": {"application/json": {"schema": ref(schema_name)}},
    }


def ok_response(
    schema_name: str, description: str, statuses: Sequence[int] = (200,)
) -> dict[str, Any]:
    """The success responses, one per status, each a JSON body of ``schema_name``."""
    return {
        str(status): {
            "description": description,
            "headers": response_headers(status),
            "content": {"application/json": {"schema": ref(schema_name)}},
        }
        for status in statuses
    }


def with_arrow(ok: dict[str, Any]) -> dict[str, Any]:
    """A diff's 200 also in Arrow IPC, when the request's Accept asks for it."""
    ok["200"]["content"]["application/vnd.apache.arrow.stream"] = {
        "schema": {
            "type": "string",
            "format": "binary",
            "description": "An Arrow IPC stream (extension; Accept: "
            "application/vnd.apache.arrow.stream): one record batch per window with "
            "columns seq, ts "
            "(int64), node, tag (only with include_tags), data (unless include_data is "
            "false), meta (unless include_meta is false), all utf8, NULL when absent, data "
            "and meta the stored JSON text; the schema metadata key topics.diff holds the "
            "other members of the JSON answer (topic, next_from_seq, head_seq, "
            "earliest_seq, caught_up, tombstone, lag, performance, from_seq and "
            "end_reached when present) as JSON. A plain read (no wait_ms, cursor, commit "
            "or from_ts) whose limit is above TOPICS_MAX_LIMIT gets up to 16 consecutive "
            "windows joined, within limit and max_batch_bytes, with the last window's "
            "cursors; a window that starts with a tombstone heads the next answer.",
        }
    }
    return ok


def sse_ok(description: str) -> dict[str, Any]:
    """The 200 of an SSE stream GET (event payloads: the operation's ``x-sse-events``)."""
    return {
        "200": {
            "description": description,
            "headers": {
                **response_headers(200),
                "Cache-Control": {"schema": {"const": "no-store"}},
                "X-Accel-Buffering": {"schema": {"const": "no"}},
            },
            "content": {
                "text/event-stream": {
                    "schema": {
                        "type": "string",
                        "description": "An SSE stream: retry: 2000 at open, then events "
                        "(payload schemas in x-sse-events) and ': hb <ms>' heartbeat comments.",
                    }
                }
            },
        }
    }


def param_refs(*names: str) -> list[dict[str, str]]:
    """References to ``components.parameters``: ``X-Request-ID`` first, then ``names``."""
    return [{"$ref": f"#/components/parameters/{name}"} for name in ("X-Request-ID", *names)]
