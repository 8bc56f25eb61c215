"""Errors (§0.5): every code, its schema, and the responses an operation lists."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

# The watch types register the watch's codes (backlog_exceeded and the stream-only ones):
# imported here so the document lists them whatever imported this module.
import topics.watch_types  # noqa: F401
from topics.errors import FAMILY_CODES, TopicsError, registered_codes

from .schema import REQUEST_ID_PATTERN, Schema, integer, obj, ref, string

# -- errors (§0.5) -----------------------------------------------------------------------

#: What each code means to a client (prose only: the codes, their statuses and where they
#: travel come from the classes of ``topics.errors``). The document lists the codes in this
#: order, then any code without an entry here, described by its class's docstring.
_MEANINGS: dict[str, str] = {
    "invalid_request": "Malformed request: bad JSON, bad type, bad name, value out of range.",
    "batch_too_large": "More records (or queue seqs) in one request than the server allows.",
    "record_too_large": "One record over TOPICS_MAX_RECORD_BYTES, a meta/tag/node over its "
    "limit, or a batch that can never fit the topic's caps.",
    "unauthorized": "Missing or invalid bearer key (or ?token= where it is not accepted).",
    "forbidden": "The key lacks the route's scope, or the name is outside its prefix allowlist.",
    "not_found": "No route for this path; or an unknown/collected watch session.",
    "topic_not_found": "The topic does not exist (and was not auto-created).",
    "router_not_found": "The router does not exist.",
    "cursor_not_found": "GET of a named cursor the topic does not hold (a read from it "
    "starts at 0).",
    "method_not_allowed": "The path exists but not with this method (see Allow).",
    "not_acceptable": "An SSE stream GET whose Accept does not allow text/event-stream.",
    "request_timeout": "Our extension (408): the body did not arrive within "
    "TOPICS_HTTP_BODY_TIMEOUT_MS of the head; the connection is closed.",
    "payload_too_large": "The body (or its gzip-decoded size) exceeds TOPICS_MAX_BODY_BYTES.",
    "unsupported_media_type": "A body without Content-Type: application/json (utf-8), or a "
    "Content-Encoding other than gzip/identity.",
    "router_cycle": "The router would close a directed cycle (and allow_cycle is false).",
    "topic_exists_incompatible": "Changing a topic's type, or a second source into a "
    "router's derived dest (detail.reason = router_dest_fan_in).",
    "topic_not_empty": "DELETE ?if_empty=true on a topic that holds records.",
    "not_a_queue": "A queue operation on a topic whose type is not queue.",
    "head_mismatch": "A write whose expected_head_seq is not the topic's head_seq "
    "(compare-and-append); detail.head_seq holds the actual head; nothing appended.",
    "producer_fenced": "A write whose epoch is below the highest the topic has seen for its "
    "producer_id (a newer instance took over); detail.current_epoch; nothing appended.",
    "cursor_conflict": "A cursor commit whose expect_seq is not the committed seq "
    "(detail.seq holds it); nothing changed.",
    "backlog_exceeded": "A watched topic is further behind than its max_backlog and the watch "
    'asked on_backlog: "error" (POST /v0/watch, a WebSocket subscribe); detail: topic, '
    "from_seq, head_seq, backlog, max_backlog.",
    "topic_full": "A write to a full topic whose discard policy is reject; nothing appended.",
    "throttled": "CPU pressure (detail.retry_after_ms) or a resource cap (detail.limit, "
    "detail.max); carries Retry-After.",
    "not_ready": "The engine is still recovering its WAL (detail.replay_progress); on "
    "/v0/ready also storage refusing writes (detail.storage) or connections not accepted "
    "(detail.accepting); carries Retry-After.",
    "shutting_down": "The server is draining after a signal; carries Retry-After.",
    "internal": "A bug or a storage failure; the message never reveals internals.",
    "insufficient_storage": "Our extension (507): the data directory's disk is full or below "
    "TOPICS_MIN_FREE_BYTES. detail.outcome is not_stored (refused before any change) or "
    "unknown (applied while the disk filled; durable if space returns before a restart).",
}


def _meaning(code: str, cls: type[TopicsError]) -> str:
    """The prose of ``code``: its entry in :data:`_MEANINGS`, else its class's docstring."""
    if code in _MEANINGS:
        return _MEANINGS[code]
    doc = " ".join((cls.__doc__ or "").split("\n\n", 1)[0].split())
    if not doc:
        raise ValueError(
            f"error code {code!r} ({cls.__name__}) has no description: give the class a "
            "docstring or the code an entry in openapi/errors.py's _MEANINGS"
        )
    return doc


