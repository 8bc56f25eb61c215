"""Result types the Engine returns (plain frozen dataclasses, contract shapes).

Every result has ``to_dict()`` giving the contract's JSON object without the
``performance`` block, which frontends add. Diff results keep their records as the
spliced JSON array bytes (``records_json``) so a frontend can send them without
re-encoding; Python callers read ``.records`` and get decoded :class:`Record` values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import ujson

from .config import TopicConfig

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

TombstoneReason = Literal[
    "cap",
    "ttl",
    "mixed",
    "recreated",
    "source_trim",
    "crash",
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

    gap_from: int
    gap_to: int
    reason: TombstoneReason
    missed_estimate: int
    earliest_seq: int
    head_seq: int

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
    topic: str
    first_seq: int
    last_seq: int
    seqs: list[int] | None
    head_seq: int
    count: int
    created: bool
    deduped: bool
    wal_append_ms: float = 0.0
    fsync_ms: float = 0.0
    #: A queue write with dedupe keys: per keyed record whose key was held, by request
    #: index, ``{"index", "dedupe_key", "seq", "outcome": "duplicate"|"replaced"}`` (+
    #: ``"replaced_seq"``); None when the write carried no dedupe key.
    dedupe: list[dict[str, Any]] | None = None

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
    topic: str
    records_json: bytes
    record_count: int
    next_from_seq: int
    head_seq: int
    earliest_seq: int
    caught_up: bool
    tombstone: Tombstone | None
    lag: int
    records_scanned: int
    _decoded: list[Record] = field(default_factory=list, repr=False, compare=False)
    #: The resolved start when the read gave ``from_ts`` (issue 18), else None.
    from_seq: int | None = None
    #: With ``to_ts``/``to_seq``: whether the cursor reached the end; else None.
    end_reached: bool | None = None
    #: "records", or "cloudevents": ``records_json`` then holds CloudEvents (``events``).
    format: str = "records"

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
    topic: str
    type: str
    head_seq: int
    earliest_seq: int
    next_seq: int
    count: int
    bytes: int
    config: TopicConfig
    effective_priority: int
    last_write_ts: int | None
    last_read_ts: int | None
    queue: dict[str, int] | None = None

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
    topic: str
    type: str
    head_seq: int
    earliest_seq: int
    count: int
    bytes: int
    durable: bool
    durability: str
    effective_priority: int

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
    topics: list[TopicSummary]
    next_cursor: str | None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"topics": [t.to_dict() for t in self.topics]}
        if self.next_cursor is not None:
            out["next_cursor"] = self.next_cursor
        return out


@dataclass(frozen=True, slots=True)
class PutTopicResult:
    topic: str
    created: bool
    config: TopicConfig

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "created": self.created, "config": self.config.to_dict()}


@dataclass(frozen=True, slots=True)
class DeleteTopicResult:
    topic: str
    deleted: bool
    routers_removed: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "deleted": self.deleted,
            "routers_removed": list(self.routers_removed),
        }


@dataclass(frozen=True, slots=True)
class DeleteRecordsResult:
    topic: str
    deleted: int
    earliest_seq: int
    head_seq: int
    count: int
    bytes: int
    fsync_ms: float = 0.0

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
