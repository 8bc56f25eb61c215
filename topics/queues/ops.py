"""Queue endpoints behind the Engine facade (contract §10) and their engine hooks.

The Engine owns one :class:`QueueOps`, built on its appender, and delegates its §10
methods to it; the lease projection itself lives in ``queues/state.py``, a /work session
(and the append relay) in ``queues/work.py``. Hooks the Engine calls:
``start`` (after recovery), ``on_topic_deleted``, ``queues`` (the store extension that
persists durable leases) and ``queue_counters`` (§10.7).

Rules:
1. Arguments are checked before the topic is resolved; then an absent topic is
   ``topic_not_found`` (never created) and a log topic is ``not_a_queue``.
2. A claim pass (``serve``) is one synchronous step: refresh the projection, pick jobs,
   lease them, log the CLAIMED events. With ``claim_jitter_ms > 0`` the claimers that
   arrive within the window form a cohort, and the first of them to wake at the window's
   end serves the whole cohort in one pass, dividing the jobs in proportion to each
   claimer's ``max`` (largest remainder) and dealing them round-robin.
3. Lease events are logged in the same synchronous step as the change they describe
   (so log order is change order) and only for ``leases_durable`` queues; the caller awaits
   the WAL ticket only for the fsync class. Acks delete through ``Appender.delete_seqs``
   (the permanent delete of §5), so an ack is as durable as the topic.
4. A claim whose caller is cancelled after its jobs were leased (the client went away)
   releases them at once instead of leaving them to expire; likewise a /work session
   releases what it delivered and still holds when it closes (§10.8).
5. Dead-lettering (§10.6) happens as soon as a job leaves its lease on its last allowed
   delivery (``_queue`` rule 9): a nack awaits it before answering, a claim after its
   pass; an expiry noticed by a synchronous look (a counter read) or a release starts it
   as a task. While such a lease is held, one timer task per queue sleeps until its
   deadline, read from the engine's clock, and looks: a queue nobody touches still moves
   the job at its expiry. The copy is shielded from cancellation: the jobs are appended
   to the dead-letter topic through ``Engine.write`` (so it is created, reserved and
   logged like any write) and then deleted from the queue like an ack. If the write fails
   (e.g. the dead-letter topic is full) the jobs go back to the freelist.
6. Nothing here polls: waiters park on the queue's ParkingLot, which queue changes unpark
   and a relay task unparks on appends; a waiter also wakes when the next lease deadline
   or nack delay is due, the only clock-driven change. A /work session served without a
   task (``WorkSession.poll``) leaves a listener instead (topics/listener_types.py), told
   synchronously by the same changes; ack and nack tell it after computing their
   answer's counts.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

from .. import _args
from .._names import check_topic_name
from ..config import LEASE_MS_RANGE
from ..errors import (
    BatchTooLargeError,
    InvalidRequestError,
    NotAQueueError,
    TopicNotFoundError,
)
from ..queue_types import AckResult, ClaimResult, ExtendResult, NackResult
from .claims import Claim, Cohort, deal, seq_of, split_held
from .dead_letters import DeadLetters
from .state import (
    ACKED,
    CLAIMED,
    EXTENDED,
    RELEASED,
    QueueState,
    new_lease_ids,
)
from .store import Queues, encode_event, leases_durable
from .work import WorkSession, relay_appends

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from .._persistence.appender import Appender
    from .._storage.wal import WalTicket
    from ..log.topic_log import TopicLog
    from ..types import WriteResult

    #: ``Engine.write`` as the queues call it (dead letters).
    WriteFn = Callable[..., Awaitable[WriteResult]]

__all__ = ["DELAY_MS_MAX", "QueueOps", "WorkSession"]

log_ = logging.getLogger("topics.queue")

#: nack ``delay_ms`` is clamped to [0, DELAY_MS_MAX] (§10.5).
DELAY_MS_MAX = 86_400_000


class QueueOps:
    """The §10 methods of :class:`topics.Engine`, which documents the public ones (see the
    module docstring)."""

    def __init__(self, appender: Appender, write: WriteFn) -> None:
        self._app = self.appender = appender
        self.clock = appender.clock
        self.limits = appender.limits
        # Engine.write, for dead letters (created, reserved and logged like any write).
        self.engine_write = write
        self.queues = Queues()
        self.dead = DeadLetters(self)

    # -- hooks -------------------------------------------------------------------------

    def start(self) -> None:
        """Adopt what recovery restored (the registry is final now); jobs that used up their
        deliveries go to their dead letter now, and leases held on a last delivery are
        watched, as they would have been without the restart (rule 5)."""
        self.queues.bind(self._app.registry)
        for q in list(self.queues.states.values()):
            self.dead.soon(q.log, q, q.take_doomed())
            if q.last_tries:
                self.dead.watch(q.log, q)

    def on_topic_deleted(self, log: TopicLog) -> None:
        """Forget the leases of a deleted queue topic and wake its waiters."""
        q = self.queues.states.pop(log.topic_id, None)
        if q is not None:
            q.wake()

    def queue_counters(self, log: TopicLog) -> dict[str, int] | None:
        """§10.7 counters of a queue topic (None for a log topic)."""
        if log.config.type != "queue":
            return None
        q = self.queue_state(log)
        return {
            "ready": q.ready,
            "in_flight": q.in_flight,
            "dead_lettered": q.dead_lettered,
            "scheduled": q.scheduled,
            "backoff": q.backoff,
        }

    # -- claim (§10.2) ---------------------------------------------------------------------

    async def claim(
        self, topic: str, *, node: str, max: int = 1, lease_ms: int | None = None
    ) -> ClaimResult:
        """Lease up to ``max`` claimable jobs to ``node`` (§10.2).

        Args:
            node: the worker's identity (required; at most ``max_node_bytes``).
            max: jobs wanted, clamped to ``limits.max_claim`` (fewer, even none, is normal).
            lease_ms: lease duration (default the topic's ``lease_ms``), clamped
                [100, 86400000].

        Returns: the jobs ascending by seq, each with its ``lease_id``, absolute
        ``deadline`` and ``deliveries``; and ``ready``, what is claimable afterwards.

        Raises: invalid_request, topic_not_found, not_a_queue.

        Example::

            res = await engine.claim("jobs", node="w1", max=16)
            for job in res.claimed: ...
            await engine.ack("jobs", node="w1", seqs=res.seqs, lease_ids=res.lease_ids)
        """
        name = check_topic_name(topic)
        who = self._node_arg(node)
        want = self._claim_max(max)
        lease = _lease_arg(lease_ms) if lease_ms is not None else None
        self._app.check_serving()
        await trio.lowlevel.checkpoint()  # every engine call is a trio checkpoint
        log = self.queue_log(name)
        q = self.queue_state(log, keep_doomed=True)  # the pass dead-letters them
        return await self.claim_jobs(log, q, who, want, lease)

    async def claim_jobs(
        self,
        log: TopicLog,
        q: QueueState,
        node: str,
        want: int,
        lease_ms: int | None,
        session: WorkSession | None = None,
    ) -> ClaimResult:
        claim = Claim(node, want, lease_ms if lease_ms is not None else log.config.lease_ms)
        jitter_ms = log.config.claim_jitter_ms
        if jitter_ms:
            dead = await self._join_cohort(log, q, claim, jitter_ms)
        else:
            dead = self.serve(log, q, [claim])
        delivered = False
        try:
            if dead:
                await self.dead.move(log, q, dead)
            fsync_ms = 0.0
            if claim.ticket is not None and log.config.durability == "fsync":
                fsync_ms = (await self._app.wait(claim.ticket))[1]
            q.refresh(self.clock.now_ms())
            result = ClaimResult(
                log.name,
                tuple(claim.fragments),
                tuple(claim.seqs),
                tuple(claim.lease_ids),
                q.ready,
                fsync_ms,
            )
            if session is not None:
                session.held.update(zip(claim.seqs, claim.lease_ids, strict=True))
            delivered = True
            return result
        finally:
            if not delivered:  # rule 4: cancelled (or failed) after leasing
                self.release_leases(log, q, claim.node, claim.seqs, claim.lease_ids)

    async def _join_cohort(
        self, log: TopicLog, q: QueueState, claim: Claim, jitter_ms: int
    ) -> list[int]:
        """Wait out the coalescing window; the first member awake serves the cohort (rule 2)."""
        cohort = q.cohort
        if cohort is None:
            cohort = q.cohort = Cohort(trio.current_time() + jitter_ms / 1000)
        cohort.members.append(claim)
        woke = False
        try:
            await trio.sleep_until(cohort.deadline)
            woke = True
        finally:
            if not woke:
                if cohort.served:
                    self.release_leases(log, q, claim.node, claim.seqs, claim.lease_ids)
                else:
                    cohort.members.remove(claim)
        if self._app.registry.get(log.name) is not log:  # deleted (maybe recreated) meanwhile
            raise TopicNotFoundError.for_topic(log.name)
        if cohort.served:
            return []
        cohort.served = True
        if q.cohort is cohort:
            q.cohort = None
        return self.serve(log, q, cohort.members)

    def serve(self, log: TopicLog, q: QueueState, claims: list[Claim]) -> list[int]:
        """One claim pass (rule 2). Returns the seqs to dead-letter."""
        now = self.clock.now_ms()
        q.refresh(now)
        taken, dead = q.pick(sum(c.want for c in claims), q.dead_letter_after())
        dead += q.take_doomed()  # expired on their last delivery just now (rule 5)
        shares = [taken] if len(claims) == 1 else deal(taken, [c.want for c in claims])
        logged = self._app.store is not None and leases_durable(log)
        for claim, jobs in zip(claims, shares, strict=True):
            if not jobs:
                continue
            if len(jobs) > 1:
                jobs.sort(key=seq_of)
            deadline = now + claim.lease_ms
            lease_ids = new_lease_ids(len(jobs))
            fragments, deliveries = q.lease_all(jobs, claim.node, lease_ids, deadline)
            seqs = [job.seq for job in jobs]
            claim.fragments.extend(fragments)
            claim.seqs.extend(seqs)
            claim.lease_ids.extend(lease_ids)
            if logged:
                events = [
                    [seq, n, deadline, lease_id]
                    for seq, n, lease_id in zip(seqs, deliveries, lease_ids, strict=True)
                ]
                claim.ticket = self.log_lease(log, CLAIMED, claim.node, events)
        if q.last_tries:
            self.dead.watch(log, q)
        return dead

    # -- ack / nack / extend (§10.4-§10.6) ----------------------------------------------------

    async def ack(
        self,
        topic: str,
        *,
        node: str,
        seqs: Sequence[int],
        lease_ids: Sequence[str] | None = None,
    ) -> AckResult:
        """Complete jobs held by ``node``: each is permanently deleted (§10.4).

        Seqs not currently leased to ``node`` (or whose lease id does not match, when
        ``lease_ids`` is given: one per seq) are skipped and reported; acking is idempotent.
        On an fsync-class queue the delete is synced before this returns.

        Raises: invalid_request, batch_too_large, topic_not_found, not_a_queue.
        """
        name = check_topic_name(topic)
        who = self._node_arg(node)
        refs = self._lease_refs(seqs, lease_ids)
        self._app.check_serving()
        await trio.lowlevel.checkpoint()  # every engine call is a trio checkpoint
        log = self.queue_log(name)
        q = self.queue_state(log)
        acked, skipped = split_held(q.leases, who, refs)
        ticket: WalTicket | None = None
        if acked:
            q.forget_leased(acked)
            _, ticket = self._app.delete_seqs(log, acked)
            lease_ticket = self.log_lease(log, ACKED, acked)
            if lease_ticket is not None:  # the later entry: syncing it syncs the delete too
                ticket = lease_ticket
            q.mark()
        if ticket is not None and log.config.durability == "fsync":
            q.wake_node(who)  # a /work session at its in-flight bound may take more now
            fsync_ms = (await self._app.wait(ticket))[1]
            return AckResult(name, len(acked), skipped, q.ready, q.in_flight, fsync_ms)
        result = AckResult(name, len(acked), skipped, q.ready, q.in_flight, 0.0)
        if acked:
            # After the counts: a task-less /work session (``WorkSession.poll``) refills
            # right here, and the answer reports the queue as the ack left it, as when
            # the session's task refilled after this returned.
            q.wake_node(who)
        return result

    async def nack(
        self,
        topic: str,
        *,
        node: str,
        seqs: Sequence[int],
        delay_ms: int = 0,
        lease_ids: Sequence[str] | None = None,
    ) -> NackResult:
        """Release leases held by ``node``; each job is claimable again after ``delay_ms``
        (clamped [0, 86400000]; until then it counts as neither ready nor in flight) (§10.5).

        Raises: invalid_request, batch_too_large, topic_not_found, not_a_queue.
        """
        name = check_topic_name(topic)
        who = self._node_arg(node)
        delay = min(_args.u64("delay_ms", delay_ms), DELAY_MS_MAX)
        refs = self._lease_refs(seqs, lease_ids)
        self._app.check_serving()
        await trio.lowlevel.checkpoint()  # every engine call is a trio checkpoint
        log = self.queue_log(name)
        q = self.queue_state(log, keep_doomed=True)  # taken with the nack's own below
        held, skipped = split_held(q.leases, who, refs)
        now = self.clock.now_ms()
        for seq in held:
            q.release(seq, now + delay, now)
        doomed = q.take_doomed()  # on their last delivery: no backoff, out now (rule 5)
        ticket = None
        if doomed:  # logged as released now, so a restart before the copy sends them too
            ticket = self.log_lease(log, RELEASED, now, doomed)
        rest = [seq for seq in held if seq not in doomed] if doomed else held
        if rest:
            released = self.log_lease(log, RELEASED, now + delay, rest)
            ticket = released if released is not None else ticket
        if doomed:
            await self.dead.move(log, q, doomed)
        if ticket is not None and log.config.durability == "fsync":
            q.wake_node(who)
            fsync_ms = (await self._app.wait(ticket))[1]
            return NackResult(name, len(held), skipped, q.ready, q.in_flight, fsync_ms)
        result = NackResult(name, len(held), skipped, q.ready, q.in_flight, 0.0)
        if held:
            q.wake_node(who)  # after the counts, as in ack
        return result

    async def extend(
        self,
        topic: str,
        *,
        node: str,
        seqs: Sequence[int],
        lease_ms: int,
        lease_ids: Sequence[str] | None = None,
    ) -> ExtendResult:
        """Set the deadline of leases held by ``node`` to now + ``lease_ms`` (§10.6).

        Expired (reclaimed) or foreign leases are skipped; deliveries do not change.

        Raises: invalid_request (also for a missing lease_ms), batch_too_large,
        topic_not_found, not_a_queue.
        """
        name = check_topic_name(topic)
        who = self._node_arg(node)
        if lease_ms is None:
            raise InvalidRequestError.for_field("lease_ms", "is required (the new lease length)")
        lease = _lease_arg(lease_ms)
        refs = self._lease_refs(seqs, lease_ids)
        self._app.check_serving()
        await trio.lowlevel.checkpoint()  # every engine call is a trio checkpoint
        log = self.queue_log(name)
        q = self.queue_state(log)
        held, skipped = split_held(q.leases, who, refs)
        deadline = self.clock.now_ms() + lease
        deadlines: dict[int, int] = {}
        events = []
        for seq in held:
            q.extend(seq, deadline)
            deadlines[seq] = deadline
            events.append([seq, q.leases[seq].lease_id, deadline])
        ticket = self.log_lease(log, EXTENDED, events) if held else None
        fsync_ms = 0.0
        if ticket is not None and log.config.durability == "fsync":
            fsync_ms = (await self._app.wait(ticket))[1]
        return ExtendResult(name, len(held), skipped, deadlines, fsync_ms)

    # -- /work sessions (§10.8) ---------------------------------------------------------------

    @asynccontextmanager
    async def open_work_session(
        self, topic: str, *, node: str, max: int = 1, lease_ms: int | None = None
    ) -> AsyncIterator[WorkSession]:
        """A PUSH-mode delivery session: keeps up to ``max`` jobs leased to this session.

        ``await session.next_jobs()`` waits until it can lease at least one more job
        without exceeding ``max`` in flight on this session, and returns them (a claim that
        joins the coalescing window like any other). Jobs are acked, nacked and extended
        through the ordinary methods. When the block exits (the connection closed, however),
        every lease delivered on this session and still held is released at once.

        Raises (at open): invalid_request, topic_not_found, not_a_queue. ``next_jobs``
        raises topic_not_found / not_a_queue if the topic is deleted or stops being a queue.
        """
        name = check_topic_name(topic)
        who = self._node_arg(node)
        want = self._claim_max(max)
        lease = _lease_arg(lease_ms) if lease_ms is not None else None
        self._app.check_serving()
        await trio.lowlevel.checkpoint()  # every engine call is a trio checkpoint
        log = self.queue_log(name)
        session = WorkSession(self, log, who, want, lease)
        try:
            yield session
        finally:
            session._close()

    async def wait_claimable(self, topic: str, *, timeout_s: float = math.inf) -> bool:
        """Wait until the queue may have claimable jobs (or timeout); True if it has now.

        Wakes on appends, nacks, releases and acks, and when a lease or nack delay is due.
        Used by the worker helper for its idle wait.
        """
        self._app.check_ready()
        log = self.queue_log(check_topic_name(topic))
        q = self.queue_state(log)
        if q.ready > 0:
            return True
        await self.park_queue(log, q, timeout_s)
        if self._app.registry.get(log.name) is not log:
            return False
        return self.queue_state(log).ready > 0

    async def park_queue(
        self, log: TopicLog, q: QueueState, timeout_s: float, full_node: str | None = None
    ) -> None:
        """Park until the queue changes, an append lands, or the next expiry is due (rule 6).

        ``full_node``: the caller is a /work session of that node at its in-flight bound; it
        waits for one of the node's leases to end (or expire, or for a change that wakes
        everyone), not for appends.
        """
        due = q.next_change_ms()
        if due is not None:
            timeout_s = min(timeout_s, max(due - self.clock.now_ms(), 0) / 1000)
        if full_node is not None:
            lot = q.full.get(full_node)
            if lot is None:
                lot = q.full[full_node] = trio.lowlevel.ParkingLot()
            try:
                with trio.move_on_after(timeout_s):
                    await lot.park()
            finally:
                if not lot and q.full.get(full_node) is lot:
                    del q.full[full_node]
            return
        if not q.relay_running and self._app.nursery is not None:
            q.relay_running = True
            self._app.nursery.start_soon(relay_appends, log, q)
        q.waiting += 1
        try:
            with trio.move_on_after(timeout_s):
                await q.lot.park()
        finally:
            q.waiting -= 1

    # -- helpers -------------------------------------------------------------------------------

    def queue_log(self, name: str) -> TopicLog:
        log = self._app.live_topic(name)
        if log.config.type != "queue":
            raise NotAQueueError(
                f'topic "{name}" is a {log.config.type}, not a queue; '
                'create queues with PUT {"type": "queue"}',
                detail={"topic": name, "type": log.config.type},
            )
        return log

    def queue_state(self, log: TopicLog, keep_doomed: bool = False) -> QueueState:
        """The topic's projection, refreshed to now (expiry applied, waiters woken). Jobs
        the refresh found expired on their last delivery are dead-lettered from a task,
        unless ``keep_doomed``: the caller takes them itself and awaits the copy."""
        q = self.queues.state(log)
        if q.refresh(self.clock.now_ms()):
            q.wake()
        if q.doomed and not keep_doomed:
            self.dead.soon(log, q, q.take_doomed())
        return q

    def _node_arg(self, node: object) -> str:
        value = _args.opt_str("node", node, self.limits.max_node_bytes)
        if value is None:
            raise InvalidRequestError.for_field("node", "is required (the worker's identity)")
        return value

    def _claim_max(self, value: object) -> int:
        n = _args.u64("max", value)
        if n == 0:
            raise InvalidRequestError.for_field("max", "must be at least 1")
        return min(n, self.limits.max_claim)

    def _lease_refs(self, seqs: object, lease_ids: object) -> list[tuple[int, str | None]]:
        """(seq, lease id or None) pairs from an ack/nack/extend request."""
        if seqs is None:
            raise InvalidRequestError.for_field("seqs", "is required (an array of job seqs)")
        if not isinstance(seqs, list | tuple):
            raise InvalidRequestError.for_field("seqs", "must be an array of job seqs")
        cap = self.limits.max_claim
        if len(seqs) > cap:
            raise BatchTooLargeError(
                f"{len(seqs)} seqs in one request; the limit is {cap} (TOPICS_MAX_CLAIM)",
                detail={"field": "seqs", "count": len(seqs), "max": cap},
            )
        if not seqs:
            raise InvalidRequestError.for_field("seqs", "must hold at least one seq")
        checked = list(seqs)
        for i, seq in enumerate(checked):
            if type(seq) is not int or not 0 <= seq <= _args.U64_MAX:
                _args.u64(f"seqs[{i}]", seq)  # raises invalid_request naming the entry
        if lease_ids is None:
            return [(s, None) for s in checked]
        if not isinstance(lease_ids, list | tuple) or len(lease_ids) != len(checked):
            raise InvalidRequestError.for_field(
                "lease_ids", f"must be an array of {len(checked)} lease ids (one per seq)"
            )
        for i, lease_id in enumerate(lease_ids):
            if not isinstance(lease_id, str):
                raise InvalidRequestError.for_field(f"lease_ids[{i}]", "must be a string")
        return list(zip(checked, lease_ids, strict=True))

    def log_lease(self, log: TopicLog, kind: int, *body: object) -> WalTicket | None:
        """Log one lease event if the queue's leases are durable (rule 3)."""
        store = self._app.store
        cfg = log.config
        if store is None or not cfg.leases_durable or cfg.durability == "ephemeral":
            return None
        payload = encode_event(log.topic_id, *body)
        return store.log_extension(kind, payload, sync=cfg.durability == "fsync")

    def release_leases(
        self, log: TopicLog, q: QueueState, node: str, seqs: Iterable[int], lease_ids: Iterable[str]
    ) -> None:
        """Release, at once, the given leases that are still current (rule 4)."""
        if self.queues.states.get(log.topic_id) is not q:
            return  # the topic is gone
        now = self.clock.now_ms()
        held = [
            seq
            for seq, lease_id in zip(seqs, lease_ids, strict=True)
            if q.held(seq, node, lease_id) is not None
        ]
        for seq in held:
            q.release(seq, now, now)
        if held:
            self.log_lease(log, RELEASED, now, held)
            self.dead.soon(log, q, q.take_doomed())
            q.wake_node(node)


# -- internals ----------------------------------------------------------------------------------


def _lease_arg(value: object, field: str = "lease_ms") -> int:
    n = _args.u64(field, value)
    return min(max(n, LEASE_MS_RANGE[0]), LEASE_MS_RANGE[1])
