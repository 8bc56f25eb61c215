"""The OpenAPI 3.1 description of the whole /v0 surface, served at ``GET /v0/openapi.json``.

The document is built here as a plain dict from hand-written JSON Schemas (no code
generation, no schema library): :func:`build_document`. ``docs/openapi.json`` is a
generated copy; rebuild it with::

    python -m topics.frontends.http.openapi > docs/openapi.json

Rules:
1. The document covers every endpoint of the contract's route table (spec/004: §1-§3, §5,
   §6 routers, §7 watch + SSE, §7.x WebSocket, §8 probes, §10 queues), implemented or
   not yet, plus this route itself. Path templates are the route table's patterns
   (``/v0/topics/{topic}/claim``, never ``{q}``), so the two can be compared mechanically.
2. Every operation lists every error code it can answer, grouped by status; each status's
   schema accepts exactly those codes (one ``Error.<code>`` schema per code, each the §0.5
   envelope with ``error.code`` pinned). The statuses come from :mod:`topics.errors`, so
   a code cannot drift to another status here. 404 ``not_found`` (no route) and 405
   ``method_not_allowed`` (route, wrong method) can answer any path: every code has its
   entry in ``components.responses`` (operations refer to it when one code is alone at its
   status).
3. Request bodies the server checks member by member (topic config, write, diff, delete)
   say ``additionalProperties: false``; responses never do (clients must ignore unknown
   response fields, §0.1).
4. Security: bearer keys everywhere (the role names of each requirement are the scopes
   the route needs, :data:`topics.auth.ROUTE_SCOPES`); the dev-only ``?token=`` query
   credential only on the two SSE stream GETs; the probes and this document need a key
   only with ``TOPICS_PROBE_AUTH``. With no keys configured (dev mode) nothing needs one.
5. ``GET /v0/openapi.json`` is unauthenticated by default (it is a probe-class route: no
   readiness check, never shed) and, unlike the API's JSON answers, carries no
   ``performance`` object: the body is exactly this document.
6. The generated copy carries the banner ``"x-generated-by"`` naming the command above;
   ``tests/integration/test_openapi.py`` fails when the copy, the served document and this
   module disagree, or when the route table and the document do.

Why one module past 1,000 lines (STYLE §8): it is one document, read top to bottom beside
the contract; each section below is one contract section's schemas, then the operations
table. Splitting it would scatter the $ref names that tie the sections together.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, get_args

from topics import __version__
from topics.auth import required_scopes
from topics.errors import error_class_for_code
from topics.settings import Limits
from topics.types import TombstoneReason
from topics.wire.envelope import json_bytes

from .routing import Route
from .state import Reply, RequestContext

#: Every tombstone reason, from the one Literal that declares them (topics.types).
TOMBSTONE_REASONS: list[str] = list(get_args(TombstoneReason))

__all__ = ["GENERATED_BY", "ROUTES", "build_document", "document_text", "main"]

#: The banner of the generated copy: the command that rebuilds it.
GENERATED_BY = "python -m topics.frontends.http.openapi > docs/openapi.json"

Schema = dict[str, Any]

_LIMITS = Limits()
U64_MAX = (1 << 64) - 1

# -- schema helpers ----------------------------------------------------------------------


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(
    properties: Mapping[str, Schema],
    required: Sequence[str] = (),
    *,
    closed: bool = False,
    description: str | None = None,
) -> Schema:
    """An object schema; ``closed`` forbids members not listed (request bodies, rule 3)."""
    out: Schema = {"type": "object"}
    if description:
        out["description"] = description
    out["properties"] = dict(properties)
    if required:
        out["required"] = list(required)
    if closed:
        out["additionalProperties"] = False
    return out


def _u64(description: str, **extra: Any) -> Schema:
    return {"type": "integer", "minimum": 0, "maximum": U64_MAX, "description": description} | extra


def _int(description: str, **extra: Any) -> Schema:
    return {"type": "integer", "description": description} | extra


def _bool(description: str, **extra: Any) -> Schema:
    return {"type": "boolean", "description": description} | extra


def _str(description: str, **extra: Any) -> Schema:
    return {"type": "string", "description": description} | extra


def _nullable(schema: Schema) -> Schema:
    """``schema`` or JSON null (3.1 style: a type list, or anyOf for a $ref)."""
    if "$ref" in schema:
        return {"anyOf": [schema, {"type": "null"}]}
    out = dict(schema)
    kind = out.get("type")
    if isinstance(kind, str):
        out["type"] = [kind, "null"]
    if "enum" in out:
        out["enum"] = [*out["enum"], None]
    return out


def _with_perf(schema: Schema, perf: str = "Performance") -> Schema:
    """A success body: ``schema``'s members plus the performance object (§0.9)."""
    out = dict(schema)
    out["properties"] = {**schema["properties"], "performance": _ref(perf)}
    out["required"] = [*schema.get("required", ()), "performance"]
    return out


# -- the shared vocabulary (§0) ----------------------------------------------------------

TOPIC_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,254}$"
ROUTER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:>-]{0,254}$"
REQUEST_ID_PATTERN = r"^[A-Za-z0-9._-]{1,128}$"


def _primitives() -> dict[str, Schema]:
    return {
        "TopicName": _str(
            "A topic name: 1-255 chars of A-Z a-z 0-9 . _ : -, starting alphanumeric; "
            "case-sensitive, byte-exact (§1.1). A bad name is 400 invalid_request.",
            pattern=TOPIC_NAME_PATTERN,
            examples=["jobs", "render-queue:tenantA"],
        ),
        "RouterName": _str(
            "A router name: the topic charset plus '>' (convention: \"<source>-><dest>\"; "
            "percent-encode '>' in a URL as %3E).",
            pattern=ROUTER_NAME_PATTERN,
            examples=["orders->audit"],
        ),
        "Seq": _u64("A record's sequence id: u64 as a JSON number (§0.7)."),
        "TimestampMs": _int("Integer milliseconds since the Unix epoch (§0.7)."),
        "NodeId": _str(
            f"An origin node id (loop prevention, §4.5): a non-empty string of at most "
            f"TOPICS_MAX_NODE_BYTES (default {_LIMITS.max_node_bytes}) UTF-8 bytes.",
            minLength=1,
        ),
        "NodeFilter": {
            "description": "Node loop-prevention filter: records whose $node is in this set "
            "are omitted (the cursor still advances past them).",
            "anyOf": [
                _ref("NodeId"),
                {"type": "array", "items": _ref("NodeId")},
            ],
        },
        "Tag": _str(
            f"A record tag (the deletion-match key, §5): a non-empty string of at most "
            f"TOPICS_MAX_TAG_BYTES (default {_LIMITS.max_tag_bytes}) UTF-8 bytes.",
            minLength=1,
        ),
        "Meta": {
            "type": "object",
            "description": f"Small per-record headers, stored and returned verbatim: at most "
            f"TOPICS_MAX_META_BYTES (default {_LIMITS.max_meta_bytes}) bytes and "
            f"{_LIMITS.max_meta_keys} keys.",
        },
        "AnyJson": {
            "description": "Any JSON value (object, array, string, number, bool, null), stored "
            "and returned byte-verbatim, never parsed for shape (§0.3)."
        },
        "Match": {
            "description": 'A tag predicate (§5): ["tag","Eq","X"] exact, ["tag","Glob","P*"] '
            'literal prefix + one trailing *, or a bare string as shorthand for "Eq".',
            "anyOf": [
                {"type": "string"},
                {
                    "type": "array",
                    "prefixItems": [
                        {"const": "tag"},
                        {"enum": ["Eq", "Glob"]},
                        {"type": "string"},
                    ],
                    "minItems": 3,
                    "maxItems": 3,
                },
            ],
        },
        "Where": {
            "description": "A read predicate (issue 18; docs/GUIDES.md): the Match tuple "
            "language over the fields tag, node, meta.<name>, data.<name> (top-level members) "
            "with Eq, Ne, Glob (one trailing *), In (a list), Gt/Ge/Lt/Le (numbers), Exists "
            '(optionally true/false), combined by ["and",[...]], ["or",[...]], ["not",e]; a '
            "bare string is a tag Eq. Refused records are examined (the cursor passes them); "
            "tombstones are never filtered. At most 64 terms, 8 levels.",
            "anyOf": [
                {"type": "string"},
                {
                    "type": "array",
                    "prefixItems": [
                        {"type": "string"},
                        {"enum": ["Eq", "Ne", "Glob", "In", "Gt", "Ge", "Lt", "Le", "Exists"]},
                        {},
                    ],
                    "minItems": 2,
                    "maxItems": 3,
                },
                {
                    "type": "array",
                    "prefixItems": [
                        {"enum": ["and", "or"]},
                        {"type": "array", "items": {"$ref": "#/components/schemas/Where"}},
                    ],
                    "minItems": 2,
                    "maxItems": 2,
                },
                {
                    "type": "array",
                    "prefixItems": [{"const": "not"}, {"$ref": "#/components/schemas/Where"}],
                    "minItems": 2,
                    "maxItems": 2,
                },
            ],
        },
    }


def _performance() -> dict[str, Schema]:
    ms = {"type": "number", "minimum": 0}
    return {
        "Performance": {
            "type": "object",
            "description": "On every JSON answer, success or error (§0.9). Best-effort and "
            "additive: clients must tolerate any subset. server_total_ms runs from the "
            "moment the request reaches the dispatcher to the moment the body is encoded.",
            "properties": {
                "server_total_ms": ms | {"description": "Server time for this request."},
                "wal_append_ms": ms | {"description": "Writes: time to hand the batch to the WAL."},
                "fsync_ms": ms
                | {"description": "Time the ack waited for fsync; 0 unless the fsync class."},
                "records_scanned": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "Diffs: seqs examined (filtered ones included).",
                },
                "throttle_wait_ms": ms
                | {
                    "description": "Time parked by the elastic throttle (0: this server refuses "
                    "a throttled request with 429 instead of parking it)."
                },
            },
            "required": ["server_total_ms"],
        },
        "WritePerformance": {
            "allOf": [_ref("Performance")],
            "required": ["server_total_ms", "wal_append_ms", "fsync_ms", "throttle_wait_ms"],
        },
        "DiffPerformance": {
            "allOf": [_ref("Performance")],
            "required": ["server_total_ms", "records_scanned"],
        },
        "FsyncPerformance": {
            "allOf": [_ref("Performance")],
            "required": ["server_total_ms", "fsync_ms"],
        },
    }


# -- errors (§0.5) -----------------------------------------------------------------------

#: Every error code the /v0 surface can answer, with what it means (the status comes from
#: ``topics.errors``).
ERROR_CODES: dict[str, str] = {
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
    "not_ready": "The engine is still recovering its WAL (detail.replay_progress); carries "
    "Retry-After.",
    "shutting_down": "The server is draining after a signal; carries Retry-After.",
    "internal": "A bug or a storage failure; the message never reveals internals.",
    "insufficient_storage": "Our extension (507): the data directory's disk is full or below "
    "TOPICS_MIN_FREE_BYTES. detail.outcome is not_stored (refused before any change) or "
    "unknown (applied while the disk filled; durable if space returns before a restart).",
}

#: Codes that only travel inside a stream (an SSE ``event: error`` or a WebSocket
#: ``{"op": "error"}`` frame), never as an HTTP status: code -> the HTTP-aligned number.
STREAM_ERROR_CODES: dict[str, int] = {"session_gone": 410, "slow_consumer": 408}

