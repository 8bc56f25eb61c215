"""The in-process frontend: topics as a library, async (trio) or synchronous.

Async users inside a trio program open the engine directly::

    async with topics.open_engine("./data") as engine:
        await engine.write("orders", [{"data": {"sku": "A1"}}])

Scripts without trio use :func:`open`, which runs the engine on its own thread with its
own ``trio.run`` and forwards each call there (``trio.from_thread``), so every engine
method keeps running on the one engine thread (docs/ARCHITECTURE.md, "One thread, no locks").

Rules:
1. The engine thread is started and joined in exactly one place (``SyncEngine``).
2. Errors raised by the engine reach the caller as the same exception classes.
3. After ``close()`` every call raises ``RuntimeError`` (no silent reopen).
4. Each Engine method is forwarded by name (:class:`_Forward`): its signature is the
   Engine's, written once there.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar, overload

import trio

from topics._clock import Clock
from topics._facade import place
from topics.engine import Engine, open_engine
from topics.queue_types import job_record
from topics.settings import Limits, with_cache_bytes
from topics.types import WriteResult

__all__ = ["SyncEngine", "open"]

P = ParamSpec("P")
T = TypeVar("T")


class _Forward(Generic[P, T]):
    """A :class:`SyncEngine` method that runs the Engine method of the same name on the
    engine thread (rule 4). Replaced at class creation by a plain function with the Engine
    method's signature and docstring (``topics._facade.place``: help() and inspect show the
    real parameters); for type checkers,
    ``__get__`` gives ``Callable[P, T]`` from the Engine method's parameters and result."""

    def __init__(self, method: Callable[Concatenate[Engine, P], Awaitable[T]]) -> None:
        self.method = method

    def __set_name__(self, owner: type[SyncEngine], name: str) -> None:
        def fn(db: SyncEngine, /, *args: Any, **kwargs: Any) -> Any:
            return db._call(getattr(db.engine, name), *args, **kwargs)

        place(owner, name, fn, self.method)

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(self, obj: SyncEngine, owner: type[Any]) -> Callable[P, T]: ...
    def __get__(self, obj: SyncEngine | None, owner: type[Any]) -> Any:
        if obj is None:
            return self
        raise TypeError("reached only before __set_name__ replaced the descriptor")


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
        cache_bytes: int | None = None,
    ) -> None:
        limits = with_cache_bytes(limits, cache_bytes)
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

    # -- the Engine's methods, synchronously (rule 4) ---------------------------------

    put_topic = _Forward(Engine.put_topic)
    get_topic = _Forward(Engine.get_topic)
    list_topics = _Forward(Engine.list_topics)
    delete_topic = _Forward(Engine.delete_topic)
    write = _Forward(Engine.write)
    diff = _Forward(Engine.diff)
    delete_records = _Forward(Engine.delete_records)

    put_cursor = _Forward(Engine.put_cursor)
    get_cursor = _Forward(Engine.get_cursor)
    list_cursors = _Forward(Engine.list_cursors)
    delete_cursor = _Forward(Engine.delete_cursor)

    put_router = _Forward(Engine.put_router)
    get_router = _Forward(Engine.get_router)
    list_routers = _Forward(Engine.list_routers)
    delete_router = _Forward(Engine.delete_router)

    claim = _Forward(Engine.claim)
    ack = _Forward(Engine.ack)
    nack = _Forward(Engine.nack)
    extend = _Forward(Engine.extend)
    redrive = _Forward(Engine.redrive)

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
        record = job_record(
            data, deliver_at=deliver_at, delay_ms=delay_ms, dedupe_key=dedupe_key, tag=tag,
            meta=meta,
        )  # fmt: skip
        return self._call(
            self.engine.write, queue, [record], dedupe=dedupe, dedupe_ms=dedupe_ms, replace=replace
        )


def open(
    data_dir: str | None = None,
    *,
    clock: Clock | None = None,
    limits: Limits | None = None,
    cache_bytes: int | None = None,
) -> SyncEngine:
    """Open topics for synchronous use.

    Args:
        data_dir: the data directory, or None for memory-only use (tests, scratch).
        cache_bytes: memory for older history read back from segment files (default
            ``TOPICS_CACHE_BYTES``, else 256 MiB); see docs/OPERATIONS.md.

    Example::

        with topics.open(None) as db:
            db.write("orders", [{"data": {"sku": "A1"}}])
            print(db.diff("orders", from_seq=0).records)
    """
    return SyncEngine(data_dir, clock=clock, limits=limits, cache_bytes=cache_bytes)
