"""One topic instance's log: segments, floors, retention, tag index (contract §1-§5).

Role: hold the records of one topic as runs of encoded frames (``_core.SegmentBuffer``),
answer windowed reads, and apply retention and deletes, keeping every counter exact.
Everything here is synchronous: the engine calls it from the trio thread between awaits,
so each method is atomic with respect to every other task (no locks needed).

Rules (docs/SEMANTICS.md has the user-facing version):

1. Seqs are contiguous: segment i holds seqs ``bases[i] .. bases[i] + count - 1``; a
   segment missing from the list held only dead records (dropped whole).
2. ``earliest`` is the first live seq, or ``head + 1``. Everything below it is retired
   in its segment (``SegmentBuffer.retired``) and counts nowhere. After every mutation
   ``_settle_front`` restores this.
3. ``cap_floor``/``ttl_floor`` move only when a *live* record is lost involuntarily
   (cap, TTL); deletes move ``earliest`` only. ``evict_floor = max(cap_floor, ttl_floor)``
   is the sole tombstone trigger and never exceeds ``earliest``.
3a. ``restart_floor`` names the cause only: an ``ephemeral`` topic that comes back from a
   restart without its records moves ``cap_floor`` past them (recovery) and sets
   ``restart_floor`` to the same seq, so a reader below gets reason ``restart``, not
   ``cap``, until later cap/TTL loss passes it.
4. ``count``/``bytes`` are the live records and the sum of their frame lengths. Every
   live tagged record of an in-memory segment has exactly one entry in ``trie``; a record
   leaving the live set leaves the trie in the same step. A sealed segment that lives in
   its file (``cold_segment.py``) keeps its tags in its tag index file instead.
5. ``$ts`` never decreases along seqs, so TTL expiry is always a prefix of the log.
6. A gap marker (``add_gap``; routers' ``source_trim``, docs/ROUTERS.md) is a seq that holds
   no record: the tail segment is sealed first, so a marker always falls between two
   segments and rule 1 still holds. ``gaps`` is ascending; markers below ``evict_floor``
   are forgotten (the eviction tombstone a reader below it gets covers them), and at most
   ``MAX_GAP_MARKERS`` are kept (``_gap_markers`` holds the marker and both bounds).
7. Change notification is one protocol (``wake``): every change calls each registered
   listener (``listen``) synchronously, in registration order, then unparks the tasks
   parked on ``waiters``. A subsystem that wants to act inside the change registers a
   listener (the watch hub's fan-out); one that acts later either parks a task on
   ``waiters`` (long-poll diffs, router workers) or registers a listener that unparks its
   own task (the queue's relay). The engine calls ``wake`` after a batch's WAL entry is
   queued (apply -> WAL -> fan-out), so no listener sees a batch the WAL was not asked
   to keep.
"""

from __future__ import annotations

import bisect
import os
import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import trio

from .._core import SegmentBuffer, TagTrie
from ..config import TopicConfig
from ..types import TombstoneReason
from .cold_segment import Segment
from .gap_markers import GapMarker, first_gap_from, keep_new_gap, kept_gaps

if TYPE_CHECKING:
    from .._core._ext import _Keep as Keep
    from .._storage.wal import WalTicket
    from .producer_state import ProducerState

__all__ = ["DedupeEntry", "ReadWindow", "TopicLog"]

#: A segment stops taking appends once it holds this many bytes (soft: a batch is never
#: split, so one big batch may overshoot). Small enough that retention frees memory
#: promptly, large enough that per-segment bookkeeping is noise. The test suites' tiny
#: cache pass (scripts/test) shrinks it through ``_TOPICS_TEST_SEGMENT_BYTES`` so that
#: segments seal, go cold and are evicted within a few records, child processes included.
SEGMENT_TARGET_BYTES = int(os.environ.get("_TOPICS_TEST_SEGMENT_BYTES") or 1 << 20)


class DedupeEntry(NamedTuple):
    """A batch's seq range and write time (made for every write: a tuple is the cheapest)."""

    written_at_ms: int
    first_seq: int
    last_seq: int


@dataclass(frozen=True, slots=True)
class ReadWindow:
    """What a windowed read produced (see ``TopicLog.read``)."""

    records_json: bytes
    emitted: int
    examined: int
    next_from_seq: int


