"""The request shapes, declared once: every JSON body of the HTTP API and every WebSocket
command, as the JSON Schema of its members (names, types, limits, defaults).

Three readers use each declaration, so they cannot disagree:
1. the HTTP route that decodes the body refuses a member not in ``shape.names``
   (frontends/http/*_routes.py);
2. the WebSocket decoder does the same for a command (:mod:`topics.wire.ws`);
3. the OpenAPI document publishes ``shape.json_schema()`` under ``shape.name``
   (frontends/http/openapi).

A new member goes into its shape here, and nowhere else; the engine still checks each
value (a shape only says which members exist and what they hold). ``ref(name)`` names a
schema of the OpenAPI document's ``components.schemas``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from topics.settings import Limits

from .jsonschema import Schema, boolean, integer, nullable, obj, ref, string, u64

__all__ = [
    "ACK",
    "CLAIM",
    "CURSOR_COMMIT",
    "DELETE_RECORDS",
    "DIFF",
    "EXTEND",
    "NACK",
    "REDRIVE",
    "WATCH",
    "WATCH_TOPIC",
    "WRITE",
    "WS_COMMANDS",
    "WS_COMMIT",
    "WS_PING",
    "WS_PUBLISH",
    "WS_SUBSCRIBE",
    "WS_UNSUBSCRIBE",
    "RequestShape",
]

LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class RequestShape:
    """One request body or command.

    Attributes:
        name: its name in the OpenAPI document's ``components.schemas`` (a WebSocket
            command: its ``op``).
        schema: its JSON Schema, an object schema whose ``properties`` are its members.
        names: the member names (what a decoder accepts; anything else is 400).
    """

    name: str
    schema: Schema
    names: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", frozenset(self.schema["properties"]))

    def json_schema(self) -> Schema:
        """A fresh copy of :attr:`schema` (the document is built as a fresh dict)."""
        return copy.deepcopy(self.schema)


# -- §2 writes, §3 diffs, §5 deletes -----------------------------------------------------

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


WRITE = RequestShape(
    "WriteRequest",
    obj(
        {
            "records": {
                "type": "array",
                "items": ref("WriteRecord"),
                "minItems": 1,
                "description": f"1..TOPICS_MAX_BATCH_RECORDS (default "
                f"{LIMITS.max_batch_records}) records, assigned contiguous seqs in order; "
                "more is 400 batch_too_large.",
            },
            "node": nullable(ref("NodeId")) | {"description": "Batch default $node."},
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
            "config": nullable(ref("TopicConfigInput"))
            | {"description": "Applied only when this write creates the topic."},
            "disable_backpressure": boolean(
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
                "description": "The window of dedupe: window (required with it, 400 otherwise).",
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
)

DIFF = RequestShape(
    "DiffRequest",
    obj(
        {
            "from_seq": u64("Exclusive cursor: records with $seq > from_seq.", default=0),
            "limit": u64(
                f"Max records; 0 = default 256; clamped to TOPICS_MAX_LIMIT (default "
                f"{LIMITS.max_limit}), never rejected.",
                default=256,
            ),
            "node": ref("NodeFilter"),
            "include_tags": boolean("Include $tag.", default=False),
            "include_meta": boolean("Include meta.", default=True),
            "include_data": boolean("Include data (false: metadata-only tailing).", default=True),
            "wait_ms": u64("Long-poll when caught up; clamped to 30000.", default=0),
            "max_batch_bytes": integer(
                "Soft byte budget of the answer (at least one record is always "
                "returned); default 1 MiB, clamped to 8 MiB.",
                minimum=1,
                default=1 << 20,
            ),
            "cursor": ref("CursorName")
            | {
                "description": "Start after this named cursor's committed seq instead of "
                "from_seq (not both); a cursor never committed reads from 0."
            },
            "commit": boolean(
                "With cursor: commit the answer's next_from_seq to it before answering "
                "(at most once: an answer lost on the way is not read again; commit "
                "explicitly with PUT .../cursors/{cursor} for at least once).",
                default=False,
            ),
            "from_ts": u64(
                "Start at the first record with $ts >= from_ts (ms) instead of from_seq "
                "(not both); the answer echoes the resolved from_seq. Older than every "
                "live record: exactly a read from from_seq 0, tombstone included."
            ),
            "to_ts": u64(
                "Inclusive end by time: the last record with $ts <= to_ts; caught_up and "
                "lag count to the end, end_reached says the cursor is there."
            ),
            "to_seq": u64("Inclusive end by seq (with to_ts: the earlier end)."),
            "where": ref("Where"),
            "format": string(
                "records, or cloudevents: each record as a CloudEvents 1.0 event.",
                enum=["records", "cloudevents"],
                default="records",
            ),
            "ce_type_field": string(
                "With cloudevents: the meta member giving each event's type (else topics.record).",
                minLength=1,
                default="type",
            ),
        },
        closed=True,
        description="A diff (§3). An empty body means all defaults. Unknown members are "
        "400 invalid_request.",
    ),
)

DELETE_RECORDS = RequestShape(
    "DeleteRecordsRequest",
    obj(
        {
            "before_seq": nullable(u64("Delete records with $seq < before_seq.")),
            "match": nullable(ref("Match")),
        },
        closed=True,
        description="A record delete (§5): before_seq and/or match (both = AND); neither "
        "is 400 invalid_request. null = absent.",
    ),
)

# -- §7 watch ------------------------------------------------------------------------------

WATCH_TOPIC = RequestShape(
    "WatchTopicOptions",
    obj(
        {
            "from_seq": u64("Deliver records with $seq > from_seq; 0 = earliest.", default=0),
            "tail": boolean("Start at the current head (ignore from_seq).", default=False),
            "max_backlog": u64(
                "This topic's backlog limit (replaces the request's max_backlog; 0: none).",
            ),
            "cursor": ref("CursorName")
            | {
                "description": "Start after this named cursor's committed seq (not with "
                "from_seq or tail; never committed: from 0)."
            },
            "commit": boolean(
                "With cursor: commit each delivered frame's position to it once the "
                "frame has left the server (at least once across a server crash).",
                default=False,
            ),
            "from_ts": u64(
                "Start at the first record with $ts >= from_ts (resolved once, at "
                "creation: the answer's from_seq); not with from_seq or tail."
            ),
            "to_ts": u64(
                "End after the last record with $ts <= to_ts: then event: end-reached, "
                "and the topic leaves the session."
            ),
            "to_seq": u64("End after this seq (with to_ts: the earlier end)."),
        },
        closed=True,
    ),
)

WATCH = RequestShape(
    "WatchRequest",
    obj(
        {
            "node": ref("NodeFilter"),
            "topics": {
                "type": "object",
                "description": f"topic -> options; 1..TOPICS_MAX_WATCH_TOPICS (default "
                f"{LIMITS.max_watch_topics}), counting what topic_prefix covers. The "
                "key's prefix allowlist applies to every name (403). May be empty or "
                "absent beside topic_prefix.",
                "propertyNames": ref("TopicName"),
                "additionalProperties": ref("WatchTopicOptions"),
            },
            "topic_prefix": ref("WatchPrefixes"),
            "max_backlog": u64(
                "A topic more than this many seqs behind its head when a stream starts or "
                "resumes reading it gets an event: backlog-exceeded with the head instead "
                "of the replay (0: no limit).",
                default=0,
            ),
            "on_backlog": string(
                "jump: the backlog-exceeded event; error: 409 backlog_exceeded here.",
                enum=["jump", "error"],
                default="jump",
            ),
            "limit": u64("Max records per record frame.", default=256),
            "max_batch_bytes": u64(
                "Soft byte budget per record frame; 0 = 1 MiB, clamped to 8 MiB.",
                default=262_144,
            ),
            "heartbeat_ms": u64("Heartbeat interval, clamped to [1000, 60000].", default=15_000),
            "include_meta": boolean("Include meta.", default=True),
            "include_tags": boolean("Include $tag.", default=False),
            "include_data": boolean("Include data.", default=True),
            "consistency": string(
                "eventual pushes from the WAL buffer; strong only after commit/fsync.",
                enum=["eventual", "strong"],
                default="eventual",
            ),
            "where": ref("Where"),
            "format": string(
                "records, or cloudevents (each record a CloudEvents 1.0 event).",
                enum=["records", "cloudevents"],
                default="records",
            ),
            "ce_type_field": string(
                "With cloudevents: the meta member giving each event's type.",
                minLength=1,
                default="type",
            ),
        },
        closed=True,
        description="A multiplexed watch subscription (§7.1): topics, topic_prefix or both.",
    ),
)

# -- §10 queues, named cursors ---------------------------------------------------------

_SEQS: Schema = {
    "type": "array",
    "items": ref("Seq"),
    "minItems": 1,
    "description": f"1..TOPICS_MAX_CLAIM (default {LIMITS.max_claim}) job seqs; longer "
    "is 400 batch_too_large.",
}
_LEASE_IDS: Schema = {
    "type": "array",
    "items": {"type": "string"},
    "description": "Optional per-seq lease fence (same length and order as seqs): a stale "
    "token's seq is skipped.",
}
_LEASE_MS = integer("Lease duration, clamped to [100, 86400000].")

CLAIM = RequestShape(
    "ClaimRequest",
    obj(
        {
            "node": ref("NodeId"),
            "max": u64(
                f"Jobs wanted; clamped to TOPICS_MAX_CLAIM (default {LIMITS.max_claim}).",
                default=1,
            ),
            "lease_ms": _LEASE_MS,
        },
        ["node"],
        closed=True,
    ),
)

ACK = RequestShape(
    "AckRequest",
    obj(
        {"node": ref("NodeId"), "seqs": _SEQS, "lease_ids": _LEASE_IDS},
        ["node", "seqs"],
        closed=True,
    ),
)

NACK = RequestShape(
    "NackRequest",
    obj(
        {
            "node": ref("NodeId"),
            "seqs": _SEQS,
            "delay_ms": u64("Invisible this long before reclaim; clamped to 86400000.", default=0),
            "lease_ids": _LEASE_IDS,
        },
        ["node", "seqs"],
        closed=True,
    ),
)

EXTEND = RequestShape(
    "ExtendRequest",
    obj(
        {"node": ref("NodeId"), "seqs": _SEQS, "lease_ms": _LEASE_MS, "lease_ids": _LEASE_IDS},
        ["node", "seqs", "lease_ms"],
        closed=True,
    ),
)

REDRIVE = RequestShape(
    "RedriveRequest",
    obj(
        {
            "to": nullable(ref("TopicName"))
            | {
                "description": "Target queue for every job (must exist and be a queue); "
                "default: the queue each job's meta.$dead_letter_from names."
            },
            "max": integer("Jobs to move at most, 1..100000.", minimum=1, default=1000),
            "where": {
                "type": ["object", "null"],
                "properties": {
                    "origin": ref("TopicName")
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
)

CURSOR_COMMIT = RequestShape(
    "CursorCommit",
    obj(
        {
            "seq": u64("The seq to commit (at most the topic's head_seq)."),
            "expect_seq": u64(
                "Compare-and-set: commit only if the committed seq is this (a cursor "
                "never committed counts as 0), else 409 cursor_conflict."
            ),
        },
        ["seq"],
        closed=True,
    ),
)

# -- §7.x WebSocket commands -------------------------------------------------------------


def _command(op: str, members: Schema, required: tuple[str, ...] = ()) -> RequestShape:
    """A WebSocket command: ``op`` and an optional ``request_id`` beside its own members."""
    return RequestShape(
        op,
        obj(
            {"op": {"const": op}, "request_id": {"type": "string"}, **members},
            ["op", *required],
        ),
    )


WS_SUBSCRIBE = _command(
    "subscribe",
    {
        "topic": ref("TopicName"),
        "topics": {
            "type": "object",
            "propertyNames": ref("TopicName"),
            "additionalProperties": ref("WatchTopicOptions"),
        },
        "from_seq": ref("Seq"),
        "tail": {"type": "boolean"},
        "node": ref("NodeFilter"),
        "limit": {"type": "integer", "minimum": 0},
        "max_batch_bytes": {"type": "integer", "minimum": 0},
        "include_data": {"type": "boolean"},
        "include_tags": {"type": "boolean"},
        "include_meta": {"type": "boolean"},
        "consistency": {"enum": ["eventual", "strong"]},
        "topic_prefix": ref("WatchPrefixes"),
        "max_backlog": {"type": "integer", "minimum": 0},
        "on_backlog": {"enum": ["jump", "error"]},
        "cursor": ref("CursorName"),
        "commit": {"type": "boolean"},
        "from_ts": ref("Seq"),
        "to_ts": ref("Seq"),
        "to_seq": ref("Seq"),
        "where": ref("Where"),
        "format": {"enum": ["records", "cloudevents"]},
        "ce_type_field": {"type": "string", "minLength": 1},
    },
)
WS_UNSUBSCRIBE = _command(
    "unsubscribe",
    {
        "topic": ref("TopicName"),
        "topics": {"type": "array", "items": ref("TopicName")},
        "topic_prefix": {
            "oneOf": [
                {"type": "string"},
                {"type": "array", "items": {"type": "string"}},
            ],
            "description": "Stop joining under these prefixes and drop the topics they cover.",
        },
    },
)
#: A publish is a write (every member of :data:`WRITE`) to the ``topic`` it names.
WS_PUBLISH = _command(
    "publish",
    {"topic": ref("TopicName"), **WRITE.schema["properties"]},
    ("topic", "records"),
)
WS_PING = _command("ping", {})
WS_COMMIT = _command(
    "commit",
    {
        "topic": ref("TopicName"),
        "cursor": ref("CursorName"),
        "seq": ref("Seq"),
        "expect_seq": ref("Seq"),
    },
    ("topic", "cursor", "seq"),
)

#: Every client command, in the order the OpenAPI document lists them.
WS_COMMANDS = (WS_SUBSCRIBE, WS_UNSUBSCRIBE, WS_PUBLISH, WS_PING, WS_COMMIT)
