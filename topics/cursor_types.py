"""Types of named consumer cursors (a topic's server-side reader positions).

A cursor is a name and a committed seq per topic: "this consumer group has processed
everything up to and including ``seq``". Reads that start from it resume right after.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .result_fields import wire

__all__ = ["ConsumeStats", "CursorInfo", "DeleteCursorResult"]

_U64 = {"minimum": 0, "maximum": (1 << 64) - 1}


@dataclass(frozen=True, slots=True)
class CursorInfo:
    """One cursor with its topic's watermarks.

    Attributes:
        topic: the topic.
        cursor: the cursor's name.
        seq: the committed seq (a read from the cursor returns records after it).
        head_seq, earliest_seq: the topic's, at the time of the answer.
        lag: ``max(0, head_seq - seq)``: seqs after the cursor (the same measure as a
            diff's ``lag``; deleted or expired seqs in between count too).
        updated_ts: engine-clock milliseconds of the last commit.
    """

    topic: str = wire("The topic.", schema="TopicName")
    cursor: str = wire("The cursor's name.", schema="CursorName")
    seq: int = wire("The committed seq: reads resume after it.", schema="Seq")
    head_seq: int = wire("The topic's head.", schema="Seq")
    earliest_seq: int = wire("The topic's earliest live seq.", schema="Seq")
    lag: int = wire(
        "max(0, head_seq - seq): seqs after the cursor (deleted ones count too).", schema=_U64
    )
    updated_ts: int = wire("When it was last committed (epoch ms).", schema=_U64)

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "cursor": self.cursor,
            "seq": self.seq,
            "head_seq": self.head_seq,
            "earliest_seq": self.earliest_seq,
            "lag": self.lag,
            "updated_ts": self.updated_ts,
        }


@dataclass(frozen=True, slots=True)
class DeleteCursorResult:
    topic: str = wire("The topic.", schema="TopicName")
    cursor: str = wire("The cursor's name.", schema="CursorName")
    deleted: bool = wire("False when the topic held no such cursor.")

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "cursor": self.cursor, "deleted": self.deleted}


@dataclass(slots=True)
class ConsumeStats:
    """What a consume loop did: batches committed, records handled, the last committed seq."""

    batches: int = 0
    records: int = 0
    committed_seq: int = 0
