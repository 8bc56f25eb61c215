"""``client.work(queue, node=...)``: leased jobs as an iterator, with heartbeats (§10).

::

    with client.work("jobs", node="w1", max=8) as jobs:     # sync
        for job in jobs:
            with job:                 # ack on success; on an exception, nack with backoff
                handle(job.data)      # (logged, and the loop goes on)

    async with client.work("jobs", node="w1") as jobs:      # AsyncClient, trio or asyncio
        async for job in jobs:
            async with job:
                await handle(job.data)

Rules:
1. Jobs come from ``GET /v0/topics/:q/work`` (SSE push, §10.8) when the server has that
   route, else from ``POST …/claim`` polling (``stream=False`` forces polling; polling
   backs off from 50 ms to 1 s while the queue is empty).
2. Every lease held and not yet resolved is extended every ``lease_ms / 3`` by a
   heartbeat (a thread for the sync client, a task for the async one), so a long handler
   never loses its job to expiry.
3. Every ack, nack and extend sends the claim's ``lease_ids``: a worker whose lease was
   lost (expired and re-claimed elsewhere) never completes someone else's delivery; such
   jobs are counted in ``stats.lost`` and ``job.lost`` turns true.
4. A job whose ``with`` block (or, without one, whose loop body) ends normally is acked;
   acks are sent together before more jobs are fetched. An exception nacks the job at
   once with ``min(backoff_ms * 2 ** (deliveries - 1), max_backoff_ms)``. Leaving the
   loop early (``break``, an exception through a bare loop) nacks every unresolved job:
   with the backoff delay when an exception is known (``with client.work(...)``), else
   with none, so another worker can take it at once.

The rules are :class:`WorkCore`'s, written once as steps (:mod:`topics.consumer`'s
drivers run them on either client); the iterators here and in ``_aworker.py`` are shells
that add what differs: the heartbeat's thread or task, the /work stream's I/O, ``with`` or
``async with``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from functools import partial
from operator import methodcaller
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

import httpx
import ujson

from topics.consumer import Emit, Sleep, Step, drive, iterate
from topics.errors import TopicsError
from topics.queue_types import Job
from topics.wire.sse import Event, SSEDecoder
from topics.worker import WorkerStats

from ._transport import error_from_response
from ._twin import Steps, Stream

if TYPE_CHECKING:
    from ._client_like import AsyncClientLike, ClientLike

__all__ = [
    "Book",
    "JobLease",
    "LeasedJob",
    "WorkCore",
    "WorkIterator",
    "WorkSpec",
    "jobs_of",
    "stream_args",
    "stream_missing",
]

log = logging.getLogger("topics.client.worker")

MIN_POLL_S = 0.05
MAX_POLL_S = 1.0
RECONNECT_S = 0.5

L = TypeVar("L", bound="JobLease")


@dataclass(frozen=True, slots=True)
class WorkSpec:
    topic: str
    node: str
    max: int = 1
    lease_ms: int | None = None
    backoff_ms: int = 1000
    max_backoff_ms: int = 60_000
    stream: bool | None = None
    until_empty: bool = False

    def backoff_delay_ms(self, deliveries: int) -> int:
        return int(min(self.backoff_ms * 2 ** max(deliveries - 1, 0), self.max_backoff_ms))

    def stream_params(self, lease_ms: int) -> dict[str, str]:
        return {"node": self.node, "max": str(self.max), "lease_ms": str(lease_ms)}

    @property
    def stream_path(self) -> str:
        return "/v0/topics/" + quote(self.topic, safe="") + "/work"


class Book:
    """Leases held and acks owed, shared with the heartbeat (under ``lock``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: dict[int, str] = {}
        self.done: list[Job] = []
        self.lost: set[int] = set()
        self.stats = WorkerStats()

    def take(self, jobs: list[Job]) -> None:
        with self.lock:
            self.stats.claimed += len(jobs)
            self.held.update((j.seq, j.lease_id) for j in jobs)

    def snapshot(self) -> tuple[list[int], list[str]]:
        with self.lock:
            seqs = list(self.held)
            return seqs, [self.held[s] for s in seqs]

    def release(self, seqs: list[int], skipped: list[int]) -> None:
        with self.lock:
            for seq in seqs:
                self.held.pop(seq, None)
            self.lost.update(skipped)
            self.stats.lost += len(skipped)

    def extended(self, count: int, skipped: list[int]) -> None:
        self.release(skipped, skipped)
        with self.lock:
            self.stats.extended += count


def jobs_of(items: list[Any]) -> list[Job]:
    jobs = []
    for item in items:
        if isinstance(item, Event) and item.event == "job":
            try:
                jobs.append(Job.from_json(ujson.loads(item.data)))
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring a malformed job frame: %.200s", item.data)
    return jobs


def stream_missing(resp: httpx.Response, body: bytes, spec: WorkSpec) -> bool:
    """True when the server has no /work route (404 not_found, not topic_not_found), so
    the worker falls back to claim polling; any other error is raised."""
    err = error_from_response(resp.status_code, resp.headers, body)
    if resp.status_code in (404, 405) and err.code in ("not_found", "method_not_allowed"):
        if spec.stream:
            raise TopicsError("this server has no /work stream (GET /v0/topics/:q/work)")
        return True
    raise err


def stream_args(
    client: ClientLike | AsyncClientLike, spec: WorkSpec, lease_ms: int
) -> dict[str, Any]:
    return {
        "params": spec.stream_params(lease_ms),
        "headers": {"Accept": "text/event-stream"},
        # No read timeout: a worker may wait for jobs for as long as the queue is empty.
        "timeout": httpx.Timeout(client.settings.timeout_s, read=None),
    }


# -- the rules, once -----------------------------------------------------------------------


class JobLease:
    """What both kinds of leased job are: the :class:`~topics.Job` and its lease state."""

    def __init__(self, core: WorkCore, job: Job) -> None:
        self.job = job
        self._core = core
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
        """True once the server said this lease is no longer ours (rule 3)."""
        return self.seq in self._core.book.lost

    def _ended(self, exc: BaseException | None) -> tuple[bool, int | None] | None:
        """Rule 4 for a ``with`` block that ended: None when no nack is owed, else
        whether the failure stays with this job, and the nack's delay (None: backoff)."""
        if self.resolved:
            return None
        if exc is None:
            self._core.succeeded(self)
            return None
        isolated = isinstance(exc, Exception)
        if isolated:
            log.error("job %s of %s failed; nacked", self.seq, self._core.spec.topic, exc_info=exc)
        return isolated, None if isolated else 0


class WorkCore:
    """The work iterators' rules (module docstring) as steps: leases held and acks owed
    (:class:`Book`), the job loop, ack/nack with backoff, heartbeats, claim polling."""

    def __init__(self, spec: WorkSpec) -> None:
        self.spec = spec
        self.book = Book()
        self.current: JobLease | None = None
        self.unhandled: list[Job] = []

    def succeeded(self, lease: JobLease) -> None:
        lease.resolved = True
        with self.book.lock:
            self.book.done.append(lease.job)

    def ack(self, jobs: list[Job]) -> Steps[None]:
        spec, seqs = self.spec, [j.seq for j in jobs]
        res = yield methodcaller(
            "ack", spec.topic, node=spec.node, seqs=seqs, lease_ids=[j.lease_id for j in jobs]
        )
        self.book.release(seqs, res.skipped)
        self.book.stats.acked += res.acked

    def nack(self, job: Job, delay_ms: int | None) -> Steps[None]:
        spec = self.spec
        delay = spec.backoff_delay_ms(job.deliveries) if delay_ms is None else delay_ms
        res = yield methodcaller(
            "nack", spec.topic, node=spec.node, seqs=[job.seq], delay_ms=delay,
            lease_ids=[job.lease_id],
        )  # fmt: skip
        self.book.release([job.seq], res.skipped)
        self.book.stats.nacked += res.nacked

    def flush(self) -> Steps[None]:
        """Rule 4: the acks owed, in one request."""
        with self.book.lock:
            done, self.book.done = self.book.done, []
        if done:
            yield from self.ack(done)

    def beat(self, lease_ms: int) -> Steps[None]:
        """One heartbeat (rule 2)."""
        seqs, ids = self.book.snapshot()
        if not seqs:
            return
        spec = self.spec
        try:
            res = yield methodcaller(
                "extend", spec.topic, node=spec.node, seqs=seqs, lease_ms=lease_ms, lease_ids=ids
            )
        except TopicsError as exc:  # the next beat tries again; expiry is the backstop
            log.warning("lease heartbeat failed: %s", exc)
            return
        self.book.extended(res.extended, res.skipped)

    def serve(self, next_batch: Step, lease: Callable[[Job], L]) -> Stream[L]:
        """The job loop: each job of each batch ``next_batch`` answers (None: no more)
        handed out as ``lease(job)``; one the loop body left alone succeeded."""
        while True:
            batch = yield next_batch
            if batch is None:
                return
            self.unhandled = list(batch)
            while self.unhandled:
                self.current = held = lease(self.unhandled.pop(0))
                yield Emit(held)
                if not held.resolved:  # the loop body returned: success
                    self.succeeded(held)
                self.current = None
            yield from self.flush()

    def release_all(self, failure: BaseException | None) -> Steps[None]:
        """Rule 4: on the way out, ack what succeeded and nack what was not handled."""
        current = self.current
        pending = [current.job] if current is not None and not current.resolved else []
        pending += self.unhandled
        self.current, self.unhandled = None, []
        try:
            yield from self.flush()
            for job in pending:
                yield from self.nack(job, None if isinstance(failure, Exception) else 0)
        except TopicsError as exc:  # leases expire on their own; do not mask the cause
            log.warning("could not release leases on exit: %s", exc)

    def received(self, decoder: SSEDecoder, chunk: bytes) -> list[Job]:
        """The jobs a chunk of the /work stream completes, now held."""
        batch = jobs_of(decoder.feed(chunk))
        if batch:
            self.book.take(batch)
        return batch

    def claims(self, lease_ms: int) -> Stream[list[Job]]:
        """Rule 1's fallback: claim polling, backing off while the queue is empty."""
        spec = self.spec
        poll = MIN_POLL_S
        while True:
            res = yield methodcaller(
                "claim", spec.topic, node=spec.node, max=spec.max, lease_ms=lease_ms
            )
            if res.count:
                poll = MIN_POLL_S
                self.book.take(res.claimed)
                yield Emit(res.claimed)
                continue
            if spec.until_empty:
                state = yield methodcaller("get_topic", spec.topic, touch=False)
                if state.count == 0:
                    return
            yield Sleep(poll)
            poll = min(MAX_POLL_S, poll * 2)


# -- sync --------------------------------------------------------------------------------


class LeasedJob(JobLease):
    """A job leased to this worker: the :class:`~topics.Job` plus its lease controls."""

    def __init__(self, owner: WorkIterator, job: Job) -> None:
        super().__init__(owner._core, job)
        self._client = owner._client

    def ack(self) -> None:
        """Acknowledge now (instead of with the next batch)."""
        self.resolved = True
        drive(self._client, self._core.ack([self.job]))

    def nack(self, delay_ms: int | None = None) -> None:
        """Release the job for reclaim after ``delay_ms`` (default: the backoff)."""
        self.resolved = True
        drive(self._client, self._core.nack(self.job, delay_ms))

    def __enter__(self) -> LeasedJob:
        return self

    def __exit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        owed = self._ended(exc)
        if owed is None:
            return False
        isolated, delay_ms = owed
        self.nack(delay_ms)
        return isolated  # rule 4: one job's failure does not end the loop


class WorkIterator:
    """Iterator over leased jobs (sync client); see the module docstring."""

    def __init__(self, client: ClientLike, spec: WorkSpec) -> None:
        self.spec = spec
        self._client = client
        self._core = WorkCore(spec)
        self._failure: BaseException | None = None
        self._stop = threading.Event()
        self._gen = self._run()

    @property
    def stats(self) -> WorkerStats:
        return self._core.book.stats

    def __iter__(self) -> Iterator[LeasedJob]:
        return self

    def __next__(self) -> LeasedJob:
        return next(self._gen)

    def close(self) -> None:
        self._gen.close()

    def __enter__(self) -> WorkIterator:
        return self

    def __exit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._failure = exc
        self.close()

    def _heartbeat(self, lease_ms: int) -> None:
        while not self._stop.wait(lease_ms / 3000):
            drive(self._client, self._core.beat(lease_ms))

    def _run(self) -> Generator[LeasedJob, None, None]:
        spec = self.spec
        lease_ms = spec.lease_ms or self._client.get_topic(spec.topic, touch=False).config.lease_ms
        beat = threading.Thread(target=self._heartbeat, args=(lease_ms,), daemon=True)
        beat.start()
        batches = self._batches(lease_ms)
        try:
            next_batch = partial(_next_or_none, batches)
            yield from iterate(self._client, self._core.serve(next_batch, self._lease))
        finally:
            self._stop.set()
            # Acks and nacks first, then the /work stream: closing it makes the server
            # release every lease it delivered, so an ack sent after would be skipped.
            drive(self._client, self._core.release_all(self._failure))
            batches.close()
            beat.join()

    def _lease(self, job: Job) -> LeasedJob:
        return LeasedJob(self, job)

    def _batches(self, lease_ms: int) -> Generator[list[Job], None, None]:
        spec = self.spec
        http = self._client.http
        use_stream = spec.stream is not False and not spec.until_empty
        while use_stream:
            with http.stream(
                "GET", spec.stream_path, **stream_args(self._client, spec, lease_ms)
            ) as resp:
                if not resp.is_success:
                    use_stream = not stream_missing(resp, resp.read(), spec)
                    continue
                decoder = SSEDecoder()
                with contextlib.suppress(httpx.TransportError):
                    for chunk in resp.iter_bytes():
                        batch = self._core.received(decoder, chunk)
                        if batch:
                            yield batch
            time.sleep(RECONNECT_S)  # dropped: the server released this stream's leases
        yield from iterate(self._client, self._core.claims(lease_ms))


def _next_or_none(batches: Iterator[list[Job]], _client: object) -> list[Job] | None:
    return next(batches, None)