#: The write conditions of issue 19, on POST /v0/topics/:topic and a WebSocket publish.
_WRITE_CONDITIONS: dict[str, Schema] = {
    "expected_head_seq": {
        "type": ["integer", "null"],
        "minimum": 0,
        "description": "Compare-and-append: append only if the topic's head_seq is exactly "
        "this (0 for an absent topic this write creates; deletes and eviction never move the "
        "head), else 409 head_mismatch and nothing is appended. Checked after deduplication.",
    },
    "producer_id": {
        "type": ["string", "null"],
        "minLength": 1,
        "maxLength": 256,
        "description": "Producer fencing, with epoch (both or neither): per topic, a write from "
        "an epoch below the highest seen for this producer is 409 producer_fenced. The "
        "producer's last batch's idempotency_key is deduplicated without a time window.",
    },
    "epoch": {
        "type": ["integer", "null"],
        "minimum": 0,
        "description": "This producer instance's epoch (raise it on every restart).",
    },
}

_DETAILS: dict[str, Schema] = {
    "invalid_request": _obj(
        {
            "field": _str("The offending field (a dotted path such as records[3].tag)."),
            "path": _str("Where a malformed body broke (JSONPath-like, e.g. $.records[0])."),
            "offset": _int("Byte offset in the body where it broke.", minimum=0),
            "index": _int("Index of the offending record.", minimum=0),
        }
    ),
    "batch_too_large": _obj(
        {"records": _int("Records in the request.", minimum=0), "max": _int("The limit.")}
    ),
    "forbidden": _obj(
        {
            "required_scopes": {"type": "array", "items": {"type": "string"}},
            "missing_scopes": {"type": "array", "items": {"type": "string"}},
            "topic": _str("The path's name (checked before it is validated)."),
            "router": _str("The path's name (checked before it is validated)."),
            "source": {"type": "string"},
            "dest": {"type": "string"},
        }
    ),
    "not_found": _obj({"path": _str("The path that matched no route.")}),
    "topic_not_found": _obj({"topic": {"type": "string"}}),
    "router_not_found": _obj({"router": {"type": "string"}}),
    "method_not_allowed": _obj(
        {
            "method": {"type": "string"},
            "allowed": {"type": "array", "items": {"type": "string"}},
        },
        ["method", "allowed"],
    ),
    "request_timeout": _obj({"body_timeout_ms": _int("TOPICS_HTTP_BODY_TIMEOUT_MS.", minimum=1)}),
    "payload_too_large": _obj({"max_body_bytes": _int("TOPICS_MAX_BODY_BYTES.", minimum=0)}),
    "unsupported_media_type": _obj(
        {
            "content_type": {"type": ["string", "null"]},
            "content_encoding": {"type": "string"},
        }
    ),
    "router_cycle": _obj(
        {"cycle": {"type": "array", "items": _ref("TopicName"), "examples": [["A", "B", "A"]]}}
    ),
    "topic_exists_incompatible": _obj(
        {
            "topic": {"type": "string"},
            "type": {"type": "string"},
            "requested_type": {"type": "string"},
            "reason": {"type": "string", "examples": ["router_dest_fan_in"]},
        }
    ),
    "topic_not_empty": _obj({"topic": {"type": "string"}, "count": {"type": "integer"}}),
    "head_mismatch": _obj(
        {
            "topic": {"type": "string"},
            "expected_head_seq": {"type": "integer"},
            "head_seq": _int("The topic's actual head_seq.", minimum=0),
        },
        ["topic", "expected_head_seq", "head_seq"],
    ),
    "producer_fenced": _obj(
        {
            "topic": {"type": "string"},
            "producer_id": {"type": "string"},
            "epoch": _int("The write's epoch.", minimum=0),
            "current_epoch": _int("The highest epoch the topic has seen.", minimum=0),
        },
        ["topic", "producer_id", "epoch", "current_epoch"],
    ),
    "topic_full": _obj(
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
            "retry_after_ms": _int("CPU pressure: wait this long.", minimum=0),
            "limit": _str("Resource cap: which one (max_topics, max_total_bytes, ...)."),
            "max": _int("Resource cap: its value.", minimum=0),
        },
        "anyOf": [{"required": ["retry_after_ms"]}, {"required": ["limit", "max"]}],
    },
    "not_ready": _obj(
        {"replay_progress": {"type": "number", "minimum": 0, "maximum": 1}}, ["replay_progress"]
    ),
}


def _errors() -> dict[str, Schema]:
    schemas: dict[str, Schema] = {
        "ErrorObject": _obj(
            {
                "code": _str(
                    "Stable machine-readable snake_case code: branch on this.",
                    enum=sorted(ERROR_CODES),
                ),
                "message": _str(
                    "Human-readable; may change between versions; never parse it.", minLength=1
                ),
                "detail": {"type": "object", "description": "Optional structured context."},
                "request_id": _str(
                    "The response's X-Request-ID, repeated for quoting.", pattern=REQUEST_ID_PATTERN
                ),
            },
            ["code", "message", "request_id"],
        ),
        "ErrorEnvelope": _obj(
            {"error": _ref("ErrorObject"), "performance": _ref("Performance")},
            ["error"],
            closed=True,
            description="Every non-2xx answer (§0.5). The presence of a top-level error "
            "member is the only success/failure discriminator.",
        ),
    }
    for code, meaning in ERROR_CODES.items():
        error: Schema = {"properties": {"code": {"const": code}}}
        if code in _DETAILS:
            error["properties"]["detail"] = _DETAILS[code]
        schemas[f"Error.{code}"] = {
            "description": f"{error_class_for_code(code).status} {code}: {meaning}",
            "allOf": [_ref("ErrorEnvelope"), {"properties": {"error": error}}],
        }
    return schemas


def status_of(code: str) -> int:
    """The HTTP status an error code is answered with (from :mod:`topics.errors`)."""
    if code not in ERROR_CODES:
        raise KeyError(f"unknown error code {code!r}")
    return error_class_for_code(code).status


_HEADERS_FOR_STATUS = {
    401: {"WWW-Authenticate": {"$ref": "#/components/headers/WWW-Authenticate"}},
    405: {"Allow": {"$ref": "#/components/headers/Allow"}},
    429: {"Retry-After": {"$ref": "#/components/headers/Retry-After"}},
    503: {"Retry-After": {"$ref": "#/components/headers/Retry-After"}},
}


def _error_response(group: Sequence[str]) -> dict[str, Any]:
    """The response object of one status answering exactly the codes of ``group``."""
    status = status_of(group[0])
    schema: Schema = (
        _ref(f"Error.{group[0]}")
        if len(group) == 1
        else {"anyOf": [_ref(f"Error.{c}") for c in group]}
    )
    return {
        "description": "; ".join(f"{c}: {ERROR_CODES[c]}" for c in group),
        "headers": _response_headers(status),
        "content": {"application/json": {"schema": schema}},
    }


def _error_responses(codes: Iterable[str]) -> dict[str, Any]:
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
            out[str(status)] = _error_response(group)
    return out


def _response_headers(status: int) -> dict[str, Any]:
    headers: dict[str, Any] = {"X-Request-ID": {"$ref": "#/components/headers/X-Request-ID"}}
    headers.update(_HEADERS_FOR_STATUS.get(status, {}))
    return headers


# Error sets shared by many routes (the dispatcher's gate, body reading).
AUTH = ("unauthorized", "forbidden")
GATE = (*AUTH, "throttled", "not_ready", "internal")  # every non-probe route
STORE = ("insufficient_storage",)  # every route that changes stored state
BODY = ("invalid_request", "request_timeout", "payload_too_large", "unsupported_media_type")
NAMED = ("invalid_request",)  # a {topic}/{router} in the path is validated (400)


# -- §0.10 topic config, §1 topics -------------------------------------------------------


def _config_fields(for_input: bool) -> dict[str, Schema]:
    def u64(description: str, default: int) -> Schema:
        return _u64(description, default=default)

    queue_only = " Queue only (accepted, and inert, on a log topic)."
    fields: dict[str, Schema] = {
        "type": _str(
            "Topic kind; log is the plain append-only log, queue adds §10. Immutable once set "
            "(a PUT changing it is 409 topic_exists_incompatible).",
            enum=["log", "queue"],
            default="log",
        ),
        "ttl_ms": u64("Records older than this (by $ts) are not delivered; 0 = no TTL.", 0),
        "cap_records": u64("Max retained records; 0 = unbounded.", 0),
        "cap_bytes": u64("Max retained payload bytes; 0 = unbounded.", 0),
        "discard": _str(
            "Full-topic policy: old evicts the oldest, reject refuses with 422 topic_full.",
            enum=["old", "reject"],
            default="old",
        ),
        "durable": _bool(
            "Alias: on input true = fsync, false = disk (used only without durability); on "
            "output durability == fsync.",
            default=False,
        ),
        "durability": _str(
            "Commit class: ephemeral (resident only), memory (WAL, best effort), disk (WAL, "
            "group commit, the default), fsync (ack waits for fsync).",
            enum=["ephemeral", "memory", "disk", "fsync"],
            default="disk",
        ),
        "priority": {
            "type": ["integer", "null"],
            "description": "Manual delivery priority, clamped to [-1000, 1000]; null = auto.",
            "default": None,
        },
        "auto_priority": _bool(
            "Derive priority from read recency when priority is null.", default=True
        ),
        "auto_create": _bool("May a write lazily create this topic.", default=True),
        "idempotency_window_ms": u64("How long write dedupe keys are remembered.", 120_000),
        "dedupe_node": _bool("Node loop-prevention filtering on reads.", default=True),
        "lease_ms": _int(
            "Default lease of a claim, clamped to [100, 86400000]." + queue_only, default=30_000
        ),
        "claim_jitter_ms": _int(
            "Claim coalescing window, clamped to [0, 5000]; 0 = greedy." + queue_only, default=0
        ),
        "max_deliveries": u64("Dead-letter after this many deliveries; 0 = never." + queue_only, 0),
        "dead_letter": {
            "anyOf": [_ref("TopicName"), {"type": "null"}],
            "description": "Topic that receives jobs over max_deliveries; must differ from "
            "this topic." + queue_only,
            "default": None,
        },
        "leases_durable": _bool("Durability of the leases log." + queue_only, default=False),
    }
    if for_input:
        # durability: null means "absent" (durable decides); every other field is typed.
        fields["durability"] = _nullable(fields["durability"])
    return fields


