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

import bisect
from collections.abc import Callable
from dataclasses import dataclass

from .. import _args
from ..errors import InvalidRequestError
from ..query.where import DEFAULT_MAX_COST, Predicate, compile_where
from ..types import DiffResult, Tombstone, TombstoneReason
from .cold_segment import Segment
from .gap_markers import GapMarker
from .topic_log import ReadWindow, TopicLog

__all__ = [
    "frame_seq_by_ts",
    "ReadBounds",
    "gap_tombstone",
    "read_bounds",
    "read_diff",
    "time_bound",
    "tombstone_for",
]


@dataclass(frozen=True, slots=True)
class ReadBounds:
    """Time and seq bounds and a ``where`` predicate of one read (issue 18).

    Rules (docs/SEMANTICS.md rules 29-32):
    1. ``from_ts`` resolves to the seq of the last held frame with ``$ts < from_ts`` (dead
       frames included: a reader passes them silently), so the read starts at the first
       record with ``$ts >= from_ts``. When no live record is older than ``from_ts`` the
       ts of what was lost below ``earliest_seq`` is unknown, so it resolves to 0: exactly
       a read from the start, with that read's tombstone.
    2. The end (inclusive) is ``to_seq``, and for ``to_ts`` the seq before the first live
       record with ``$ts > to_ts``; with none, the head once the clock has passed ``to_ts``
       (a later write is stamped at least now), else not known yet.
    3. ``where`` filters like a node filter: refused records are examined, not returned.
    4. A filtered read is bounded in time as well (issue 30, :func:`time_bound`): past
       ``Limits.max_where_ms`` it ends with what it has and a cursor, as ``limit`` ends it.
    """

    from_ts: int | None = None
    to_ts: int | None = None
    to_seq: int | None = None
    where: Predicate | None = None

    @property
    def bounded(self) -> bool:
        return self.to_ts is not None or self.to_seq is not None

    def start(self, log: TopicLog, from_seq: int) -> int:
        """The resolved ``from_seq`` (rule 1); ``from_seq`` itself without ``from_ts``."""
        if self.from_ts is None:
            return from_seq
        last, _ = frame_seq_by_ts(log, self.from_ts)
        return 0 if last is None or last < log.earliest else last

    def end(self, log: TopicLog, now_ms: int) -> int | None:
        """The last seq the read may reach (rule 2), or None: not bounded / not known yet."""
        end = self.to_seq
        if self.to_ts is not None:
            _, after = frame_seq_by_ts(log, self.to_ts + 1)
            # The first *live* record past to_ts (deleted ones in between read for free).
            live = log.next_live(after) if after is not None else log.head + 1
            if live <= log.head:
                by_ts: int | None = live - 1
            else:
                by_ts = log.head if self.to_ts < now_ms else None
            if by_ts is not None:
                end = by_ts if end is None else min(end, by_ts)
        return end


def read_bounds(
    *,
    from_seq: int = 0,
    from_ts: object = None,
    to_ts: object = None,
    to_seq: object = None,
    where: object = None,
    max_where_cost: int = DEFAULT_MAX_COST,
) -> ReadBounds | None:
    """Check a read's bound arguments (nothing else is read); None when none is given.
    ``max_where_cost``: the ``where`` plan's budget (topics/query/where.py rule 7)."""
    if from_ts is None and to_ts is None and to_seq is None and where is None:
        return None
    fts = _args.u64("from_ts", from_ts) if from_ts is not None else None
    if fts is not None and from_seq:
        raise InvalidRequestError.for_field(
            "from_ts", "give from_seq or from_ts, not both (resume with the answer's cursor)"
        )
    return ReadBounds(
        fts,
        _args.u64("to_ts", to_ts) if to_ts is not None else None,
        _args.u64("to_seq", to_seq) if to_seq is not None else None,
        compile_where(where, max_cost=max_where_cost),
    )


