"""A queue worker: claim -> handle -> ack, with lease heartbeats and retry backoff (§10).

Works with the async :class:`topics.Engine` inside a trio program and with the
synchronous facade (``topics.open``)::

    async with topics.open_engine("./data") as engine:          # trio
        await topics.run_worker(engine, "jobs", "w1", handle, max=16)

    with topics.open("./data") as db:                            # plain threads
        topics.run_worker(db, "jobs", "w1", handle, max=16, until_empty=True)

Behaviour:

1. Claims up to ``max`` jobs at a time and calls ``handler(job)`` for each, in seq order.
   With the async engine the handler may be a plain function or a coroutine function (a
   blocking handler should hand its work to ``trio.to_thread``); with the sync facade it
   is a plain function, called on the worker's thread.
2. While a batch is being handled, every lease of the batch not yet resolved is extended
   every ``lease_ms / 3`` (the heartbeat), so a long job never loses its lease to expiry.
3. A handler that returns is a success: successes are acked together when the batch ends.
   A handler that raises ``Exception`` gets its job nacked at once with an exponential
   backoff delay, ``min(backoff_ms * 2 ** (deliveries - 1), max_backoff_ms)``.
4. Every ack, nack and extend sends the claim's ``lease_ids``, so a worker whose lease
   was lost (expired and re-claimed elsewhere) never completes someone else's delivery;
   such seqs come back ``skipped`` and are counted in ``WorkerStats.lost``.
5. When the queue has nothing to claim the worker waits for work without polling (the
   engine wakes it on appends, nacks and expiries). With ``until_empty=True`` it returns
   once a claim finds nothing and the queue holds no live job at all.
"""

from __future__ import annotations

import inspect
import math
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, overload

import trio

from .engine import Engine
from .frontends.inproc import SyncEngine
from .queue_types import AckResult, ClaimResult, Job, NackResult

__all__ = ["Handler", "Worker", "WorkerStats", "run_worker"]

Handler = Callable[[Job], object]

#: How long the sync worker waits for work before re-checking its stop flag.
SYNC_IDLE_WAIT_S = 0.5


@dataclass(slots=True)
class WorkerStats:
    """What a worker did: jobs claimed, acked, nacked (handler failures), lease
    extensions sent, and jobs whose lease was lost before they were resolved."""

    claimed: int = 0
    acked: int = 0
    nacked: int = 0
    extended: int = 0
    lost: int = 0