def _codes(stream_only: bool) -> dict[str, type[TopicsError]]:
    registered = registered_codes()
    unknown = sorted(set(_MEANINGS) - set(registered))
    if unknown:
        raise ValueError(f"_MEANINGS describes codes no error class registers: {unknown}")
    ordered = [*_MEANINGS, *(code for code in registered if code not in _MEANINGS)]
    return {
        code: registered[code]
        for code in ordered
        if code not in FAMILY_CODES and registered[code].stream_only is stream_only
    }


def error_codes() -> dict[str, str]:
    """Every code an HTTP answer can carry, with what it means: every registered error
    class but the family bases and the stream-only codes (``topics.errors``)."""
    return {code: _meaning(code, cls) for code, cls in _codes(stream_only=False).items()}


def stream_error_codes() -> dict[str, int]:
    """Codes that only travel inside a stream (an SSE ``event: error`` or a WebSocket
    ``{"op": "error"}`` frame), never as an HTTP status: code -> the HTTP-aligned number."""
    return {code: cls.status for code, cls in _codes(stream_only=True).items()}


_DETAILS: dict[str, Schema] = {
    "invalid_request": obj(
        {
            "field": string("The offending field (a dotted path such as records[3].tag)."),
            "path": string("Where a malformed body broke (JSONPath-like, e.g. $.records[0])."),
            "offset": integer("Byte offset in the body where it broke.", minimum=0),
            "index": integer("Index of the offending record.", minimum=0),
        }
    ),
    "batch_too_large": obj(
        {"records": integer("Records in the request.", minimum=0), "max": integer("The limit.")}
    ),
    "forbidden": obj(
        {
            "required_scopes": {"type": "array", "items": {"type": "string"}},
            "missing_scopes": {"type": "array", "items": {"type": "string"}},
            "topic": string("The path's name (checked before it is validated)."),
            "router": string("The path's name (checked before it is validated)."),
            "source": {"type": "string"},
            "dest": {"type": "string"},
        }
    ),
    "not_found": obj({"path": string("The path that matched no route.")}),
    "topic_not_found": obj({"topic": {"type": "string"}}),
    "router_not_found": obj({"router": {"type": "string"}}),
    "method_not_allowed": obj(
        {
            "method": {"type": "string"},
            "allowed": {"type": "array", "items": {"type": "string"}},
        },
        ["method", "allowed"],
    ),
    "request_timeout": obj({"body_timeout_ms": integer("TOPICS_HTTP_BODY_TIMEOUT_MS.", minimum=1)}),
    "payload_too_large": obj({"max_body_bytes": integer("TOPICS_MAX_BODY_BYTES.", minimum=0)}),
    "unsupported_media_type": obj(
        {
            "content_type": {"type": ["string", "null"]},
            "content_encoding": {"type": "string"},
        }
    ),
    "router_cycle": obj(
        {"cycle": {"type": "array", "items": ref("TopicName"), "examples": [["A", "B", "A"]]}}
    ),
    "topic_exists_incompatible": obj(
        {
            "topic": {"type": "string"},
            "type": {"type": "string"},
            "requested_type": {"type": "string"},
            "reason": {"type": "string", "examples": ["router_dest_fan_in"]},
        }
    ),
    "topic_not_empty": obj({"topic": {"type": "string"}, "count": {"type": "integer"}}),
    "head_mismatch": obj(
        {
            "topic": {"type": "string"},
            "expected_head_seq": {"type": "integer"},
            "head_seq": integer("The topic's actual head_seq.", minimum=0),
        },
        ["topic", "expected_head_seq", "head_seq"],
    ),
    "producer_fenced": obj(
        {
            "topic": {"type": "string"},
            "producer_id": {"type": "string"},
            "epoch": integer("The write's epoch.", minimum=0),
            "current_epoch": integer("The highest epoch the topic has seen.", minimum=0),
        },
        ["topic", "producer_id", "epoch", "current_epoch"],
    ),
    "topic_full": obj(
        {
            "topic": {"type": "string"},
            "cap_records": {"type": "integer"},
            "cap_bytes": {"type": "integer"},
            "count": {"type": "integer"},
            "bytes": {"type": "integer"},
        }
    ),
    "throttled": {
        "type": "object",
        "properties": {
            "retry_after_ms": integer("CPU pressure: wait this long.", minimum=0),
            "limit": string("Resource cap: which one (max_topics, max_total_bytes, ...)."),
            "max": integer("Resource cap: its value.", minimum=0),
        },
        "anyOf": [{"required": ["retry_after_ms"]}, {"required": ["limit", "max"]}],
    },
    "not_ready": {
        "type": "object",
        "properties": {
            "replay_progress": {"type": "number", "minimum": 0, "maximum": 1},
            "storage": string(
                "/v0/ready: writes are refused for storage.",
                enum=["below_reserve", "disk_full", "wal_failed"],
            ),
            "accepting": string(
                "/v0/ready: accept() fails with this errno (EMFILE, ENFILE): out of descriptors."
            ),
        },
        "anyOf": [
            {"required": ["replay_progress"]},
            {"required": ["storage"]},
            {"required": ["accepting"]},
        ],
    },
}


