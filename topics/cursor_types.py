"""Types of named consumer cursors (a topic's server-side reader positions).

A cursor is a name and a committed seq per topic: "this consumer group has processed
everything up to and including ``seq``". Reads that start from it resume right after.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ConsumeStats", "CursorInfo", "DeleteCursorResult"]


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

    topic: str
    cursor: str
    seq: int
    head_seq: int
    earliest_seq: int
    lag: int
    updated_ts: int

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
    topic: str
    cursor: str
    deleted: bool

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "cursor": self.cursor, "deleted": self.deleted}


@dataclass(slots=True)
class ConsumeStats:
    """What a consume loop did: batches committed, records handled, the last committed seq."""

    batches: int = 0
    records: int = 0
    committed_seq: int = 0
