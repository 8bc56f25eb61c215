"""Issue 18 on watches and WebSocket feeds: per-topic from_ts/to_ts/to_seq (an end event,
then the topic leaves the session), where and cloudevents (topics/watch/bounds.py)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
import ujson

from topics._clock import ManualClock
from topics.engine import Engine
from topics.errors import InvalidRequestError
from topics.watch.feed import WatchFeed
from topics.watch_types import CaughtUpEvent, EndReachedEvent, RecordBatch, WatchEvent

from ._support import START_MS
from .test_watch_hub import FakeSink


async def drain(feed: WatchFeed) -> list[WatchEvent]:
    await trio.testing.wait_all_tasks_blocked()
    out: list[WatchEvent] = []
    while events := feed.poll():
        out.extend(events)
    return out


def seqs(events: list[WatchEvent]) -> list[int]:
    return [
        r["$seq"] for e in events if isinstance(e, RecordBatch) for r in ujson.loads(e.records_json)
    ]


async def write_at(engine: Engine, clock: ManualClock, ms: int, *datas: Any) -> None:
    clock.set(START_MS + ms)
    await engine.write("t", [{"data": d} for d in datas])


async def test_session_from_ts_to_seq_ends_and_leaves_the_session(
    engine: Engine, clock: ManualClock
) -> None:
    await write_at(engine, clock, 0, 1, 2)
    await write_at(engine, clock, 100, 3, 4, 5)
    created = await engine.create_watch({"t": {"from_ts": START_MS + 50, "to_seq": 6}})
    assert created.topics["t"].from_seq == 2  # echoed resolved start
    stream = engine.open_watch(created.wid)
    events = await drain(stream.feed)
    assert seqs(events) == [3, 4, 5]
    assert isinstance(events[-1], CaughtUpEvent)
    for ev in events:
        stream.commit(ev.topic, ev.cursor, None, isinstance(ev, EndReachedEvent))
    await write_at(engine, clock, 200, 6, 7)
    events = await drain(stream.feed)
    assert seqs(events) == [6]
    assert isinstance(events[-1], EndReachedEvent)
    assert events[-1].cursor == 6
    assert "t" not in stream.feed.topics
    for ev in events:
        stream.commit(ev.topic, ev.cursor, None, isinstance(ev, EndReachedEvent))
    stream.close()
    again = engine.open_watch(created.wid)  # resumed: the ended topic stays gone
    assert await drain(again.feed) == []
    assert "t" not in again.feed.topics
    again.close()


async def test_subscribe_already_past_its_end_ends_at_once(
    engine: Engine, clock: ManualClock
) -> None:
    await write_at(engine, clock, 0, 1, 2, 3)
    feed = engine.open_watch_feed()
    marks = engine.watch_subscribe(feed, {"t": {"from_seq": 2, "to_seq": 2}})
    assert marks["t"].from_seq == 2
    events = await drain(feed)
    assert [type(e).__name__ for e in events] == ["EndReachedEvent"]
    feed.close()


async def test_to_ts_ends_before_the_first_later_record(engine: Engine, clock: ManualClock) -> None:
    await write_at(engine, clock, 0, 1)
    feed = engine.open_watch_feed()
    engine.watch_subscribe(feed, {"t": {"to_ts": START_MS + 10}})
    events = await drain(feed)
    assert seqs(events) == [1]
    assert not any(isinstance(e, EndReachedEvent) for e in events)
    await write_at(engine, clock, 5, 2)
    await write_at(engine, clock, 20, 3)
    events = await drain(feed)
    assert seqs(events) == [2]
    assert isinstance(events[-1], EndReachedEvent)
    assert events[-1].cursor == 2
    feed.close()


async def test_where_filters_the_feed_and_the_cursor_passes_refused_records(
    engine: Engine,
) -> None:
    feed = engine.open_watch_feed()
    await engine.write("t", [{"data": {"k": i % 3}} for i in range(9)])
    engine.watch_subscribe(feed, {"t": {"from_seq": 0}}, where=["data.k", "Eq", 0])
    events = await drain(feed)
    assert seqs(events) == [1, 4, 7]
    assert feed.topics["t"].cursor == 9
    await engine.write("t", [{"data": {"k": 1}}, {"data": {"k": 0}}])
    assert seqs(await drain(feed)) == [11]
    feed.close()


async def test_watchers_with_different_where_do_not_share_reads(engine: Engine) -> None:
    await engine.put_topic("t")
    a, b = engine.open_watch_feed(), engine.open_watch_feed()
    engine.watch_subscribe(a, {"t": {}}, where="x")
    engine.watch_subscribe(b, {"t": {}}, where="y")
    await drain(a)
    await drain(b)
    await engine.write("t", [{"data": 1, "tag": "x"}, {"data": 2, "tag": "y"}])
    assert seqs(await drain(a)) == [1]
    assert seqs(await drain(b)) == [2]
    a.close()
    b.close()


async def test_cloudevents_feed(engine: Engine) -> None:
    await engine.write("t", [{"data": {"a": 1}, "meta": {"type": "x.y"}}])
    feed = engine.open_watch_feed()
    engine.watch_subscribe(feed, {"t": {}}, format="cloudevents")
    (batch, _) = await drain(feed)
    assert isinstance(batch, RecordBatch)
    (ev,) = ujson.loads(batch.records_json)
    assert ev["id"] == "t@1"
    assert ev["type"] == "x.y"
    assert ev["data"] == {"a": 1}
    feed.close()


@pytest.mark.parametrize(
    ("topics", "kw", "field"),
    [
        ({"t": {"from_ts": 1, "from_seq": 3}}, {}, "topics.t.from_ts"),
        ({"t": {"from_ts": 1, "tail": True}}, {}, "topics.t.from_ts"),
        ({"t": {"to_seq": -1}}, {}, "topics.t.to_seq"),
        ({"t": {}}, {"where": ["data.k", "Nope", 1]}, "where"),
        ({"t": {}}, {"format": "avro"}, "format"),
    ],
)
async def test_bad_bounds_are_refused(
    engine: Engine, topics: dict[str, Any], kw: dict[str, Any], field: str
) -> None:
    await engine.write("t", [{"data": 1}])
    with pytest.raises(InvalidRequestError) as exc:
        await engine.create_watch(topics, **kw)
    assert exc.value.detail is not None
    assert exc.value.detail["field"] == field
    feed = engine.open_watch_feed()
    with pytest.raises(InvalidRequestError):
        engine.watch_subscribe(feed, topics, **kw)
    assert feed.topics == {}
    feed.close()


async def test_grouped_delivery_still_ends(
    engine: Engine, mock_clock: trio.testing.MockClock
) -> None:
    """Idle direct sinks at one cursor with the same end get one grouped read; the read
    that reaches the end is left to each stream, which then sends its end event."""
    await engine.put_topic("t")
    streams = []
    for _ in range(2):
        created = await engine.create_watch({"t": {"tail": True, "to_seq": 2}})
        streams.append(engine.open_watch(created.wid))
    for st in streams:
        await drain(st.feed)
    FakeSink.groups = []
    sinks = [FakeSink(st) for st in streams]
    mock_clock.jump(1)
    await engine.write("t", [{"data": 1}])
    assert FakeSink.groups == [([1], 2)]  # grouped while the end is not reached
    mock_clock.jump(1)
    await engine.write("t", [{"data": 2}, {"data": 3}])
    assert FakeSink.groups[1:] == []  # the end is not a plain batch: one by one
    assert [sk.singles for sk in sinks] == [[[2]]] * 2
    assert all("t" not in st.feed.topics for st in streams)
    for st in streams:
        st.close()
