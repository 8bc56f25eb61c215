"""Reading one seq range of one topic into Arrow record batches, gaps included.

Role: the one place that turns diff pages into rows, for batch and streaming reads alike.
A task reads ``(lo, hi]`` of a topic page by page and yields one ``pyarrow.RecordBatch``
per page (Spark takes Arrow batches from Python data sources without a per-row step).

Rules:
1. Tombstones never vanish (contract §3.3). With ``on_gap="fail"`` the first one raises
   :class:`GapError` naming the lost range; with ``"emit"`` it becomes a gap row (see
   ``GAP_FIELD``): ``data``/``ts``/``node``/``tag``/``meta`` null, ``seq = gap_to``, and
   the ``gap`` struct set. A gap is clipped to the task's range, so a loss that spans
   several partitions shows as one row per partition; together they cover it exactly.
2. ``data`` is the stored JSON text verbatim (JSON ``null`` is the text ``"null"``; only
   gap rows have SQL NULL there); ``meta`` likewise, NULL when the record has none.
3. A task must reach ``hi``. A data-directory Reader older than the plan is refreshed
   once; if the head is still below ``hi`` the topic was recreated under the read, which
   is reported as a ``recreated`` gap (rule 1), never as a silently short read.
4. ``hi < lo`` is a streaming range whose topic head fell below the stored cursor: the
   topic was deleted and recreated (§3.3 ``recreated``). The task reports that gap, then
   reads the new topic's records ``(0, hi]``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from ..types import Tombstone
from ._options import OnGap
from ._sources import Page, Source

__all__ = [
    "BASE_FIELDS",
    "GAP_FIELD",
    "GapError",
    "RangeReader",
    "read_schema",
]

BASE_FIELDS = (
    "topic string, seq bigint, ts bigint, node string, tag string, data string, meta string"
)
GAP_FIELD = "gap struct<gap_from: bigint, gap_to: bigint, reason: string, missed_estimate: bigint>"

# The shape of one split record (``_sources`` rule 1) as Arrow sees it.
_SPLIT = pa.struct(
    [
        ("$seq", pa.int64()),
        ("$ts", pa.int64()),
        ("$node", pa.string()),
        ("$tag", pa.string()),
        ("data", pa.binary()),
        ("meta", pa.binary()),
    ]
)


def read_schema(on_gap: OnGap) -> str:
    """The DDL schema of a read: the record columns, plus ``gap`` when gaps are emitted."""
    return BASE_FIELDS if on_gap == "fail" else f"{BASE_FIELDS}, {GAP_FIELD}"


class GapError(RuntimeError):
    """A read crossed records lost to cap/TTL (or a recreated topic) with ``on_gap=fail``.

    Attributes: ``topic``, ``gap_from``, ``gap_to`` (the lost seqs, inclusive), ``reason``.
    """

    def __init__(self, topic: str, gap_from: int, gap_to: int, reason: str) -> None:
        self.topic, self.gap_from, self.gap_to, self.reason = topic, gap_from, gap_to, reason
        super().__init__(
            f"topic {topic!r}: seqs {gap_from}..{gap_to} were lost (tombstone reason "
            f"{reason!r}) before this read reached them. Read with option on_gap=emit to "
            f"get a gap row instead, or start after the gap (from_seq >= {gap_to})."
        )


@dataclass(frozen=True, slots=True)
class _Gap:
    gap_from: int
    gap_to: int
    reason: str

    def as_struct(self) -> dict[str, Any]:
        return {
            "gap_from": self.gap_from,
            "gap_to": self.gap_to,
            "reason": self.reason,
            "missed_estimate": max(0, self.gap_to - self.gap_from + 1),
        }


class RangeReader:
    """Turns pages of one source into batches of the requested Arrow schema."""

    def __init__(self, source: Source, arrow_schema: pa.Schema, on_gap: OnGap) -> None:
        self.source = source
        self.schema = arrow_schema
        self.on_gap = on_gap

    def read(self, topic: str, lo: int, hi: int) -> Iterator[pa.RecordBatch]:
        """Yield the rows of ``(lo, hi]`` (rules 1-4)."""
        if hi < lo:
            first = self.source.page(topic, lo)
            gap_to = first.earliest_seq - 1
            yield from self._gap(topic, _Gap(1, gap_to, "recreated"))
            lo = max(0, gap_to)  # the new topic's records after what it already lost
        cursor, refreshed = lo, False
        while cursor < hi:
            page = self.source.page(topic, cursor)
            tomb = page.tombstone
            if tomb is not None:
                if tomb.reason == "recreated":
                    yield from self._gap(topic, _Gap(tomb.gap_from, tomb.gap_to, "recreated"))
                    return
                yield from self._gap(topic, _clip(tomb, hi))
            if page.records:
                yield self._batch(topic, page, hi)
            if page.next_from_seq >= hi:
                return
            if page.caught_up:
                if refreshed:  # rule 3: the head is below what the plan saw
                    yield from self._gap(topic, _Gap(page.head_seq + 1, hi, "recreated"))
                    return
                self.source.refresh()
                refreshed = True
            cursor = page.next_from_seq

    def _gap(self, topic: str, gap: _Gap) -> Iterator[pa.RecordBatch]:
        if self.on_gap == "fail":
            raise GapError(topic, gap.gap_from, gap.gap_to, gap.reason)
        columns: dict[str, Any] = {
            "topic": [topic],
            "seq": [gap.gap_to],
            "gap": [gap.as_struct()],
        }
        arrays = [pa.array(columns.get(f.name, [None]), type=f.type) for f in self.schema]
        yield pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _batch(self, topic: str, page: Page, hi: int) -> pa.RecordBatch:
        records = page.records
        if records[-1]["$seq"] > hi:  # the window ran past the range: cut at hi
            seqs = [r["$seq"] for r in records]
            records = records[: bisect.bisect_right(seqs, hi)]
        split = pa.array(records, type=_SPLIT)
        n = len(split)
        arrays = []
        for f in self.schema:
            name = f.name
            if name == "topic":
                arr = pa.array([topic] * n, type=pa.string())
            elif name == "data":
                arr = pc.fill_null(split.field("data").cast(pa.string()), "null")
            elif name == "meta":
                arr = split.field("meta").cast(pa.string())
            elif name in ("seq", "ts", "node", "tag"):
                arr = split.field("$" + name)
            else:  # "gap", or a column this source does not know: null
                arr = pa.nulls(n, type=f.type)
            if arr.type != f.type:
                arr = arr.cast(f.type)
            arrays.append(arr)
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _clip(tomb: Tombstone, hi: int) -> _Gap:
    return _Gap(tomb.gap_from, min(tomb.gap_to, hi), tomb.reason)
