"""Result types of the queue endpoints (contract §10): frozen dataclasses in contract shape.

Like the diff result, a claim keeps its jobs as the JSON objects the engine rendered once
(``fragments``: each job's stored record with the lease fields spliced in), so the HTTP
layer sends them without re-encoding and a /work stream frames each one as it is; Python
callers read ``.claimed`` and get decoded :class:`Job` values. ``to_dict()`` gives the
contract object without the ``performance`` block, which frontends add.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import ujson

from .result_fields import Computed, computed, off_wire, wire
from .types import record_dict

#: Schema fragments the results' fields share (topics/result_fields.py).
_COUNT = {"minimum": 0}
_SEQS = {"items": {"$ref": "#/components/schemas/Seq"}}

__all__ = [
    "AckResult",
    "ClaimResult",
    "ExtendResult",
    "Job",
    "NackResult",
    "RedriveResult",
    "job_record",
]


@dataclass(frozen=True, slots=True)
class Job:
    """One leased job (a ``claimed[]`` entry, §10.2).

    ``data`` is the decoded JSON value (None for JSON null); ``node``/``tag``/``meta`` are
    None when the record has none. ``deadline`` is absolute epoch ms.
    """

    seq: int = wire("The job's seq.", schema="Seq", name="$seq")
    ts: int = wire("When it was written.", schema="TimestampMs", name="$ts")
    data: Any = wire("The job's data, as written.", schema="AnyJson")
    lease_id: str = wire(
        "Opaque lease identity (lease_<hex>).", schema={"pattern": r"^lease_[0-9a-f]+$"}
    )
    deadline: int = wire("When the lease ends.", schema="TimestampMs")
    deliveries: int = wire("Deliveries including this one.", schema={"minimum": 1})
    node: str | None = wire(
        "The node that wrote it, if any.", schema="NodeId", name="$node", omitted=True, default=None
    )
    tag: str | None = wire(
        "Its tag, if any.", schema="Tag", name="$tag", omitted=True, default=None
    )
    meta: dict[str, Any] | None = wire(
        "Its meta, if any.", schema="Meta", omitted=True, default=None
    )

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Job:
        return cls(
            seq=obj["$seq"],
            ts=obj["$ts"],
            data=obj.get("data"),
            lease_id=obj["lease_id"],
            deadline=obj["deadline"],
            deliveries=obj["deliveries"],
            node=obj.get("$node"),
            tag=obj.get("$tag"),
            meta=obj.get("meta"),
        )

    @property
    def deliver_at(self) -> int | None:
        """When a scheduled job became claimable (its ``$deliver_at`` stamp), else None."""
        value = self.meta.get("$deliver_at") if self.meta else None
        return value if type(value) is int else None

    @property
    def dedupe_key(self) -> str | None:
        """The job's ``dedupe_key`` (its ``$dedupe_key`` stamp), else None."""
        value = self.meta.get("$dedupe_key") if self.meta else None
        return value if isinstance(value, str) else None

    @property
    def redriven_from(self) -> str | None:
        """The dead-letter topic a redrive moved this job back from, else None."""
        value = self.meta.get("$redrive_from") if self.meta else None
        return value if isinstance(value, str) else None

    def to_dict(self) -> dict[str, Any]:
        out = record_dict(self.seq, self.ts, self.node, self.tag, self.data, self.meta)
        out.update(lease_id=self.lease_id, deadline=self.deadline, deliveries=self.deliveries)
        return out


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """What a claim leased (§10.2), ascending by seq.

    Attributes:
        fragments: each job's JSON object, rendered once (splice them; never re-encode).
        seqs, lease_ids: the jobs' seqs and lease ids, in the same order (what an
            ack/nack/extend sends back, without decoding anything).
        ready: claimable jobs left after this claim.
        fsync_ms: time spent waiting for durable leases to be synced (0 unless the queue
            has ``leases_durable`` and the fsync class).
    """

    topic: str = wire("The queue.", schema="TopicName")
    fragments: tuple[bytes, ...] = wire(
        "The leased jobs, ascending by $seq.",
        name="claimed",
        schema={"type": "array", "items": {"$ref": "#/components/schemas/Job"}},
    )
    seqs: tuple[int, ...] = off_wire("the claimed jobs' $seq, for the caller")
    lease_ids: tuple[str, ...] = off_wire("the claimed jobs' lease_id, for the caller")
    ready: int = wire("Claimable jobs left.", schema=_COUNT)
    fsync_ms: float = off_wire("a timing: the answer's performance", default=0.0)
    _decoded: list[Job] = off_wire(
        "a cache of the decoded claimed", default_factory=list, repr=False, compare=False
    )

    WIRE_COMPUTED: ClassVar[tuple[Computed, ...]] = (
        computed(
            "count",
            "claimed.length; < max means the queue is (nearly) empty.",
            schema={"type": "integer", "minimum": 0},
        ),
    )

    @property
    def count(self) -> int:
        return len(self.fragments)

    @property
    def claimed_json(self) -> bytes:
        """The ``claimed`` array as JSON bytes."""
        return b"[" + b",".join(self.fragments) + b"]"

    @property
    def claimed(self) -> list[Job]:
        """The jobs, decoded on first access."""
        if self.fragments and not self._decoded:
            self._decoded.extend(Job.from_json(o) for o in ujson.loads(self.claimed_json))
        return self._decoded

    def stream_fragments(self) -> list[bytes]:
        """Each job as a /work ``event: job`` payload: the job object with ``"topic"``
        first (§10.8). The topic name needs no escaping (its charset is [A-Za-z0-9._:-])."""
        head = b'{"topic":"' + self.topic.encode() + b'",'
        return [head + frag[1:] for frag in self.fragments]

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "claimed": ujson.loads(self.claimed_json),
            "count": self.count,
            "ready": self.ready,
        }


