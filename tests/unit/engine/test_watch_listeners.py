"""How the engine tells a watch frontend (topics/listener_types.py): the listener a stream
or feed is attached to is told of writes, prefix joins and the stream's end, and nothing
once detached; its answer decides whether the feed's waiting task wakes."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from topics.engine import Engine
from topics.watch.session import WatchStream
from topics.watch_types import RecordBatch, SessionGoneError, TopicAddedEvent, WatchEvent

from ._support import recs


class Listener:
    """A frontend stream as the engine sees it: counts what it is told; ``changed`` reads
    the feed (as a direct stream does) and answers ``answer``."""

    def __init__(self, stream: WatchStream, answer: bool = True) -> None:
        self.stream = stream
        self.answer = answer
        self.read: list[WatchEvent] = []
        self.changes = 0
        self.ends: list[object] = []

    def changed(self) -> bool:
        self.changes += 1
        if self.answer:
            self.read.extend(self.stream.feed.poll())
        return self.answer

    def stopped(self) -> None:
        self.ends.append(self.stream.end)

    @staticmethod
    def write_group(batch: RecordBatch, sinks: list[Any]) -> list[Any]:
        for sink in sinks:
            sink.read.append(batch)
            sink.stream.commit(batch.topic, batch.to_seq, None, False)
        return []


async def open_stream(engine: Engine, topics: dict[str, Any], **kw: Any) -> WatchStream:
    created = await engine.create_watch(topics, **kw)
    stream = engine.open_watch(created.wid)
    await trio.testing.wait_all_tasks_blocked()
    stream.feed.poll()  # the opening read: caught up
    return stream


async def wakes(stream: WatchStream, write: Any) -> bool:
    """Whether a task waiting on the stream's feed wakes when ``write`` runs."""
    woke = False

    async def waiter() -> None:
        nonlocal woke
        await stream.feed.wait()
        woke = True

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        await write()
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    return woke


async def test_a_listener_that_delivers_keeps_the_task_asleep(
    engine: Engine, mock_clock: trio.testing.MockClock
) -> None:
    await engine.put_topic("a")
    stream = await open_stream(engine, {"a": {"tail": True}})
    listener = Listener(stream)
    stream.attach(listener, direct=True)
    mock_clock.jump(1)
    assert not await wakes(stream, lambda: engine.write("a", recs(1)))
    assert [type(e) for e in listener.read] == [RecordBatch]
    stream.close()


async def test_a_listener_that_declines_wakes_the_task(
    engine: Engine, mock_clock: trio.testing.MockClock
) -> None:
    await engine.put_topic("a")
    stream = await open_stream(engine, {"a": {"tail": True}})
    listener = Listener(stream, answer=False)
    stream.attach(listener, direct=True)
    mock_clock.jump(1)
    assert await wakes(stream, lambda: engine.write("a", recs(1)))
    assert listener.changes == 1
    assert [type(e) for e in stream.feed.poll()] == [RecordBatch]  # the task reads it
    stream.close()


async def test_a_stream_attached_not_direct_hears_only_of_its_end(
    engine: Engine, mock_clock: trio.testing.MockClock
) -> None:
    await engine.put_topic("a")
    stream = await open_stream(engine, {"a": {"tail": True}})
    listener = Listener(stream)
    stream.attach(listener, direct=False)
    mock_clock.jump(1)
    assert await wakes(stream, lambda: engine.write("a", recs(1)))
    assert listener.changes == 0
    assert engine.close_watch(stream.session.wid)
    assert len(listener.ends) == 1
    assert isinstance(listener.ends[0], SessionGoneError)
    stream.close()


async def test_a_detached_stream_tells_nobody(
    engine: Engine, mock_clock: trio.testing.MockClock
) -> None:
    await engine.put_topic("a")
    stream = await open_stream(engine, {"a": {"tail": True}})
    listener = Listener(stream)
    stream.attach(listener, direct=True)
    stream.group(listener)
    stream.detach()
    assert stream.feed.sink is None
    mock_clock.jump(1)
    assert await wakes(stream, lambda: engine.write("a", recs(1)))
    engine.open_watch(stream.session.wid).close()  # supersedes it: no stop notice either
    assert (listener.changes, listener.read, listener.ends) == (0, [], [])
    stream.close()


async def test_a_grouped_sink_gets_the_batch_and_leaving_the_group_ends_that(
    engine: Engine, mock_clock: trio.testing.MockClock
) -> None:
    await engine.put_topic("a")
    stream = await open_stream(engine, {"a": {"tail": True}})
    listener = Listener(stream)
    stream.attach(listener, direct=True)
    stream.group(listener)
    mock_clock.jump(1)
    await engine.write("a", recs(1))
    assert (listener.changes, len(listener.read)) == (0, 1)  # write_group took it
    assert stream.session.cursors() == {"a": 1}
    stream.group(None)
    mock_clock.jump(1)
    await engine.write("a", recs(2))
    assert (listener.changes, len(listener.read)) == (1, 2)  # one by one now
    stream.close()


async def test_a_prefix_join_tells_the_listener(engine: Engine) -> None:
    created = await engine.create_watch(None, topic_prefix={"orders.": {}})
    stream = engine.open_watch(created.wid)
    await trio.testing.wait_all_tasks_blocked()
    stream.feed.poll()
    listener = Listener(stream)
    stream.attach(listener, direct=True)
    await engine.put_topic("orders.eu")
    await trio.testing.wait_all_tasks_blocked()  # the joined topic's relay passes
    assert listener.changes >= 1
    added = [e for e in listener.read if type(e) is TopicAddedEvent]
    assert [e.topic for e in added] == ["orders.eu"]
    stream.close()