def _topics() -> dict[str, Schema]:
    config_out = _config_fields(False)
    return {
        "TopicConfigInput": _obj(
            _config_fields(True),
            closed=True,
            description="The topic config object (§0.10) on input: every field optional, "
            "omitted fields keep their current value (or the default on create). Unknown "
            "fields are 400 invalid_request (a typo must not configure nothing).",
        ),
        "TopicConfig": _obj(
            config_out,
            list(config_out),
            description="The full, resolved topic config (§0.10), queue fields included.",
        ),
        "QueueCounters": _obj(
            {
                "ready": _int("Claimable jobs right now.", minimum=0),
                "in_flight": _int("Jobs under an active lease.", minimum=0),
                "dead_lettered": _int(
                    "Jobs moved to dead_letter over this topic's life.", minimum=0
                ),
                "scheduled": _int(
                    "Jobs written with a deliver_at still in the future (not claimable yet; "
                    "counted in neither ready nor in_flight).",
                    minimum=0,
                ),
            },
            ["ready", "in_flight", "dead_lettered", "scheduled"],
        ),
        "TopicPutResult": _with_perf(
            _obj(
                {
                    "topic": _ref("TopicName"),
                    "created": _bool("True only when this call created the topic."),
                    "config": _ref("TopicConfig"),
                },
                ["topic", "created", "config"],
            )
        ),
        "TopicState": _with_perf(
            _obj(
                {
                    "topic": _ref("TopicName"),
                    "type": _str("log or queue.", enum=["log", "queue"]),
                    "head_seq": _ref("Seq"),
                    "earliest_seq": _ref("Seq"),
                    "next_seq": _ref("Seq"),
                    "count": _int("Retained records.", minimum=0),
                    "bytes": _int("Retained payload bytes.", minimum=0),
                    "config": _ref("TopicConfig"),
                    "queue": _ref("QueueCounters"),
                    "effective_priority": _int("The priority in use right now."),
                    "last_write_ts": _nullable(_ref("TimestampMs")),
                    "last_read_ts": _nullable(_ref("TimestampMs")),
                },
                [
                    "topic",
                    "type",
                    "head_seq",
                    "earliest_seq",
                    "next_seq",
                    "count",
                    "bytes",
                    "config",
                    "effective_priority",
                    "last_write_ts",
                    "last_read_ts",
                ],
                description="Topic state (§1.2); queue is present only on a queue topic.",
            )
        ),
        "TopicSummary": _obj(
            {
                "topic": _ref("TopicName"),
                "type": _str("log or queue.", enum=["log", "queue"]),
                "head_seq": _ref("Seq"),
                "earliest_seq": _ref("Seq"),
                "count": _int("Retained records.", minimum=0),
                "bytes": _int("Retained payload bytes.", minimum=0),
                "durable": {"type": "boolean"},
                "durability": _str("Commit class.", enum=["ephemeral", "memory", "disk", "fsync"]),
                "effective_priority": {"type": "integer"},
            },
            [
                "topic",
                "type",
                "head_seq",
                "earliest_seq",
                "count",
                "bytes",
                "durable",
                "durability",
                "effective_priority",
            ],
        ),
        "TopicList": _with_perf(
            _obj(
                {
                    "topics": {"type": "array", "items": _ref("TopicSummary")},
                    "next_cursor": _str("Opaque; present only when more pages exist.", minLength=1),
                },
                ["topics"],
            )
        ),
        "TopicDeleteResult": _with_perf(
            _obj(
                {
                    "topic": _ref("TopicName"),
                    "deleted": _bool("False when the topic did not exist."),
                    "routers_removed": {"type": "array", "items": _ref("RouterName")},
                },
                ["topic", "deleted", "routers_removed"],
            )
        ),
    }


# -- §2 writes, §3 diffs, §5 deletes -----------------------------------------------------


def _records() -> dict[str, Schema]:
    return {
        "WriteRecord": _obj(
            {
                "data": _ref("AnyJson"),
                "tag": _nullable(_ref("Tag")),
                "node": _nullable(_ref("NodeId")),
                "meta": _nullable(_ref("Meta")),
                "deliver_at": {
                    "type": ["integer", "null"],
                    "minimum": 0,
                    "description": "Queue topics only: not claimable before this epoch-ms time "
                    "(at most 365 days ahead; a past time is claimable at once). Stored as "
                    "meta.$deliver_at.",
                },
                "delay_ms": {
                    "type": ["integer", "null"],
                    "minimum": 0,
                    "maximum": 31_536_000_000,
                    "description": "Queue topics only: deliver_at = now + delay_ms. Not with "
                    "deliver_at.",
                },
                "dedupe_key": {
                    "type": ["string", "null"],
                    "minLength": 1,
                    "maxLength": 256,
                    "description": "Queue topics only: a job whose key is held (see the write's "
                    "dedupe) is not appended; the answer's dedupe names the holder. Stored as "
                    "meta.$dedupe_key.",
                },
            },
            ["data"],
            closed=True,  # topics/record_fields.py: any other member is 400
            description="One record to append. tag/node/meta null = absent. Any other "
            "member is 400 invalid_request; deliver_at, delay_ms and dedupe_key only on a queue "
            "topic (elsewhere they are 400 too).",
        ),
        "WriteRequest": _obj(
            {
                "records": {
                    "type": "array",
                    "items": _ref("WriteRecord"),
                    "minItems": 1,
                    "description": f"1..TOPICS_MAX_BATCH_RECORDS (default "
                    f"{_LIMITS.max_batch_records}) records, assigned contiguous seqs in order; "
                    "more is 400 batch_too_large.",
                },
                "node": _nullable(_ref("NodeId")) | {"description": "Batch default $node."},
                "idempotency_key": {
                    "type": ["string", "null"],
                    "minLength": 1,
                    "maxLength": 256,
                    "description": "Dedupe key (§0.8), scoped to the topic; wins over the "
                    "Idempotency-Key header.",
                },
                "create": {
                    "type": ["boolean", "null"],
                    "description": "Override auto_create for this write (false: 404 if absent).",
                },
                "config": _nullable(_ref("TopicConfigInput"))
                | {"description": "Applied only when this write creates the topic."},
                "disable_backpressure": _bool(
                    "Trusted-loader opt-out of the CPU-pressure 429.", default=False
                ),
                "return_seqs": {
                    "type": ["boolean", "null"],
                    "description": "false omits seqs from the answer (wins over ?return_seqs).",
                },
                "dedupe": {
                    "type": ["string", "null"],
                    "enum": ["until_ack", "window", None],
                    "description": "Queue topics only: how the records' dedupe_key holds. "
                    "until_ack (default): while the job is live (until acked, dead-lettered or "
                    "deleted); window: for dedupe_ms after the write, acked or not.",
                },
                "dedupe_ms": {
                    "type": ["integer", "null"],
                    "minimum": 1,
                    "maximum": 31_536_000_000,
                    "description": "The window of dedupe: window (required with it, 400 "
                    "otherwise).",
                },
                "replace": {
                    "type": ["boolean", "null"],
                    "description": "A held key whose job was never handed out is replaced: the "
                    "old job is deleted and the new one appended (a new seq, at the tail). A "
                    "claimed holder is never replaced.",
                },
                **_WRITE_CONDITIONS,
            },
            ["records"],
            closed=True,
            description="An append (§2). Unknown members are 400 invalid_request.",
        ),
        "WriteResult": _with_perf(
            _obj(
                {
                    "topic": _ref("TopicName"),
                    "first_seq": _ref("Seq"),
                    "last_seq": _ref("Seq"),
                    "seqs": {
                        "type": "array",
                        "items": _ref("Seq"),
                        "description": "Omitted with return_seqs=false.",
                    },
                    "head_seq": _ref("Seq"),
                    "count": _int(
                        "Records appended by this write (0 when every job was a dedupe "
                        "duplicate: first_seq is then head_seq + 1).",
                        minimum=0,
                    ),
                    "created": _bool("This write created the topic (status 201)."),
                    "deduped": _bool(
                        "An in-window idempotency_key matched: nothing appended, "
                        "the original seqs are returned."
                    ),
                    "dedupe": {
                        "type": "array",
                        "items": _ref("JobDedupe"),
                        "description": "Present when a queue write carried dedupe_keys: one "
                        "entry per record whose key was held, by request index.",
                    },
                },
                ["topic", "first_seq", "last_seq", "head_seq", "count", "created", "deduped"],
            ),
            "WritePerformance",
        ),
        "Record": _obj(
            {
                "$seq": _ref("Seq"),
                "$ts": _ref("TimestampMs"),
                "$node": _ref("NodeId"),
                "$tag": _ref("Tag"),
                "data": _ref("AnyJson"),
                "meta": _ref("Meta"),
            },
            ["$seq", "$ts"],
            description="A stored record (§0.4): $node/$tag/meta omitted when absent (or not "
            "asked for); data present (maybe null) unless include_data is false.",
        ),
        "Tombstone": _obj(
            {
                "gap_from": _ref("Seq"),
                "gap_to": _ref("Seq"),
                "reason": _str(
                    "Why the range was lost (informational; the range is authoritative).",
                    enum=TOMBSTONE_REASONS,
                ),
                "missed_estimate": _int("Approximate records lost.", minimum=0),
                "earliest_seq": _ref("Seq"),
                "head_seq": _ref("Seq"),
            },
            ["gap_from", "gap_to", "reason", "missed_estimate", "earliest_seq", "head_seq"],
            description="An explicit gap [gap_from, gap_to] lost to cap/TTL (§3.3), or in a "
            "crash (reason crash: the un-synced tail of a disk/memory topic, docs/SEMANTICS.md "
            "rule 13a), or to a restart (reason restart: an ephemeral topic's records, which "
            "live only in memory); a 200 in-band signal, never an error.",
        ),
        "DiffRequest": _obj(
            {
                "from_seq": _u64("Exclusive cursor: records with $seq > from_seq.", default=0),
                "limit": _u64(
                    f"Max records; 0 = default 256; clamped to TOPICS_MAX_LIMIT (default "
                    f"{_LIMITS.max_limit}), never rejected.",
                    default=256,
                ),
                "node": _ref("NodeFilter"),
                "include_tags": _bool("Include $tag.", default=False),
                "include_meta": _bool("Include meta.", default=True),
                "include_data": _bool("Include data (false: metadata-only tailing).", default=True),
                "wait_ms": _u64("Long-poll when caught up; clamped to 30000.", default=0),
                "max_batch_bytes": _int(
                    "Soft byte budget of the answer (at least one record is always "
                    "returned); default 1 MiB, clamped to 8 MiB.",
                    minimum=1,
                    default=1 << 20,
                ),
                "cursor": _ref("CursorName")
                | {
                    "description": "Start after this named cursor's committed seq instead of "
                    "from_seq (not both); a cursor never committed reads from 0."
                },
                "commit": _bool(
                    "With cursor: commit the answer's next_from_seq to it before answering "
                    "(at most once: an answer lost on the way is not read again; commit "
                    "explicitly with PUT .../cursors/{cursor} for at least once).",
                    default=False,
                ),
                "from_ts": _u64(
                    "Start at the first record with $ts >= from_ts (ms) instead of from_seq "
                    "(not both); the answer echoes the resolved from_seq. Older than every "
                    "live record: exactly a read from from_seq 0, tombstone included."
                ),
                "to_ts": _u64(
                    "Inclusive end by time: the last record with $ts <= to_ts; caught_up and "
                    "lag count to the end, end_reached says the cursor is there."
                ),
                "to_seq": _u64("Inclusive end by seq (with to_ts: the earlier end)."),
                "where": _ref("Where"),
                "format": _str(
                    "records, or cloudevents: each record as a CloudEvents 1.0 event.",
                    enum=["records", "cloudevents"],
                    default="records",
                ),
                "ce_type_field": _str(
                    "With cloudevents: the meta member giving each event's type "
                    "(else topics.record).",
                    minLength=1,
                    default="type",
                ),
            },
            closed=True,
            description="A diff (§3). An empty body means all defaults. Unknown members are "
            "400 invalid_request.",
        ),
        "CloudEvent": _obj(
            {
                "specversion": {"const": "1.0"},
                "id": _str("topic@seq."),
                "source": _str("The topic's path, /v0/topics/<topic>."),
                "type": _str("meta[ce_type_field] when a string, else topics.record."),
                "time": _str("$ts as RFC 3339 UTC (ms).", format="date-time"),
                "datacontenttype": {"const": "application/json"},
                "subject": _str("The record's $tag, when it has one."),
                "topicsseq": _ref("Seq"),
                "topicsnode": _str("The record's $node, when it has one."),
                "data": _ref("AnyJson"),
            },
            ["specversion", "id", "source", "type", "time", "datacontenttype", "topicsseq"],
            description="A record as a CloudEvents 1.0 structured event (format=cloudevents); "
            "data is the stored JSON, verbatim. Tombstones stay the answer's tombstone member.",
        ),
        "DiffResult": _with_perf(
            _obj(
                {
                    "topic": _ref("TopicName"),
                    "records": {
                        "type": "array",
                        "items": {"anyOf": [_ref("Record"), _ref("CloudEvent")]},
                        "description": "Records, or CloudEvents with format=cloudevents.",
                    },
                    "next_from_seq": _ref("Seq"),
                    "head_seq": _ref("Seq"),
                    "earliest_seq": _ref("Seq"),
                    "caught_up": _bool(
                        "next_from_seq == head_seq (or the to_ts/to_seq end): the reliable "
                        "'no more now'."
                    ),
                    "tombstone": _nullable(_ref("Tombstone")),
                    "lag": _int("head_seq (or the end) - next_from_seq.", minimum=0),
                    "from_seq": _ref("Seq")
                    | {"description": "Where from_ts resolved to (only with from_ts)."},
                    "end_reached": _bool(
                        "Only with to_ts/to_seq: the cursor is at the end; read no further."
                    ),
                },
                [
                    "topic",
                    "records",
                    "next_from_seq",
                    "head_seq",
                    "earliest_seq",
                    "caught_up",
                    "tombstone",
                    "lag",
                ],
            ),
            "DiffPerformance",
        ),
        "DeleteRecordsRequest": _obj(
            {
                "before_seq": _nullable(_u64("Delete records with $seq < before_seq.")),
                "match": _nullable(_ref("Match")),
            },
            closed=True,
            description="A record delete (§5): before_seq and/or match (both = AND); neither "
            "is 400 invalid_request. null = absent.",
        ),
        "DeleteRecordsResult": _with_perf(
            _obj(
                {
                    "topic": _ref("TopicName"),
                    "deleted": _int("Records removed by this call.", minimum=0),
                    "earliest_seq": _ref("Seq"),
                    "head_seq": _ref("Seq"),
                    "count": _int("Records left.", minimum=0),
                    "bytes": _int("Bytes left.", minimum=0),
                },
                ["topic", "deleted", "earliest_seq", "head_seq", "count", "bytes"],
            ),
            "FsyncPerformance",
        ),
    }