class Worker:
    """A claim/handle/ack loop for one node on one queue (see the module docstring).

    Args:
        engine: an async :class:`topics.Engine` (use :meth:`run` inside trio) or a
            :class:`topics.SyncEngine` (use :meth:`run_sync`).
        topic: the queue.
        node: this worker's identity (the lease holder).
        handler: called with each :class:`topics.Job`; raising means "retry later".
        max: jobs per claim.
        lease_ms: lease length asked for (default: the topic's ``lease_ms``).
        backoff_ms, max_backoff_ms: the nack delay schedule (rule 3).
        until_empty: return when the queue is empty instead of waiting for more work.
    """

    def __init__(
        self,
        engine: Engine | SyncEngine,
        topic: str,
        node: str,
        handler: Handler,
        *,
        max: int = 1,
        lease_ms: int | None = None,
        backoff_ms: int = 1000,
        max_backoff_ms: int = 60_000,
        until_empty: bool = False,
    ) -> None:
        self.engine = engine
        self.topic = topic
        self.node = node
        self.handler = handler
        self.max = max
        self.lease_ms = lease_ms
        self.backoff_ms = backoff_ms
        self.max_backoff_ms = max_backoff_ms
        self.until_empty = until_empty
        self.stats = WorkerStats()
        self._stopping = threading.Event()
        self._idle_scope: trio.CancelScope | None = None

    def backoff_delay_ms(self, deliveries: int) -> int:
        """The nack delay for a job that failed on its ``deliveries``-th delivery."""
        return int(min(self.backoff_ms * 2 ** max(deliveries - 1, 0), self.max_backoff_ms))

    def stop(self) -> None:
        """Ask the loop to return after the current batch (sync: from any thread; async:
        from the trio thread, which also ends an idle wait at once)."""
        self._stopping.set()
        if self._idle_scope is not None and not isinstance(self.engine, SyncEngine):
            self._idle_scope.cancel()

    # -- async (inside trio) ------------------------------------------------------------

    async def run(self) -> WorkerStats:
        """Run on the async engine until stopped (or, with ``until_empty``, drained)."""
        engine = self.engine
        if not isinstance(engine, Engine):
            raise TypeError("Worker.run needs the async Engine; use run_sync with topics.open")
        topic, node = self.topic, self.node
        lease_ms = self.lease_ms or (await engine.get_topic(topic, touch=False)).config.lease_ms
        while not self._stopping.is_set():
            res = await engine.claim(topic, node=node, max=self.max, lease_ms=lease_ms)
            if res.count:
                self.stats.claimed += res.count
                await self._handle_batch(engine, res, lease_ms)
                continue
            if self.until_empty and (await engine.get_topic(topic, touch=False)).count == 0:
                break
            with trio.CancelScope() as self._idle_scope:
                await engine.wait_claimable(topic, timeout_s=math.inf)
            self._idle_scope = None
        return self.stats

    async def _handle_batch(self, engine: Engine, res: ClaimResult, lease_ms: int) -> None:
        pending = dict(zip(res.seqs, res.lease_ids, strict=True))
        done: list[Job] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._heartbeat, engine, pending, lease_ms)
            for job in res.claimed:
                try:
                    outcome = self.handler(job)
                    if inspect.isawaitable(outcome):
                        await outcome
                except Exception:
                    pending.pop(job.seq, None)
                    self._count_nack(await engine.nack(self.topic, **self._nack_args(job)))
                    continue
                done.append(job)
            if done:
                self._count_ack(await engine.ack(self.topic, **self._ack_args(done)))
            nursery.cancel_scope.cancel()

    async def _heartbeat(self, engine: Engine, pending: dict[int, str], lease_ms: int) -> None:
        while True:
            await trio.sleep(lease_ms / 3000)
            if pending:
                seqs = list(pending)
                res = await engine.extend(
                    self.topic,
                    node=self.node,
                    seqs=seqs,
                    lease_ms=lease_ms,
                    lease_ids=[pending[s] for s in seqs],
                )
                self.stats.extended += res.extended
                for seq in res.skipped:
                    pending.pop(seq, None)

    # -- sync (topics.open) -------------------------------------------------------------

    def run_sync(self) -> WorkerStats:
        """Run on the synchronous facade until :meth:`stop` (or drained, ``until_empty``)."""
        db = self.engine
        if not isinstance(db, SyncEngine):
            raise TypeError("Worker.run_sync needs topics.open's SyncEngine; use run with Engine")
        topic, node = self.topic, self.node
        lease_ms = self.lease_ms or db.get_topic(topic, touch=False).config.lease_ms
        while not self._stopping.is_set():
            res = db.claim(topic, node=node, max=self.max, lease_ms=lease_ms)
            if res.count:
                self.stats.claimed += res.count
                self._handle_batch_sync(db, res, lease_ms)
                continue
            if self.until_empty and db.get_topic(topic, touch=False).count == 0:
                break
            # The engine's idle wait (no polling), bounded so stop() is noticed.
            db._call(db.engine.wait_claimable, topic, timeout_s=SYNC_IDLE_WAIT_S)
        return self.stats

    def _handle_batch_sync(self, db: SyncEngine, res: ClaimResult, lease_ms: int) -> None:
        pending = dict(zip(res.seqs, res.lease_ids, strict=True))
        lock = threading.Lock()
        finished = threading.Event()

        def heartbeat() -> None:
            while not finished.wait(lease_ms / 3000):
                with lock:
                    seqs = list(pending)
                    ids = [pending[s] for s in seqs]
                if not seqs:
                    continue
                ext = db.extend(
                    self.topic, node=self.node, seqs=seqs, lease_ms=lease_ms, lease_ids=ids
                )
                with lock:
                    self.stats.extended += ext.extended
                    for seq in ext.skipped:
                        pending.pop(seq, None)

        beat = threading.Thread(target=heartbeat, name=f"topics-heartbeat-{self.node}", daemon=True)
        beat.start()
        done: list[Job] = []
        try:
            for job in res.claimed:
                try:
                    self.handler(job)
                except Exception:
                    with lock:
                        pending.pop(job.seq, None)
                    self._count_nack(db.nack(self.topic, **self._nack_args(job)))
                    continue
                done.append(job)
            if done:
                self._count_ack(db.ack(self.topic, **self._ack_args(done)))
        finally:
            finished.set()
            beat.join()

    # -- shared ---------------------------------------------------------------------------

    def _nack_args(self, job: Job) -> dict[str, Any]:
        return {
            "node": self.node,
            "seqs": [job.seq],
            "delay_ms": self.backoff_delay_ms(job.deliveries),
            "lease_ids": [job.lease_id],
        }

    def _ack_args(self, jobs: list[Job]) -> dict[str, Any]:
        return {
            "node": self.node,
            "seqs": [j.seq for j in jobs],
            "lease_ids": [j.lease_id for j in jobs],
        }

    def _count_nack(self, res: NackResult) -> None:
        self.stats.nacked += res.nacked
        self.stats.lost += len(res.skipped)

    def _count_ack(self, res: AckResult) -> None:
        self.stats.acked += res.acked
        self.stats.lost += len(res.skipped)


