"""The schema helpers and the shared vocabulary (§0): names, seqs, performance."""

from __future__ import annotations

from typing import get_args

from topics._names import ROUTER_NAME_RE, TOPIC_NAME_RE
from topics.settings import Limits
from topics.types import TombstoneReason
from topics.wire.jsonschema import (
    U64_MAX,
    Schema,
    boolean,
    integer,
    nullable,
    obj,
    ref,
    string,
    u64,
)

__all__ = [
    "LIMITS",
    "REQUEST_ID_PATTERN",
    "ROUTER_NAME_PATTERN",
    "TOMBSTONE_REASONS",
    "TOPIC_NAME_PATTERN",
    "U64_MAX",
    "Schema",
    "boolean",
    "integer",
    "nullable",
    "obj",
    "ref",
    "schemas",
    "string",
    "u64",
    "with_perf",
]

LIMITS = Limits()

#: Every tombstone reason, from the one Literal that declares them (topics.types).
TOMBSTONE_REASONS: list[str] = list(get_args(TombstoneReason))


def with_perf(schema: Schema, perf: str = "Performance") -> Schema:
    """A success body: ``schema``'s members plus the performance object (§0.9)."""
    out = dict(schema)
    out["properties"] = {**schema["properties"], "performance": ref(perf)}
    out["required"] = [*schema.get("required", ()), "performance"]
    return out


# -- the shared vocabulary (§0) ----------------------------------------------------------

# The validators' own patterns, anchored (JSON Schema's pattern is a search).
TOPIC_NAME_PATTERN = f"^{TOPIC_NAME_RE.pattern}$"
ROUTER_NAME_PATTERN = f"^{ROUTER_NAME_RE.pattern}$"
REQUEST_ID_PATTERN = r"^[A-Za-z0-9._-]{1,128}$"


def _primitives() -> dict[str, Schema]:
    """The shared scalar schemas (names, seqs, times, codes).

    Kept whole: a declarative table, read top to bottom like the document it makes.
    """
    return {
        "TopicName": string(
            "A topic name: 1-255 chars of A-Z a-z 0-9 . _ : -, starting alphanumeric; "
            "case-sensitive, byte-exact (§1.1). A bad name is 400 invalid_request.",
            pattern=TOPIC_NAME_PATTERN,
            examples=["jobs", "render-queue:tenantA"],
        ),
        "RouterName": string(
            "A router name: the topic charset plus '>' (convention: \"<source>-><dest>\"; "
            "percent-encode '>' in a URL as %3E).",
            pattern=ROUTER_NAME_PATTERN,
            examples=["orders->audit"],
        ),
        "Seq": u64("A record's sequence id: u64 as a JSON number (§0.7)."),
        "TimestampMs": integer("Integer milliseconds since the Unix epoch (§0.7)."),
        "NodeId": string(
            f"An origin node id (loop prevention, §4.5): a non-empty string of at most "
            f"TOPICS_MAX_NODE_BYTES (default {LIMITS.max_node_bytes}) UTF-8 bytes.",
            minLength=1,
        ),
        "NodeFilter": {
            "description": "Node loop-prevention filter: records whose $node is in this set "
            "are omitted (the cursor still advances past them).",
            "anyOf": [
                ref("NodeId"),
                {"type": "array", "items": ref("NodeId")},
            ],
        },
        "Tag": string(
            f"A record tag (the deletion-match key, §5): a non-empty string of at most "
            f"TOPICS_MAX_TAG_BYTES (default {LIMITS.max_tag_bytes}) UTF-8 bytes.",
            minLength=1,
        ),
        "Meta": {
            "type": "object",
            "description": f"Small per-record headers, stored and returned verbatim: at most "
            f"TOPICS_MAX_META_BYTES (default {LIMITS.max_meta_bytes}) bytes and "
            f"{LIMITS.max_meta_keys} keys. Top-level keys beginning with $ are the server's "
            "(its stamps, e.g. $deliver_at): a write that carries one is 400 invalid_request.",
        },
        "AnyJson": {
            "description": "Any JSON value (object, array, string, number, bool, null), stored "
            "and returned byte-verbatim, never parsed for shape (§0.3). I-JSON's limits hold "
            "on write: a lone UTF-16 surrogate escape or a number whose integer part has more "
            "than 308 digits is 400 invalid_request."
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
            "tombstones are never filtered. At most 64 terms, 8 levels, no lone surrogates, "
            "and a cost per record (a test per term, an In is one, a decode per part read) "
            "within TOPICS_MAX_WHERE_COST (default 128); a filtered read stops after "
            "TOPICS_MAX_WHERE_MS with a cursor, as limit stops it.",
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
            "allOf": [ref("Performance")],
            "required": ["server_total_ms", "wal_append_ms", "fsync_ms", "throttle_wait_ms"],
        },
        "DiffPerformance": {
            "allOf": [ref("Performance")],
            "required": ["server_total_ms", "records_scanned"],
        },
        "FsyncPerformance": {
            "allOf": [ref("Performance")],
            "required": ["server_total_ms", "fsync_ms"],
        },
    }


def schemas() -> dict[str, Schema]:
    """This module's entries of ``components.schemas``, in document order."""
    return {**_primitives(), **_performance()}
