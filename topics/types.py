"""Result types the Engine returns (plain frozen dataclasses, contract shapes).

Every result has ``to_dict()`` giving the contract's JSON object without the
``performance`` block, which frontends add. Diff results keep their records as the
spliced JSON array bytes (``records_json``) so a frontend can send them without
re-encoding; Python callers read ``.records`` and get decoded :class:`Record` values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import ujson

from .config import TopicConfig
from .result_fields import off_wire, wire

__all__ = [
    "DeleteRecordsResult",
    "DeleteTopicResult",
    "DiffResult",
    "EngineStatistics",
    "PutTopicResult",
    "Record",
    "Tombstone",
    "TombstoneReason",
    "TopicGauge",
    "TopicPage",
    "TopicState",
    "TopicSummary",
    "WriteResult",
]

#: Schema fragments several results' fields share (topics/result_fields.py).
_TOPIC_TYPE = {"enum": ["log", "queue"]}
_COUNT = {"minimum": 0}

TombstoneReason = Literal[
    "cap",
    "ttl",
    "mixed",
    "recreated",
    "source_trim",
    "crash",
    "corrupt",
    "restart",
    "from_seq_too_old",
    "unreadable",
]


@dataclass(frozen=True, slots=True)
class Record:
    """One stored record as a reader sees it. ``data`` is None for JSON null (or when the
    read asked for no data); ``node``/``tag``/``meta`` are None when absent."""

    seq: int
    ts: int
    data: Any = None
    node: str | None = None
    tag: str | None = None
    meta: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Record:
        return cls(
            seq=obj["$seq"],
            ts=obj["$ts"],
            data=obj.get("data"),
            node=obj.get("$node"),
            tag=obj.get("$tag"),
            meta=obj.get("meta"),
        )

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self.seq, self.ts, self.node, self.tag, self.data, self.meta)


def record_dict(
    seq: int, ts: int, node: str | None, tag: str | None, data: Any, meta: dict[str, Any] | None
) -> dict[str, Any]:
    """A record object in the contract's shape (§0.4: $-keys, absent fields omitted)."""
    out: dict[str, Any] = {"$seq": seq, "$ts": ts}
    if node is not None:
        out["$node"] = node
    if tag is not None:
        out["$tag"] = tag
    out["data"] = data
    if meta is not None:
        out["meta"] = meta
    return out


@dataclass(frozen=True, slots=True)
class Tombstone:
    """An explicit gap: seqs [gap_from, gap_to] were lost involuntarily (§3.3)."""

    gap_from: int = wire("The first seq lost.", schema="Seq")
    gap_to: int = wire("The last seq lost.", schema="Seq")
    reason: TombstoneReason = wire(
        "Why the range was lost (informational; the range is authoritative)."
    )
    missed_estimate: int = wire("Approximate records lost.", schema=_COUNT)
    earliest_seq: int = wire("The topic's earliest live seq.", schema="Seq")
    head_seq: int = wire("The topic's head.", schema="Seq")

    def to_dict(self) -> dict[str, Any]:
        return {
            "gap_from": self.gap_from,
            "gap_to": self.gap_to,
            "reason": self.reason,
            "missed_estimate": self.missed_estimate,
            "earliest_seq": self.earliest_seq,
            "head_seq": self.head_seq,
        }


@dataclass(frozen=True, slots=True)
class WriteResult:
    topic: str = wire("The topic written.", schema="TopicName")
    first_seq: int = wire("The first seq assigned.", schema="Seq")
    last_seq: int = wire("The last seq assigned.", schema="Seq")
    seqs: list[int] | None = wire(
        "Every seq assigned, in order; omitted with return_seqs=false.",
        schema={"type": "array", "items": {"$ref": "#/components/schemas/Seq"}},
        omitted=True,
    )
    head_seq: int = wire("The topic's head after the write.", schema="Seq")
    count: int = wire(
        "Records appended by this write (0 when every job was a dedupe duplicate: "
        "first_seq is then head_seq + 1).",
        schema=_COUNT,
    )
    created: bool = wire("This write created the topic (status 201).")
    deduped: bool = wire(
        "An in-window idempotency_key matched: nothing appended, the original seqs are returned."
    )
    wal_append_ms: float = off_wire("a timing: the answer's performance", default=0.0)
    fsync_ms: float = off_wire("a timing: the answer's performance", default=0.0)
    #: A queue write with dedupe keys: per keyed record whose key was held, by request
    #: index, ``{"index", "dedupe_key", "seq", "outcome": "duplicate"|"replaced"}`` (+
    #: ``"replaced_seq"``); None when the write carried no dedupe key.
    dedupe: list[dict[str, Any]] | None = wire(
        "Present when a queue write carried dedupe_keys: one entry per record whose key "
        "was held, by request index.",
        schema={"type": "array", "items": {"$ref": "#/components/schemas/JobDedupe"}},
        omitted=True,
        default=None,
    )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "topic": self.topic,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
        }
        if self.seqs is not None:
            out["seqs"] = self.seqs
        out.update(
            head_seq=self.head_seq, count=self.count, created=self.created, deduped=self.deduped
        )
        if self.dedupe is not None:
            out["dedupe"] = self.dedupe
        return out


