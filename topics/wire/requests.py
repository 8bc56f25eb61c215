"""The request shapes, declared once: every JSON body of the HTTP API and every WebSocket
command, as the JSON Schema of its members (names, types, limits, defaults).

Three readers use each declaration, so they cannot disagree:
1. the HTTP route that decodes the body refuses a member not in ``shape.names``
   (frontends/http/*_routes.py);
2. the WebSocket decoder does the same for a command (:mod:`topics.wire.ws`);
3. the OpenAPI document publishes ``shape.json_schema()`` under ``shape.name``
   (frontends/http/openapi).

A new member goes into its shape here, and nowhere else; an option of a write, a diff or
a watch goes into :mod:`topics.wire.options`, which declares where every surface carries
it, and its shapes here are built from there. The engine still checks each value (a shape
only says which members exist and what they hold). ``ref(name)`` names a
schema of the OpenAPI document's ``components.schemas``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from topics.settings import Limits

from .jsonschema import Schema, integer, nullable, obj, ref, u64
from .options import DIFF_OPTIONS, WATCH_OPTIONS, WATCH_TOPIC_OPTIONS, WRITE_OPTIONS

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
            **WRITE_OPTIONS.properties(),
        },
        ["records"],
        closed=True,
        description="An append (§2). Unknown members are 400 invalid_request.",
    ),
)

DIFF = RequestShape(
    "DiffRequest",
    obj(
        DIFF_OPTIONS.properties(),
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

WATCH_TOPIC = RequestShape("WatchTopicOptions", obj(WATCH_TOPIC_OPTIONS.properties(), closed=True))

WATCH = RequestShape(
    "WatchRequest",
    obj(
        {
            "topics": {
                "type": "object",
                "description": f"topic -> options; 1..TOPICS_MAX_WATCH_TOPICS (default "
                f"{LIMITS.max_watch_topics}), counting what topic_prefix covers. The "
                "key's prefix allowlist applies to every name (403). May be empty or "
                "absent beside topic_prefix.",
                "propertyNames": ref("TopicName"),
                "additionalProperties": ref("WatchTopicOptions"),
            },
            **WATCH_OPTIONS.properties(),
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


#: A subscribe takes a watch's options (not its heartbeat: WebSocket pings keep it alive)
#: and either one ``topic`` with its start at the top level or a ``topics`` map.
WS_SUBSCRIBE = _command(
    "subscribe",
    {
        "topic": ref("TopicName"),
        "topics": {
            "type": "object",
            "propertyNames": ref("TopicName"),
            "additionalProperties": ref("WatchTopicOptions"),
        },
        **WATCH_TOPIC_OPTIONS.properties(ws=True),
        **WATCH_OPTIONS.properties(ws=True),
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
