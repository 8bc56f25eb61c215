"""The diff read shared by the engine and the read-only Reader (contract §3, §3.3).

``read_diff`` decides the tombstone, the start of the window and the cursor fields from
a topic's floors (docs/SEMANTICS.md rules 10-15); the rendering itself is the log's.

Gap markers (``TopicLog.add_gap``, a router's ``source_trim``, SEMANTICS rule 28) end a
window just before them, so one response never carries records from both sides of a
marker; a read that reaches a marker before any live record (deleted seqs are passed for
free) gets the marker's tombstone at once and continues after it, so a cursor just below
a marker never waits for a write to learn of it. A ``source_trim`` marker reports itself
(``gap_from == gap_to ==`` the marker); a ``crash`` marker (recovery.py rule 4) the seqs
the crash may have lost from the reader's cursor on. At most one tombstone per response:
an eviction tombstone wins, and covers any marker below ``earliest_seq``.
"""

from __future__ import annotations

from ._log import GapMarker, ReadWindow, TopicLog
from .types import DiffResult, Tombstone, TombstoneReason

__all__ = ["gap_tombstone", "read_diff", "tombstone_for"]


def tombstone_for(log: TopicLog, from_seq: int) -> Tombstone | None:
    """The tombstone a read from ``from_seq`` must carry, if any."""
    if from_seq > log.head:
        gap_to = log.earliest - 1
        return Tombstone(1, gap_to, "recreated", max(0, gap_to), log.earliest, log.head)
    first = from_seq + 1
    if first >= log.evict_floor:
        return None
    by_cap, by_ttl = first < log.cap_floor, first < log.ttl_floor
    reason: TombstoneReason = "mixed" if by_cap and by_ttl else "cap" if by_cap else "ttl"
    gap_to = log.earliest - 1
    return Tombstone(first, gap_to, reason, gap_to - first + 1, log.earliest, log.head)


def gap_tombstone(log: TopicLog, marker: GapMarker, start: int = 0) -> Tombstone:
    """The tombstone a reader whose window starts at ``start`` gets at a gap marker.

    A ``source_trim`` marker stands for another topic's seqs, so its own seq is the gap; a
    local loss (seqs a crash skipped) names this topic's lost range itself, from the
    reader's start on (a reader already inside the range saw the seqs below its cursor).
    """
    if marker.reason == "source_trim":
        return Tombstone(
            marker.seq, marker.seq, marker.reason, marker.missed_estimate, log.earliest, log.head
        )
    gap_from = max(marker.source_from, start)
    gap_to = marker.source_to
    return Tombstone(gap_from, gap_to, marker.reason, gap_to - gap_from + 1, log.earliest, log.head)


def read_diff(
    log: TopicLog,
    from_seq: int,
    limit: int,
    skip_nodes: frozenset[bytes] | None,
    flags: int,
    budget: int,
    upto: int | None = None,
) -> DiffResult:
    """One diff window from ``from_seq`` (exclusive).

    ``upto`` bounds the window to seqs ``<= upto`` as if the head were there (a strong
    watch read: the WAL has not committed past it); the window ends, ``head_seq``,
    ``caught_up`` and ``lag`` are then computed against ``upto``. None: the head.
    """
    head = log.head if upto is None or upto >= log.head else upto
    bounded = head < log.head
    tombstone = tombstone_for(log, from_seq)
    start = log.earliest if tombstone is not None else from_seq + 1
    end = head if bounded else None
    if log.gaps:
        gap = log.gap_from(start)
        # Nothing live lies between start and the marker: report it now, read on after it.
        if (
            gap is not None
            and tombstone is None
            and (not bounded or gap.seq <= head)
            and log.next_live(start) > gap.seq
        ):
            tombstone = gap_tombstone(log, gap, start)
            start = gap.seq + 1
            gap = log.gap_from(start)
        if gap is not None:
            # A window ends before the first seq the marker stands for: a crash's range
            # starts below the marker, and the next read must report all of it.
            last = (gap.seq if gap.reason == "source_trim" else gap.source_from) - 1
            end = last if end is None else min(end, last)
    skip = skip_nodes if log.config.dedupe_node else None
    if end is not None and start > end:  # nothing committed past the reader yet
        window = ReadWindow(b"[]", 0, 0, start - 1)
    else:
        window = log.read(start, limit, budget, skip, flags, end)
    nxt = window.next_from_seq
    return DiffResult(
        topic=log.name,
        records_json=window.records_json,
        record_count=window.emitted,
        next_from_seq=nxt,
        head_seq=head,
        earliest_seq=log.earliest,
        caught_up=nxt >= head if bounded else nxt == head,
        tombstone=tombstone,
        lag=max(0, head - nxt) if bounded else head - nxt,
        records_scanned=window.examined,
    )
