"""``AsyncClient.work(...)``: the async shell over :mod:`topics.client._worker`'s
:class:`~topics.client._worker.WorkCore` (same rules, same code).

The heartbeat is a task in a task group that ``async with client.work(...)`` opens and
closes, so it never outlives the block (structured concurrency: no task is left behind,
under trio or asyncio). Iterating without entering the block is refused: a worker without
its heartbeat would lose long jobs to lease expiry.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import httpx

from topics.consumer import adrive, aiterate
from topics.queue_types import Job
from topics.wire.sse import SSEDecoder
from topics.worker import WorkerStats

from ._worker import (
    RECONNECT_S,
    JobLease,
    WorkCore,
    WorkIterator,
    WorkSpec,
    stream_args,
    stream_missing,
)

if TYPE_CHECKING:
    from ._client_like import AsyncClientLike, ClientLike

__all__ = ["AsyncLeasedJob", "AsyncWorkIterator", "RunWorker", "WorkPlan"]

log = logging.getLogger("topics.client.worker")


class AsyncLeasedJob(JobLease):
    """A job leased to an async worker; ``async with job:`` acks or nacks it (rule 4)."""

    def __init__(self, owner: AsyncWorkIterator, job: Job) -> None:
        super().__init__(owner._core, job)
        self._client = owner._client

    async def ack(self) -> None:
        self.resolved = True
        await adrive(self._client, self._core.ack([self.job]))

    async def nack(self, delay_ms: int | None = None) -> None:
        self.resolved = True
        await adrive(self._client, self._core.nack(self.job, delay_ms))

    async def __aenter__(self) -> AsyncLeasedJob:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        owed = self._ended(exc)
        if owed is None:
            return False
        isolated, delay_ms = owed
        with anyio.CancelScope(shield=True):  # a cancelled worker still hands its job back
            await self.nack(delay_ms)
        return isolated


class AsyncWorkIterator:
    """Async iterator over leased jobs; use it as ``async with client.work(...) as jobs``."""

    def __init__(self, client: AsyncClientLike, spec: WorkSpec) -> None:
        self.spec = spec
        self._client = client
        self._core = WorkCore(spec)
        self._tg: anyio.abc.TaskGroup | None = None
        self._lease_ms = 0
        self._gen: AsyncGenerator[AsyncLeasedJob, None] | None = None

    @property
    def stats(self) -> WorkerStats:
        return self._core.book.stats

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
                await adrive(self._client, self._core.release_all(exc))
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

    async def _heartbeat(self) -> None:
        lease_ms = self._lease_ms
        while True:
            await anyio.sleep(lease_ms / 3000)
            await adrive(self._client, self._core.beat(lease_ms))

    def _lease(self, job: Job) -> AsyncLeasedJob:
        return AsyncLeasedJob(self, job)

    async def _run(self) -> AsyncGenerator[AsyncLeasedJob, None]:
        batches = self._batches()
        try:
            serve = self._core.serve(partial(_anext_or_none, batches), self._lease)
            async with aclosing(aiterate(self._client, serve)) as jobs:
                async for job in jobs:
                    yield job
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
                        batch = self._core.received(decoder, chunk)
                        if batch:
                            yield batch
                except httpx.TransportError:
                    pass
            await anyio.sleep(RECONNECT_S)
        async with aclosing(aiterate(self._client, self._core.claims(lease_ms))) as claimed:
            async for batch in claimed:
                yield batch


async def _anext_or_none(batches: AsyncIterator[list[Job]], _client: object) -> list[Job] | None:
    return await anext(batches, None)


@dataclass(frozen=True, slots=True)
class WorkPlan:
    """``client.work(...)``'s plan: a work iterator of the client's kind."""

    spec: WorkSpec

    def sync(self, client: ClientLike) -> WorkIterator:
        return WorkIterator(client, self.spec)

    def aio(self, client: AsyncClientLike) -> AsyncWorkIterator:
        return AsyncWorkIterator(client, self.spec)


@dataclass(frozen=True, slots=True)
class RunWorker:
    """``client.run_worker(...)``'s plan: the handler over a work iterator, each job in its
    ``with`` block (acked on success, nacked with backoff when the handler raises)."""

    spec: WorkSpec
    handler: Callable[[Job], Any]

    def sync(self, client: ClientLike) -> WorkerStats:
        work = WorkIterator(client, self.spec)
        with work as jobs:
            for job in jobs:
                with job:
                    self.handler(job.job)
        return work.stats

    async def aio(self, client: AsyncClientLike) -> WorkerStats:
        work = AsyncWorkIterator(client, self.spec)
        async with work as jobs:
            async for job in jobs:
                async with job:
                    outcome = self.handler(job.job)
                    if inspect.isawaitable(outcome):
                        await outcome
        return work.stats