# -- §6 routers --------------------------------------------------------------------------


def _routers() -> dict[str, Schema]:
    guarantee = _str(
        "Delivery mode: at_least_once (default) or exactly_once (a stable idempotency key in "
        "meta._topics_router suppresses duplicate dest appends).",
        enum=["at_least_once", "exactly_once"],
    )
    config = {
        "source": _ref("TopicName"),
        "dest": _ref("TopicName"),
        "preserve_node": _bool("Keep $node on forwarded records.", default=True),
        "preserve_tag": _bool("Keep $tag on forwarded records.", default=True),
        "filter": _nullable(_ref("Match"))
        | {"description": "Forward-time tag filter (the §5 tuple language); null = all."},
        "allow_cycle": _bool("Permit a directed cycle (runtime hop cap instead).", default=False),
        "guarantee": guarantee | {"default": "at_least_once"},
    }
    echoed = [
        "router",
        "source",
        "dest",
        "preserve_node",
        "preserve_tag",
        "filter",
        "allow_cycle",
        "guarantee",
    ]
    state_props = {"router": _ref("RouterName"), **config, "guarantee": guarantee}
    return {
        "RouterPutRequest": _obj(
            {
                **config,
                "create_dest": _bool("Auto-create dest if absent (false: 404).", default=True),
            },
            ["source", "dest"],
            closed=True,
            description="Create or configure a router (§6.1); source != dest. The key's prefix "
            "allowlist applies to source and dest too.",
        ),
        "RouterPutResult": _with_perf(
            _obj(
                {**state_props, "created": _bool("This call created the router.")},
                [*echoed, "created"],
            )
        ),
        "RouterState": _with_perf(
            _obj(
                {**state_props, "forwarded_total": _int("Records forwarded.", minimum=0)},
                [*echoed, "forwarded_total"],
            )
        ),
        "RouterSummary": _obj(
            {
                "router": _ref("RouterName"),
                "source": _ref("TopicName"),
                "dest": _ref("TopicName"),
                "guarantee": guarantee,
                "forwarded_total": _int("Records forwarded.", minimum=0),
            },
            ["router", "source", "dest", "guarantee", "forwarded_total"],
        ),
        "RouterList": _with_perf(
            _obj(
                {
                    "routers": {"type": "array", "items": _ref("RouterSummary")},
                    "next_cursor": _str("Opaque; present only when more pages exist.", minLength=1),
                },
                ["routers"],
            )
        ),
        "RouterDeleteResult": _with_perf(
            _obj(
                {"router": _ref("RouterName"), "deleted": _bool("False when it did not exist.")},
                ["router", "deleted"],
            )
        ),
    }


# -- §7 watch (SSE) and §7.x WebSocket ---------------------------------------------------