@overload
def run_worker(
    engine: SyncEngine,
    topic: str,
    node: str,
    handler: Handler,
    *,
    max: int = 1,
    lease_ms: int | None = None,
    until_empty: bool = False,
    backoff_ms: int = 1000,
    max_backoff_ms: int = 60_000,
) -> WorkerStats: ...


@overload
def run_worker(
    engine: Engine,
    topic: str,
    node: str,
    handler: Handler,
    *,
    max: int = 1,
    lease_ms: int | None = None,
    until_empty: bool = False,
    backoff_ms: int = 1000,
    max_backoff_ms: int = 60_000,
) -> Coroutine[Any, Any, WorkerStats]: ...


def run_worker(
    engine: Engine | SyncEngine,
    topic: str,
    node: str,
    handler: Handler,
    *,
    max: int = 1,
    lease_ms: int | None = None,
    until_empty: bool = False,
    backoff_ms: int = 1000,
    max_backoff_ms: int = 60_000,
) -> WorkerStats | Coroutine[Any, Any, WorkerStats]:
    """Run a :class:`Worker`: ``await run_worker(engine, ...)`` with the async engine,
    plain ``run_worker(db, ...)`` with the sync facade.

    Returns: the worker's :class:`WorkerStats` once it stops (``until_empty``: drained).

    Raises: what the engine raises (topic_not_found, not_a_queue, ...); handler
    exceptions are caught and turned into nacks.

    Example::

        def handle(job: topics.Job) -> None:
            print(job.seq, job.data)

        with topics.open(None) as db:
            db.put_topic("jobs", {"type": "queue"})
            db.write("jobs", [{"data": i} for i in range(10)])
            stats = topics.run_worker(db, "jobs", "w1", handle, max=4, until_empty=True)
            assert stats.acked == 10
    """
    worker = Worker(
        engine,
        topic,
        node,
        handler,
        max=max,
        lease_ms=lease_ms,
        backoff_ms=backoff_ms,
        max_backoff_ms=max_backoff_ms,
        until_empty=until_empty,
    )
    if isinstance(engine, SyncEngine):
        return worker.run_sync()
    return worker.run()