def schemas() -> dict[str, Schema]:
    """This module's entries of ``components.schemas``, in document order."""
    codes = error_codes()
    schemas: dict[str, Schema] = {
        "ErrorObject": obj(
            {
                "code": string(
                    "Stable machine-readable snake_case code: branch on this.",
                    enum=sorted(codes),
                ),
                "message": string(
                    "Human-readable; may change between versions; never parse it.", minLength=1
                ),
                "detail": {"type": "object", "description": "Optional structured context."},
                "request_id": string(
                    "The response's X-Request-ID, repeated for quoting.", pattern=REQUEST_ID_PATTERN
                ),
            },
            ["code", "message", "request_id"],
        ),
        "ErrorEnvelope": obj(
            {"error": ref("ErrorObject"), "performance": ref("Performance")},
            ["error"],
            closed=True,
            description="Every non-2xx answer (§0.5). The presence of a top-level error "
            "member is the only success/failure discriminator.",
        ),
    }
    for code, meaning in codes.items():
        error: Schema = {"properties": {"code": {"const": code}}}
        if code in _DETAILS:
            error["properties"]["detail"] = _DETAILS[code]
        schemas[f"Error.{code}"] = {
            "description": f"{status_of(code)} {code}: {meaning}",
            "allOf": [ref("ErrorEnvelope"), {"properties": {"error": error}}],
        }
    return schemas


def status_of(code: str) -> int:
    """The HTTP status an error code is answered with (from :mod:`topics.errors`)."""
    cls = registered_codes().get(code)
    if cls is None or code in FAMILY_CODES or cls.stream_only:
        raise KeyError(f"unknown error code {code!r}")
    return cls.status


_HEADERS_FOR_STATUS = {
    401: {"WWW-Authenticate": {"$ref": "#/components/headers/WWW-Authenticate"}},
    405: {"Allow": {"$ref": "#/components/headers/Allow"}},
    429: {"Retry-After": {"$ref": "#/components/headers/Retry-After"}},
    503: {"Retry-After": {"$ref": "#/components/headers/Retry-After"}},
}


def error_response(group: Sequence[str]) -> dict[str, Any]:
    """The response object of one status answering exactly the codes of ``group``."""
    status = status_of(group[0])
    codes = error_codes()
    schema: Schema = (
        ref(f"Error.{group[0]}")
        if len(group) == 1
        else {"anyOf": [ref(f"Error.{c}") for c in group]}
    )
    return {
        "description": "; ".join(f"{c}: {codes[c]}" for c in group),
        "headers": response_headers(status),
        "content": {"application/json": {"schema": schema}},
    }


def error_responses(codes: Iterable[str]) -> dict[str, Any]:
    """One response per status, accepting exactly ``codes`` (rule 2); a status answered
    with a single code refers to that code's entry of ``components.responses``."""
    by_status: dict[int, list[str]] = {}
    for code in codes:
        group = by_status.setdefault(status_of(code), [])
        if code not in group:
            group.append(code)
    out: dict[str, Any] = {}
    for status in sorted(by_status):
        group = by_status[status]
        if len(group) == 1:
            out[str(status)] = {"$ref": f"#/components/responses/{group[0]}"}
        else:
            out[str(status)] = error_response(group)
    return out


def response_headers(status: int) -> dict[str, Any]:
    """The headers a response of ``status`` carries (X-Request-ID, and Retry-After etc.)."""
    headers: dict[str, Any] = {"X-Request-ID": {"$ref": "#/components/headers/X-Request-ID"}}
    headers.update(_HEADERS_FOR_STATUS.get(status, {}))
    return headers


# Error sets shared by many routes (the dispatcher's gate, body reading).
AUTH = ("unauthorized", "forbidden")
GATE = (*AUTH, "throttled", "not_ready", "internal")  # every non-probe route
STORE = ("insufficient_storage",)  # every route that changes stored state
BODY = ("invalid_request", "request_timeout", "payload_too_large", "unsupported_media_type")
NAMED = ("invalid_request",)  # a {topic}/{router} in the path is validated (400)
