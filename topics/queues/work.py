"""A /work connection's PUSH delivery (§10.8): :class:`WorkSession`, and the relay that
wakes a queue's waiters on appends (``_queue_ops`` rule 6).

``QueueOps.open_work_session`` opens a session and closes it when the connection ends;
the session claims through the queue endpoints' own passes (``QueueOps.claim_jobs``,
``serve``, ``park_queue``, ``release_leases``), so it leases, logs and wakes exactly as a
claim does, and releases what it still holds when it closes (``_queue_ops`` rule 4).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

import trio

from ..queue_types import ClaimResult
from .claims import Claim
from .store import leases_durable

if TYPE_CHECKING:
    from .._clock import Clock
    from .._persistence.appender import Appender
    from ..listener_types import ChangeListener
    from ..log.topic_log import TopicLog
    from .dead_letters import DeadLetters
    from .state import QueueState
    from .store import Queues

__all__ = ["WorkSession", "relay_appends"]


class _QueueOps(Protocol):
    """What a session uses of ``QueueOps`` (queues/ops.py), which opens it. A protocol, not
    an import, keeps this module below ops.py, which builds sessions and starts relays."""

    @property
    def appender(self) -> Appender: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def queues(self) -> Queues: ...
    @property
    def dead(self) -> DeadLetters: ...
    def queue_log(self, name: str) -> TopicLog: ...
    def queue_state(self, log: TopicLog, keep_doomed: bool = False) -> QueueState: ...
    def serve(self, log: TopicLog, q: QueueState, claims: list[Claim]) -> list[int]: ...
    async def claim_jobs(
        self,
        log: TopicLog,
        q: QueueState,
        node: str,
        want: int,
        lease_ms: int | None,
        session: WorkSession | None = None,
    ) -> ClaimResult: ...
    async def park_queue(
        self, log: TopicLog, q: QueueState, timeout_s: float, full_node: str | None = None
    ) -> None: ...
    def release_leases(
        self, log: TopicLog, q: QueueState, node: str, seqs: Iterable[int], lease_ids: Iterable[str]
    ) -> None: ...


class WorkSession:
    """One /work connection's delivery state (see :meth:`QueueOps.open_work_session`).

    Attributes:
        node, max, lease_ms: as opened (``lease_ms`` None = the topic's default).
        held: seq -> lease id of the jobs delivered on this session and not yet known to
            be acked, released or expired.
    """

    def __init__(
        self, ops: _QueueOps, log: TopicLog, node: str, max_in_flight: int, lease_ms: int | None
    ) -> None:
        self._ops = ops
        self._log = log
        self.topic = log.name
        self.node = node
        self.max = max_in_flight
        self.lease_ms = lease_ms
        self.held: dict[int, str] = {}
        self._closed = False
        self._listening: QueueState | None = None  # where poll left its listener

    async def next_jobs(self) -> ClaimResult:
        """Wait until at least one job can be delivered within ``max`` in flight; lease
        and return them (never empty).

        Raises: topic_not_found / not_a_queue when the topic went away or changed type.
        """
        ops = self._ops
        retried = False
        while True:
            if self._closed:
                raise RuntimeError("this work session is closed")
            log = ops.queue_log(self.topic)
            if log is not self._log:  # deleted and recreated as a queue: a new instance
                self._log = log
                self.held.clear()
            q = ops.queue_state(log)
            self._prune(q)
            want = self.max - len(self.held)
            if want > 0 and q.ready > 0:
                result = await ops.claim_jobs(log, q, self.node, want, self.lease_ms, self)
                if result.count:
                    return result
                # Nothing was leased (all picked jobs were dead-lettered, or the cohort
                # took them). Jobs may have arrived while the claim awaited: look once
                # more before parking, but never loop on a dead letter that keeps failing.
                q = ops.queue_state(log)
                if not retried and q.ready > 0:
                    retried = True
                    continue
            retried = False
            await ops.park_queue(log, q, math.inf, self.node if want <= 0 else None)

    def poll(self, listener: ChangeListener) -> ClaimResult | None:
        """:meth:`next_jobs` for a caller without a task of its own: lease what can be
        delivered now (the result may be empty) and leave ``listener`` to be told
        (``changed``, synchronously and once) when the queue changes in a way that may let
        this session take more (as :meth:`next_jobs` would wake); it then calls ``poll``
        again (topics/listener_types.py).

        Returns None, leaving no listener, when that takes waiting (a coalescing window, a
        dead-letter write, durable leases to sync) or the topic was deleted or replaced:
        the caller then goes back to :meth:`next_jobs`, which raises or waits. Expiry is
        clock-driven: the caller also polls again at :meth:`next_change_ms`.
        """
        ops = self._ops
        self.detach()
        if self._closed:
            return None
        log = ops.appender.registry.get(self.topic)
        if log is not self._log:
            return None
        cfg = log.config
        if cfg.type != "queue":
            return None
        q = ops.queue_state(log)
        if (
            cfg.claim_jitter_ms
            or (cfg.dead_letter is not None and q.free)  # a freed job may be due to go
            or (cfg.durability == "fsync" and leases_durable(log))
        ):
            return None
        self._prune(q)
        want = self.max - len(self.held)
        if want > 0 and q.ready > 0:
            lease_ms = self.lease_ms if self.lease_ms is not None else cfg.lease_ms
            claim = Claim(self.node, want, lease_ms)
            # The freelist was checked above; what serve's own look found expired on its
            # last delivery goes out from a task.
            ops.dead.soon(log, q, ops.serve(log, q, [claim]))
            q.refresh(ops.clock.now_ms())
            seqs = tuple(claim.seqs)
            result = ClaimResult(
                log.name, tuple(claim.fragments), seqs, tuple(claim.lease_ids), q.ready
            )
            self.held.update(zip(seqs, claim.lease_ids, strict=True))
            want -= len(seqs)
        else:
            result = ClaimResult(log.name, (), (), (), q.ready)
        if ops.queues.states.get(log.topic_id) is q:
            q.listeners[self] = (self.node, want <= 0, listener.changed)
            self._listening = q
            if not q.relay_running and ops.appender.nursery is not None:
                q.relay_running = True
                ops.appender.nursery.start_soon(relay_appends, log, q)
        return result

    def detach(self) -> None:
        """Withdraw the listener :meth:`poll` left (if it was not told yet)."""
        q = self._listening
        if q is not None:
            self._listening = None
            q.listeners.pop(self, None)

    def next_change_ms(self) -> int | None:
        """The clock time (ms) of the queue's next lease expiry or nack delay, if any."""
        q = self._ops.queues.states.get(self._log.topic_id)
        return q.next_change_ms() if q is not None else None

    @property
    def in_flight(self) -> int:
        """Jobs delivered on this session and still leased."""
        q = self._ops.queues.states.get(self._log.topic_id)
        if q is not None:
            self._prune(q)
        return len(self.held)

    def _prune(self, q: QueueState) -> None:
        # (q.held inlined: this runs on every delivery, once per job in flight.)
        leases, node = q.leases, self.node
        gone = []
        for seq, lid in self.held.items():
            lease = leases.get(seq)
            if lease is None or lease.lease_id != lid or lease.node != node:
                gone.append(seq)
        for seq in gone:
            del self.held[seq]

    def _close(self) -> None:
        """Release every lease still held from this session (release-on-disconnect)."""
        self._closed = True
        self.detach()
        ops = self._ops
        q = ops.queues.states.get(self._log.topic_id)
        if q is not None and self.held:
            ops.release_leases(self._log, q, self.node, list(self.held), list(self.held.values()))
        self.held.clear()


async def relay_appends(log: TopicLog, q: QueueState) -> None:
    """Wake the queue's waiters on every append while any wait (rule 6). The relay hears
    of changes as every subsystem does (``TopicLog.listen``, _log rule 7) and acts once
    the publisher yields, so a burst of appends costs one pass."""
    appended = trio.lowlevel.ParkingLot()
    listener = appended.unpark_all
    log.listen(listener)
    try:
        q.wake_claimers()  # an append between the waiter's read and this task's start
        while (q.waiting or q.listeners) and not log.deleted:
            await appended.park()
            q.wake_claimers()
    finally:
        log.unlisten(listener)
        q.relay_running = False