@dataclass(frozen=True, slots=True)
class AckResult:
    """An ack (§10.4): ``acked`` jobs were deleted; ``skipped`` seqs were not held."""

    topic: str = wire("The queue.", schema="TopicName")
    acked: int = wire("Jobs completed.", schema=_COUNT)
    skipped: list[int] = wire("Seqs not held by node.", schema=_SEQS)
    ready: int = wire("Claimable now.", schema=_COUNT)
    in_flight: int = wire("Leased now.", schema=_COUNT)
    fsync_ms: float = off_wire("a timing: the answer's performance", default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "acked": self.acked,
            "skipped": list(self.skipped),
            "ready": self.ready,
            "in_flight": self.in_flight,
        }


@dataclass(frozen=True, slots=True)
class NackResult:
    """A nack (§10.5): ``nacked`` leases were released; ``skipped`` seqs were not held."""

    topic: str = wire("The queue.", schema="TopicName")
    nacked: int = wire("Leases released.", schema=_COUNT)
    skipped: list[int] = wire("Seqs not held by node.", schema=_SEQS)
    ready: int = wire("Claimable now.", schema=_COUNT)
    in_flight: int = wire("Leased now.", schema=_COUNT)
    fsync_ms: float = off_wire("a timing: the answer's performance", default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "nacked": self.nacked,
            "skipped": list(self.skipped),
            "ready": self.ready,
            "in_flight": self.in_flight,
        }


@dataclass(frozen=True, slots=True)
class ExtendResult:
    """An extend (§10.6): new absolute deadlines of the leases pushed out."""

    topic: str = wire("The queue.", schema="TopicName")
    extended: int = wire("Leases pushed out.", schema=_COUNT)
    skipped: list[int] = wire("Seqs not held by node.", schema=_SEQS)
    deadlines: dict[int, int] = wire(
        "seq (as a string key) -> new absolute deadline (ms).",
        schema={
            "propertyNames": {"pattern": "^[0-9]+$"},
            "additionalProperties": {"$ref": "#/components/schemas/TimestampMs"},
        },
    )
    fsync_ms: float = off_wire("a timing: the answer's performance", default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "extended": self.extended,
            "skipped": list(self.skipped),
            "deadlines": {str(seq): deadline for seq, deadline in self.deadlines.items()},
        }


@dataclass(frozen=True, slots=True)
class RedriveResult:
    """A redrive: ``moved`` dead-lettered jobs went back to a queue, in ``batches`` (one
    atomic move each: ``{"to", "count", "first_seq", "last_seq"}``, the seqs the copies
    got in ``to``); ``skipped`` jobs passed the filter but have no queue to go to (no
    ``$dead_letter_from`` and no ``to``, or that topic is gone or not a queue);
    ``remaining`` is what the dead-letter topic still holds."""

    topic: str = wire("The dead-letter topic.", schema="TopicName")
    moved: int = wire("Jobs moved back.", schema=_COUNT)
    skipped: int = wire(
        "Jobs that passed the filter but have no queue to go to (no $dead_letter_from and "
        "no to, or it is gone or not a queue).",
        schema=_COUNT,
    )
    remaining: int = wire("Records the dead-letter topic still holds.", schema=_COUNT)
    batches: list[dict[str, Any]] = wire(
        "One atomic move each: the copies' seqs in to.",
        schema={
            "items": {
                "type": "object",
                "properties": {
                    "to": {"$ref": "#/components/schemas/TopicName"},
                    "count": {
                        "type": "integer",
                        "description": "Jobs in the batch.",
                        "minimum": 1,
                    },
                    "first_seq": {"$ref": "#/components/schemas/Seq"},
                    "last_seq": {"$ref": "#/components/schemas/Seq"},
                },
                "required": ["to", "count", "first_seq", "last_seq"],
            }
        },
    )
    fsync_ms: float = off_wire("a timing: the answer's performance", default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "moved": self.moved,
            "skipped": self.skipped,
            "remaining": self.remaining,
            "batches": [dict(b) for b in self.batches],
        }


def job_record(
    data: Any,
    *,
    deliver_at: int | None,
    delay_ms: int | None,
    dedupe_key: str | None,
    tag: str | None,
    meta: Mapping[str, Any] | bytes | None,
) -> dict[str, Any]:
    """One queue job as a write record (``schedule`` on the clients and the sync facade);
    None members left out."""
    record: dict[str, Any] = {"data": data}
    for name, value in (
        ("tag", tag),
        ("meta", meta),
        ("deliver_at", deliver_at),
        ("delay_ms", delay_ms),
        ("dedupe_key", dedupe_key),
    ):
        if value is not None:
            record[name] = value
    return record
