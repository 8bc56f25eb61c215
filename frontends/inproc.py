"""The in-process frontend: topics as a library, async (trio) or synchronous.

Async users inside a trio program open the engine directly::

    async with topics.open_engine("./data") as engine:
        await engine.write("orders", [{"data": {"sku": "A1"}}])

Scripts without trio use :func:`open`, which runs the engine on its own thread with its
own ``trio.run`` and forwards each call there (``trio.from_thread``), so every engine
method keeps running on the one engine thread (ARCHITECTURE: "One thread runs the engine").

Rules:
1. The engine thread is started and joined in exactly one place (``SyncEngine``).
2. Errors raised by the engine reach the caller as the same exception classes.
3. After ``close()`` every call raises ``RuntimeError`` (no silent reopen).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import trio

from topics._clock import Clock
from topics.cursor_types import CursorInfo, DeleteCursorResult
from topics.engine import Engine, open_engine
from topics.queue_types import AckResult, ClaimResult, ExtendResult, NackResult, RedriveResult
from topics.router_types import DeleteRouterResult, PutRouterResult, RouterInfo, RouterPage
from topics.settings import Limits
from topics.types import (
    DeleteRecordsResult,
    DeleteTopicResult,
    DiffResult,
    PutTopicResult,
    TopicPage,
    TopicState,
    WriteResult,
)

__all__ = ["SyncEngine", "open"]

T = TypeVar("T")


class SyncEngine:
    """A synchronous handle on an engine running in a background thread.

    Method names, arguments and results are those of :class:`topics.Engine`.
    """

    def __init__(
        self,
        data_dir: str | None = None,
        *,
        clock: Clock | None = None,
        limits: Limits | None = None,
    ) -> None:
        self._ready = threading.Event()
        self._stop: trio.Event | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._engine: Engine | None = None
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(
            target=self._run, args=(data_dir, clock, limits), name="topics-engine", daemon=True
        )
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def _run(self, data_dir: str | None, clock: Clock | None, limits: Limits | None) -> None:
        try:
            trio.run(self._main, data_dir, clock, limits)
        except BaseException as exc:  # reported to the opener, which re-raises it
            self._error = exc
        finally:
            self._ready.set()

    async def _main(self, data_dir: str | None, clock: Clock | None, limits: Limits | None) -> None:
        async with open_engine(data_dir, clock=clock, limits=limits) as engine:
            self._engine = engine
            self._stop = trio.Event()
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await self._stop.wait()

    @property
    def engine(self) -> Engine:
        """The underlying async engine (only usable from the engine thread)."""
        if self._engine is None or self._closed:
            raise RuntimeError("this topics engine is closed")
        return self._engine

    def _call(self, fn: Callable[..., Awaitable[T]], /, *args: Any, **kwargs: Any) -> T:
        if self._closed or self._token is None:
            raise RuntimeError("this topics engine is closed")
        return trio.from_thread.run(functools.partial(fn, *args, **kwargs), trio_token=self._token)

    def close(self) -> None:
        """Stop the engine (flushing what it must) and join its thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._token is not None and self._stop is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join()
        if self._error is not None:
            raise self._error

    def __enter__(self) -> SyncEngine:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the Engine's methods, synchronously -------------------------------------------

    def put_topic(self, topic: str, config: Mapping[str, Any] | None = None) -> PutTopicResult:
        return self._call(self.engine.put_topic, topic, config)

    def get_topic(self, topic: str, *, touch: bool = True) -> TopicState:
        return self._call(self.engine.get_topic, topic, touch=touch)

    def list_topics(
        self,
        *,
        prefix: str | None = None,
        page_size: int = 100,
        cursor: str | None = None,
        touch: bool = False,
    ) -> TopicPage:
        return self._call(
            self.engine.list_topics, prefix=prefix, page_size=page_size, cursor=cursor, touch=touch
        )

    def delete_topic(self, topic: str, *, if_empty: bool = False) -> DeleteTopicResult:
        return self._call(self.engine.delete_topic, topic, if_empty=if_empty)

    def write(
        self, topic: str, records: Sequence[Mapping[str, Any]], **options: Any
    ) -> WriteResult:
        """See :meth:`topics.Engine.write` for the options."""
        return self._call(self.engine.write, topic, records, **options)

    def diff(self, topic: str, **options: Any) -> DiffResult:
        """See :meth:`topics.Engine.diff` for the options."""
        return self._call(self.engine.diff, topic, **options)

    def delete_records(
        self, topic: str, *, before_seq: int | None = None, match: object = None
    ) -> DeleteRecordsResult:
        return self._call(self.engine.delete_records, topic, before_seq=before_seq, match=match)

    # -- named cursors -------------------------------------------------------------------

    def put_cursor(
        self, topic: str, cursor: str, seq: int, *, expect_seq: int | None = None
    ) -> CursorInfo:
        return self._call(self.engine.put_cursor, topic, cursor, seq, expect_seq=expect_seq)

    def get_cursor(self, topic: str, cursor: str) -> CursorInfo:
        return self._call(self.engine.get_cursor, topic, cursor)

    def list_cursors(self, topic: str) -> list[CursorInfo]:
        return self._call(self.engine.list_cursors, topic)

    def delete_cursor(self, topic: str, cursor: str) -> DeleteCursorResult:
        return self._call(self.engine.delete_cursor, topic, cursor)

    # -- routers (§6) ------------------------------------------------------------------------

    def put_router(self, router: str, body: Mapping[str, Any] | None = None) -> PutRouterResult:
        """See :meth:`topics.Engine.put_router`."""
        return self._call(self.engine.put_router, router, body)

    def get_router(self, router: str) -> RouterInfo:
        """See :meth:`topics.Engine.get_router`."""
        return self._call(self.engine.get_router, router)

    def list_routers(
        self,
        *,
        prefix: str | None = None,
        source: str | None = None,
        dest: str | None = None,
        page_size: int = 100,
        cursor: str | None = None,
    ) -> RouterPage:
        """See :meth:`topics.Engine.list_routers`."""
        return self._call(
            self.engine.list_routers,
            prefix=prefix,
            source=source,
            dest=dest,
            page_size=page_size,
            cursor=cursor,
        )

    def delete_router(self, router: str) -> DeleteRouterResult:
        """See :meth:`topics.Engine.delete_router`."""
        return self._call(self.engine.delete_router, router)

    # -- queues (§10) -----------------------------------------------------------------------

    def claim(
        self, topic: str, *, node: str, max: int = 1, lease_ms: int | None = None
    ) -> ClaimResult:
        """See :meth:`topics.Engine.claim`."""
        return self._call(self.engine.claim, topic, node=node, max=max, lease_ms=lease_ms)

    def ack(
        self,
        topic: str,
        *,
        node: str,
        seqs: Sequence[int],
        lease_ids: Sequence[str] | None = None,
    ) -> AckResult:
        """See :meth:`topics.Engine.ack`."""
        return self._call(self.engine.ack, topic, node=node, seqs=seqs, lease_ids=lease_ids)

    def nack(
        self,
        topic: str,
        *,
        node: str,
        seqs: Sequence[int],
        delay_ms: int = 0,
        lease_ids: Sequence[str] | None = None,
    ) -> NackResult:
        """See :meth:`topics.Engine.nack`."""
        return self._call(
            self.engine.nack, topic, node=node, seqs=seqs, delay_ms=delay_ms, lease_ids=lease_ids
        )

    def extend(
        self,
        topic: str,
        *,
        node: str,
        seqs: Sequence[int],
        lease_ms: int,
        lease_ids: Sequence[str] | None = None,
    ) -> ExtendResult:
        """See :meth:`topics.Engine.extend`."""
        return self._call(
            self.engine.extend, topic, node=node, seqs=seqs, lease_ms=lease_ms, lease_ids=lease_ids
        )

    def schedule(
        self,
        queue: str,
        data: Any,
        *,
        deliver_at: int | None = None,
        delay_ms: int | None = None,
        dedupe_key: str | None = None,
        dedupe: str | None = None,
        dedupe_ms: int | None = None,
        replace: bool | None = None,
        tag: str | None = None,
        meta: Mapping[str, Any] | bytes | None = None,
    ) -> WriteResult:
        """Enqueue one job, as ``topics.Client.schedule`` (a write of one record)."""
        record: dict[str, Any] = {"data": data}
        for name, value in (
            ("tag", tag),
            ("meta", meta),
            ("deliver_at", deliver_at),
            ("delay_ms", delay_ms),
            ("dedupe_key", dedupe_key),
        ):
            if value is not None:
                record[name] = value
        return self._call(
            self.engine.write, queue, [record], dedupe=dedupe, dedupe_ms=dedupe_ms, replace=replace
        )

    def redrive(
        self,
        topic: str,
        *,
        to: str | None = None,
        max: int | None = None,
        where: Mapping[str, Any] | None = None,
    ) -> RedriveResult:
        """See :meth:`topics.Engine.redrive`."""
        return self._call(self.engine.redrive, topic, to=to, max=max, where=where)


def open(
    data_dir: str | None = None, *, clock: Clock | None = None, limits: Limits | None = None
) -> SyncEngine:
    """Open topics for synchronous use.

    Args:
        data_dir: the data directory, or None for memory-only use (tests, scratch).

    Example::

        with topics.open(None) as db:
            db.write("orders", [{"data": {"sku": "A1"}}])
            print(db.diff("orders", from_seq=0).records)
    """
    return SyncEngine(data_dir, clock=clock, limits=limits)