def time_bound(now_ms: Callable[[], int], budget_ms: int) -> Callable[[], bool] | None:
    """Rule 4: what tells a filtered read, from now on, that its ``budget_ms`` is spent
    (None: 0, no bound). ``now_ms`` is the engine clock (a test's moves when told to)."""
    if not budget_ms:
        return None
    until = now_ms() + budget_ms
    return lambda: now_ms() >= until


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
    if log.restart_floor >= log.evict_floor:  # the last loss was a restart (_log rule 3a)
        reason = "restart"
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
    bounds: ReadBounds | None = None,
    now_ms: int = 0,
    out_of_time: Callable[[], bool] | None = None,
) -> DiffResult:
    """One diff window from ``from_seq`` (exclusive).

    ``upto`` bounds the window to seqs ``<= upto`` as if the head were there (a strong
    watch read: the WAL has not committed past it); the window ends, ``head_seq``,
    ``caught_up`` and ``lag`` are then computed against ``upto``. None: the head.

    ``bounds`` (from :func:`read_bounds`) may move the start (``from_ts``, echoed as the
    answer's ``from_seq``), end the read (``to_ts``/``to_seq``: ``caught_up`` and
    ``lag`` count to the end, and ``end_reached`` says the cursor is there) and filter;
    ``out_of_time`` (:func:`time_bound`) then bounds the filtered read (rule 4).

    Kept whole: every diff, watch pass and Spark page runs it; the window arithmetic reads
    best in one place.
    """
    keep = None
    user_end: int | None = None
    if bounds is not None:
        from_seq = bounds.start(log, from_seq)
        user_end = bounds.end(log, now_ms)
        keep = bounds.where
    head = log.head if upto is None or upto >= log.head else upto
    bounded = head < log.head
    tombstone = tombstone_for(log, from_seq)
    start = log.earliest if tombstone is not None else from_seq + 1
    end = head if bounded else None
    if user_end is not None:
        end = user_end if end is None else min(end, user_end)
    if log.gaps:
        gap = log.gap_from(start)
        # Nothing live lies between start and the marker: report it now, read on after it.
        if (
            gap is not None
            and tombstone is None
            and (not bounded or gap.seq <= head)
            and (user_end is None or gap.seq <= user_end)
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
        timed = out_of_time if keep is not None else None
        window = log.read(start, limit, budget, skip, flags, end, keep, timed)
    nxt = window.next_from_seq
    if bounds is not None and (bounds.from_ts is not None or bounds.bounded):
        # Past the end counts as "at the end": a cursor the caller moved beyond it is done.
        stop = head if user_end is None else min(head, user_end)
        reached = user_end is not None and nxt >= user_end
        return DiffResult(
            topic=log.name,
            records_json=window.records_json,
            record_count=window.emitted,
            next_from_seq=nxt,
            head_seq=head,
            earliest_seq=log.earliest,
            caught_up=nxt >= stop,
            tombstone=tombstone,
            lag=max(0, stop - nxt),
            records_scanned=window.examined,
            from_seq=from_seq if bounds.from_ts is not None else None,
            end_reached=reached if bounds.bounded else None,
        )
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


def frame_seq_by_ts(log: TopicLog, ts_ms: int) -> tuple[int | None, int | None]:
    """``(last, first)``: the seqs of the last held frame with ``$ts < ts_ms`` and of
    the first with ``$ts >= ts_ms`` (None when there is none), dead frames included.

    A binary search over the segments, then over one segment's frames (rule 5: ``$ts``
    never decreases along seqs); segments already dropped are unknown.
    """
    segs = log.segments
    n = len(segs)
    if n and segs[-1].count == 0:  # a fresh tail holds nothing yet (last_ts -1)
        n -= 1
    i = bisect.bisect_left(segs, ts_ms, 0, n, key=_last_ts)
    if i == n:
        last = segs[n - 1] if n else None
        return (last.base_seq + last.count - 1 if last is not None else None), None
    seg = segs[i]
    idx = seg.first_ts_at_least(ts_ms)
    first = seg.base_seq + idx
    if idx:
        return first - 1, first
    if i == 0:
        return None, first
    prev = segs[i - 1]
    return prev.base_seq + prev.count - 1, first


def _last_ts(seg: Segment) -> int:
    return int(seg.last_ts)