def _watch() -> dict[str, Schema]:
    position = _obj(
        {
            "from_seq": _ref("Seq"),
            "head_seq": _ref("Seq"),
            "earliest_seq": _ref("Seq"),
        },
        ["from_seq", "head_seq", "earliest_seq"],
    )
    return {
        "WatchTopicOptions": _obj(
            {
                "from_seq": _u64("Deliver records with $seq > from_seq; 0 = earliest.", default=0),
                "tail": _bool("Start at the current head (ignore from_seq).", default=False),
                "max_backlog": _u64(
                    "This topic's backlog limit (replaces the request's max_backlog; 0: none).",
                ),
                "cursor": _ref("CursorName")
                | {
                    "description": "Start after this named cursor's committed seq (not with "
                    "from_seq or tail; never committed: from 0)."
                },
                "commit": _bool(
                    "With cursor: commit each delivered frame's position to it once the "
                    "frame has left the server (at least once across a server crash).",
                    default=False,
                ),
                "from_ts": _u64(
                    "Start at the first record with $ts >= from_ts (resolved once, at "
                    "creation: the answer's from_seq); not with from_seq or tail."
                ),
                "to_ts": _u64(
                    "End after the last record with $ts <= to_ts: then event: end-reached, "
                    "and the topic leaves the session."
                ),
                "to_seq": _u64("End after this seq (with to_ts: the earlier end)."),
            },
            closed=True,
        ),
        "WatchPrefixOptions": _obj(
            {
                "tail": _bool(
                    "Existing topics under the prefix start at their head (topics created "
                    "later always start at 0).",
                    default=False,
                ),
                "max_backlog": _u64(
                    "Backlog limit of the topics under it (replaces the request's; 0: none)."
                ),
            },
            closed=True,
        ),
        "WatchPrefixes": {
            "description": "topic_prefix: every topic whose name starts with a prefix, now and "
            "created later (those join with an event: topic-added at from_seq 0). A prefix "
            "is narrowed to the key's allowlist; one that shares no name with it is 403. "
            "An object prefix -> options, or an array of prefixes.",
            "oneOf": [
                {
                    "type": "object",
                    "minProperties": 1,
                    "additionalProperties": {
                        "oneOf": [_ref("WatchPrefixOptions"), {"type": "null"}]
                    },
                },
                {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
            ],
        },
        "WatchPrefixesResolved": {
            "type": "object",
            "description": "Each topic_prefix as it applies: the allowed prefixes it covers "
            "after narrowing to the key's allowlist.",
            "additionalProperties": _obj(
                {
                    "covers": {"type": "array", "items": {"type": "string"}},
                    "tail": {"type": "boolean"},
                    "max_backlog": _ref("Seq"),
                },
                ["covers", "tail", "max_backlog"],
            ),
        },
        "WatchRequest": _obj(
            {
                "node": _ref("NodeFilter"),
                "topics": {
                    "type": "object",
                    "description": f"topic -> options; 1..TOPICS_MAX_WATCH_TOPICS (default "
                    f"{_LIMITS.max_watch_topics}), counting what topic_prefix covers. The "
                    "key's prefix allowlist applies to every name (403). May be empty or "
                    "absent beside topic_prefix.",
                    "propertyNames": _ref("TopicName"),
                    "additionalProperties": _ref("WatchTopicOptions"),
                },
                "topic_prefix": _ref("WatchPrefixes"),
                "max_backlog": _u64(
                    "A topic more than this many seqs behind its head when a stream starts or "
                    "resumes reading it gets an event: backlog-exceeded with the head instead "
                    "of the replay (0: no limit).",
                    default=0,
                ),
                "on_backlog": _str(
                    "jump: the backlog-exceeded event; error: 409 backlog_exceeded here.",
                    enum=["jump", "error"],
                    default="jump",
                ),
                "limit": _u64("Max records per record frame.", default=256),
                "max_batch_bytes": _u64(
                    "Soft byte budget per record frame; 0 = 1 MiB, clamped to 8 MiB.",
                    default=262_144,
                ),
                "heartbeat_ms": _u64(
                    "Heartbeat interval, clamped to [1000, 60000].", default=15_000
                ),
                "include_meta": _bool("Include meta.", default=True),
                "include_tags": _bool("Include $tag.", default=False),
                "include_data": _bool("Include data.", default=True),
                "consistency": _str(
                    "eventual pushes from the WAL buffer; strong only after commit/fsync.",
                    enum=["eventual", "strong"],
                    default="eventual",
                ),
                "where": _ref("Where"),
                "format": _str(
                    "records, or cloudevents (each record a CloudEvents 1.0 event).",
                    enum=["records", "cloudevents"],
                    default="records",
                ),
                "ce_type_field": _str(
                    "With cloudevents: the meta member giving each event's type.",
                    minLength=1,
                    default="type",
                ),
            },
            closed=True,
            description="A multiplexed watch subscription (§7.1): topics, topic_prefix or both.",
        ),
        "WatchSession": _with_perf(
            _obj(
                {
                    "wid": _str(
                        "Unguessable session capability (>= 128 bits, base64url).",
                        pattern=r"^wid_[A-Za-z0-9_-]+$",
                    ),
                    "stream_url": _str("The SSE GET for this session (/v0/watch/{wid})."),
                    "session_ttl_ms": _int("Idle session lifetime.", minimum=0),
                    "topics": {
                        "type": "object",
                        "description": "Resolved per-topic positions (unknown topics dropped "
                        "with ?lenient=true are absent).",
                        "additionalProperties": position,
                    },
                    "topic_prefix": _ref("WatchPrefixesResolved"),
                },
                ["wid", "stream_url", "session_ttl_ms", "topics"],
            )
        ),
        # SSE event payloads (the data: line of each event name).
        "SseRecordEvent": _obj(
            {
                "topic": _ref("TopicName"),
                "records": {
                    "type": "array",
                    "items": {"anyOf": [_ref("Record"), _ref("CloudEvent")]},
                },
                "from_seq": _ref("Seq"),
                "to_seq": _ref("Seq"),
                "head_seq": _ref("Seq"),
            },
            ["topic", "records", "from_seq", "to_seq", "head_seq"],
            description="event: record; id: is the post-batch composite cursor.",
        ),
        "SseTombstoneEvent": _obj(
            {
                "topic": _ref("TopicName"),
                "reason": _str(
                    "Why.",
                    enum=TOMBSTONE_REASONS,
                ),
                "gap_from": _ref("Seq"),
                "gap_to": _ref("Seq"),
                "earliest_seq": _ref("Seq"),
                "head_seq": _ref("Seq"),
            },
            ["topic", "reason", "gap_from", "gap_to", "earliest_seq", "head_seq"],
            description="event: tombstone — explicit, never-silent loss.",
        ),
        "SseCaughtUpEvent": _obj(
            {"topic": _ref("TopicName"), "head_seq": _ref("Seq")},
            ["topic", "head_seq"],
            description="event: caught-up — the topic is drained to head.",
        ),
        "SseTopicDeletedEvent": _obj(
            {"topic": _ref("TopicName"), "head_seq": _ref("Seq"), "reason": {"type": "string"}},
            ["topic", "head_seq", "reason"],
            description="event: topic-deleted — terminal for that topic only.",
        ),
        "SseEndReachedEvent": _obj(
            {
                "topic": _ref("TopicName"),
                "next_from_seq": _ref("Seq"),
                "head_seq": _ref("Seq"),
            },
            ["topic", "next_from_seq", "head_seq"],
            description="event: end-reached — the topic's to_ts/to_seq end was delivered up to "
            "next_from_seq; terminal for that topic only (it leaves the session).",
        ),
        "SseTopicAddedEvent": _obj(
            {
                "topic": _ref("TopicName"),
                "prefix": _str("The topic_prefix it joined under."),
                "from_seq": _ref("Seq"),
                "head_seq": _ref("Seq"),
            },
            ["topic", "prefix", "from_seq", "head_seq"],
            description="event: topic-added — a topic created under a watched prefix joined; "
            "its records follow from from_seq (0). Sent again on a resume until a later frame "
            "of it was sent.",
        ),
        "SseBacklogExceededEvent": _obj(
            {
                "topic": _ref("TopicName"),
                "from_seq": _ref("Seq"),
                "head_seq": _ref("Seq"),
                "backlog": _ref("Seq"),
                "max_backlog": _ref("Seq"),
            },
            ["topic", "from_seq", "head_seq", "backlog", "max_backlog"],
            description="event: backlog-exceeded — (from_seq, head_seq] is not replayed; the "
            "id: already points at head_seq. Re-snapshot, then take what follows.",
        ),
        "SseErrorEvent": _obj(
            {
                "code": _int(
                    "HTTP-aligned: 429 advisory pacing, 408 slow consumer and 410 session "
                    "collected (terminal), 409 the topic ceased to be a queue (/work)."
                ),
                "error": _str("Human-readable message."),
                "error_code": _str(
                    "The wire code (§0.5 codes plus the stream-only session_gone and "
                    "slow_consumer).",
                    enum=sorted({*ERROR_CODES, *STREAM_ERROR_CODES}),
                ),
                "retry_after_ms": {"type": "integer", "minimum": 0},
                "topics": {"type": "array", "items": _ref("TopicName")},
                "detail": {"type": "object"},
                "request_id": {"type": "string"},
            },
            ["code", "error"],
            description="event: error — a per-stream problem (no id: line).",
        ),
        "SseConnectionEstablishedEvent": _obj(
            {
                "request_id": {"type": "string"},
                "wid": {"type": "string"},
                "topics": {
                    "type": "object",
                    "additionalProperties": position,
                    "description": "Where this stream resumes, per topic, and the watermarks.",
                },
            },
            ["request_id", "topics"],
            description="event: connection-established — the first event after retry: "
            "(CONTRACT-NOTES 6); no id: line.",
        ),
        "SseConnectionClosingEvent": _obj(
            {
                "reason": _str(
                    "Why the server ends the stream.", examples=["server_shutdown", "superseded"]
                ),
                "request_id": {"type": "string"},
                "retry_after_ms": {"type": "integer", "minimum": 0},
            },
            ["reason"],
            description="event: connection-closing — the server ends the stream on purpose "
            "(CONTRACT-NOTES 7); reconnect with Last-Event-ID.",
        ),
    }


def _ws() -> dict[str, Schema]:
    def op(name: str, props: Mapping[str, Schema], required: Sequence[str] = ()) -> Schema:
        return _obj({"op": {"const": name}, **props}, ["op", *required])

    rid = {"request_id": {"type": "string"}}
    topic_positions = {
        "type": "object",
        "additionalProperties": _obj(
            {"from_seq": _ref("Seq"), "head_seq": _ref("Seq"), "earliest_seq": _ref("Seq")}
        ),
    }
    return {
        "WsClientCommand": {
            "description": "A JSON text message from the client (§7.x).",
            "oneOf": [
                op(
                    "subscribe",
                    {
                        **rid,
                        "topic": _ref("TopicName"),
                        "topics": {
                            "type": "object",
                            "propertyNames": _ref("TopicName"),
                            "additionalProperties": _ref("WatchTopicOptions"),
                        },
                        "from_seq": _ref("Seq"),
                        "tail": {"type": "boolean"},
                        "node": _ref("NodeFilter"),
                        "limit": {"type": "integer", "minimum": 0},
                        "max_batch_bytes": {"type": "integer", "minimum": 0},
                        "include_data": {"type": "boolean"},
                        "include_tags": {"type": "boolean"},
                        "include_meta": {"type": "boolean"},
                        "consistency": {"enum": ["eventual", "strong"]},
                        "topic_prefix": _ref("WatchPrefixes"),
                        "max_backlog": {"type": "integer", "minimum": 0},
                        "on_backlog": {"enum": ["jump", "error"]},
                        "cursor": _ref("CursorName"),
                        "commit": {"type": "boolean"},
                        "from_ts": _ref("Seq"),
                        "to_ts": _ref("Seq"),
                        "to_seq": _ref("Seq"),
                        "where": _ref("Where"),
                        "format": {"enum": ["records", "cloudevents"]},
                        "ce_type_field": {"type": "string", "minLength": 1},
                    },
                ),
                op(
                    "unsubscribe",
                    {
                        **rid,
                        "topic": _ref("TopicName"),
                        "topics": {"type": "array", "items": _ref("TopicName")},
                        "topic_prefix": {
                            "oneOf": [
                                {"type": "string"},
                                {"type": "array", "items": {"type": "string"}},
                            ],
                            "description": "Stop joining under these prefixes and drop the "
                            "topics they cover.",
                        },
                    },
                ),
                op(
                    "publish",
                    {
                        **rid,
                        "topic": _ref("TopicName"),
                        "records": {"type": "array", "items": _ref("WriteRecord"), "minItems": 1},
                        "node": _ref("NodeId"),
                        "idempotency_key": {"type": "string"},
                        "create": {"type": "boolean"},
                        "config": _ref("TopicConfigInput"),
                        "disable_backpressure": {"type": "boolean"},
                        "return_seqs": {"type": "boolean"},
                        **_WRITE_CONDITIONS,
                    },
                    ["topic", "records"],
                ),
                op("ping", rid),
                op(
                    "commit",
                    {
                        **rid,
                        "topic": _ref("TopicName"),
                        "cursor": _ref("CursorName"),
                        "seq": _ref("Seq"),
                        "expect_seq": _ref("Seq"),
                    },
                    ["topic", "cursor", "seq"],
                ),
            ],
        },
        "WsServerFrame": {
            "description": "A JSON text message from the server (§7.x). Clients must ignore "
            "unknown ops.",
            "oneOf": [
                op(
                    "subscribed",
                    {
                        **rid,
                        "topics": topic_positions,
                        "topic_prefix": _ref("WatchPrefixesResolved"),
                    },
                    ["topics"],
                ),
                op(
                    "unsubscribed",
                    {**rid, "topics": {"type": "array", "items": _ref("TopicName")}},
                    ["topics"],
                ),
                op("pong", rid),
                op(
                    "committed",
                    {
                        **rid,
                        "topic": _ref("TopicName"),
                        "cursor": _ref("CursorName"),
                        "seq": _ref("Seq"),
                        "head_seq": _ref("Seq"),
                        "earliest_seq": _ref("Seq"),
                        "lag": _ref("Seq"),
                        "updated_ts": _ref("Seq"),
                    },
                    ["topic", "cursor", "seq", "lag"],
                ),
                op(
                    "record",
                    {
                        "topic": _ref("TopicName"),
                        "from_seq": _ref("Seq"),
                        "to_seq": _ref("Seq"),
                        "head_seq": _ref("Seq"),
                        "records": {
                            "type": "array",
                            "items": {"anyOf": [_ref("Record"), _ref("CloudEvent")]},
                        },
                    },
                    ["topic", "records"],
                ),
                op("caught_up", {"topic": _ref("TopicName"), "head_seq": _ref("Seq")}, ["topic"]),
                op(
                    "ack",
                    {
                        **rid,
                        "topic": _ref("TopicName"),
                        "first_seq": _ref("Seq"),
                        "last_seq": _ref("Seq"),
                        "seqs": {"type": "array", "items": _ref("Seq")},
                        "head_seq": _ref("Seq"),
                        "deduped": {"type": "boolean"},
                        "performance": _ref("Performance"),
                    },
                    ["topic"],
                ),
                op(
                    "tombstone",
                    {
                        "topic": _ref("TopicName"),
                        "reason": {"type": "string"},
                        "gap_from": _ref("Seq"),
                        "gap_to": _ref("Seq"),
                        "earliest_seq": _ref("Seq"),
                        "head_seq": _ref("Seq"),
                    },
                    ["topic"],
                ),
                op(
                    "topic_deleted",
                    {
                        "topic": _ref("TopicName"),
                        "head_seq": _ref("Seq"),
                        "reason": {"type": "string"},
                    },
                    ["topic"],
                ),
                op(
                    "topic_added",
                    {
                        "topic": _ref("TopicName"),
                        "prefix": {"type": "string"},
                        "from_seq": _ref("Seq"),
                        "head_seq": _ref("Seq"),
                    },
                    ["topic", "prefix", "from_seq"],
                ),
                op(
                    "backlog_exceeded",
                    {
                        "topic": _ref("TopicName"),
                        "from_seq": _ref("Seq"),
                        "head_seq": _ref("Seq"),
                        "backlog": _ref("Seq"),
                        "max_backlog": _ref("Seq"),
                    },
                    ["topic", "head_seq"],
                ),
                op(
                    "end_reached",
                    {
                        "topic": _ref("TopicName"),
                        "next_from_seq": _ref("Seq"),
                        "head_seq": _ref("Seq"),
                    },
                    ["topic", "next_from_seq"],
                ),
                op(
                    "error",
                    {
                        **rid,
                        "code": {"enum": sorted({*ERROR_CODES, *STREAM_ERROR_CODES})},
                        "message": {"type": "string"},
                        "detail": {"type": "object"},
                    },
                    ["code", "message"],
                ),
            ],
        },
    }


# -- §10 queues --------------------------------------------------------------------------


def _queues() -> dict[str, Schema]:
    seqs = {
        "type": "array",
        "items": _ref("Seq"),
        "minItems": 1,
        "description": f"1..TOPICS_MAX_CLAIM (default {_LIMITS.max_claim}) job seqs; longer "
        "is 400 batch_too_large.",
    }
    lease_ids = {
        "type": "array",
        "items": {"type": "string"},
        "description": "Optional per-seq lease fence (same length and order as seqs): a stale "
        "token's seq is skipped.",
    }
    lease_ms = _int("Lease duration, clamped to [100, 86400000].")
    skipped = {"type": "array", "items": _ref("Seq"), "description": "Seqs not held by node."}
    counters = {
        "ready": _int("Claimable now.", minimum=0),
        "in_flight": _int("Leased now.", minimum=0),
    }
    job_props = {
        "$seq": _ref("Seq"),
        "$ts": _ref("TimestampMs"),
        "$node": _ref("NodeId"),
        "$tag": _ref("Tag"),
        "data": _ref("AnyJson"),
        "meta": _ref("Meta"),
        "lease_id": _str("Opaque lease identity (lease_<hex>).", pattern=r"^lease_[0-9a-f]+$"),
        "deadline": _ref("TimestampMs"),
        "deliveries": _int("Deliveries including this one.", minimum=1),
    }
    job_required = ["$seq", "$ts", "data", "lease_id", "deadline", "deliveries"]
    return {
        "Job": _obj(job_props, job_required, description="One leased job (§10.2)."),
        "ClaimRequest": _obj(
            {
                "node": _ref("NodeId"),
                "max": _u64(
                    f"Jobs wanted; clamped to TOPICS_MAX_CLAIM (default {_LIMITS.max_claim}).",
                    default=1,
                ),
                "lease_ms": lease_ms,
            },
            ["node"],
            closed=True,
        ),
        "ClaimResult": _with_perf(
            _obj(
                {
                    "topic": _ref("TopicName"),
                    "claimed": {"type": "array", "items": _ref("Job")},
                    "count": _int(
                        "claimed.length; < max means the queue is (nearly) empty.", minimum=0
                    ),
                    "ready": _int("Claimable jobs left.", minimum=0),
                },
                ["topic", "claimed", "count", "ready"],
            )
        ),
        "AckRequest": _obj(
            {"node": _ref("NodeId"), "seqs": seqs, "lease_ids": lease_ids},
            ["node", "seqs"],
            closed=True,
        ),
        "AckResult": _with_perf(
            _obj(
                {
                    "topic": _ref("TopicName"),
                    "acked": _int("Jobs completed.", minimum=0),
                    "skipped": skipped,
                    **counters,
                },
                ["topic", "acked", "skipped", "ready", "in_flight"],
            )
        ),
        "NackRequest": _obj(
            {
                "node": _ref("NodeId"),
                "seqs": seqs,
                "delay_ms": _u64(
                    "Invisible this long before reclaim; clamped to 86400000.", default=0
                ),
                "lease_ids": lease_ids,
            },
            ["node", "seqs"],
            closed=True,
        ),
        "NackResult": _with_perf(
            _obj(
                {
                    "topic": _ref("TopicName"),
                    "nacked": _int("Leases released.", minimum=0),
                    "skipped": skipped,
                    **counters,
                },
                ["topic", "nacked", "skipped", "ready", "in_flight"],
            )
        ),
        "ExtendRequest": _obj(
            {"node": _ref("NodeId"), "seqs": seqs, "lease_ms": lease_ms, "lease_ids": lease_ids},
            ["node", "seqs", "lease_ms"],
            closed=True,
        ),
        "ExtendResult": _with_perf(
            _obj(
                {
                    "topic": _ref("TopicName"),
                    "extended": _int("Leases pushed out.", minimum=0),
                    "skipped": skipped,
                    "deadlines": {
                        "type": "object",
                        "description": "seq (as a string key) -> new absolute deadline (ms).",
                        "propertyNames": {"pattern": "^[0-9]+$"},
                        "additionalProperties": _ref("TimestampMs"),
                    },
                },
                ["topic", "extended", "skipped", "deadlines"],
            )
        ),
        "JobDedupe": _obj(
            {
                "index": _int("The record's index in the request.", minimum=0),
                "dedupe_key": _str("Its dedupe_key."),
                "seq": _ref("Seq"),
                "outcome": _str(
                    "duplicate: not appended, seq is the holder's; replaced: appended as seq, "
                    "the unclaimed holder replaced_seq was deleted.",
                    enum=["duplicate", "replaced"],
                ),
                "replaced_seq": _ref("Seq"),
            },
            ["index", "dedupe_key", "seq", "outcome"],
        ),
        "RedriveRequest": _obj(
            {
                "to": _nullable(_ref("TopicName"))
                | {
                    "description": "Target queue for every job (must exist and be a queue); "
                    "default: the queue each job's meta.$dead_letter_from names."
                },
                "max": _int("Jobs to move at most, 1..100000.", minimum=1, default=1000),
                "where": {
                    "type": ["object", "null"],
                    "properties": {
                        "origin": _ref("TopicName")
                        | {"description": "Only jobs dead-lettered from this queue."},
                        "match": {
                            "description": "Only jobs whose tag matches, as a delete's match: "
                            '"tag" or ["tag", "Eq"|"Glob", value].'
                        },
                    },
                    "additionalProperties": False,
                },
            },
            [],
            closed=True,
        ),
        "RedriveResult": _with_perf(
            _obj(
                {
                    "topic": _ref("TopicName"),
                    "moved": _int("Jobs moved back.", minimum=0),
                    "skipped": _int(
                        "Jobs that passed the filter but have no queue to go to (no "
                        "$dead_letter_from and no to, or it is gone or not a queue).",
                        minimum=0,
                    ),
                    "remaining": _int("Records the dead-letter topic still holds.", minimum=0),
                    "batches": {
                        "type": "array",
                        "description": "One atomic move each: the copies' seqs in to.",
                        "items": _obj(
                            {
                                "to": _ref("TopicName"),
                                "count": _int("Jobs in the batch.", minimum=1),
                                "first_seq": _ref("Seq"),
                                "last_seq": _ref("Seq"),
                            },
                            ["to", "count", "first_seq", "last_seq"],
                        ),
                    },
                },
                ["topic", "moved", "skipped", "remaining", "batches"],
            )
        ),
        "SseJobEvent": _obj(
            {"topic": _ref("TopicName"), **job_props},
            ["topic", *job_required],
            description="event: job on /work; id: is the job's $seq.",
        ),
    }


# -- §8 probes, this document ------------------------------------------------------------


def _probes() -> dict[str, Schema]:
    return {
        "Health": _with_perf(
            _obj(
                {
                    "status": {"const": "ok"},
                    "version": _str("The server's version."),
                    "uptime_ms": _int("Since the server started.", minimum=0),
                },
                ["status", "version", "uptime_ms"],
            )
        ),
        "Ready": _with_perf(
            _obj(
                {
                    "status": {"const": "ready"},
                    "wal_replay_complete": {"const": True},
                    "topics": _int("Live topics.", minimum=0),
                },
                ["status", "wal_replay_complete", "topics"],
            )
        ),
        "MetricsSnapshot": {
            "type": "object",
            "description": "The JSON snapshot (Accept: application/json): the Prometheus "
            "metrics keyed by family name; per-topic families map topic -> value; the "
            "histogram is {buckets, sum, count}.",
            "properties": {
                "topics_topics": {"type": "integer"},
                "topics_ready": {"type": "integer"},
                "topics_topics_by_class": {
                    "type": "object",
                    "additionalProperties": {"type": "integer"},
                },
                "topics_topic_head_seq": {
                    "type": "object",
                    "additionalProperties": {"type": "integer"},
                },
                "topics_cursor_lag": {
                    "type": "object",
                    "description": "topic -> cursor -> head_seq - committed seq.",
                    "additionalProperties": {
                        "type": "object",
                        "additionalProperties": {"type": "integer"},
                    },
                },
                "topics_cursor_seq": {
                    "type": "object",
                    "description": "topic -> cursor -> committed seq.",
                    "additionalProperties": {
                        "type": "object",
                        "additionalProperties": {"type": "integer"},
                    },
                },
                "topics_wal_fsync_latency_us": _obj(
                    {
                        "buckets": {"type": "object", "additionalProperties": {"type": "integer"}},
                        "sum": {"type": "number"},
                        "count": {"type": "integer"},
                    },
                    ["buckets", "sum", "count"],
                ),
                "performance": _ref("Performance"),
            },
            "required": ["topics_topics", "topics_ready", "performance"],
            "additionalProperties": {
                "description": "Every other family: a number, or topic -> number.",
                "anyOf": [
                    {"type": "number"},
                    {"type": "object", "additionalProperties": {"type": "number"}},
                ],
            },
        },
        "OpenApiDocument": {
            "type": "object",
            "description": "This document (no performance object).",
            "required": ["openapi", "info", "paths"],
        },
    }


def _cursors() -> dict[str, Schema]:
    info = {
        "topic": _ref("TopicName"),
        "cursor": _ref("CursorName"),
        "seq": _ref("Seq") | {"description": "The committed seq: reads resume after it."},
        "head_seq": _ref("Seq"),
        "earliest_seq": _ref("Seq"),
        "lag": _u64("max(0, head_seq - seq): seqs after the cursor (deleted ones count too)."),
        "updated_ts": _u64("When it was last committed (epoch ms)."),
    }
    return {
        "CursorName": {
            "type": "string",
            "pattern": "^[A-Za-z0-9][A-Za-z0-9._:-]{0,254}$",
            "description": "A named cursor: 1-255 chars of A-Z a-z 0-9 . _ : -, starting "
            "alphanumeric.",
        },
        "CursorInfo": _with_perf(_obj(info, list(info))),
        "CursorItem": _obj(info, list(info)),
        "CursorList": _with_perf(
            _obj(
                {
                    "topic": _ref("TopicName"),
                    "cursors": {"type": "array", "items": _ref("CursorItem")},
                },
                ["topic", "cursors"],
            )
        ),
        "CursorCommit": _obj(
            {
                "seq": _u64("The seq to commit (at most the topic's head_seq)."),
                "expect_seq": _u64(
                    "Compare-and-set: commit only if the committed seq is this (a cursor "
                    "never committed counts as 0), else 409 cursor_conflict."
                ),
            },
            ["seq"],
            closed=True,
        ),
        "CursorDeleteResult": _with_perf(
            _obj(
                {
                    "topic": _ref("TopicName"),
                    "cursor": _ref("CursorName"),
                    "deleted": _bool("False when the topic held no such cursor."),
                },
                ["topic", "cursor", "deleted"],
            )
        ),
    }


# -- parameters, headers, security -------------------------------------------------------


def _parameters() -> dict[str, Any]:
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
            "schema": _ref("TopicName"),
        },
        "router": {
            "name": "router",
            "in": "path",
            "required": True,
            "description": "Router name (percent-encode '>' as %3E).",
            "schema": _ref("RouterName"),
        },
        "cursor_name": {
            "name": "cursor",
            "in": "path",
            "required": True,
            "description": "The named cursor (a consumer group): the topic-name charset.",
            "schema": _ref("CursorName"),
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
            "schema": _ref("NodeId"),
        },
        "work_max": query(
            "max", qint, "Target in-flight depth (default 1, clamped to TOPICS_MAX_CLAIM)."
        ),
        "work_lease_ms": query("lease_ms", qint, "Lease of pushed jobs (default: the topic's)."),
    }


