"""Lease state of queue topics: the projection of each queue's leases log (contract §10).

Role: for one queue topic instance (a ``TopicLog`` of type "queue"), say which jobs are
claimable, who holds which lease until when, how often each job was delivered, and hand
jobs out. Everything here is synchronous and runs on the engine's trio thread between
awaits, so every method is atomic; the queue endpoints (``_queue_ops.py``) do the
validation, the waiting, the dead-letter writes and the WAL logging around it.

Rules:

1. A job is a live record of the queue topic. A *tracked* job has been delivered at least
   once and is in exactly one state: LEASED (``leases``), FREE (``free``: the reclaim
   freelist), DELAYED (``delayed``: nacked with a delay) or DEAD_LETTERING (being copied to
   the dead-letter topic). ``deliveries`` has an entry for exactly the tracked jobs.
2. Every live seq <= ``cursor`` is tracked; every live seq > ``cursor`` is fresh (never
   leased). A claim hands out FREE jobs first (oldest freed first), then fresh ones by
   walking the segments forward from the cursor, skipping deleted records.
3. Tracked jobs are live. Deletes made elsewhere (tag deletes, ``before_seq``, TTL, cap
   eviction) are noticed by ``refresh``: appends raise ``count`` exactly as much as
   ``head``, so a smaller rise means something was deleted, and the tracked set is then
   checked record by record.
4. Expiry is lazy: no timers. ``refresh(now)`` moves every lease whose deadline is past
   (``now > deadline``) and every delay that has elapsed (``now >= available_at``) to the
   freelist; the heaps hold (time, seq, token) entries that are checked against the live
   state when popped, so an extended or released lease leaves only a stale entry behind.
5. So ``ready = count - in_flight - delayed - dead_lettering - scheduled`` and
   ``in_flight = len(leases)`` are exact after ``refresh``.
6. ``Queues`` (``_queue_store.py``) holds every queue topic's projection by topic id and is the store extension
   (manifest section "queues", WAL entry types 48..63) that persists them.
7. Durable leases (``leases_durable``): every change is described by one lifecycle event
   (``CLAIMED``, ``ACKED``, ``RELEASED``, ``EXTENDED``, ``DEAD_LETTERED``), logged by the
   caller in the same synchronous step as the change, carrying outcomes (deadlines,
   delivery counts, lease ids), never clock readings to redo, so replaying the events in
   log order over the last snapshot rebuilds the same state (``apply_event``).
8. Scheduled jobs and dedupe keys (``_queue_jobs``) come from the jobs' meta stamps: a
   pending scheduled job is untracked and not claimable, so rule 2 reads "every live seq
   <= cursor is tracked, pending or due"; ``refresh`` moves jobs whose time came the way
   it frees expired leases, and ``_fresh`` merges the due ones below the cursor with the
   forward walk so due jobs go out in seq order.
"""

from __future__ import annotations

import bisect
import heapq
import logging
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio
import ujson

from ._core import RENDER_DATA, RENDER_META, RENDER_TAGS, SegmentBuffer
from ._log import TopicLog
from ._meta_keys import ServerMeta
from ._queue_jobs import DedupeKeys, Schedule, Stamps, scan_log

if TYPE_CHECKING:
    from ._queue_claims import Cohort

__all__ = [
    "ACKED",
    "CLAIMED",
    "DEAD_LETTERED",
    "ENTRY_TYPES",
    "EXTENDED",
    "RELEASED",
    "Lease",
    "QueueState",
    "Taken",
    "new_lease_ids",
    "stamp_dead_letter_meta",
]

# Leases-log WAL entry types (store extension range 48..63 is the queues'). Payloads are
# JSON arrays whose first element is the topic id:
CLAIMED = 48  # [tid, node, [[seq, deliveries, deadline, lease_id], ...]]
ACKED = 49  # [tid, [seq, ...]]
RELEASED = 50  # [tid, available_at, [seq, ...]]
EXTENDED = 51  # [tid, [[seq, lease_id, deadline], ...]]
DEAD_LETTERED = 52  # [tid, [seq, ...]]
ENTRY_TYPES = frozenset({CLAIMED, ACKED, RELEASED, EXTENDED, DEAD_LETTERED})

