"""Prefix joins that scale (issue 30 finding 2): a creation reaches only the prefix watches
it matches, joins count against the subscription's topic cap and a join past it is
reported (``join-refused``), and nothing of a session is held after it ends."""

from __future__ import annotations

import gc

import trio
import trio.testing

from topics._clock import ManualClock
from topics.engine import Engine
from topics.watch.feed import FeedTopic
from topics.watch.session import SessionTopic, WatchSession
from topics.watch_types import JoinRefusedEvent, TopicAddedEvent

from ._support import recs, with_limits
from .test_watch_hub import drain, kinds


async def test_a_creation_calls_only_the_watches_its_name_matches(engine: Engine) -> None:
    streams = []
    for i in range(100):
        created = await engine.create_watch({}, topic_prefix=[f"w{i:03d}."])
        streams.append(engine.open_watch(created.wid))
    joins = engine.watch_hub.joiners
    assert len(joins) == 100
    before, probes = joins.joins, joins.probes
    for j in range(50):
        await engine.put_topic(f"elsewhere.{j}")  # under no watched prefix
    assert joins.joins == before  # no watch was even asked
    await engine.put_topic("w042.orders")
    assert joins.joins == before + 1
    assert joins.probes - probes == 51  # one length held: one probe per creation
    events = await drain(streams[42].feed)
    assert kinds(events)[0] == "TopicAddedEvent"
    assert await drain(streams[41].feed) == []
    for stream in streams:
        stream.close()
    assert len(joins) == 0


async def test_the_first_entry_covering_a_topic_still_wins(engine: Engine) -> None:
    created = await engine.create_watch(
        {}, topic_prefix={"a.": {"max_backlog": 0}, "a.b.": {"max_backlog": 7}}
    )
    stream = engine.open_watch(created.wid)
    await engine.put_topic("a.b.c")
    events = await drain(stream.feed)
    assert [e.prefix for e in events if isinstance(e, TopicAddedEvent)] == ["a."]
    stream.close()


@with_limits(max_watch_topics=3)
async def test_joins_past_the_topic_cap_are_refused_and_reported(engine: Engine) -> None:
    await engine.put_topic("p.0")
    created = await engine.create_watch({}, topic_prefix=["p."])
    stream = engine.open_watch(created.wid)
    await drain(stream.feed)
    for i in range(1, 5):
        await engine.write(f"p.{i}", recs(i), create=True)
    events = await drain(stream.feed)
    added = [e.topic for e in events if isinstance(e, TopicAddedEvent)]
    refused = [e for e in events if isinstance(e, JoinRefusedEvent)]
    assert added == ["p.1", "p.2"]
    assert refused == [JoinRefusedEvent("p.3", "p.", 1, 3), JoinRefusedEvent("p.4", "p.", 1, 3)]
    assert set(stream.session.topics) == {"p.0", "p.1", "p.2"}
    assert set(stream.feed.topics) == {"p.0", "p.1", "p.2"}  # the refused left the feed
    await engine.write("p.3", recs(2))
    assert [e for e in await drain(stream.feed) if e.topic == "p.3"] == []
    stream.close()
    await engine.put_topic("p.5")  # created while away: refused at the next open
    stream = engine.open_watch(created.wid)
    events = await drain(stream.feed)
    assert sorted(e.topic for e in events if isinstance(e, JoinRefusedEvent)) == [
        "p.3",
        "p.4",
        "p.5",
    ]
    stream.close()


@with_limits(max_watch_topics=2)
async def test_a_deleted_joined_topic_frees_its_place(engine: Engine) -> None:
    created = await engine.create_watch({}, topic_prefix=["p."])
    stream = engine.open_watch(created.wid)
    for round_ in range(5):  # a namespace that churns never fills the session
        name = f"p.{round_}"
        await engine.put_topic(name)
        events = await drain(stream.feed)
        assert "JoinRefusedEvent" not in kinds(events)
        for ev in events:
            stream.commit(ev.topic, ev.cursor, None, False)
        await engine.delete_topic(name)
        for ev in await drain(stream.feed):
            stream.commit(ev.topic, ev.cursor, None, type(ev).__name__ == "TopicDeletedEvent")
    await engine.put_topic("p.a")
    await engine.put_topic("p.b")
    await engine.put_topic("p.c")
    events = await drain(stream.feed)
    assert [e.topic for e in events if isinstance(e, JoinRefusedEvent)] == ["p.c"]
    assert len(stream.session.topics) <= 3  # two live, at most one dead one left
    stream.close()


@with_limits(max_watch_topics=2)
async def test_a_websocket_feed_counts_its_joins_against_the_cap(engine: Engine) -> None:
    feed = engine.open_watch_feed()
    engine.watch_subscribe(feed, {}, topic_prefix=["q."])
    for i in range(3):
        await engine.put_topic(f"q.{i}")
    events = await drain(feed)
    assert [e.topic for e in events if isinstance(e, TopicAddedEvent)] == ["q.0", "q.1"]
    assert [e.topic for e in events if isinstance(e, JoinRefusedEvent)] == ["q.2"]
    assert set(feed.topics) == {"q.0", "q.1"}
    feed.close()


async def test_nothing_of_a_session_is_held_after_it_ends(
    engine: Engine, clock: ManualClock
) -> None:
    hub = engine.watch_hub
    created = await engine.create_watch({}, topic_prefix=["m."])
    stream = engine.open_watch(created.wid)
    for i in range(20):
        await engine.write(f"m.{i}", recs(i), create=True)
    await drain(stream.feed)
    assert len(_held(created.wid)) == 41  # the session, its 20 topics, their 20 feed topics
    assert len(hub._topics) == 20
    stream.close()
    del stream
    assert len(hub._topics) == 0  # no listener, relay or read cache per joined topic
    assert len(hub.joiners) == 0
    clock.advance(hub.settings.session_ttl_ms + 1)
    await engine.create_watch({}, topic_prefix=["other."])  # a GC pass
    assert hub.session(created.wid) is None
    await trio.testing.wait_all_tasks_blocked()  # the cancelled relays end
    assert _held(created.wid) == []


def _held(wid: str) -> list[object]:
    """What is still alive of session ``wid``: it, its topics and its feed's topics."""
    gc.collect()
    sessions = [o for o in gc.get_objects() if isinstance(o, WatchSession) and o.wid == wid]
    topics = [
        o
        for o in gc.get_objects()
        if isinstance(o, SessionTopic | FeedTopic) and o.name.startswith("m.")
    ]
    return [*sessions, *topics]