@dataclass(frozen=True, slots=True)
class DiffResult:
    topic: str = wire("The topic read.", schema="TopicName")
    records_json: bytes = wire(
        "Records, or CloudEvents with format=cloudevents.",
        schema={
            "type": "array",
            "items": {
                "anyOf": [
                    {"$ref": "#/components/schemas/Record"},
                    {"$ref": "#/components/schemas/CloudEvent"},
                ]
            },
        },
        name="records",
    )
    record_count: int = off_wire("the length of records")
    next_from_seq: int = wire("The cursor of the next read.", schema="Seq")
    head_seq: int = wire("The topic's head.", schema="Seq")
    earliest_seq: int = wire("The topic's earliest live seq.", schema="Seq")
    caught_up: bool = wire(
        "next_from_seq == head_seq (or the to_ts/to_seq end): the reliable 'no more now'."
    )
    tombstone: Tombstone | None = wire(
        "The gap between the asked cursor and the first live record, if any.",
        schema="Tombstone",
    )
    lag: int = wire("head_seq (or the end) - next_from_seq.", schema=_COUNT)
    records_scanned: int = off_wire("a measure: the answer's performance")
    _decoded: list[Record] = off_wire(
        "the decoded records' cache", default_factory=list, repr=False, compare=False
    )
    #: The resolved start when the read gave ``from_ts`` (issue 18), else None.
    from_seq: int | None = wire(
        "Where from_ts resolved to (only with from_ts).", schema="Seq", omitted=True, default=None
    )
    #: With ``to_ts``/``to_seq``: whether the cursor reached the end; else None.
    end_reached: bool | None = wire(
        "Only with to_ts/to_seq: the cursor is at the end; read no further.",
        omitted=True,
        default=None,
    )
    #: "records", or "cloudevents": ``records_json`` then holds CloudEvents (``events``).
    format: str = off_wire("the read's own format option", default="records")

    @property
    def records(self) -> list[Record]:
        """The records, decoded from ``records_json`` on first access."""
        if self.format != "records":
            raise TypeError(f"a {self.format} answer has .events, not .records")
        if self.record_count and not self._decoded:
            self._decoded.extend(Record.from_json(o) for o in ujson.loads(self.records_json))
        return self._decoded

    @property
    def events(self) -> list[dict[str, Any]]:
        """The answer's CloudEvents (``format="cloudevents"``), decoded."""
        if self.format != "cloudevents":
            raise TypeError("only a cloudevents answer has .events")
        events: list[dict[str, Any]] = ujson.loads(self.records_json)
        return events

    def to_dict(self) -> dict[str, Any]:
        out = {
            "topic": self.topic,
            "records": ujson.loads(self.records_json),
            "next_from_seq": self.next_from_seq,
            "head_seq": self.head_seq,
            "earliest_seq": self.earliest_seq,
            "caught_up": self.caught_up,
            "tombstone": self.tombstone.to_dict() if self.tombstone else None,
            "lag": self.lag,
        }
        if self.from_seq is not None:
            out["from_seq"] = self.from_seq
        if self.end_reached is not None:
            out["end_reached"] = self.end_reached
        return out


@dataclass(frozen=True, slots=True)
class TopicState:
    topic: str = wire("The topic.", schema="TopicName")
    type: str = wire("log or queue.", schema=_TOPIC_TYPE)
    head_seq: int = wire("The last seq assigned (0: none yet).", schema="Seq")
    earliest_seq: int = wire("The earliest live seq.", schema="Seq")
    next_seq: int = wire("The seq the next record gets.", schema="Seq")
    count: int = wire("Retained records.", schema=_COUNT)
    bytes: int = wire("Retained payload bytes.", schema=_COUNT)
    config: TopicConfig = wire("The resolved config.", schema="TopicConfig")
    effective_priority: int = wire("The priority in use right now.")
    last_write_ts: int | None = wire(
        "When it was last written (null: never).", schema="TimestampMs"
    )
    last_read_ts: int | None = wire("When it was last read (null: never).", schema="TimestampMs")
    queue: dict[str, int] | None = wire(
        "A queue topic's job counters.", schema="QueueCounters", omitted=True, default=None
    )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "topic": self.topic,
            "type": self.type,
            "head_seq": self.head_seq,
            "earliest_seq": self.earliest_seq,
            "next_seq": self.next_seq,
            "count": self.count,
            "bytes": self.bytes,
            "config": self.config.to_dict(),
        }
        if self.queue is not None:
            out["queue"] = dict(self.queue)
        out.update(
            effective_priority=self.effective_priority,
            last_write_ts=self.last_write_ts,
            last_read_ts=self.last_read_ts,
        )
        return out


