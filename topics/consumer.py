"""A log consumer in a consumer group: read after a named cursor, handle, commit (issue 21).

The embedded twin of ``Client.consume`` (and the log counterpart of :func:`run_worker` for
queues), for the async :class:`topics.Engine` and the synchronous facade::

    async with topics.open_engine("./data") as engine:            # trio
        await topics.consume(engine, "orders", "billing", handle)

    with topics.open("./data") as db:                              # plain threads
        topics.consume(db, "orders", "billing", handle, until_caught_up=True)

Behaviour:

1. Reads pages of ``limit`` records after the group's cursor (a group that never committed
   starts at 0) and calls ``handler(record)`` for each, in seq order.
2. Commits each page once its last record was handled, with ``expect_seq`` = where the page
   started: at least once (a crash mid-page hands that page out again) and never a skipped
   record; a rival member of the group that moved the cursor meanwhile raises
   ``CursorConflictError`` instead of being overwritten.
3. A handler that raises stops the loop with its page uncommitted (the exception
   propagates). With ``until_caught_up`` the loop returns once a read finds nothing more;
   otherwise it long-polls (``wait_ms``) for as long as it runs.

The loop is written once, as steps (:func:`consume_steps`): a generator that yields what to
do to a handle and is sent the answer, with no I/O of its own. :func:`drive` runs steps on
a synchronous handle (``SyncEngine``, ``topics.Client``), :func:`adrive` on an async one
(``Engine``, ``topics.AsyncClient``), so the engine and both clients share one loop.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import AsyncGenerator, Callable, Coroutine, Generator
from contextlib import aclosing, closing
from dataclasses import dataclass
from functools import partial
from operator import methodcaller
from typing import Any, Generic, TypeVar, overload

import anyio

from .cursor_types import ConsumeStats
from .engine import Engine
from .errors import CursorNotFoundError
from .frontends.inproc import SyncEngine
from .types import Record

__all__ = [
    "Effect",
    "Emit",
    "Sleep",
    "Step",
    "adrive",
    "aiterate",
    "consume",
    "consume_steps",
    "drive",
    "iterate",
]

T = TypeVar("T")
Y = TypeVar("Y")

RecordHandler = Callable[[Record], object]

Step = Callable[[Any], object]
"""What to do next, applied to the handle (``methodcaller("diff", ...)``); what it returns
is sent back into the steps, awaited first by the async drivers when it is awaitable (an
async handle's method, a coroutine handler). What it raises is thrown into the steps."""


@dataclass(frozen=True, slots=True)
class Sleep:
    """A step: pause (``time.sleep`` or ``anyio.sleep``, as the driver runs)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Emit(Generic[Y]):
    """A step of an iterator's steps: hand ``item`` to whoever iterates."""

    item: Y


Effect = Step | Sleep


@dataclass(frozen=True, slots=True)
class _Done(Generic[T]):
    value: T


def _advance(steps: Generator[Any, Any, T], answer: Any, error: BaseException | None) -> Any:
    return steps.send(answer) if error is None else steps.throw(error)


def iterate(handle: object, steps: Generator[Effect | Emit[Y], Any, T]) -> Generator[Y, None, T]:
    """Run ``steps`` on a synchronous handle, yielding what they emit; returns their value."""
    answer: Any = None
    error: BaseException | None = None
    with closing(steps):
        while True:
            try:
                step = _advance(steps, answer, error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            answer, error = None, None
            if isinstance(step, Emit):
                yield step.item
                continue
            try:
                if isinstance(step, Sleep):
                    time.sleep(step.seconds)
                else:
                    answer = step(handle)
            except BaseException as exc:  # the steps decide; what they do not catch propagates
                error = exc


def drive(handle: object, steps: Generator[Effect, Any, T]) -> T:
    """Run ``steps`` on a synchronous handle and return their value."""
    run: Generator[object, None, T] = iterate(handle, steps)
    with closing(run):
        try:
            item = next(run)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
    raise TypeError(f"steps emitted {item!r} where a result was expected")


async def _aloop(
    handle: object, steps: Generator[Effect | Emit[Y], Any, T]
) -> AsyncGenerator[Y | _Done[T], None]:
    """:func:`iterate` on an async handle; the value comes last, as a :class:`_Done`."""
    answer: Any = None
    error: BaseException | None = None
    with closing(steps):
        while True:
            try:
                step = _advance(steps, answer, error)
            except StopIteration as stop:
                yield _Done(stop.value)
                return
            answer, error = None, None
            if isinstance(step, Emit):
                yield step.item
                continue
            try:
                if isinstance(step, Sleep):
                    await anyio.sleep(step.seconds)
                else:
                    answer = step(handle)
                    if inspect.isawaitable(answer):
                        answer = await answer
            except BaseException as exc:
                error = exc


async def adrive(handle: object, steps: Generator[Effect, Any, T]) -> T:
    """Run ``steps`` on an async handle (awaiting its answers) and return their value."""
    run: AsyncGenerator[object, None] = _aloop(handle, steps)
    async with aclosing(run):
        async for item in run:
            if isinstance(item, _Done):
                return item.value  # type: ignore[no-any-return]
            raise TypeError(f"steps emitted {item!r} where a result was expected")
    raise AssertionError("unreachable: the loop ends with its value")


async def aiterate(
    handle: object, steps: Generator[Effect | Emit[Y], Any, None]
) -> AsyncGenerator[Y, None]:
    """Run ``steps`` on an async handle, yielding what they emit."""
    run = _aloop(handle, steps)
    async with aclosing(run):
        async for item in run:
            if isinstance(item, _Done):
                return
            yield item


# -- the consume loop ----------------------------------------------------------------------


def _handle(handler: RecordHandler, record: Record, _handle: object) -> object:
    return handler(record)


def consume_steps(
    topic: str,
    group: str,
    handler: RecordHandler,
    *,
    limit: int = 0,
    wait_ms: int = 5000,
    until_caught_up: bool = False,
) -> Generator[Step, Any, ConsumeStats]:
    """The consume loop (module docstring) as steps over any handle with the engine's
    ``get_cursor``/``diff``/``put_cursor`` (an engine, the sync facade, either client)."""
    stats = ConsumeStats()
    try:
        current = (yield methodcaller("get_cursor", topic, group)).seq
    except CursorNotFoundError:
        current = 0
    stats.committed_seq = current
    wait = 0 if until_caught_up else wait_ms
    while True:
        res = yield methodcaller("diff", topic, from_seq=current, limit=limit, wait_ms=wait)
        for rec in res.records:
            yield partial(_handle, handler, rec)
            stats.records += 1
        if res.next_from_seq != current:
            yield methodcaller("put_cursor", topic, group, res.next_from_seq, expect_seq=current)
            current = stats.committed_seq = res.next_from_seq
            stats.batches += 1
        if until_caught_up and res.caught_up:
            return stats


@overload
def consume(
    engine: SyncEngine,
    topic: str,
    group: str,
    handler: RecordHandler,
    *,
    limit: int = 0,
    wait_ms: int = 5000,
    until_caught_up: bool = False,
) -> ConsumeStats: ...


@overload
def consume(
    engine: Engine,
    topic: str,
    group: str,
    handler: RecordHandler,
    *,
    limit: int = 0,
    wait_ms: int = 5000,
    until_caught_up: bool = False,
) -> Coroutine[Any, Any, ConsumeStats]: ...


def consume(
    engine: Engine | SyncEngine,
    topic: str,
    group: str,
    handler: RecordHandler,
    *,
    limit: int = 0,
    wait_ms: int = 5000,
    until_caught_up: bool = False,
) -> ConsumeStats | Coroutine[Any, Any, ConsumeStats]:
    """Handle every record of ``topic`` after group ``group``'s cursor (module docstring):
    ``await consume(engine, ...)`` with the async engine, plain ``consume(db, ...)`` with the
    sync facade. Returns the :class:`ConsumeStats` once it stops.

    Example::

        with topics.open(None) as db:
            db.write("orders", [{"data": i} for i in range(10)])
            stats = topics.consume(db, "orders", "billing", print, until_caught_up=True)
            assert stats.committed_seq == 10
    """
    steps = consume_steps(
        topic, group, handler, limit=limit, wait_ms=wait_ms, until_caught_up=until_caught_up
    )
    if isinstance(engine, SyncEngine):
        return drive(engine, steps)
    return adrive(engine, steps)