log_ = logging.getLogger("topics.queue")

_RENDER_ALL = RENDER_DATA | RENDER_META | RENDER_TAGS
_NO_BUDGET = 1 << 62
#: Random bytes per lease id: 96 bits, so a lease id cannot be guessed.
LEASE_ID_BYTES = 12


def new_lease_ids(n: int) -> list[str]:
    """``n`` unguessable lease ids ("lease_" + 24 hex digits), one urandom call for all."""
    hexed = os.urandom(LEASE_ID_BYTES * n).hex()
    w = 2 * LEASE_ID_BYTES
    return ["lease_" + hexed[i * w : (i + 1) * w] for i in range(n)]


@dataclass(slots=True)
class Lease:
    node: str
    lease_id: str
    deadline: int


@dataclass(slots=True)
class Taken:
    """One job handed out by a claim pass (before it is leased)."""

    seq: int
    seg: SegmentBuffer
    idx: int


class QueueState:
    """The lease projection of one queue topic instance (module rules 1-6)."""

    def __init__(self, log: TopicLog) -> None:
        self.log = log
        self.cursor = 0
        self.deliveries: dict[int, int] = {}
        self.leases: dict[int, Lease] = {}
        self.free: set[int] = set()
        self.delayed: dict[int, int] = {}
        self.dead_lettering: set[int] = set()
        self.dead_lettered = 0
        self._free_order: deque[int] = deque()
        self._deadlines: list[tuple[int, int, str]] = []
        self._delays: list[tuple[int, int]] = []
        self._seen = (log.head, log.count)
        self.schedule = Schedule()
        self.dedupe = DedupeKeys()
        self._adopt_stamps(log)
        # Waiters for "something may be claimable / a lease ended" (/work sessions, the
        # worker's idle wait); appends reach them through a relay task (_queue_ops).
        self.lot = trio.lowlevel.ParkingLot()
        self.waiting = 0
        # /work sessions at their in-flight bound, by node: only the end of one of their
        # own leases lets them take more. Waking every one of them on each append and on
        # every other worker's ack cost more than the deliveries with many sessions open.
        self.full: dict[str, trio.lowlevel.ParkingLot] = {}
        self.relay_running = False
        self.cohort: Cohort | None = None  # the open coalescing window, if any
        # Sessions that wait without a task (``WorkSession.poll``): session -> (node, at
        # its bound, hook). Waking a task per delivered batch (the scheduler round trip,
        # its cancel scopes) cost a /work stream about as much as leasing and framing the
        # jobs, so a frontend that can write without blocking is called synchronously
        # instead, from whatever changed the queue (an ack, an append's relay, expiry).
        self.hooked: dict[object, tuple[str, bool, Callable[[], object]]] = {}

    # -- counters ------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return len(self.leases)

    @property
    def ready(self) -> int:
        """Claimable now (rule 5); exact after :meth:`refresh`."""
        log = self.log
        return (
            log.count
            - len(self.leases)
            - len(self.delayed)
            - len(self.dead_lettering)
            - len(self.schedule.pending)
        )

    @property
    def scheduled(self) -> int:
        """Jobs written with a ``deliver_at`` still in the future (rule 8)."""
        return len(self.schedule.pending)

    def wake(self) -> None:
        """Anything may have changed: wake every waiter."""
        if self.lot:
            self.lot.unpark_all()
        for lot in self.full.values():
            lot.unpark_all()
        if self.hooked:
            self._call_hooks(None, everyone=True)

    def wake_node(self, node: str) -> None:
        """Leases of ``node`` ended (ack, nack, release): wake the claimers and the full
        sessions of that node (no other session's in-flight count changed)."""
        if self.lot:
            self.lot.unpark_all()
        lot = self.full.get(node)
        if lot:
            lot.unpark_all()
        if self.hooked:
            self._call_hooks(node)

    def wake_claimers(self) -> None:
        """Jobs were appended: only waiters below their bound can use them."""
        if self.lot:
            self.lot.unpark_all()
        if self.hooked:
            self._call_hooks(None)

    def _call_hooks(self, node: str | None, everyone: bool = False) -> None:
        """Call the hooks of the task-less waiters this change concerns (``hooked``). Each
        is unhooked before it runs (it hooks itself again if it still waits), so a hook
        that changes the queue never calls itself."""
        hooked = self.hooked
        due = [
            key for key, (owner, full, _) in hooked.items() if everyone or not full or owner == node
        ]
        for key in due:
            entry = hooked.pop(key, None)
            if entry is not None:
                try:
                    entry[2]()
                except Exception:  # a frontend's bug must not fail the ack that woke it
                    log_.exception("a queue waiter's hook failed")

    def next_change_ms(self) -> int | None:
        """The clock time at which a lease expires, a delay elapses or a scheduled job
        comes due next (or None)."""
        times = []
        if self._deadlines:
            times.append(self._deadlines[0][0] + 1)
        if self._delays:
            times.append(self._delays[0][0])
        due = self.schedule.next_ms()
        if due is not None:
            times.append(due)
        return min(times) if times else None

    # -- upkeep --------------------------------------------------------------------------

    def refresh(self, now: int) -> bool:
        """Apply outside deletes (rule 3) and lazy expiry (rule 4). True if a job was freed."""
        log = self.log
        head, count = self._seen
        # A held job deleted from outside ends its lease too: report it, so full sessions
        # (which no longer wake on every queue change) notice.
        freed = log.count - count < log.head - head and self._drop_dead()
        self._seen = (log.head, log.count)
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] < now:
            deadline, seq, lease_id = heapq.heappop(deadlines)
            lease = self.leases.get(seq)
            if lease is not None and lease.lease_id == lease_id and lease.deadline == deadline:
                del self.leases[seq]
                self._make_free(seq)
                freed = True
        delays = self._delays
        while delays and delays[0][0] <= now:
            at, seq = heapq.heappop(delays)
            if self.delayed.get(seq) == at:
                del self.delayed[seq]
                self._make_free(seq)
                freed = True
        schedule = self.schedule
        if schedule.heap and schedule.pop_due(now, self.cursor):  # (no call when idle)
            freed = True
        if len(deadlines) > 64 and len(deadlines) > 4 * len(self.leases):
            self._compact_deadlines()
        return freed

    def mark(self) -> None:
        """Note the log's (head, count) after a delete this projection made itself."""
        self._seen = (self.log.head, self.log.count)

    def _drop_dead(self) -> bool:
        log = self.log
        dead = [seq for seq in self.deliveries if not _is_live(log, seq)]
        for seq in dead:
            self.untrack(seq)
        pending = self.schedule.pending
        if pending:  # a deleted scheduled job must stop counting against ready
            for seq in [seq for seq in pending if not _is_live(log, seq)]:
                del pending[seq]
        return bool(dead)

    def _compact_deadlines(self) -> None:
        self._deadlines = [(ls.deadline, seq, ls.lease_id) for seq, ls in self.leases.items()]
        heapq.heapify(self._deadlines)

    def _make_free(self, seq: int) -> None:
        self.free.add(seq)
        self._free_order.append(seq)

    def forget_leased(self, seqs: list[int]) -> None:
        """:meth:`untrack` for jobs known to be LEASED (an ack of held leases): a job is
        in one state only (rule 1), so the other states need no look."""
        deliveries, leases = self.deliveries, self.leases
        for seq in seqs:
            del deliveries[seq]
            del leases[seq]

    def untrack(self, seq: int) -> None:
        """Forget a job (acked, dead-lettered or deleted): it leaves every state."""
        if self.deliveries.pop(seq, None) is None:
            return
        self.leases.pop(seq, None)
        self.free.discard(seq)
        self.delayed.pop(seq, None)
        self.dead_lettering.discard(seq)

    # -- claiming ------------------------------------------------------------------------

    def pick(self, n: int, dead_letter_after: int) -> tuple[list[Taken], list[int]]:
        """Take up to ``n`` claimable jobs: the freelist first, then fresh ones (rule 2).

        A freed job already delivered ``dead_letter_after`` times (when > 0) is not handed
        out: it moves to DEAD_LETTERING and is returned in the second list. The caller
        leases every taken job in the same synchronous step.
        """
        taken: list[Taken] = []
        dead: list[int] = []
        log = self.log
        order = self._free_order
        while order and len(taken) < n:
            seq = order.popleft()
            if seq not in self.free:
                continue  # stale entry: leased, dead-lettered or gone since
            self.free.discard(seq)
            if dead_letter_after and self.deliveries[seq] >= dead_letter_after:
                self.dead_lettering.add(seq)
                dead.append(seq)
                continue
            loc = log.locate(seq)
            assert loc is not None, "a tracked job is live (rule 3)"
            taken.append(Taken(seq, log.segments[loc[0]], loc[1]))
        if len(taken) < n:
            taken.extend(self._fresh(n - len(taken)))
        return taken, dead

    def _fresh(self, n: int) -> list[Taken]:
        schedule = self.schedule
        if schedule.pending or schedule.due:
            return self._fresh_scheduled(n)
        log = self.log
        start = max(self.cursor + 1, log.earliest)
        segments = log.segments
        i = max(bisect.bisect_right(log.bases, start) - 1, 0)
        out: list[Taken] = []
        while i < len(segments) and len(out) < n:
            seg = segments[i]
            idx = seg.first_live(max(start - seg.base_seq, 0))
            while idx < seg.count and len(out) < n:
                out.append(Taken(seg.base_seq + idx, seg, idx))
                idx = seg.first_live(idx + 1)
            i += 1
        if out:
            self.cursor = max(self.cursor, out[-1].seq)
        return out

    def _fresh_scheduled(self, n: int) -> list[Taken]:
        """:meth:`_fresh` while jobs are scheduled (rule 8): the forward walk skips pending
        jobs, and due jobs the cursor already passed are merged in, in seq order."""
        log, schedule = self.log, self.schedule
        pending = schedule.pending
        walk = self._walk_fresh(pending)
        ahead = next(walk, None)
        out: list[Taken] = []
        while len(out) < n:
            due = schedule.next_due(self._untracked_live)
            if due is not None and (ahead is None or due < ahead.seq):
                heapq.heappop(schedule.due)
                loc = log.locate(due)
                assert loc is not None  # _untracked_live checked it
                out.append(Taken(due, log.segments[loc[0]], loc[1]))
            elif ahead is not None:
                out.append(ahead)
                self.cursor = max(self.cursor, ahead.seq)
                ahead = next(walk, None)
            else:
                break
        return out

    def _walk_fresh(self, pending: dict[int, int]) -> Iterator[Taken]:
        log = self.log
        start = max(self.cursor + 1, log.earliest)
        segments = log.segments
        i = max(bisect.bisect_right(log.bases, start) - 1, 0)
        while i < len(segments):
            seg = segments[i]
            base = seg.base_seq
            idx = seg.first_live(max(start - base, 0))
            while idx < seg.count:
                if base + idx not in pending:
                    yield Taken(base + idx, seg, idx)
                idx = seg.first_live(idx + 1)
            i += 1

    def _untracked_live(self, seq: int) -> bool:
        return seq not in self.deliveries and _is_live(self.log, seq)

    # -- scheduled jobs and dedupe keys (rule 8) -------------------------------------------

    def _adopt_stamps(self, log: TopicLog) -> None:
        """Rebuild schedule and keys from the records the log holds (a restart)."""
        for seq, live, stamps in scan_log(log):
            self.adopt(seq, stamps, live, None)

    def adopt(self, seq: int, stamps: Stamps, live: bool, now: int | None) -> None:
        """Take in one job's stamps: schedule it if live and not due (when ``now`` is
        known; a rebuild keeps it pending and lets ``refresh`` decide) and take its key."""
        at, key, until = stamps
        if live and at is not None and (now is None or at > now):
            self.schedule.add(seq, at)
        if key is not None and (live or until is not None):
            self.dedupe.add(key, seq, until, now or 0, self._is_live)

    def _is_live(self, seq: int) -> bool:
        return _is_live(self.log, seq)

    def unclaimed(self, seq: int) -> bool:
        """Whether ``seq`` is a live job never handed out (fresh, pending or due: by
        rules 2 and 8 that is every live untracked job)."""
        return seq not in self.deliveries and _is_live(self.log, seq)

    def lease_all(
        self, jobs: list[Taken], node: str, lease_ids: list[str], deadline: int
    ) -> tuple[list[bytes], list[int]]:
        """Lease a claim's taken jobs, one deadline for all; returns each job's JSON object
        for the response (its stored record with the lease fields) and its deliveries."""
        deliveries, leases, heap = self.deliveries, self.leases, self._deadlines
        fragments: list[bytes] = []
        counts: list[int] = []
        for job, lease_id in zip(jobs, lease_ids, strict=True):
            seq = job.seq
            n = deliveries.get(seq, 0) + 1
            deliveries[seq] = n
            leases[seq] = Lease(node, lease_id, deadline)
            heapq.heappush(heap, (deadline, seq, lease_id))
            frag = job.seg.render(job.idx, 1, _NO_BUDGET, None, _RENDER_ALL)[0]
            fragments.append(
                b'%b,"lease_id":"%s","deadline":%d,"deliveries":%d}'
                % (frag[:-1], lease_id.encode(), deadline, n)
            )
            counts.append(n)
        return fragments, counts

    def give_back(self, seqs: Iterable[int]) -> None:
        """Return jobs that could not be dead-lettered to the freelist (deliveries kept)."""
        for seq in seqs:
            if seq in self.dead_lettering:
                self.dead_lettering.discard(seq)
                self._make_free(seq)

    # -- holders -------------------------------------------------------------------------

    def held(self, seq: int, node: str, lease_id: str | None) -> Lease | None:
        """The lease on ``seq`` if ``node`` holds it (and ``lease_id`` matches, when given)."""
        lease = self.leases.get(seq)
        if lease is None or lease.node != node:
            return None
        if lease_id is not None and lease.lease_id != lease_id:
            return None
        return lease

    def release(self, seq: int, available_at: int, now: int) -> None:
        """Drop the lease on ``seq``; the job is claimable again at ``available_at``."""
        if self.leases.pop(seq, None) is None:
            return
        if available_at <= now:
            self._make_free(seq)
        else:
            self.delayed[seq] = available_at
            heapq.heappush(self._delays, (available_at, seq))

    def extend(self, seq: int, deadline: int) -> None:
        lease = self.leases[seq]
        lease.deadline = deadline
        heapq.heappush(self._deadlines, (deadline, seq, lease.lease_id))

    # -- durable leases: snapshot and replay (rule 7) --------------------------------------

    def snapshot(self, durable: bool) -> dict[str, Any]:
        """The manifest entry: the counter always; the whole projection if ``durable``."""
        out: dict[str, Any] = {"dead_lettered": self.dead_lettered}
        if not durable:
            return out
        jobs: list[list[Any]] = []
        for seq, deliveries in self.deliveries.items():
            lease = self.leases.get(seq)
            if lease is not None:
                jobs.append([seq, deliveries, "L", lease.node, lease.lease_id, lease.deadline])
            elif seq in self.delayed:
                jobs.append([seq, deliveries, "D", self.delayed[seq]])
            else:  # FREE, or DEAD_LETTERING (not finished: claimable again after a restart)
                jobs.append([seq, deliveries, "F"])
        out["cursor"] = self.cursor
        out["jobs"] = jobs
        return out

    def load(self, section: dict[str, Any], durable: bool) -> None:
        """Start from a manifest entry (before the logged events are applied)."""
        self.dead_lettered = int(section.get("dead_lettered", 0))
        if not durable or "jobs" not in section:
            return
        self.cursor = int(section.get("cursor", 0))
        for job in section["jobs"]:
            seq, deliveries, kind = int(job[0]), int(job[1]), job[2]
            self.deliveries[seq] = deliveries
            if kind == "L":
                self.leases[seq] = Lease(str(job[3]), str(job[4]), int(job[5]))
            elif kind == "D":
                self.delayed[seq] = int(job[3])
            else:
                self._make_free(seq)

    def apply_event(self, kind: int, body: list[Any]) -> None:
        """Replay one logged lifecycle event (``body`` without the topic id)."""
        if kind == CLAIMED:
            node = str(body[0])
            for seq, deliveries, deadline, lease_id in body[1]:
                self.free.discard(seq)
                self.delayed.pop(seq, None)
                self.dead_lettering.discard(seq)
                self.deliveries[seq] = int(deliveries)
                self.leases[seq] = Lease(node, str(lease_id), int(deadline))
                self.cursor = max(self.cursor, int(seq))
        elif kind == ACKED:
            for seq in body[0]:
                self.untrack(int(seq))
        elif kind == RELEASED:
            available_at = int(body[0])
            for seq in body[1]:
                if self.leases.pop(int(seq), None) is not None:
                    self.delayed[int(seq)] = available_at  # refresh frees it when due
        elif kind == EXTENDED:
            for seq, lease_id, deadline in body[0]:
                lease = self.leases.get(int(seq))
                if lease is not None and lease.lease_id == lease_id:
                    lease.deadline = int(deadline)
        elif kind == DEAD_LETTERED:
            for seq in body[0]:
                self.untrack(int(seq))
            self.dead_lettered += len(body[0])

    def finish_restore(self) -> None:
        """After loading and replaying: keep only live jobs, make every live seq <= cursor
        tracked (a job delivered while leases were not durable comes back FREE), and
        rebuild the heaps and the freelist order."""
        log = self.log
        self._drop_dead()
        schedule = self.schedule
        tracked = self.deliveries
        schedule.rebuild(lambda seq: seq not in tracked, self.cursor)
        for seq in list(_live_seqs(log, self.cursor)):
            if seq not in self.deliveries and seq not in schedule.pending:
                self.deliveries[seq] = 0
                self.free.add(seq)
        self._free_order = deque(sorted(self.free))
        self._deadlines = [(ls.deadline, seq, ls.lease_id) for seq, ls in self.leases.items()]
        heapq.heapify(self._deadlines)
        self._delays = [(at, seq) for seq, at in self.delayed.items()]
        heapq.heapify(self._delays)
        self._seen = (log.head, log.count)