@dataclass(frozen=True, slots=True)
class TopicSummary:
    topic: str = wire("The topic.", schema="TopicName")
    type: str = wire("log or queue.", schema=_TOPIC_TYPE)
    head_seq: int = wire("The last seq assigned (0: none yet).", schema="Seq")
    earliest_seq: int = wire("The earliest live seq.", schema="Seq")
    count: int = wire("Retained records.", schema=_COUNT)
    bytes: int = wire("Retained payload bytes.", schema=_COUNT)
    durable: bool = wire("durability is fsync.")
    durability: str = wire(
        "Commit class.", schema={"enum": ["ephemeral", "memory", "disk", "fsync"]}
    )
    effective_priority: int = wire("The priority in use right now.")

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "type": self.type,
            "head_seq": self.head_seq,
            "earliest_seq": self.earliest_seq,
            "count": self.count,
            "bytes": self.bytes,
            "durable": self.durable,
            "durability": self.durability,
            "effective_priority": self.effective_priority,
        }


@dataclass(frozen=True, slots=True)
class TopicPage:
    topics: list[TopicSummary] = wire(
        "This page's topics.",
        schema={"type": "array", "items": {"$ref": "#/components/schemas/TopicSummary"}},
    )
    next_cursor: str | None = wire(
        "Opaque; present only when more pages exist.", schema={"minLength": 1}, omitted=True
    )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"topics": [t.to_dict() for t in self.topics]}
        if self.next_cursor is not None:
            out["next_cursor"] = self.next_cursor
        return out


@dataclass(frozen=True, slots=True)
class PutTopicResult:
    topic: str = wire("The topic.", schema="TopicName")
    created: bool = wire("True only when this call created the topic.")
    config: TopicConfig = wire("The resolved config.", schema="TopicConfig")

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "created": self.created, "config": self.config.to_dict()}


@dataclass(frozen=True, slots=True)
class DeleteTopicResult:
    topic: str = wire("The topic.", schema="TopicName")
    deleted: bool = wire("False when the topic did not exist.")
    routers_removed: list[str] = wire(
        "The routers that read or wrote it, removed with it.",
        schema={"items": {"$ref": "#/components/schemas/RouterName"}},
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "deleted": self.deleted,
            "routers_removed": list(self.routers_removed),
        }


@dataclass(frozen=True, slots=True)
class DeleteRecordsResult:
    topic: str = wire("The topic.", schema="TopicName")
    deleted: int = wire("Records removed by this call.", schema=_COUNT)
    earliest_seq: int = wire("The topic's earliest live seq after the delete.", schema="Seq")
    head_seq: int = wire("The topic's head (a delete never moves it).", schema="Seq")
    count: int = wire("Records left.", schema=_COUNT)
    bytes: int = wire("Bytes left.", schema=_COUNT)
    fsync_ms: float = off_wire("a timing: the answer's performance", default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "deleted": self.deleted,
            "earliest_seq": self.earliest_seq,
            "head_seq": self.head_seq,
            "count": self.count,
            "bytes": self.bytes,
        }


@dataclass(frozen=True, slots=True)
class TopicGauge:
    """Per-topic gauges for /v0/metrics."""

    topic: str
    head_seq: int
    earliest_seq: int
    records_live: int
    bytes_live: int
    # Queue topics only (None on a log topic): the §10.7 ready / in_flight counters, and
    # the jobs scheduled for later (§10.9).
    queue_ready: int | None = None
    queue_in_flight: int | None = None
    queue_scheduled: int | None = None


@dataclass(frozen=True, slots=True)
class EngineStatistics:
    """What the engine reports to /v0/metrics and /v0/ready (§8)."""

    ready: bool
    recovery_progress: float
    uptime_ms: int
    topics: int
    topics_by_class: dict[str, int]
    queue_topics: int
    records_live: int
    bytes_live: int
    topic_gauges: list[TopicGauge]
    topic_gauges_truncated: bool
    routers: int = 0
    #: Active leases across every queue topic (topics_queue_leases_in_flight).
    queue_leases_in_flight: int = 0
