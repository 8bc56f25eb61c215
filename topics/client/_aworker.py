"""``AsyncClient.work(...)``: the async twin of :mod:`topics.client._worker` (same rules).

The heartbeat is a task in a task group that ``async with client.work(...)`` opens and
closes, so it never outlives the block (structured concurrency: no task is left behind,
under trio or asyncio). Iterating without entering the block is refused: a worker without
its heartbeat would lose long jobs to lease expiry.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import httpx

from topics.errors import TopicsError
from topics.queue_types import Job
from topics.wire.sse import SSEDecoder
from topics.worker import WorkerStats

from ._worker import (
    MAX_POLL_S,
    MIN_POLL_S,
    RECONNECT_S,
    Book,
    WorkIterator,
    WorkSpec,
    jobs_of,
    stream_args,
    stream_missing,
)

if TYPE_CHECKING:
    from ._async import AsyncClient
    from ._sync import Client

__all__ = ["AsyncLeasedJob", "AsyncWorkIterator", "RunWorker", "WorkPlan"]

log = logging.getLogger("topics.client.worker")


class AsyncLeasedJob:
    """A job leased to an async worker; ``async with job:`` acks or nacks it (rule 4)."""

    def __init__(self, owner: AsyncWorkIterator, job: Job) -> None:
        self.job = job
        self._owner = owner
        self.resolved = False

    @property
    def seq(self) -> int:
        return self.job.seq

    @property
    def data(self) -> Any:
        return self.job.data

    @property
    def deliveries(self) -> int:
        return self.job.deliveries

    @property
    def meta(self) -> dict[str, Any] | None:
        """The job's meta, with the engine's stamps (``job.job.deliver_at``,
        ``dedupe_key`` and ``redriven_from`` read them)."""
        return self.job.meta

    @property
    def lost(self) -> bool:
        return self.seq in self._owner._book.lost

    async def ack(self) -> None:
        self.resolved = True
        await self._owner._ack([self.job])

    async def nack(self, delay_ms: int | None = None) -> None:
        self.resolved = True
        await self._owner._nack(self.job, delay_ms)

    async def __aenter__(self) -> AsyncLeasedJob:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if self.resolved:
            return False
        if exc is None:
            self._owner._succeeded(self)
            return False
        isolated = isinstance(exc, Exception)
        if isolated:
            log.error("job %s of %s failed; nacked", self.seq, self._owner.spec.topic, exc_info=exc)
        with anyio.CancelScope(shield=True):  # a cancelled worker still hands its job back
            await self.nack(None if isolated else 0)
        return isolated


class AsyncWorkIterator:
    """Async iterator over leased jobs; use it as ``async with client.work(...) as jobs``."""

    def __init__(self, client: AsyncClient, spec: WorkSpec) -> None:
        self.spec = spec
        self._client = client
        self._book = Book()
        self._current: AsyncLeasedJob | None = None
        self._unhandled: list[Job] = []
        self._tg: anyio.abc.TaskGroup | None = None
        self._lease_ms = 0
        self._gen: AsyncGenerator[AsyncLeasedJob, None] | None = None

    @property
    def stats(self) -> WorkerStats:
        return self._book.stats

    async def __aenter__(self) -> AsyncWorkIterator:
        spec = self.spec
        self._lease_ms = (
            spec.lease_ms or (await self._client.get_topic(spec.topic, touch=False)).config.lease_ms
        )
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._heartbeat)
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._tg is not None
        try:
            # Acks and nacks first, then the /work stream (see _worker._run).
            with anyio.CancelScope(shield=True):
                await self._release_all(exc)
            if self._gen is not None:
                await self._gen.aclose()
        finally:
            self._tg.cancel_scope.cancel()
            await self._tg.__aexit__(None, None, None)

    def __aiter__(self) -> AsyncIterator[AsyncLeasedJob]:
        if self._tg is None:
            raise RuntimeError("use `async with client.work(...) as jobs:` to run the heartbeat")
        if self._gen is None:
            self._gen = self._run()
        return self._gen

    def _succeeded(self, job: AsyncLeasedJob) -> None:
        job.resolved = True
        self._book.done.append(job.job)

    async def _ack(self, jobs: list[Job]) -> None:
        res = await self._client.ack(
            self.spec.topic,
            node=self.spec.node,
            seqs=[j.seq for j in jobs],
            lease_ids=[j.lease_id for j in jobs],
        )
        self._book.release([j.seq for j in jobs], res.skipped)
        self._book.stats.acked += res.acked

    async def _nack(self, job: Job, delay_ms: int | None) -> None:
        delay = self.spec.backoff_delay_ms(job.deliveries) if delay_ms is None else delay_ms
        res = await self._client.nack(
            self.spec.topic, node=self.spec.node, seqs=[job.seq], delay_ms=delay,
            lease_ids=[job.lease_id],
        )  # fmt: skip
        self._book.release([job.seq], res.skipped)
        self._book.stats.nacked += res.nacked

    async def _flush(self) -> None:
        done, self._book.done = self._book.done, []
        if done:
            await self._ack(done)

    async def _heartbeat(self) -> None:
        lease_ms = self._lease_ms
        while True:
            await anyio.sleep(lease_ms / 3000)
            seqs, ids = self._book.snapshot()
            if not seqs:
                continue
            try:
                res = await self._client.extend(
                    self.spec.topic, node=self.spec.node, seqs=seqs, lease_ms=lease_ms,
                    lease_ids=ids,
                )  # fmt: skip
            except TopicsError as exc:
                log.warning("lease heartbeat failed: %s", exc)
                continue
            self._book.extended(res.extended, res.skipped)

    async def _release_all(self, failure: BaseException | None) -> None:
        pending = [self._current.job] if self._current and not self._current.resolved else []
        pending += self._unhandled
        self._current, self._unhandled = None, []
        try:
            await self._flush()
            for job in pending:
                await self._nack(job, None if isinstance(failure, Exception) else 0)
        except TopicsError as exc:
            log.warning("could not release leases on exit: %s", exc)

    async def _run(self) -> AsyncGenerator[AsyncLeasedJob, None]:
        batches = self._batches()
        try:
            async for batch in batches:
                self._unhandled = list(batch)
                while self._unhandled:
                    self._current = AsyncLeasedJob(self, self._unhandled.pop(0))
                    yield self._current
                    if not self._current.resolved:
                        self._succeeded(self._current)
                    self._current = None
                await self._flush()
        finally:
            await batches.aclose()

    async def _batches(self) -> AsyncGenerator[list[Job], None]:
        spec, lease_ms = self.spec, self._lease_ms
        http = self._client.http
        use_stream = spec.stream is not False and not spec.until_empty
        while use_stream:
            args = stream_args(self._client, spec, lease_ms)
            async with http.stream("GET", spec.stream_path, **args) as resp:
                if not resp.is_success:
                    use_stream = not stream_missing(resp, await resp.aread(), spec)
                    continue
                decoder = SSEDecoder()
                try:
                    async for chunk in resp.aiter_bytes():
                        batch = jobs_of(decoder.feed(chunk))
                        if batch:
                            self._book.take(batch)
                            yield batch
                except httpx.TransportError:
                    pass
            await anyio.sleep(RECONNECT_S)
        poll = MIN_POLL_S
        while True:
            res = await self._client.claim(
                spec.topic, node=spec.node, max=spec.max, lease_ms=lease_ms
            )
            if res.count:
                poll = MIN_POLL_S
                self._book.take(res.claimed)
                yield res.claimed
                continue
            if (
                spec.until_empty
                and (await self._client.get_topic(spec.topic, touch=False)).count == 0
            ):
                return
            await anyio.sleep(poll)
            poll = min(MAX_POLL_S, poll * 2)


@dataclass(frozen=True, slots=True)
class WorkPlan:
    """``client.work(...)``'s plan: a work iterator of the client's kind."""

    spec: WorkSpec

    def sync(self, client: Client) -> WorkIterator:
        return WorkIterator(client, self.spec)

    def aio(self, client: AsyncClient) -> AsyncWorkIterator:
        return AsyncWorkIterator(client, self.spec)


@dataclass(frozen=True, slots=True)
class RunWorker:
    """``client.run_worker(...)``'s plan: the handler over a work iterator, each job in its
    ``with`` block (acked on success, nacked with backoff when the handler raises)."""

    spec: WorkSpec
    handler: Callable[[Job], Any]

    def sync(self, client: Client) -> WorkerStats:
        work = WorkIterator(client, self.spec)
        with work as jobs:
            for job in jobs:
                with job:
                    self.handler(job.job)
        return work.stats

    async def aio(self, client: AsyncClient) -> WorkerStats:
        work = AsyncWorkIterator(client, self.spec)
        async with work as jobs:
            async for job in jobs:
                async with job:
                    outcome = self.handler(job.job)
                    if inspect.isawaitable(outcome):
                        await outcome
        return work.stats
