"""Prefix watches and the backlog guard in the engine (topics.watch.prefix, _watch_guard;
issue 18 items 3-4): what a prefix covers, joins of topics created later (live and while
no stream was open), the allowlist narrowing, resume of joined topics, deletion and
recreation, and ``max_backlog`` with its two outcomes."""

from __future__ import annotations

from typing import Any

import pytest

from topics.auth import Principal
from topics.engine import Engine
from topics.errors import ForbiddenError, InvalidRequestError, TopicNotFoundError
from topics.watch.prefix import FeedJoiner
from topics.watch_types import (
    BacklogExceededError,
    BacklogExceededEvent,
    CaughtUpEvent,
    TopicAddedEvent,
    TopicDeletedEvent,
)

from ._support import recs, with_limits
from .test_watch_hub import drain, kinds, seqs

TENANT = Principal(0, frozenset({"read", "write"}), ("tenA-orders.",))


async def _topics(engine: Engine, **counts: int) -> None:
    for name, n in counts.items():
        await engine.put_topic(name.replace("_", "."))
        if n:
            await engine.write(name.replace("_", "."), recs(*range(n)))


# -- what a prefix covers --------------------------------------------------------------------


async def test_prefix_covers_existing_topics_from_their_start_or_tail(engine: Engine) -> None:
    await _topics(engine, orders_eu=3, orders_us=2, other=5)
    created = await engine.create_watch({}, topic_prefix={"orders.": {}})
    assert {n: w.from_seq for n, w in created.topics.items()} == {"orders.eu": 0, "orders.us": 0}
    assert created.to_dict()["topic_prefix"] == {
        "orders.": {"covers": ["orders."], "tail": False, "max_backlog": 0}
    }
    stream = engine.open_watch(created.wid)
    events = await drain(stream.feed)
    assert sorted(seqs(events)) == [1, 1, 2, 2, 3]
    assert "TopicAddedEvent" not in kinds(events)  # existing topics are in the answer
    stream.close()
    tail = await engine.create_watch(None, topic_prefix={"orders.": {"tail": True}})
    assert {n: w.from_seq for n, w in tail.topics.items()} == {"orders.eu": 3, "orders.us": 2}


async def test_named_topics_keep_their_own_start(engine: Engine) -> None:
    await _topics(engine, orders_eu=3, orders_us=2)
    created = await engine.create_watch({"orders.eu": {"from_seq": 2}}, topic_prefix=["orders."])
    assert {n: w.from_seq for n, w in created.topics.items()} == {"orders.eu": 2, "orders.us": 0}


