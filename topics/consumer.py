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
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import Any, overload

from .cursor_types import ConsumeStats
from .engine import Engine
from .errors import CursorNotFoundError
from .frontends.inproc import SyncEngine
from .types import Record

__all__ = ["consume"]

RecordHandler = Callable[[Record], object]


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
    wait = 0 if until_caught_up else wait_ms
    if isinstance(engine, SyncEngine):
        return _consume_sync(engine, topic, group, handler, limit, wait, until_caught_up)
    return _consume_async(engine, topic, group, handler, limit, wait, until_caught_up)


def _consume_sync(
    db: SyncEngine,
    topic: str,
    group: str,
    handler: RecordHandler,
    limit: int,
    wait_ms: int,
    until_caught_up: bool,
) -> ConsumeStats:
    stats = ConsumeStats()
    try:
        current = db.get_cursor(topic, group).seq
    except CursorNotFoundError:
        current = 0
    stats.committed_seq = current
    while True:
        res = db.diff(topic, from_seq=current, limit=limit, wait_ms=wait_ms)
        for rec in res.records:
            handler(rec)
            stats.records += 1
        if res.next_from_seq != current:
            db.put_cursor(topic, group, res.next_from_seq, expect_seq=current)
            current = stats.committed_seq = res.next_from_seq
            stats.batches += 1
        if until_caught_up and res.caught_up:
            return stats


async def _consume_async(
    engine: Engine,
    topic: str,
    group: str,
    handler: RecordHandler,
    limit: int,
    wait_ms: int,
    until_caught_up: bool,
) -> ConsumeStats:
    stats = ConsumeStats()
    try:
        current = (await engine.get_cursor(topic, group)).seq
    except CursorNotFoundError:
        current = 0
    stats.committed_seq = current
    while True:
        res = await engine.diff(topic, from_seq=current, limit=limit, wait_ms=wait_ms)
        for rec in res.records:
            out = handler(rec)
            if inspect.isawaitable(out):
                await out
            stats.records += 1
        if res.next_from_seq != current:
            await engine.put_cursor(topic, group, res.next_from_seq, expect_seq=current)
            current = stats.committed_seq = res.next_from_seq
            stats.batches += 1
        if until_caught_up and res.caught_up:
            return stats