class TopicLog:
    """The records and floors of one topic instance."""

    def __init__(self, name: str, topic_id: int, config: TopicConfig) -> None:
        self.name = name
        self.topic_id = topic_id
        self.config = config
        self.segments: list[Segment] = []
        self.bases: list[int] = []
        self.head = 0
        self.earliest = 1
        self.cap_floor = 1
        self.ttl_floor = 1
        # Seqs below this were lost because an ``ephemeral`` topic's records do not outlive
        # the process (set by recovery, kept by checkpoints; rule 3a): reason ``restart``.
        self.restart_floor = 0
        self.count = 0
        self.bytes = 0
        self.last_ts = -1
        self.last_write_ts: int | None = None
        self.last_read_ts: int | None = None
        self.trie = TagTrie()
        self.dedupe: OrderedDict[str, DedupeEntry] = OrderedDict()
        # Producer id -> its highest epoch and last batch (log/producer_state.py); logged.
        self.producers: dict[str, ProducerState] = {}
        # False once a key was remembered with an earlier written_at than the newest one (the
        # wall clock stepped back): the prune can no longer stop at the first live key.
        self._keys_in_time_order = True
        self.deleted = False
        # Seqs up to here may have been handed out; a synced WATERMARK/TOPIC_PUT entry says
        # so on disk (0 for a memory-only engine, which never reserves).
        self.watermark = 0
        # The highest watermark logged, synced or not (a checkpoint must not drop one that
        # is in flight), and the LSN of the last HEAD entry, which released everything
        # above the head: a reservation logged before it no longer counts when its sync
        # completes (``_durability``; entries.py rule 5).
        self.reserved_to = 0
        self.released_lsn = 0
        # The WATERMARK entry in flight that will raise ``watermark`` (target, ticket):
        # one per topic, shared by every writer that needs it (``_durability``).
        self.reservation: tuple[int, WalTicket] | None = None
        # Tasks that wait for a change (long-poll diff, routers) park here (rule 7).
        self.waiters = trio.lowlevel.ParkingLot()
        # Called synchronously by every change, before the waiters wake (rule 7).
        self.listeners: tuple[Callable[[], object], ...] = ()
        # Gap markers (rule 6), ascending by seq.
        self.gaps: list[GapMarker] = []

    # -- state ------------------------------------------------------------------------

    @property
    def evict_floor(self) -> int:
        return max(self.cap_floor, self.ttl_floor)

    def wake(self) -> None:
        """The topic changed (records published, removed, the topic deleted): rule 7."""
        for listener in self.listeners:
            listener()
        if self.waiters:
            self.waiters.unpark_all()

    def listen(self, listener: Callable[[], object]) -> None:
        """Call ``listener`` on every change from now on (rule 7)."""
        self.listeners = (*self.listeners, listener)

    def unlisten(self, listener: Callable[[], object]) -> None:
        """Stop calling ``listener`` (the object given to :meth:`listen`)."""
        self.listeners = tuple(cb for cb in self.listeners if cb is not listener)

    # -- appends ----------------------------------------------------------------------

    def next_ts(self, now_ms: int) -> int:
        """Commit timestamp for the next batch: the clock, but never below the last one."""
        return now_ms if now_ms > self.last_ts else self.last_ts

    def writable_segment(self) -> SegmentBuffer:
        """The tail segment the next batch goes into (opened here when needed).

        The caller encodes the batch with this segment's salt, then calls ``append``.
        """
        seg = self.segments[-1] if self.segments else None
        if type(seg) is SegmentBuffer and not seg.sealed:
            if seg.nbytes < SEGMENT_TARGET_BYTES:
                return seg
            seg.seal()
        fresh = SegmentBuffer(self.head + 1, secrets.randbits(32))
        self.segments.append(fresh)
        self.bases.append(fresh.base_seq)
        self._settle_front()  # the sealed tail may have been wholly dead: drop it now
        return fresh

    def append(self, frames: bytes, n: int, tags: list[bytes | None] | None, ts: int) -> int:
        """Append one encoded batch (seqs head+1 .. head+n) to the writable segment.

        Returns the batch's byte size (sum of frame lengths).
        """
        seg = self.segments[-1]
        before = seg.live_bytes
        seg.append(frames)
        size = seg.live_bytes - before
        first = self.head + 1
        if tags is not None:
            self.trie.add_batch(tags, first)
        if self.count == 0:
            self.earliest = first
        self.head += n
        self.count += n
        self.bytes += size
        self.last_ts = ts
        return size

    # -- gap markers (rule 6) ---------------------------------------------------------

    def add_gap(
        self, reason: TombstoneReason, missed_estimate: int, source_from: int, source_to: int
    ) -> GapMarker:
        """Take the next seq as a gap marker: it holds no record, and a reader reaching it
        gets a tombstone instead (``_reads.read_diff``). Seals the tail segment first."""
        if self.segments and not self.segments[-1].sealed:
            self.segments[-1].seal()
        self.head += 1
        marker = GapMarker(self.head, reason, missed_estimate, source_from, source_to)
        keep_new_gap(self.gaps, marker)
        self._settle_front()  # a wholly dead sealed tail goes; earliest may pass the marker
        return marker

    def gap_from(self, seq: int) -> GapMarker | None:
        """The first gap marker at or above ``seq``, forgetting those below ``evict_floor``."""
        return first_gap_from(self.gaps, seq, self.evict_floor) if self.gaps else None

    def restore_gaps(self, markers: list[GapMarker]) -> None:
        """Adopt persisted markers (recovery): those within the log and above the floor."""
        self.gaps = kept_gaps(markers, self.evict_floor, self.head)

    # -- retention --------------------------------------------------------------------

    def expire(self, now_ms: int) -> int:
        """Apply TTL at ``now_ms``: records with ``now - ts > ttl_ms`` are lost (rule 5).

        Returns the seq bound below which live records were just lost (0 if none), which
        persistence logs as the outcome (recovery cannot re-run the clock).
        """
        ttl = self.config.ttl_ms
        if ttl == 0 or self.count == 0 or ttl >= now_ms:
            return 0  # (ttl >= now: nothing with a non-negative ts can have expired)
        keep_from_ts = now_ms - ttl  # a record is live iff ts >= now - ttl
        target = self.head + 1
        for seg in self.segments:
            if seg.last_ts >= keep_from_ts:
                target = seg.base_seq + seg.first_ts_at_least(keep_from_ts)
                break
        if target <= self.earliest:
            return 0
        _, _, last_live = self._retire_below(target)
        if last_live >= 0:
            self.ttl_floor = max(self.ttl_floor, last_live + 1)
        self._settle_front()
        return target if last_live >= 0 else 0

    def remember_key(self, key: str, entry: DedupeEntry) -> None:
        dedupe = self.dedupe
        if dedupe and self._keys_in_time_order:
            newest = next(reversed(dedupe.values()))
            self._keys_in_time_order = entry.written_at_ms >= newest.written_at_ms
        dedupe[key] = entry

    def expire_keys(self, now_ms: int) -> None:
        """Forget idempotency keys older than the window. Kept in write order, which is
        written_at order unless the clock stepped back; then one full pass re-sorts them."""
        window = self.config.idempotency_window_ms
        dedupe = self.dedupe
        if not self._keys_in_time_order:
            live = sorted(
                (e.written_at_ms, k)
                for k, e in dedupe.items()
                if now_ms - e.written_at_ms <= window
            )
            self.dedupe = OrderedDict((k, dedupe[k]) for _, k in live)
            self._keys_in_time_order = True
            return
        while dedupe:
            oldest = next(iter(dedupe.values()))
            if now_ms - oldest.written_at_ms <= window:
                return
            dedupe.popitem(last=False)

    def replay_expiry(self, bound: int, ttl_floor: int) -> None:
        """Re-apply a logged TTL outcome (recovery)."""
        self._retire_below(bound)
        self.ttl_floor = max(self.ttl_floor, ttl_floor)
        self._settle_front()

    def evict_to_caps(self) -> None:
        """Evict the oldest live records until both caps hold (discard:"old")."""
        cap_n, cap_b = self.config.cap_records, self.config.cap_bytes
        over_n = self.count - cap_n if cap_n else 0
        over_b = self.bytes - cap_b if cap_b else 0
        if over_n <= 0 and over_b <= 0:
            return
        last_live = -1
        while (over_n > 0 or over_b > 0) and self.segments:
            seg = self.segments[0]
            i = seg.first_live(0)
            if i >= seg.count:
                if not seg.sealed:
                    break  # nothing live is left at all
                self._drop_front_segment()
                continue
            # Every live record of a sealed segment goes when the caps would take them
            # one by one anyway: at once, so a cold one is dropped without reading it.
            whole = seg.sealed and (over_n >= seg.live_count or over_b >= seg.live_bytes)
            n, size, last = seg.retire_to(seg.count if whole else i + 1, self.trie)
            last_live = seg.base_seq + (last if whole else i)
            self.count -= n
            self.bytes -= size
            over_n -= n
            over_b -= size
            if seg.retired >= seg.count and seg.sealed:
                self._drop_front_segment()
        if last_live >= 0:
            self.cap_floor = max(self.cap_floor, last_live + 1)
        self._settle_front()

    def evictable_bytes(self, n: int, size: int) -> int:
        """Bytes the caps would evict if a batch of ``n`` records and ``size`` bytes were
        appended now (a dry run of ``evict_to_caps``; nothing changes)."""
        cap_n, cap_b = self.config.cap_records, self.config.cap_bytes
        over_n = self.count + n - cap_n if cap_n else 0
        over_b = self.bytes + size - cap_b if cap_b else 0
        freed = 0
        for seg in self.segments:
            i = seg.first_live(0)
            while i < seg.count and (over_n > 0 or over_b > 0):
                frame = seg.frame_len(i)
                freed += frame
                over_n -= 1
                over_b -= frame
                i = seg.first_live(i + 1)
            if over_n <= 0 and over_b <= 0:
                return freed
        # The batch itself would be trimmed too: at most the caps' worth of it stays.
        kept = size if not cap_b else min(size, cap_b)
        return freed + (size - kept)

    def _retire_below(self, target: int) -> tuple[int, int, int]:
        """Retire every seq < target (clamped to head+1). Returns (live n, live bytes, last live seq)."""
        target = min(target, self.head + 1)
        total_n = total_b = 0
        last_live = -1
        while self.segments and self.bases[0] < target:
            seg = self.segments[0]
            end = target - seg.base_seq
            n, size, last = seg.retire_to(end, self.trie)
            total_n += n
            total_b += size
            self.count -= n  # per segment: a cold segment that cannot be read stops the loop
            self.bytes -= size
            if last >= 0:
                last_live = seg.base_seq + last
            if seg.retired >= seg.count and seg.sealed:
                self._drop_front_segment()
            else:
                break
        return total_n, total_b, last_live

    def _drop_front_segment(self) -> None:
        self.segments.pop(0)
        self.bases.pop(0)

    def _settle_front(self) -> None:
        """Restore rule 2: advance ``earliest`` to the first live seq, dropping dead segments.

        The unsealed tail segment is kept even when wholly dead: the next append goes there.
        """
        while self.segments:
            seg = self.segments[0]
            i = seg.first_live(0)
            if i < seg.count:
                seg.retire_to(i, self.trie)
                self.earliest = seg.base_seq + i
                return
            seg.retire_to(seg.count, self.trie)
            if not seg.sealed:
                break
            self._drop_front_segment()
        self.earliest = self.head + 1

    # -- persistence hooks ------------------------------------------------------------

    def replay_append(self, frames: memoryview, salt: int, first_seq: int, n: int) -> None:
        """Append logged frames during recovery, in the segment their salt belongs to."""
        if first_seq <= self.head:
            skip = self.head - first_seq + 1
            if skip >= n:
                return  # already in the checkpointed segments
            raise ValueError(
                f"topic {self.topic_id}: WAL append overlaps the log at seq {first_seq}"
            )
        if first_seq > self.head + 1:
            self.skip_to(first_seq - 1)  # seqs never logged (e.g. while ephemeral) are lost
        seg = self.segments[-1] if self.segments else None
        if seg is None or seg.sealed or seg.salt != salt:
            if seg is not None and not seg.sealed:
                seg.seal()
            seg = SegmentBuffer(first_seq, salt)
            self.segments.append(seg)
            self.bases.append(first_seq)
        start = seg.count
        seg.append(frames)
        for i in range(start, seg.count):
            tag = seg.tag_at(i)
            if tag is not None:
                self.trie.add(tag, seg.base_seq + i)
        size = sum(seg.frame_len(i) for i in range(start, seg.count))
        if self.count == 0:
            self.earliest = first_seq
        self.head = first_seq + n - 1
        self.count += n
        self.bytes += size
        self.last_ts = seg.last_ts

    def skip_silently(self, head: int) -> None:
        """Advance the head past seqs no reader saw and no writer was told of (recovery):
        they hold nothing, a reader's cursor just passes them, no floor moves."""
        if head <= self.head:
            return
        if self.segments and not self.segments[-1].sealed:
            self.segments[-1].seal()
        self.head = head
        self._settle_front()

    def next_live(self, seq: int) -> int:
        """The first live seq at or above ``seq``, or ``head + 1``."""
        i = max(bisect.bisect_right(self.bases, seq) - 1, 0)
        for seg in self.segments[i:]:
            idx = max(seq - seg.base_seq, 0)
            if idx < seg.count:
                j = seg.first_live(idx)
                if j < seg.count:
                    return seg.base_seq + j
        return self.head + 1

    def skip_to(self, head: int) -> None:
        """Advance the head past seqs that may have been handed out but were lost (a crash
        after a watermark, or appends never logged). Readers below get a tombstone: the loss
        is involuntary, so it moves the eviction floor (reported as reason "cap")."""
        if head <= self.head:
            return
        self._retire_below(self.head + 1)
        if self.segments and not self.segments[-1].sealed:
            self.segments[-1].seal()
        self.head = head
        self.cap_floor = max(self.cap_floor, head + 1)
        self._settle_front()

    def adopt_segment(self, seg: Segment) -> None:
        """Attach a segment loaded from disk (recovery, in seq order)."""
        self.segments.append(seg)
        self.bases.append(seg.base_seq)

    def finish_load(self, earliest: int) -> None:
        """After adopting checkpointed segments: rebuild counters and the tag index, and
        retire everything below the checkpointed ``earliest``."""
        self.count = sum(seg.live_count for seg in self.segments)
        self.bytes = sum(seg.live_bytes for seg in self.segments)
        for seg in self.segments:
            if type(seg) is not SegmentBuffer:
                continue  # a cold segment's tags are in its tag index file (cold_log.py)
            for i in range(seg.count):
                if seg.is_live(i):
                    tag = seg.tag_at(i)
                    if tag is not None:
                        self.trie.add(tag, seg.base_seq + i)
        if self.segments:
            self.last_ts = max(self.last_ts, self.segments[-1].last_ts)
        self._retire_below(earliest)
        self._settle_front()

    # -- deletes ----------------------------------------------------------------------

    def delete_before(self, bound: int) -> int:
        """Delete every live record with seq < bound (a prefix). Returns how many."""
        if bound <= self.earliest:
            return 0
        n, _, _ = self._retire_below(bound)
        self._settle_front()
        return n

    def delete_seqs(self, seqs: list[int]) -> int:
        """Flag the given seqs deleted (those still live). Returns how many were live."""
        deleted = 0
        for seq in seqs:
            loc = self.locate(seq)
            if loc is None:
                continue
            seg_i, idx = loc
            seg = self.segments[seg_i]
            size = seg.mark_deleted(idx, self.trie)
            if size:
                deleted += 1
                self.count -= 1
                self.bytes -= size
                if seg.live_count == 0 and seg.sealed and seg_i > 0:
                    del self.segments[seg_i]
                    del self.bases[seg_i]
        self._settle_front()
        return deleted

    def locate(self, seq: int) -> tuple[int, int] | None:
        """(segment position, index) of ``seq`` if its segment is still held."""
        i = bisect.bisect_right(self.bases, seq) - 1
        if i < 0:
            return None
        seg = self.segments[i]
        idx = seq - seg.base_seq
        return (i, idx) if idx < seg.count else None

    # -- reads ------------------------------------------------------------------------

    def read(
        self,
        start: int,
        limit: int,
        budget: int,
        skip_nodes: frozenset[bytes] | None,
        flags: int,
        end: int | None = None,
        keep: Keep | None = None,
        out_of_time: Callable[[], bool] | None = None,
    ) -> ReadWindow:
        """Render the window starting at seq ``start`` (docs/SEMANTICS.md rules 14-15).

        ``end`` bounds the window (the seq before a gap marker, or what a strong watch may
        see: the WAL's committed seq); reaching it ends the window like reaching the head.
        ``out_of_time`` (a filtered read's time budget, issue 30) is asked between chunks
        of 1, 2, 4, ... examined records; once it says so the window ends there, as
        ``limit`` ends it, so however costly each record is, a read overshoots its budget
        by at most about the time it already took.
        """
        start = max(start, self.earliest)
        i = max(bisect.bisect_right(self.bases, start) - 1, 0)
        parts: list[bytes] = []
        emitted = examined = out_bytes = 0
        seq = start
        stopped = False
        segments = self.segments
        chunk = limit if out_of_time is None else 1
        while i < len(segments):
            seg = segments[i]
            if end is not None and seg.base_seq > end:
                break
            idx = max(seq - seg.base_seq, 0)
            if idx >= seg.count:
                i += 1
                continue
            # -1: the whole segment; else stop after ``end`` (it may lie mid-segment).
            stop = -1 if end is None else end - seg.base_seq + 1
            want = min(chunk, limit - examined)
            frag, e, x, nxt = seg.render(
                idx, want, budget - out_bytes, skip_nodes, flags, stop, keep
            )
            if e:
                parts.append(frag)
                out_bytes += len(frag)
            emitted += e
            examined += x
            seq = seg.base_seq + nxt
            if examined >= limit or out_bytes >= budget:
                stopped = True
                break
            if x < want:  # the segment (or the window's end in it) is done
                i += 1
            if out_of_time is not None:
                if out_of_time():
                    stopped = True
                    break
                chunk *= 2
        if stopped:
            next_from = seq - 1
        else:
            next_from = self.head if end is None else min(end, self.head)
        return ReadWindow(b"[" + b",".join(parts) + b"]", emitted, examined, next_from)
