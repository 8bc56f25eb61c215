"""Lease state of queue topics: the projection of each queue's leases log (contract §10).

Role: for one queue topic instance (a ``TopicLog`` of type "queue"), say which jobs are
claimable, who holds which lease until when, how often each job was delivered, and hand
jobs out. Everything here is synchronous and runs on the engine's trio thread between
awaits, so every method is atomic; the queue endpoints (``queues/ops.py``) do the
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
4. Expiry is lazy: ``refresh(now)`` moves every lease whose deadline is past
   (``now > deadline``) and every delay that has elapsed (``now >= available_at``) to the
   freelist; the heaps hold (time, seq, token) entries that are checked against the live
   state when popped, so an extended or released lease leaves only a stale entry behind.
   The one timer is the caller's: while a job is leased on its last allowed delivery,
   ``_queue_ops`` sleeps until that lease's deadline (``last_try_deadline``) and refreshes.
5. So ``ready = count - in_flight - delayed - dead_lettering - scheduled`` and
   ``in_flight = len(leases)`` are exact after ``refresh``; ``backoff = delayed``.
9. Eager dead letters: a job that leaves its lease (nack, expiry, release) having been
   delivered ``max_deliveries`` times, on a queue with a ``dead_letter``, goes straight to
   DEAD_LETTERING and onto ``doomed`` (never to the freelist), and the caller copies it
   out at once (``take_doomed``). So a worker that drains the queue finishes after the
   dead letter exists, not before. ``pick`` still checks the freelist, for jobs whose
   copy failed (``give_back``) or whose ``max_deliveries`` was lowered.
6. ``Queues`` (``queues/store.py``) holds every queue topic's projection by topic id and is the store extension
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
from collections import deque
from collections.abc import Callable, Iterable, Iterator

import trio

from .._core import RENDER_DATA, RENDER_META, RENDER_TAGS
from ..log.topic_log import TopicLog
from .claims import Cohort, Taken
from .jobs import DedupeKeys, Schedule, Stamps, scan_log
from .leases import (
    ACKED,
    CLAIMED,
    DEAD_LETTERED,
    ENTRY_TYPES,
    EXTENDED,
    RELEASED,
    DurableLeases,
    Lease,
    is_live,
    new_lease_ids,
)

__all__ = [
    "ACKED",
    "CLAIMED",
    "DEAD_LETTERED",
    "ENTRY_TYPES",
    "EXTENDED",
    "RELEASED",
    "Lease",
    "QueueState",
    "new_lease_ids",
]


log_ = logging.getLogger("topics.queue")

_RENDER_ALL = RENDER_DATA | RENDER_META | RENDER_TAGS
_NO_BUDGET = 1 << 62


class QueueState(DurableLeases):
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
        # DEAD_LETTERING jobs no copy is under way for yet (rule 9), and the jobs leased
        # on their last delivery, whose expiry the caller's timer watches (a subset of
        # ``leases``: every way a lease ends takes its job out).
        self.doomed: list[int] = []
        self.last_tries: set[int] = set()
        self.reaping = False
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
        # its bound, its listener's ``changed``). Waking a task per delivered batch (the
        # scheduler round trip, its cancel scopes) cost a /work stream about as much as
        # leasing and framing the jobs, so a frontend that can write without blocking is
        # told synchronously instead (topics/listener_types.py), from whatever changed the
        # queue (an ack, an append's relay, expiry).
        self.listeners: dict[object, tuple[str, bool, Callable[[], bool]]] = {}

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
    def backoff(self) -> int:
        """Nacked with a delay that has not elapsed yet: counted in neither ready nor
        in_flight, so a job waiting out its backoff is visible somewhere (rule 5)."""
        return len(self.delayed)

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
        if self.listeners:
            self._tell(None, everyone=True)

    def wake_node(self, node: str) -> None:
        """Leases of ``node`` ended (ack, nack, release): wake the claimers and the full
        sessions of that node (no other session's in-flight count changed)."""
        if self.lot:
            self.lot.unpark_all()
        lot = self.full.get(node)
        if lot:
            lot.unpark_all()
        if self.listeners:
            self._tell(node)

    def wake_claimers(self) -> None:
        """Jobs were appended: only waiters below their bound can use them."""
        if self.lot:
            self.lot.unpark_all()
        if self.listeners:
            self._tell(None)

    def _tell(self, node: str | None, everyone: bool = False) -> None:
        """Tell the task-less waiters this change concerns (``listeners``). Each is taken
        off before it is told (it polls again if it still waits), so a listener that
        changes the queue is never told of its own change."""
        listeners = self.listeners
        due = [
            key
            for key, (owner, full, _) in listeners.items()
            if everyone or not full or owner == node
        ]
        for key in due:
            entry = listeners.pop(key, None)
            if entry is not None:
                try:
                    entry[2]()
                except Exception:  # a frontend's bug must not fail the ack that woke it
                    log_.exception("a queue waiter's listener failed")

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
                self.last_tries.discard(seq)
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
        dead = [seq for seq in self.deliveries if not is_live(log, seq)]
        for seq in dead:
            self.untrack(seq)
        pending = self.schedule.pending
        if pending:  # a deleted scheduled job must stop counting against ready
            for seq in [seq for seq in pending if not is_live(log, seq)]:
                del pending[seq]
        return bool(dead)

    def _compact_deadlines(self) -> None:
        self._deadlines = [(ls.deadline, seq, ls.lease_id) for seq, ls in self.leases.items()]
        heapq.heapify(self._deadlines)

    def dead_letter_after(self) -> int:
        """Deliveries after which a job is dead-lettered (0: never), read from the live
        config so a PUT that changes it applies to the next job that leaves a lease."""
        cfg = self.log.config
        return cfg.max_deliveries if cfg.dead_letter is not None else 0

    def _make_free(self, seq: int) -> None:
        after = self.dead_letter_after()
        if after and self.deliveries[seq] >= after:  # rule 9: out now, not at the next claim
            self.dead_lettering.add(seq)
            self.doomed.append(seq)
            return
        self.free.add(seq)
        self._free_order.append(seq)

    def take_doomed(self) -> list[int]:
        """The jobs waiting for their dead-letter copy (rule 9); the caller writes them."""
        if not self.doomed:
            return []
        out = [seq for seq in self.doomed if seq in self.dead_lettering]
        self.doomed = []
        return out

    def last_try_deadline(self) -> int | None:
        """The earliest deadline of a lease held on a job's last allowed delivery (its
        expiry dead-letters the job), forgetting the jobs that left their lease."""
        best: int | None = None
        leases = self.leases
        for seq in list(self.last_tries):
            lease = leases.get(seq)
            if lease is None:
                self.last_tries.discard(seq)
            elif best is None or lease.deadline < best:
                best = lease.deadline
        return best

    def forget_leased(self, seqs: list[int]) -> None:
        """:meth:`untrack` for jobs known to be LEASED (an ack of held leases): a job is
        in one state only (rule 1), so the other states need no look."""
        deliveries, leases = self.deliveries, self.leases
        for seq in seqs:
            del deliveries[seq]
            del leases[seq]
        if self.last_tries:  # (bounded by the leases: a busy queue must not grow it)
            self.last_tries.difference_update(seqs)

    def untrack(self, seq: int) -> None:
        """Forget a job (acked, dead-lettered or deleted): it leaves every state."""
        if self.deliveries.pop(seq, None) is None:
            return
        self.leases.pop(seq, None)
        self.last_tries.discard(seq)
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
        return seq not in self.deliveries and is_live(self.log, seq)

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
        return is_live(self.log, seq)

    def unclaimed(self, seq: int) -> bool:
        """Whether ``seq`` is a live job never handed out (fresh, pending or due: by
        rules 2 and 8 that is every live untracked job)."""
        return seq not in self.deliveries and is_live(self.log, seq)

    def lease_all(
        self, jobs: list[Taken], node: str, lease_ids: list[str], deadline: int
    ) -> tuple[list[bytes], list[int]]:
        """Lease a claim's taken jobs, one deadline for all; returns each job's JSON object
        for the response (its stored record with the lease fields) and its deliveries."""
        deliveries, leases, heap = self.deliveries, self.leases, self._deadlines
        fragments: list[bytes] = []
        counts: list[int] = []
        last = self.dead_letter_after()
        for job, lease_id in zip(jobs, lease_ids, strict=True):
            seq = job.seq
            n = deliveries.get(seq, 0) + 1
            deliveries[seq] = n
            if last and n >= last:
                self.last_tries.add(seq)
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
        """Return jobs that could not be dead-lettered to the freelist (deliveries kept;
        the next claim tries again, so a failing target is not retried in a loop)."""
        for seq in seqs:
            if seq in self.dead_lettering:
                self.dead_lettering.discard(seq)
                self.free.add(seq)
                self._free_order.append(seq)

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
        """Drop the lease on ``seq``; the job is claimable again at ``available_at`` (or,
        on its last allowed delivery, goes to its dead letter now: rule 9)."""
        if self.leases.pop(seq, None) is None:
            return
        self.last_tries.discard(seq)
        after = self.dead_letter_after()
        if available_at <= now or (after and self.deliveries[seq] >= after):
            self._make_free(seq)
        else:
            self.delayed[seq] = available_at
            heapq.heappush(self._delays, (available_at, seq))

    def extend(self, seq: int, deadline: int) -> None:
        lease = self.leases[seq]
        lease.deadline = deadline
        heapq.heappush(self._deadlines, (deadline, seq, lease.lease_id))