# -- helpers ------------------------------------------------------------------------------


def _is_live(log: TopicLog, seq: int) -> bool:
    if seq < log.earliest or seq > log.head:
        return False
    loc = log.locate(seq)
    return loc is not None and log.segments[loc[0]].is_live(loc[1])


def _live_seqs(log: TopicLog, last: int) -> Iterator[int]:
    """Live seqs from ``earliest`` up to ``last`` inclusive."""
    for seg in list(log.segments):
        if seg.base_seq > last:
            return
        idx = seg.first_live(0)
        while idx < seg.count and seg.base_seq + idx <= last:
            yield seg.base_seq + idx
            idx = seg.first_live(idx + 1)


def stamp_dead_letter_meta(meta: bytes | None, source: str, deliveries: int, seq: int) -> bytes:
    """A job's ``meta`` with the §10.6 trace keys appended (the original bytes are kept
    verbatim; the stamps come last, so a reader that keeps the last of duplicate keys
    sees these even when the job was dead-lettered before)."""
    stamps = b'"$dead_letter_from":%s,"$dead_letter_deliveries":%d,"$dead_letter_src_seq":%d' % (
        ujson.dumps(source).encode(),
        deliveries,
        seq,
    )
    if meta is None:
        return ServerMeta(b"{" + stamps + b"}")
    body = bytes(meta).strip()
    inner = body[1:-1].strip()
    if not inner:
        return ServerMeta(b"{" + stamps + b"}")
    return ServerMeta(b"{" + inner + b"," + stamps + b"}")
