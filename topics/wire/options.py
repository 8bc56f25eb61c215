"""The options of a write, a diff and a watch, declared once (issue 29, item 4).

Each :class:`Option` is one member of a request body: its JSON Schema (type, limits, the
wire's default and the one description every surface shows) and where each surface
carries it: the Engine keyword, the WebSocket command, the client keyword and the
``topics`` CLI flag, or why a surface has none. The body's subject (a write's
``records``, a watch's ``topics``) is not an option; topics/wire/requests.py adds it.

Rules:
1. topics/wire/requests.py builds the request shapes (``WriteRequest``, ``DiffRequest``,
   ``WatchRequest``, ``WatchTopicOptions`` and the WebSocket ``publish`` and
   ``subscribe``) from these tables, so the HTTP decoders, the WebSocket decoder and the
   OpenAPI document take their member names, schemas and descriptions from here.
2. The client's option sets (the publish options of topics/client/_ws.py, the watch
   options of topics/client/_watch_state.py) are the ``client`` names of these tables.
3. What cannot read a table (the Engine's and the client's signatures, the CLI's flags,
   what the decoders hand on) is checked against it by
   tests/unit/wire/test_option_surfaces.py: a surface that lacks a declared option, or
   an option whose surface is None without a reason, fails it.
4. Everything here is built at import time; no request reads this module's objects
   other than through the frozen name sets of :mod:`topics.wire.requests`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from topics.settings import Limits

from .jsonschema import Schema, boolean, integer, nullable, ref, string, u64

__all__ = [
    "DIFF_OPTIONS",
    "WATCH_OPTIONS",
    "WATCH_TOPIC_OPTIONS",
    "WRITE_OPTIONS",
    "Option",
    "Options",
]

LIMITS = Limits()

#: ``engine``/``client`` default: the surface's name is the wire's.
_SAME = "="


@dataclass(frozen=True, slots=True)
class Option:
    """One option and where each surface carries it.

    Attributes:
        name: the member of the HTTP body (and of the WebSocket command, with ``ws``).
        schema: its JSON Schema; ``schema["description"]`` is its one description.
        engine: the Engine keyword (None: the frontend's own, ``no_engine`` says why).
        client: the client keyword (None: not on the client).
        ws: also a member of the operation's WebSocket command.
        cli: ``"<command ...> --flag"`` of the ``topics`` CLI, or None (``no_cli`` says why).
    """

    name: str
    schema: Schema
    engine: str | None
    client: str | None
    ws: bool
    cli: str | None
    no_engine: str = ""
    no_cli: str = ""

    @property
    def description(self) -> str:
        text: str = self.schema["description"]
        return text


def _opt(
    name: str,
    schema: Schema,
    *,
    engine: str | None = _SAME,
    client: str | None = _SAME,
    ws: bool = True,
    cli: str | None = None,
    no_engine: str = "",
    no_cli: str = "",
) -> Option:
    return Option(
        name,
        schema,
        name if engine == _SAME else engine,
        name if client == _SAME else client,
        ws,
        cli,
        no_engine,
        no_cli,
    )


@dataclass(frozen=True, slots=True)
class Options:
    """The options of one operation.

    Attributes:
        op: the operation (``write``, ``diff``, ``watch``, ``watch topic``).
        engine: the Engine method an HTTP request calls (None: the options travel inside
            a ``topics`` map, per topic).
        engine_ws: the one a WebSocket command calls (None: not on the WebSocket).
        client: the client method.
        options: the options, in the order the document lists them.
    """

    op: str
    engine: str | None
    engine_ws: str | None
    client: str
    options: tuple[Option, ...]

    @property
    def names(self) -> frozenset[str]:
        return frozenset(o.name for o in self.options)

    def properties(self, *, ws: bool = False) -> dict[str, Schema]:
        """The members' schemas (``ws``: only the WebSocket command's), fresh copies."""
        return {o.name: copy.deepcopy(o.schema) for o in self.options if o.ws or not ws}

    def client_names(self) -> frozenset[str]:
        return frozenset(o.client for o in self.options if o.client is not None)


_FORMAT = ("records", "cloudevents")
_NO_TYPE_FIELD = "the CLI's CloudEvents take their type from meta.type, the default"
_WHOLE = "the CLI prints whole records"
_GROUP = (
    "topics tail --group follows a consumer group through the client's cursor store "
    "(GET/PUT of the group's cursors), not through this option"
)

WRITE_OPTIONS = Options(
    "write",
    "write",
    "write",
    "write",
    (
        _opt(
            "node",
            nullable(ref("NodeId")) | {"description": "Batch default $node."},
            cli="write --node",
        ),
        _opt(
            "idempotency_key",
            {
                "type": ["string", "null"],
                "minLength": 1,
                "maxLength": 256,
                "description": "Dedupe key (§0.8), scoped to the topic; wins over the "
                "Idempotency-Key header.",
            },
            no_cli="the client gives each batch a fresh key, which its retries reuse",
        ),
        _opt(
            "create",
            {
                "type": ["boolean", "null"],
                "description": "Override auto_create for this write (false: 404 if absent).",
            },
            no_cli="a write creates as the server's auto_create says; topics put creates",
        ),
        _opt(
            "config",
            nullable(ref("TopicConfigInput"))
            | {"description": "Applied only when this write creates the topic."},
            no_cli="topics put configures a topic",
        ),
        _opt(
            "disable_backpressure",
            boolean("Trusted-loader opt-out of the CPU-pressure 429.", default=False),
            engine=None,
            no_engine="the frontend sheds a write under CPU pressure before the engine "
            "sees it (record_routes rule 3)",
            no_cli="a trusted loader's opt-out, for programs rather than a shell",
        ),
        _opt(
            "return_seqs",
            {
                "type": ["boolean", "null"],
                "description": "false omits seqs from the answer (wins over ?return_seqs).",
            },
            no_cli="the CLI reports a write's first and last seq, never the list",
        ),
        _opt(
            "dedupe",
            {
                "type": ["string", "null"],
                "enum": ["until_ack", "window", None],
                "description": "Queue topics only: how the records' dedupe_key holds. "
                "until_ack (default): while the job is live (until acked, dead-lettered or "
                "deleted); window: for dedupe_ms after the write, acked or not.",
            },
            cli="jobs schedule --dedupe",
        ),
        _opt(
            "dedupe_ms",
            {
                "type": ["integer", "null"],
                "minimum": 1,
                "maximum": 31_536_000_000,
                "description": "The window of dedupe: window (required with it, 400 otherwise).",
            },
            cli="jobs schedule --dedupe-ms",
        ),
        _opt(
            "replace",
            {
                "type": ["boolean", "null"],
                "description": "A held key whose job was never handed out is replaced: the "
                "old job is deleted and the new one appended (a new seq, at the tail). A "
                "claimed holder is never replaced.",
            },
            cli="jobs schedule --replace",
        ),
        # The write conditions of issue 19.
        _opt(
            "expected_head_seq",
            {
                "type": ["integer", "null"],
                "minimum": 0,
                "description": "Compare-and-append: append only if the topic's head_seq is "
                "exactly this (0 for an absent topic this write creates; deletes and eviction "
                "never move the head), else 409 head_mismatch and nothing is appended. "
                "Checked after deduplication.",
            },
            cli="write --expect-head",
        ),
        _opt(
            "producer_id",
            {
                "type": ["string", "null"],
                "minLength": 1,
                "maxLength": 256,
                "description": "Producer fencing, with epoch (both or neither): per topic, a "
                "write from an epoch below the highest seen for this producer is 409 "
                "producer_fenced. The producer's last batch's idempotency_key is deduplicated "
                "without a time window.",
            },
            cli="write --producer-id",
        ),
        _opt(
            "epoch",
            {
                "type": ["integer", "null"],
                "minimum": 0,
                "description": "This producer instance's epoch (raise it on every restart).",
            },
            cli="write --epoch",
        ),
    ),
)

DIFF_OPTIONS = Options(
    "diff",
    "diff",
    None,
    "diff",
    (
        _opt(
            "from_seq",
            u64("Exclusive cursor: records with $seq > from_seq.", default=0),
            ws=False,
            cli="read --from",
        ),
        _opt(
            "limit",
            u64(
                f"Max records; 0 = default 256; clamped to TOPICS_MAX_LIMIT (default "
                f"{LIMITS.max_limit}), never rejected.",
                default=256,
            ),
            ws=False,
            cli="read --limit",
        ),
        _opt(
            "node",
            ref("NodeFilter") | {"description": "Leave out records written by these nodes."},
            ws=False,
            no_cli="topics read prints every node's records",
        ),
        _opt("include_tags", boolean("Include $tag.", default=False), ws=False, no_cli=_WHOLE),
        _opt("include_meta", boolean("Include meta.", default=True), ws=False, no_cli=_WHOLE),
        _opt(
            "include_data",
            boolean("Include data (false: metadata-only tailing).", default=True),
            ws=False,
            no_cli=_WHOLE,
        ),
        _opt(
            "wait_ms",
            u64("Long-poll when caught up; clamped to 30000.", default=0),
            ws=False,
            no_cli="topics tail follows live records (a watch)",
        ),
        _opt(
            "max_batch_bytes",
            integer(
                "Soft byte budget of the answer (at least one record is always "
                "returned); default 1 MiB, clamped to 8 MiB.",
                minimum=1,
                default=1 << 20,
            ),
            engine="max_bytes",
            client="max_bytes",
            ws=False,
            no_cli="topics read pages by --limit records",
        ),
        _opt(
            "cursor",
            ref("CursorName")
            | {
                "description": "Start after this named cursor's committed seq instead of "
                "from_seq (not both); a cursor never committed reads from 0."
            },
            ws=False,
            no_cli="a consumer group is followed live with topics tail --group",
        ),
        _opt(
            "commit",
            boolean(
                "With cursor: commit the answer's next_from_seq to it before answering "
                "(at most once: an answer lost on the way is not read again; commit "
                "explicitly with PUT .../cursors/{cursor} for at least once).",
                default=False,
            ),
            ws=False,
            no_cli="a consumer group is followed live with topics tail --group",
        ),
        _opt(
            "from_ts",
            u64(
                "Start at the first record with $ts >= from_ts (ms) instead of from_seq "
                "(not both); the answer echoes the resolved from_seq. Older than every "
                "live record: exactly a read from from_seq 0, tombstone included."
            ),
            ws=False,
            cli="read --since",
        ),
        _opt(
            "to_ts",
            u64(
                "Inclusive end by time: the last record with $ts <= to_ts; caught_up and "
                "lag count to the end, end_reached says the cursor is there."
            ),
            ws=False,
            cli="read --until",
        ),
        _opt(
            "to_seq",
            u64("Inclusive end by seq (with to_ts: the earlier end)."),
            ws=False,
            cli="read --to",
        ),
        _opt(
            "where",
            ref("Where") | {"description": "Only the records this predicate holds for."},
            ws=False,
            cli="read --where",
        ),
        _opt(
            "format",
            string(
                "records, or cloudevents: each record as a CloudEvents 1.0 event.",
                enum=list(_FORMAT),
                default="records",
            ),
            ws=False,
            cli="read --format",
        ),
        _opt(
            "ce_type_field",
            string(
                "With cloudevents: the meta member giving each event's type (else topics.record).",
                minLength=1,
                default="type",
            ),
            ws=False,
            no_cli=_NO_TYPE_FIELD,
        ),
    ),
)

#: A watch's own options: the stream's (POST /v0/watch, a WebSocket subscribe).
WATCH_OPTIONS = Options(
    "watch",
    "create_watch",
    "watch_subscribe",
    "watch",
    (
        _opt(
            "node",
            ref("NodeFilter") | {"description": "Leave out records written by these nodes."},
            cli="tail --node",
        ),
        _opt(
            "topic_prefix",
            ref("WatchPrefixes")
            | {"description": "Every topic under these name prefixes, now and created later."},
            cli="tail --prefix",
        ),
        _opt(
            "max_backlog",
            u64(
                "A topic more than this many seqs behind its head when a stream starts or "
                "resumes reading it gets an event: backlog-exceeded with the head instead "
                "of the replay (0: no limit).",
                default=0,
            ),
            cli="tail --max-backlog",
        ),
        _opt(
            "on_backlog",
            string(
                "jump: the backlog-exceeded event; error: 409 backlog_exceeded here.",
                enum=["jump", "error"],
                default="jump",
            ),
            no_cli="topics tail reports a jump on stderr and goes on",
        ),
        _opt(
            "limit",
            u64("Max records per record frame.", default=256),
            no_cli="a frame's size does not change what topics tail prints",
        ),
        _opt(
            "max_batch_bytes",
            u64("Soft byte budget per record frame; 0 = 1 MiB, clamped to 8 MiB.", default=262_144),
            no_cli="a frame's size does not change what topics tail prints",
        ),
        _opt(
            "heartbeat_ms",
            u64("Heartbeat interval, clamped to [1000, 60000].", default=15_000),
            ws=False,
            no_cli="the client's watchdog follows the heartbeat it asked for",
        ),
        _opt("include_meta", boolean("Include meta.", default=True), no_cli=_WHOLE),
        _opt("include_tags", boolean("Include $tag.", default=False), no_cli=_WHOLE),
        _opt("include_data", boolean("Include data.", default=True), no_cli=_WHOLE),
        _opt(
            "consistency",
            string(
                "eventual pushes from the WAL buffer; strong only after commit/fsync.",
                enum=["eventual", "strong"],
                default="eventual",
            ),
            no_cli="topics tail shows records as soon as the server has them",
        ),
        _opt(
            "where",
            ref("Where") | {"description": "Only the records this predicate holds for."},
            cli="tail --where",
        ),
        _opt(
            "format",
            string(
                "records, or cloudevents (each record a CloudEvents 1.0 event).",
                enum=list(_FORMAT),
                default="records",
            ),
            no_cli="topics tail prints records (topics read --format reads CloudEvents)",
        ),
        _opt(
            "ce_type_field",
            string(
                "With cloudevents: the meta member giving each event's type.",
                minLength=1,
                default="type",
            ),
            no_cli=_NO_TYPE_FIELD,
        ),
    ),
)

#: A watched topic's own options: the values of a watch's ``topics`` map (the Engine and
#: the client take them there too); ``ws``: also the single-topic form of a subscribe.
WATCH_TOPIC_OPTIONS = Options(
    "watch topic",
    None,
    None,
    "watch",
    (
        _opt(
            "from_seq",
            u64("Deliver records with $seq > from_seq; 0 = earliest.", default=0),
            cli="tail --from",
        ),
        _opt(
            "tail",
            boolean("Start at the current head (ignore from_seq).", default=False),
            no_cli="topics tail starts at the head unless --from, --last or --since",
        ),
        _opt(
            "max_backlog",
            u64("This topic's backlog limit (replaces the request's max_backlog; 0: none)."),
            ws=False,
            no_cli="topics tail --max-backlog sets every topic's",
        ),
        _opt(
            "cursor",
            ref("CursorName")
            | {
                "description": "Start after this named cursor's committed seq (not with "
                "from_seq or tail; never committed: from 0)."
            },
            no_cli=_GROUP,
        ),
        _opt(
            "commit",
            boolean(
                "With cursor: commit each delivered frame's position to it once the "
                "frame has left the server (at least once across a server crash).",
                default=False,
            ),
            no_cli=_GROUP,
        ),
        _opt(
            "from_ts",
            u64(
                "Start at the first record with $ts >= from_ts (resolved once, at "
                "creation: the answer's from_seq); not with from_seq or tail."
            ),
            cli="tail --since",
        ),
        _opt(
            "to_ts",
            u64(
                "End after the last record with $ts <= to_ts: then event: end-reached, "
                "and the topic leaves the session."
            ),
            cli="tail --until",
        ),
        _opt("to_seq", u64("End after this seq (with to_ts: the earlier end)."), cli="tail --to"),
    ),
)