def _headers() -> dict[str, Any]:
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


def _security_schemes() -> dict[str, Any]:
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


# -- operations --------------------------------------------------------------------------


def _json_body(schema_name: str, *, required: bool, description: str) -> dict[str, Any]:
    return {
        "required": required,
        "description": description,
        "content": {"application/json": {"schema": _ref(schema_name)}},
    }


def _ok(schema_name: str, description: str, statuses: Sequence[int] = (200,)) -> dict[str, Any]:
    return {
        str(status): {
            "description": description,
            "headers": _response_headers(status),
            "content": {"application/json": {"schema": _ref(schema_name)}},
        }
        for status in statuses
    }


def _with_arrow(ok: dict[str, Any]) -> dict[str, Any]:
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


def _sse_ok(description: str) -> dict[str, Any]:
    return {
        "200": {
            "description": description,
            "headers": {
                **_response_headers(200),
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


def _param_refs(*names: str) -> list[dict[str, str]]:
    return [{"$ref": f"#/components/parameters/{name}"} for name in ("X-Request-ID", *names)]


def _security(
    method: str,
    pattern: str,
    *,
    probe: bool = False,
    query_token: bool = False,
    always_auth: bool = False,
    capability: bool = False,
) -> list[dict[str, list[str]]]:
    # A capability-gated stream (the watch GET) needs the creating key, not a scope.
    scopes: list[str] = [] if capability else sorted(required_scopes(method, pattern))
    if probe and not always_auth:
        return [{}, {"bearerAuth": []}]
    out: list[dict[str, list[str]]] = [{"bearerAuth": scopes}]
    if query_token:
        out.append({"queryToken": scopes})
    return out


def _op(
    method: str,
    pattern: str,
    *,
    op_id: str,
    tag: str,
    summary: str,
    description: str,
    ok: dict[str, Any],
    errors: Iterable[str],
    params: Sequence[str] = (),
    body: dict[str, Any] | None = None,
    probe: bool = False,
    always_auth: bool = False,
    query_token: bool = False,
    capability: bool = False,
    extra: Mapping[str, Any] | None = None,
) -> tuple[str, str, dict[str, Any]]:
    path_params = [p for p in ("topic", "router", "wid") if "{" + p + "}" in pattern]
    operation: dict[str, Any] = {
        "operationId": op_id,
        "tags": [tag],
        "summary": summary,
        "description": description,
        "security": _security(
            method,
            pattern,
            probe=probe,
            query_token=query_token,
            always_auth=always_auth,
            capability=capability,
        ),
        "parameters": _param_refs(*path_params, *params),
    }
    if body is not None:
        operation["requestBody"] = body
    operation["responses"] = {**ok, **_error_responses(errors)}
    if extra:
        operation.update(extra)
    return method.lower(), pattern, operation


def _operations() -> list[tuple[str, str, dict[str, Any]]]:
    topic_body_note = (
        " A body needs Content-Type: application/json (charset utf-8 if given) and may be "
        "gzip-encoded."
    )
    return [
        # §1 topics
        _op(
            "PUT",
            "/v0/topics/{topic}",
            op_id="putTopic",
            tag="topics",
            summary="Create or configure a topic (idempotent upsert)",
            description="§1.1. 201 when this call created the topic, 200 otherwise (identical "
            "config: no-op). An empty body creates with all defaults. type cannot change "
            "(409). A new topic over TOPICS_MAX_TOPICS is 429 throttled (detail.limit)."
            + topic_body_note,
            params=["Content-Encoding"],
            body=_json_body(
                "TopicConfigInput",
                required=False,
                description="The topic config object (§0.10); empty = defaults.",
            ),
            ok=_ok("TopicPutResult", "The topic and its full resolved config.", (200, 201)),
            errors=(*GATE, *STORE, *BODY, "topic_exists_incompatible"),
        ),
        _op(
            "GET",
            "/v0/topics/{topic}",
            op_id="getTopic",
            tag="topics",
            summary="Topic state: head, earliest, count, bytes, config",
            description="§1.2 (never auto-creates). A queue topic adds the queue counters.",
            params=["touch"],
            ok=_ok("TopicState", "The topic's state."),
            errors=(*GATE, *NAMED, "topic_not_found"),
        ),
        _op(
            "GET",
            "/v0/topics",
            op_id="listTopics",
            tag="topics",
            summary="List topics (opaque-cursor paginated)",
            description="§1.3. Filtered to the key's prefix allowlist; with several allowed "
            "prefixes a page may be short while next_cursor is present.",
            params=["prefix", "page_size", "cursor", "touch"],
            ok=_ok("TopicList", "One page; next_cursor is absent on the last page."),
            errors=(*GATE, "invalid_request"),
        ),
        _op(
            "DELETE",
            "/v0/topics/{topic}",
            op_id="deleteTopic",
            tag="topics",
            summary="Delete a topic and everything in it (cascades routers)",
            description="§1.4. Idempotent: an absent topic answers 200 with deleted: false.",
            params=["if_empty"],
            ok=_ok("TopicDeleteResult", "What was deleted."),
            errors=(*GATE, *STORE, *NAMED, "topic_not_empty"),
        ),
        # §2, §3, §5 records
        _op(
            "POST",
            "/v0/topics/{topic}",
            op_id="writeRecords",
            tag="records",
            summary="Append records; returns the assigned seqs and head",
            description="§2. Atomic: all records commit with contiguous seqs or none do. 201 "
            "when the write created the topic. Record data/meta are stored byte-verbatim. "
            "Shed under CPU pressure (429) unless disable_backpressure is true; a full "
            "discard:reject topic is 422 topic_full; TOPICS_MAX_TOTAL_BYTES / MAX_TOPICS caps "
            "are 429 throttled (detail.limit). expected_head_seq makes it a compare-and-append "
            "(409 head_mismatch); producer_id + epoch fence older instances of a producer "
            "(409 producer_fenced)." + topic_body_note,
            params=["return_seqs", "Idempotency-Key", "Content-Encoding"],
            body=_json_body("WriteRequest", required=True, description="The batch."),
            ok=_ok("WriteResult", "The assigned seqs (or the deduped original ones).", (200, 201)),
            errors=(
                *GATE,
                *STORE,
                *BODY,
                "batch_too_large",
                "record_too_large",
                "topic_not_found",
                "topic_full",
                "head_mismatch",
                "producer_fenced",
            ),
        ),
        _op(
            "POST",
            "/v0/topics/{topic}/diff",
            op_id="diffRecords",
            tag="records",
            summary="Read the records after a cursor (batched, with tombstones)",
            description="§3. Read-only and safe to retry; POST because the body describes the "
            "read. Never auto-creates. limit and wait_ms over their maxima are clamped, not "
            "rejected. A long poll (wait_ms) ends early, with the current answer, when the "
            "server starts draining. Extension: with Accept: application/vnd.apache.arrow.stream "
            "the same answer comes as an Arrow IPC stream (docs/HTTP.md); JSON is the default."
            + topic_body_note,
            params=["Content-Encoding"],
            body=_json_body(
                "DiffRequest",
                required=False,
                description="The cursor and options; empty = all defaults.",
            ),
            ok=_with_arrow(
                _ok("DiffResult", "Records, the next cursor, watermarks and any tombstone.")
            ),
            errors=(*GATE, *BODY, "topic_not_found"),
        ),
        _op(
            "POST",
            "/v0/topics/{topic}/delete",
            op_id="deleteRecords",
            tag="records",
            summary="Permanently delete records by before_seq and/or tag match",
            description="§5. Silent (no tombstone), point-in-time, effective immediately."
            + topic_body_note,
            params=["Content-Encoding"],
            body=_json_body(
                "DeleteRecordsRequest", required=True, description="before_seq and/or match."
            ),
            ok=_ok("DeleteRecordsResult", "How many were deleted and the topic after."),
            errors=(*GATE, *STORE, *BODY, "topic_not_found"),
        ),
        # §6 routers
        _op(
            "PUT",
            "/v0/routers/{router}",
            op_id="putRouter",
            tag="routers",
            summary="Create or configure a router (idempotent upsert)",
            description="§6.1. Forwarding is asynchronous and derived. 201 when created. An "
            "absent source (and an absent dest unless create_dest is false) is auto-created "
            "with the default config, after every check passed: a refused router leaves no "
            "topic behind. A cycle is 409 router_cycle (detail.cycle) unless allow_cycle; a "
            "second source into a derived dest is 409 topic_exists_incompatible (detail.reason "
            "= router_dest_fan_in); over TOPICS_MAX_ROUTERS is 429 throttled. The key's prefix "
            "allowlist applies to source and dest, the topics it may create (403)."
            + topic_body_note,
            params=["Content-Encoding"],
            body=_json_body("RouterPutRequest", required=True, description="The router."),
            ok=_ok("RouterPutResult", "The router as configured.", (200, 201)),
            errors=(
                *GATE,
                *STORE,
                *BODY,
                "topic_not_found",
                "router_cycle",
                "topic_exists_incompatible",
            ),
        ),
        _op(
            "GET",
            "/v0/routers/{router}",
            op_id="getRouter",
            tag="routers",
            summary="Get a router",
            description="§6.2.",
            ok=_ok("RouterState", "The router and its forwarded_total."),
            errors=(*GATE, *NAMED, "router_not_found"),
        ),
        _op(
            "GET",
            "/v0/routers",
            op_id="listRouters",
            tag="routers",
            summary="List routers (opaque-cursor paginated)",
            description="§6.3. Filtered to the key's prefix allowlist.",
            params=["prefix", "router_source", "router_dest", "page_size", "cursor"],
            ok=_ok("RouterList", "One page; next_cursor is absent on the last page."),
            errors=(*GATE, "invalid_request"),
        ),
        _op(
            "DELETE",
            "/v0/routers/{router}",
            op_id="deleteRouter",
            tag="routers",
            summary="Delete a router",
            description="§6.4. Idempotent (deleted: false when absent); forwarded copies stay.",
            ok=_ok("RouterDeleteResult", "Whether it existed."),
            errors=(*GATE, *STORE, *NAMED),
        ),
        # §7 watch
        _op(
            "POST",
            "/v0/watch",
            op_id="createWatch",
            tag="watch",
            summary="Create a multiplexed SSE watch session",
            description="§7.1. Returns a wid and the stream URL; 400/404 come here, before any "
            "stream is open. The key's prefix allowlist applies to every topic named (403); "
            "a topic_prefix is narrowed to it (403 when nothing is left). With on_backlog: "
            "error, a topic further behind than its max_backlog is 409 backlog_exceeded. "
            "Over TOPICS_MAX_WATCH_SESSIONS is 429 throttled. Idle sessions are collected "
            "after session_ttl_ms." + topic_body_note,
            params=["lenient", "Content-Encoding"],
            body=_json_body("WatchRequest", required=True, description="The subscription."),
            ok=_ok("WatchSession", "The session and the resolved per-topic positions."),
            errors=(*GATE, *BODY, "topic_not_found", "backlog_exceeded"),
        ),
        _op(
            "GET",
            "/v0/watch/{wid}",
            op_id="openWatchStream",
            tag="watch",
            summary="Open the SSE stream of a watch session",
            description="§7.2-§7.6. Capability-gated: no scope is checked here; with auth on, "
            "the key that created the session must be presented (header or the dev-only "
            "?token=) and any other key is 401. Resumes from the session cursors, rewound by "
            "Last-Event-ID (a malformed one is ignored). Unknown/collected wid: 404 "
            "not_found; malformed: 400. Counts against TOPICS_MAX_SSE_CONNECTIONS(_PER_KEY) "
            "(429). The event payloads are in x-sse-events.",
            params=["Last-Event-ID", "token"],
            query_token=True,
            capability=True,
            ok=_sse_ok("The stream is open."),
            errors=(
                "unauthorized",
                "throttled",
                "not_ready",
                "internal",
                "invalid_request",
                "not_found",
                "not_acceptable",
            ),
            extra={
                "x-sse-events": {
                    "connection-established": _ref("SseConnectionEstablishedEvent"),
                    "connection-closing": _ref("SseConnectionClosingEvent"),
                    "record": _ref("SseRecordEvent"),
                    "tombstone": _ref("SseTombstoneEvent"),
                    "caught-up": _ref("SseCaughtUpEvent"),
                    "topic-deleted": _ref("SseTopicDeletedEvent"),
                    "topic-added": _ref("SseTopicAddedEvent"),
                    "backlog-exceeded": _ref("SseBacklogExceededEvent"),
                    "end-reached": _ref("SseEndReachedEvent"),
                    "error": _ref("SseErrorEvent"),
                }
            },
        ),
        # §7.x WebSocket
        _op(
            "GET",
            "/v0/ws",
            op_id="openWebSocket",
            tag="websocket",
            summary="JSON-over-WebSocket subscribe/publish data plane",
            description="§7.x. Upgrade with a valid bearer key when auth is on (no scope is "
            "consumed at upgrade; each command is authorized by operation: subscribe needs "
            "read, publish write, publish with config also admin, and every name is checked "
            "against the prefix allowlist). Counts against the SSE connection caps. Messages "
            "are JSON text frames: x-websocket-messages gives their schemas; command errors "
            "arrive as {op: error} frames, not HTTP statuses. Refusals before the upgrade are "
            "HTTP answers with the error envelope; a GET without Upgrade is 400.",
            ok={
                "101": {
                    "description": "Switching Protocols: the WebSocket is open.",
                    "headers": _response_headers(101),
                }
            },
            errors=(
                "invalid_request",
                "unauthorized",
                "throttled",
                "not_ready",
                "shutting_down",
                "internal",
            ),
            extra={
                "security": [{"bearerAuth": []}],
                "x-websocket-messages": {
                    "client": _ref("WsClientCommand"),
                    "server": _ref("WsServerFrame"),
                },
            },
        ),
        # §10 queues
        _op(
            "POST",
            "/v0/topics/{topic}/claim",
            op_id="claimJobs",
            tag="queues",
            summary="Lease up to max claimable jobs to a worker node",
            description="§10.2. count < max is the '(nearly) empty' signal, never an error. "
            "With claim_jitter_ms > 0 the claim waits for its cohort." + topic_body_note,
            params=["Content-Encoding"],
            body=_json_body("ClaimRequest", required=True, description="Who and how many."),
            ok=_ok("ClaimResult", "The leased jobs, ascending by $seq."),
            errors=(*GATE, *STORE, *BODY, "topic_not_found", "not_a_queue"),
        ),
        _op(
            "POST",
            "/v0/topics/{topic}/ack",
            op_id="ackJobs",
            tag="queues",
            summary="Complete jobs (ack == permanent delete)",
            description="§10.4. Seqs not leased to node are skipped (idempotent)."
            + topic_body_note,
            params=["Content-Encoding"],
            body=_json_body("AckRequest", required=True, description="The held seqs."),
            ok=_ok("AckResult", "What was acked and the queue counters after."),
            errors=(*GATE, *STORE, *BODY, "batch_too_large", "topic_not_found", "not_a_queue"),
        ),
        _op(
            "POST",
            "/v0/topics/{topic}/nack",
            op_id="nackJobs",
            tag="queues",
            summary="Release leased jobs for (delayed) reclaim",
            description="§10.5." + topic_body_note,
            params=["Content-Encoding"],
            body=_json_body("NackRequest", required=True, description="The held seqs."),
            ok=_ok("NackResult", "What was released and the queue counters after."),
            errors=(*GATE, *STORE, *BODY, "batch_too_large", "topic_not_found", "not_a_queue"),
        ),
        _op(
            "POST",
            "/v0/topics/{topic}/extend",
            op_id="extendLeases",
            tag="queues",
            summary="Extend lease deadlines (heartbeat)",
            description="§10.6. Sets the deadline to now + lease_ms (sets, not adds)."
            + topic_body_note,
            params=["Content-Encoding"],
            body=_json_body("ExtendRequest", required=True, description="The held seqs."),
            ok=_ok("ExtendResult", "The new deadlines."),
            errors=(*GATE, *STORE, *BODY, "batch_too_large", "topic_not_found", "not_a_queue"),
        ),
        # named cursors (consumer groups)
        _op(
            "GET",
            "/v0/topics/{topic}/cursors",
            op_id="listCursors",
            tag="cursors",
            summary="List a topic's named cursors with their lag",
            description="Every cursor of the topic in name order. lag is head_seq - seq.",
            ok=_ok("CursorList", "The cursors."),
            errors=(*GATE, *NAMED, "topic_not_found"),
        ),
        _op(
            "GET",
            "/v0/topics/{topic}/cursors/{cursor}",
            op_id="getCursor",
            tag="cursors",
            summary="One named cursor",
            description="404 cursor_not_found when the topic holds no such cursor (a read "
            "from it would start at 0).",
            params=["cursor_name"],
            ok=_ok("CursorInfo", "The cursor and its lag."),
            errors=(*GATE, *NAMED, "topic_not_found", "cursor_not_found"),
        ),
        _op(
            "PUT",
            "/v0/topics/{topic}/cursors/{cursor}",
            op_id="commitCursor",
            tag="cursors",
            summary="Commit a seq to a named cursor (optionally compare-and-set)",
            description="Creates the cursor or moves it (back too), never past head_seq (400). "
            "With expect_seq it commits only if the committed seq is that (a cursor never "
            "committed counts as 0), else 409 cursor_conflict and nothing changes. Synced "
            "before the answer, like topic config; dropped with its topic. Needs the read "
            "scope (a consumer commits its own progress)." + topic_body_note,
            params=["cursor_name", "Content-Encoding"],
            body=_json_body("CursorCommit", required=True, description="The seq to commit."),
            ok=_ok("CursorInfo", "The cursor as committed."),
            errors=(*GATE, *STORE, *BODY, "topic_not_found", "cursor_conflict"),
        ),
        _op(
            "DELETE",
            "/v0/topics/{topic}/cursors/{cursor}",
            op_id="deleteCursor",
            tag="cursors",
            summary="Forget a named cursor",
            description="Idempotent: an absent cursor answers 200 with deleted: false.",
            params=["cursor_name"],
            ok=_ok("CursorDeleteResult", "Whether a cursor was deleted."),
            errors=(*GATE, *STORE, *NAMED, "topic_not_found"),
        ),
        _op(
            "POST",
            "/v0/topics/{topic}/redrive",
            op_id="redriveJobs",
            tag="queues",
            summary="Move dead-lettered jobs back to their queue",
            description="Admin. Moves up to max live records of this dead-letter topic, in seq "
            "order, to to (or the queue each one's meta.$dead_letter_from names), one atomic "
            "batch per target: appended there as fresh jobs (data, tag and meta kept, plus "
            "$redrive_from, $redrive_src_seq, $redrive_origin, $redrive_origin_seq, "
            "$redrive_at) and deleted here in one step. The key's prefix allowlist must cover "
            "every target (403 before anything moves)." + topic_body_note,
            params=["Content-Encoding"],
            body=_json_body("RedriveRequest", required=False, description="Target and filter."),
            ok=_ok("RedriveResult", "What moved, in which batches."),
            errors=(*GATE, *STORE, *BODY, "topic_not_found", "not_a_queue"),
        ),
        _op(
            "GET",
            "/v0/topics/{topic}/work",
            op_id="openWorkStream",
            tag="queues",
            summary="SSE auto-claim/push of jobs (PUSH mode)",
            description="§10.8. Keeps up to max jobs leased to this connection; ack/nack/extend "
            "through the POST endpoints. Disconnecting releases this connection's leases at "
            "once. Counts against the SSE connection caps (429).",
            params=["work_node", "work_max", "work_lease_ms", "token"],
            query_token=True,
            ok=_sse_ok("The stream is open."),
            errors=(
                *GATE,
                *STORE,
                "invalid_request",
                "topic_not_found",
                "not_acceptable",
                "not_a_queue",
            ),
            extra={
                "x-sse-events": {
                    "job": _ref("SseJobEvent"),
                    "error": _ref("SseErrorEvent"),
                    "connection-closing": _ref("SseConnectionClosingEvent"),
                }
            },
        ),
        # §8 probes
        *[
            _op(
                "GET",
                path,
                op_id=op_id,
                tag="probes",
                summary="Liveness" + (" (alias of /v0/health)" if alias else ""),
                description="§8.1. 200 whenever the process can serve; never touches the topic "
                "set. Needs a key only with TOPICS_PROBE_AUTH.",
                probe=True,
                ok=_ok("Health", "Alive."),
                errors=("unauthorized", "internal"),
            )
            for path, op_id, alias in (
                ("/v0/health", "health", False),
                ("/healthz", "healthAlias", True),
            )
        ],
        *[
            _op(
                "GET",
                path,
                op_id=op_id,
                tag="probes",
                summary="Readiness" + (" (alias of /v0/ready)" if alias else ""),
                description="§8.2. 503 not_ready (detail.replay_progress) during WAL replay, "
                "503 shutting_down while draining. Needs a key only with TOPICS_PROBE_AUTH.",
                probe=True,
                ok=_ok("Ready", "Ready to serve."),
                errors=("unauthorized", "not_ready", "shutting_down", "internal"),
            )
            for path, op_id, alias in (
                ("/v0/ready", "ready", False),
                ("/readyz", "readyAlias", True),
            )
        ],
        _op(
            "GET",
            "/v0/metrics",
            op_id="metrics",
            tag="probes",
            summary="Prometheus text (default) or a JSON snapshot",
            description="§8.3. 200 even while recovering. Needs the read scope when keys are "
            "configured. Accept: application/json selects the JSON snapshot.",
            probe=True,
            always_auth=True,
            ok={
                "200": {
                    "description": "The metrics.",
                    "headers": _response_headers(200),
                    "content": {
                        "text/plain": {
                            "schema": {
                                "type": "string",
                                "description": "Prometheus text exposition 0.0.4.",
                            }
                        },
                        "application/json": {"schema": _ref("MetricsSnapshot")},
                    },
                }
            },
            errors=(*AUTH, "internal"),
        ),
        _op(
            "GET",
            "/v0/openapi.json",
            op_id="openapi",
            tag="meta",
            summary="This OpenAPI document",
            description="Unauthenticated by default (a key is needed only with "
            "TOPICS_PROBE_AUTH); served during recovery and never shed. The body is exactly "
            "the document (no performance object).",
            probe=True,
            ok=_ok("OpenApiDocument", "The document."),
            errors=("unauthorized", "internal"),
        ),
    ]


_TAGS = [
    ("topics", "Create, configure, inspect, list and delete topics (§1)."),
    ("records", "Append, read (diff) and delete records (§2, §3, §5)."),
    ("routers", "Server-side forwarding rules between topics (§6)."),
    ("watch", "Multiplexed SSE watch sessions (§7)."),
    ("websocket", "The JSON-over-WebSocket data plane (§7.x)."),
    ("queues", "Lease-based job delivery on type:queue topics (§10)."),
    ("cursors", "Named consumer cursors: a consumer group's position kept by the server."),
    ("probes", "Liveness, readiness and metrics (§8)."),
    ("meta", "This document."),
]

_DESCRIPTION = """\
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


def build_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the /v0 surface, as a fresh dict.

    Returns:
        The document, banner included (rule 6).

    Example::

        doc = build_document()
        doc["paths"]["/v0/topics/{topic}"]["post"]["responses"]["422"]
    """
    paths: dict[str, dict[str, Any]] = {}
    for method, pattern, operation in _operations():
        paths.setdefault(pattern, {})[method] = operation
    schemas: dict[str, Schema] = {}
    for part in (
        _primitives,
        _performance,
        _errors,
        _topics,
        _records,
        _routers,
        _watch,
        _ws,
        _queues,
        _cursors,
        _probes,
    ):
        schemas.update(part())
    parameters = _parameters()
    parameters["router_source"] = {
        "name": "source",
        "in": "query",
        "required": False,
        "description": "Only routers from this source topic.",
        "schema": _ref("TopicName"),
    }
    parameters["router_dest"] = {
        "name": "dest",
        "in": "query",
        "required": False,
        "description": "Only routers into this dest topic.",
        "schema": _ref("TopicName"),
    }
    return {
        "openapi": "3.1.0",
        "x-generated-by": GENERATED_BY,
        "info": {
            "title": "topics /v0",
            "version": __version__,
            "summary": "Persistent event engine: topics, records, routers, watch, queues.",
            "description": _DESCRIPTION,
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
        "tags": [{"name": name, "description": text} for name, text in _TAGS],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "parameters": parameters,
            "headers": _headers(),
            "securitySchemes": _security_schemes(),
            # One response per error code; not_found and method_not_allowed can answer any
            # path (rule 2).
            "responses": {code: _error_response((code,)) for code in ERROR_CODES},
        },
        "x-error-codes": {code: status_of(code) for code in ERROR_CODES},
    }


def document_text() -> str:
    """The generated copy's text: the document, indented, with a final newline."""
    return json.dumps(build_document(), indent=2, ensure_ascii=False) + "\n"


# -- the route ---------------------------------------------------------------------------

_served: bytes | None = None


async def get_openapi(ctx: RequestContext) -> Reply:
    """GET /v0/openapi.json — this document (rule 5: no performance object)."""
    global _served
    if _served is None:
        _served = json_bytes(build_document())
    return Reply(200, _served)


ROUTES = (Route("GET", "/v0/openapi.json", get_openapi, probe=True),)


def main(argv: Sequence[str] | None = None) -> int:
    """Write the document to stdout (``python -m topics.frontends.http.openapi``)."""
    del argv
    sys.stdout.write(document_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