@pytest.mark.parametrize(
    ("prefix", "field"),
    [
        ({}, "topic_prefix"),
        ("orders.", "topic_prefix"),
        ({"": {}}, "topic_prefix"),
        ({"bad prefix": {}}, "topic_prefix"),
        ({"a": {"from_seq": 1}}, "topic_prefix.a.from_seq"),
        ({"a": {"tail": 1}}, "topic_prefix.a.tail"),
        ({"a": {"max_backlog": -1}}, "topic_prefix.a.max_backlog"),
    ],
)
async def test_malformed_prefixes_are_400(engine: Engine, prefix: Any, field: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        await engine.create_watch({}, topic_prefix=prefix)
    assert info.value.detail == {"field": field}


@with_limits(max_watch_topics=2)
async def test_covered_topics_count_against_the_topic_cap(engine: Engine) -> None:
    await _topics(engine, a_1=0, a_2=0, a_3=0)
    with pytest.raises(InvalidRequestError) as info:
        await engine.create_watch({}, topic_prefix=["a."])
    assert info.value.detail is not None
    assert info.value.detail["topics"] == 3


async def test_prefix_is_narrowed_to_the_allowlist(engine: Engine) -> None:
    for name in ("tenA-orders.1", "tenA-audit", "tenB-orders.1"):
        await engine.write(name, recs(1), create=True)
    await engine.put_topic("tenA-orders-x")  # "tenA-orders." does not cover it
    created = await engine.create_watch({}, topic_prefix=["tenA-"], owner=TENANT)
    assert list(created.topics) == ["tenA-orders.1"]
    assert created.to_dict()["topic_prefix"]["tenA-"]["covers"] == ["tenA-orders."]
    stream = engine.open_watch(created.wid, owner=TENANT)
    await drain(stream.feed)
    await engine.put_topic("tenA-audit2")  # outside the narrowed prefix: never joins
    await engine.put_topic("tenA-orders.2")
    events = await drain(stream.feed)
    assert [e.topic for e in events if isinstance(e, TopicAddedEvent)] == ["tenA-orders.2"]
    stream.close()
    with pytest.raises(ForbiddenError) as info:
        await engine.create_watch({}, topic_prefix=["tenB-"], owner=TENANT)
    assert info.value.detail == {"topic_prefix": "tenB-"}


# -- joins -----------------------------------------------------------------------------------


async def test_a_topic_created_while_streaming_joins_from_its_first_record(
    engine: Engine,
) -> None:
    created = await engine.create_watch({}, topic_prefix=["orders."])
    assert created.topics == {}
    stream = engine.open_watch(created.wid)
    assert await drain(stream.feed) == []
    await engine.write("orders.new", recs(1, 2), create=True)  # created by its first write
    await engine.write("unrelated", recs(1), create=True)
    events = await drain(stream.feed)
    assert events[0] == TopicAddedEvent("orders.new", "orders.", events[0].head_seq, 0)
    assert seqs(events) == [1, 2]
    assert events[-1] == CaughtUpEvent("orders.new", 2, 2)
    assert set(stream.session.topics) == {"orders.new"}
    stream.close()


async def test_a_topic_created_while_away_joins_at_the_next_open(engine: Engine) -> None:
    await _topics(engine, orders_a=1)
    created = await engine.create_watch({}, topic_prefix=["orders."])
    stream = engine.open_watch(created.wid)
    await drain(stream.feed)
    stream.commit("orders.a", 1, None, False)
    stream.close()
    await engine.write("orders.b", recs(1, 2, 3), create=True)  # nobody listening
    stream = engine.open_watch(created.wid)
    assert {n: w.from_seq for n, w in stream.watermarks().items()} == {
        "orders.a": 1,
        "orders.b": 0,
    }
    events = await drain(stream.feed)
    added = [e for e in events if isinstance(e, TopicAddedEvent)]
    assert [(e.topic, e.cursor) for e in added] == [("orders.b", 0)]
    assert seqs(events) == [1, 2, 3]
    stream.close()
    # Not committed past the join: the next stream announces it again (at least once).
    stream = engine.open_watch(created.wid)
    assert "TopicAddedEvent" in kinds(await drain(stream.feed))
    stream.commit("orders.b", 3, None, False)
    stream.close()
    stream = engine.open_watch(created.wid)
    assert "TopicAddedEvent" not in kinds(await drain(stream.feed))
    stream.close()


async def test_a_cursor_older_than_a_join_rewinds_the_joined_topic(engine: Engine) -> None:
    await _topics(engine, orders_a=1)
    created = await engine.create_watch({}, topic_prefix=["orders."])
    stream = engine.open_watch(created.wid)
    await drain(stream.feed)
    await engine.write("orders.b", recs(1, 2, 3), create=True)
    await drain(stream.feed)
    stream.commit("orders.a", 1, None, False)
    stream.commit("orders.b", 3, None, False)  # sent, but the client crashed before it
    stream.close()
    # The client's last cursor map predates the join: it does not name orders.b.
    stream = engine.open_watch(created.wid, rewind={"orders.a": 1})
    assert stream.watermarks()["orders.b"].from_seq == 0
    events = [e for e in await drain(stream.feed) if e.topic == "orders.b"]
    assert seqs(events) == [1, 2, 3]
    assert kinds(events)[0] == "TopicAddedEvent"
    stream.close()


async def test_deleted_then_recreated_topic_rejoins_as_a_new_topic(engine: Engine) -> None:
    await _topics(engine, orders_a=2)
    created = await engine.create_watch({}, topic_prefix=["orders."])
    stream = engine.open_watch(created.wid)
    await drain(stream.feed)
    await engine.delete_topic("orders.a")
    assert await drain(stream.feed) == [TopicDeletedEvent("orders.a", 2, 2)]
    await engine.write("orders.a", recs(9), create=True)
    events = await drain(stream.feed)
    assert (kinds(events)[0], seqs(events)) == ("TopicAddedEvent", [1])
    stream.close()
    # Deleted and recreated while no stream was open: the new instance joins at 0.
    await engine.delete_topic("orders.a")
    await engine.write("orders.a", recs(7, 8), create=True)
    stream = engine.open_watch(created.wid)
    events = await drain(stream.feed)
    assert (kinds(events)[0], seqs(events)) == ("TopicAddedEvent", [1, 2])
    stream.close()


async def test_websocket_feed_joins_and_unsubscribes_by_prefix(engine: Engine) -> None:
    await _topics(engine, orders_a=1)
    feed = engine.open_watch_feed()
    marks = engine.watch_subscribe(feed, {}, topic_prefix={"orders.": {"tail": True}})
    assert {n: w.from_seq for n, w in marks.items()} == {"orders.a": 1}
    assert engine.watch_prefixes(feed)["orders."]["tail"] is True
    await drain(feed)
    await engine.write("orders.b", recs(1), create=True)
    events = await drain(feed)
    assert (kinds(events)[0], seqs(events)) == ("TopicAddedEvent", [1])
    assert sorted(engine.watch_unsubscribe_prefix(feed, ("orders.",))) == ["orders.a", "orders.b"]
    await engine.write("orders.c", recs(1), create=True)
    assert "orders.c" not in feed.topics
    feed.close()
    assert feed not in engine.watch_hub.joiners


async def test_closing_a_stream_stops_its_joins(engine: Engine) -> None:
    created = await engine.create_watch({}, topic_prefix=["orders."])
    stream = engine.open_watch(created.wid)
    assert stream.feed in engine.watch_hub.joiners
    stream.close()
    assert stream.feed not in engine.watch_hub.joiners
    await engine.put_topic("orders.x")  # joins the idle session at its next open only
    session = engine.watch_hub.session(created.wid)
    assert session is not None
    assert "orders.x" not in session.topics


# -- the backlog guard -------------------------------------------------------------------------


async def test_a_backlog_over_max_backlog_jumps_to_the_head(engine: Engine) -> None:
    await _topics(engine, a=10, b=3)
    created = await engine.create_watch({"a": {}, "b": {}}, max_backlog=5)
    stream = engine.open_watch(created.wid)
    events = await drain(stream.feed)
    jumped = [e for e in events if isinstance(e, BacklogExceededEvent)]
    assert jumped == [BacklogExceededEvent("a", 0, 10, 10, 5, 10)]
    assert seqs(events) == [1, 2, 3]  # b's three records replay; a's ten do not
    stream.commit("a", 10, None, False)
    stream.close()
    await engine.write("a", recs(*range(4)))
    stream = engine.open_watch(created.wid)  # resumed 4 behind: within the limit
    events = await drain(stream.feed)
    assert "BacklogExceededEvent" not in kinds(events)
    assert seqs(events)[:4] == [11, 12, 13, 14]
    stream.close()


async def test_per_topic_max_backlog_overrides_the_default(engine: Engine) -> None:
    await _topics(engine, a=10, b=10)
    stream_events = await drain(
        engine.open_watch(
            (await engine.create_watch({"a": {"max_backlog": 0}, "b": {}}, max_backlog=5)).wid
        ).feed
    )
    assert [e.topic for e in stream_events if isinstance(e, BacklogExceededEvent)] == ["b"]


async def test_on_backlog_error_is_409_at_creation(engine: Engine) -> None:
    await _topics(engine, a=10)
    with pytest.raises(BacklogExceededError) as info:
        await engine.create_watch({"a": {"max_backlog": 3}}, on_backlog="error")
    assert info.value.status == 409
    assert info.value.detail == {
        "topic": "a",
        "from_seq": 0,
        "head_seq": 10,
        "backlog": 10,
        "max_backlog": 3,
    }
    assert engine.watch_statistics().sessions == 0
    ok = await engine.create_watch({"a": {"from_seq": 8}}, max_backlog=3, on_backlog="error")
    assert ok.topics["a"].from_seq == 8
    with pytest.raises(InvalidRequestError):
        await engine.create_watch({"a": {}}, on_backlog="skip")


async def test_backlog_counts_from_the_earliest_retained_seq(engine: Engine) -> None:
    await engine.put_topic("a", {"cap_records": 3})
    await engine.write("a", recs(*range(10)))
    created = await engine.create_watch({"a": {}}, max_backlog=3, on_backlog="error")
    events = await drain(engine.open_watch(created.wid).feed)
    assert seqs(events) == [8, 9, 10]  # with its from_seq_too_old tombstone first
    assert kinds(events)[0] == "TombstoneEvent"


async def test_websocket_subscribe_checks_the_backlog_all_or_nothing(engine: Engine) -> None:
    await _topics(engine, a=10, b=1)
    feed = engine.open_watch_feed()
    with pytest.raises(BacklogExceededError):
        engine.watch_subscribe(feed, {"b": {}, "a": {}}, max_backlog=5, on_backlog="error")
    assert feed.topics == {}
    engine.watch_subscribe(feed, {"a": {}, "b": {}}, max_backlog=5)
    events = await drain(feed)
    assert [e.topic for e in events if isinstance(e, BacklogExceededEvent)] == ["a"]
    feed.close()


async def test_a_joined_topic_is_guarded_too(engine: Engine) -> None:
    created = await engine.create_watch({}, topic_prefix={"orders.": {"max_backlog": 2}})
    await engine.write("orders.x", recs(*range(5)), create=True)  # created while away
    events = await drain(engine.open_watch(created.wid).feed)
    assert kinds(events)[:2] == ["TopicAddedEvent", "BacklogExceededEvent"]
    assert seqs(events) == []


async def test_lenient_with_a_prefix_may_drop_every_named_topic(engine: Engine) -> None:
    await _topics(engine, orders_a=1)
    created = await engine.create_watch(
        {"orders.gone": {"from_seq": 3}}, topic_prefix=["orders."], lenient=True
    )
    assert list(created.topics) == ["orders.a"]
    with pytest.raises(TopicNotFoundError):
        await engine.create_watch({"orders.gone": {}}, topic_prefix=["orders."])


async def test_a_failing_join_never_fails_the_write(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    feed = engine.open_watch_feed()
    engine.watch_subscribe(feed, {}, topic_prefix=["orders."])

    def broken(self: object, log: object, candidates: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(FeedJoiner, "join", broken)
    res = await engine.write("orders.x", recs(1), create=True)
    assert res.first_seq == 1
    assert "joining topic 'orders.x' into a prefix watch failed" in caplog.text
    feed.close()
