"""Named consumer cursors on the engine (topics/cursors/ops.py rules 1-4, cursors/store.py)."""

from __future__ import annotations

from typing import Any

import pytest

from topics._clock import ManualClock
from topics.auth import Principal, owner_id_of
from topics.cursors.ops import CursorOps
from topics.cursors.store import CURSOR_PUT, Committed, Cursors, encode_put
from topics.engine import Engine, open_engine
from topics.errors import (
    CursorConflictError,
    CursorNotFoundError,
    InvalidRequestError,
    ThrottledError,
    TopicNotFoundError,
)
from topics.settings import Limits

from ._support import START_MS, with_limits


async def fill(engine: Engine, topic: str = "t", n: int = 5) -> None:
    await engine.write(topic, [{"data": i} for i in range(1, n + 1)])


async def test_commit_get_list_and_lag(engine):
    await fill(engine)
    info = await engine.put_cursor("t", "billing", 2)
    assert info.to_dict() == {
        "topic": "t",
        "cursor": "billing",
        "seq": 2,
        "head_seq": 5,
        "earliest_seq": 1,
        "lag": 3,
        "updated_ts": START_MS,
    }
    await engine.put_cursor("t", "audit", 5)
    assert (await engine.get_cursor("t", "billing")).seq == 2
    listed = await engine.list_cursors("t")
    assert [(c.cursor, c.seq, c.lag) for c in listed] == [("audit", 5, 0), ("billing", 2, 3)]
    await fill(engine)
    assert (await engine.get_cursor("t", "audit")).lag == 5


async def test_an_unknown_cursor_is_not_found_but_reads_from_the_start(engine):
    await fill(engine, n=3)
    with pytest.raises(CursorNotFoundError):
        await engine.get_cursor("t", "new")
    res = await engine.diff("t", cursor="new")
    assert [r.seq for r in res.records] == [1, 2, 3]
    with pytest.raises(CursorNotFoundError):
        await engine.get_cursor("t", "new")  # reading without commit creates nothing


async def test_diff_from_a_cursor_and_commit_after_the_answer(engine):
    await fill(engine)
    res = await engine.diff("t", cursor="g", commit=True, limit=2)
    assert [r.seq for r in res.records] == [1, 2]
    assert (await engine.get_cursor("t", "g")).seq == 2
    res = await engine.diff("t", cursor="g", commit=True)
    assert [r.seq for r in res.records] == [3, 4, 5]
    assert (await engine.get_cursor("t", "g")).seq == 5
    res = await engine.diff("t", cursor="g")
    assert res.records == []
    assert res.caught_up


async def test_compare_and_set(engine):
    await fill(engine)
    await engine.put_cursor("t", "g", 1, expect_seq=0)  # absent counts as 0
    await engine.put_cursor("t", "g", 3, expect_seq=1)
    with pytest.raises(CursorConflictError) as info:
        await engine.put_cursor("t", "g", 4, expect_seq=1)
    assert info.value.detail == {"topic": "t", "cursor": "g", "seq": 3, "expect_seq": 1}
    assert (await engine.get_cursor("t", "g")).seq == 3  # nothing changed
    await engine.put_cursor("t", "g", 1)  # a rewind is allowed
    assert (await engine.get_cursor("t", "g")).seq == 1


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"cursor": "bad name", "seq": 1}, "cursor"),
        ({"cursor": "", "seq": 1}, "cursor"),
        ({"cursor": "g", "seq": -1}, "seq"),
        ({"cursor": "g", "seq": 6}, "seq"),  # beyond the head
        ({"cursor": "g", "seq": 1, "expect_seq": "1"}, "expect_seq"),
    ],
)
async def test_bad_commits_are_400_and_change_nothing(engine, kwargs, field):
    await fill(engine)
    with pytest.raises(InvalidRequestError) as info:
        await engine.put_cursor("t", **kwargs)
    assert info.value.detail is not None
    assert info.value.detail["field"] == field
    assert await engine.list_cursors("t") == []


async def test_bad_read_arguments(engine):
    await fill(engine)
    with pytest.raises(InvalidRequestError, match="commit"):
        await engine.diff("t", commit=True)
    with pytest.raises(InvalidRequestError, match="from_seq or cursor"):
        await engine.diff("t", from_seq=2, cursor="g")
    with pytest.raises(InvalidRequestError, match="cursor"):
        await engine.diff("t", cursor="a/b")


async def test_missing_topic(engine):
    with pytest.raises(TopicNotFoundError):
        await engine.put_cursor("nope", "g", 0)
    with pytest.raises(TopicNotFoundError):
        await engine.list_cursors("nope")


async def test_delete_cursor_and_delete_with_the_topic(engine):
    await fill(engine)
    await engine.put_cursor("t", "g", 2)
    assert (await engine.delete_cursor("t", "g")).deleted
    assert not (await engine.delete_cursor("t", "g")).deleted
    await engine.put_cursor("t", "g", 2)
    await engine.delete_topic("t")
    await fill(engine)
    assert await engine.list_cursors("t") == []  # a recreated topic starts with none


@with_limits(max_cursors_per_topic=2)
async def test_the_cursor_cap(engine):
    await fill(engine)
    await engine.put_cursor("t", "a", 1)
    await engine.put_cursor("t", "b", 1)
    with pytest.raises(ThrottledError):
        await engine.put_cursor("t", "c", 1)
    await engine.put_cursor("t", "b", 2)  # an existing one still commits
    assert Limits().max_cursors_per_topic >= 100


async def test_cursor_lags_for_metrics(engine):
    await fill(engine, "a")
    await fill(engine, "b")
    await engine.put_cursor("a", "g", 1)
    await engine.put_cursor("b", "g", 5)
    assert [(c.topic, c.lag) for c in engine.cursor_lags()] == [("a", 4), ("b", 0)]
    assert [c.topic for c in engine.cursor_lags(lambda name: name == "b")] == ["b"]


async def test_cursors_survive_a_clean_restart(tmp_path):
    clock = ManualClock(START_MS)
    async with open_engine(str(tmp_path), clock=clock) as engine:
        await fill(engine)
        await engine.put_cursor("t", "g", 3)
        await engine.put_cursor("t", "gone", 1)
        await engine.delete_cursor("t", "gone")
    async with open_engine(str(tmp_path), clock=clock) as engine:
        assert [(c.cursor, c.seq) for c in await engine.list_cursors("t")] == [("g", 3)]
        res = await engine.diff("t", cursor="g")
        assert [r.seq for r in res.records] == [4, 5]


async def test_cursors_replay_from_the_wal_after_a_crash(tmp_path):
    """No final checkpoint: a snapshot in the manifest, then WAL entries after it."""
    clock = ManualClock(START_MS)
    async with open_engine(str(tmp_path), clock=clock) as engine:
        await fill(engine)
        await fill(engine, "doomed")
        await engine.put_cursor("t", "a", 1)
        await engine.put_cursor("t", "b", 2)
        await engine.put_cursor("doomed", "x", 2)
        await engine._store.checkpoint(engine._registry)  # type: ignore[union-attr]
        await engine.put_cursor("t", "a", 4)
        await engine.delete_cursor("t", "b")
        await engine.put_cursor("t", "c", 5)
        await engine.delete_topic("doomed")
        await engine._store.wal.flush()  # type: ignore[union-attr]
        engine._store = None  # a crash: no final checkpoint
    async with open_engine(str(tmp_path), clock=clock) as engine:
        assert [(c.cursor, c.seq) for c in await engine.list_cursors("t")] == [("a", 4), ("c", 5)]
        await fill(engine, "doomed")
        assert await engine.list_cursors("doomed") == []
        assert engine._cursors.snapshot()["topics"].keys() == {"1"}


async def test_a_data_directory_without_cursors_opens(tmp_path):
    """A manifest written before cursors existed has no "cursors" section."""
    clock = ManualClock(START_MS)
    async with open_engine(str(tmp_path), clock=clock) as engine:
        await fill(engine)
        store = engine._store
        assert store is not None
        store.extensions = [e for e in store.extensions if e.key != "cursors"]
    from topics._persistence.store import StorePaths
    from topics._storage.fs import RealFs
    from topics._storage.manifest import load_manifest

    loaded = load_manifest(RealFs(), StorePaths.for_dir(str(tmp_path)).manifest)
    assert loaded is not None
    assert "cursors" not in loaded[1]["extensions"]
    async with open_engine(str(tmp_path), clock=clock) as engine:
        assert await engine.list_cursors("t") == []
        await engine.put_cursor("t", "g", 1)
    async with open_engine(str(tmp_path), clock=clock) as engine:
        assert (await engine.get_cursor("t", "g")).seq == 1


# -- watch and WebSocket subscriptions from a cursor -------------------------------------


async def test_a_watch_starts_at_a_cursor_and_sent_frames_commit_to_it(engine):
    await fill(engine)
    await engine.put_cursor("t", "g", 2)
    created = await engine.create_watch({"t": {"cursor": "g", "commit": True}})
    assert created.topics["t"].from_seq == 2
    stream = engine.open_watch(created.wid)
    try:
        events = stream.feed.poll()
        assert events[0].from_seq == 2  # type: ignore[union-attr]
        assert events[0].to_seq == 5  # type: ignore[union-attr]
        stream.commit("t", 5, None, False)  # what the frontend calls once the bytes left
        assert (await engine.get_cursor("t", "g")).seq == 5
    finally:
        stream.close()


async def test_a_watch_without_commit_leaves_the_cursor_alone(engine):
    await fill(engine)
    await engine.put_cursor("t", "g", 1)
    created = await engine.create_watch({"t": {"cursor": "g"}})
    stream = engine.open_watch(created.wid)
    try:
        stream.commit("t", 5, None, False)
        assert (await engine.get_cursor("t", "g")).seq == 1
    finally:
        stream.close()


async def test_a_feed_subscription_from_a_cursor_commits_through_the_hub(engine):
    await fill(engine)
    feed = engine.open_watch_feed()
    try:
        marks = engine.watch_subscribe(feed, {"t": {"cursor": "new", "commit": True}})
        assert marks["t"].from_seq == 0  # never committed: from the start
        assert feed.topics["t"].commit_to == "new"
        hook = engine.watch_hub.on_delivered
        assert hook is not None
        hook(feed.topics["t"].log, "new", 3)
        assert (await engine.get_cursor("t", "new")).seq == 3
    finally:
        feed.close()


@pytest.mark.parametrize(
    "spec",
    [
        {"cursor": "g", "from_seq": 1},
        {"cursor": "g", "tail": True},
        {"commit": True},
        {"cursor": "bad name"},
        {"cursor": "g", "commit": "yes"},
    ],
)
async def test_bad_watch_cursor_options_are_400(engine, spec):
    await fill(engine)
    with pytest.raises(InvalidRequestError):
        await engine.create_watch({"t": spec})
    feed = engine.open_watch_feed()
    try:
        with pytest.raises(InvalidRequestError):
            engine.watch_subscribe(feed, {"t": spec})
        assert feed.topics == {}
    finally:
        feed.close()


async def test_a_delivery_commit_after_the_topic_is_gone_does_nothing(engine):
    await fill(engine)
    log = engine._registry.get("t")
    assert log is not None
    await engine.delete_topic("t")
    engine._commit_delivered(log, "g", 3)
    await fill(engine)
    assert await engine.list_cursors("t") == []


def test_the_sync_facade_has_the_cursor_methods(tmp_path):
    import topics

    with topics.open(str(tmp_path)) as db:
        db.write("t", [{"data": 1}, {"data": 2}])
        assert db.put_cursor("t", "g", 1).lag == 1
        assert db.get_cursor("t", "g").seq == 1
        assert [c.cursor for c in db.list_cursors("t")] == ["g"]
        assert [r.seq for r in db.diff("t", cursor="g", commit=True).records] == [2]
        assert db.delete_cursor("t", "g").deleted
    with topics.open(str(tmp_path)) as db:
        assert db.list_cursors("t") == []


# -- topics.consume: the embedded consumer-group loop ---------------------------------------


async def test_consume_with_the_async_engine(engine):
    import topics

    await fill(engine)
    seen: list[int] = []

    async def handler(rec: topics.Record) -> None:
        seen.append(rec.seq)

    stats = await topics.consume(engine, "t", "g", handler, limit=2, until_caught_up=True)
    assert seen == [1, 2, 3, 4, 5]
    assert (stats.batches, stats.records, stats.committed_seq) == (3, 5, 5)
    await fill(engine, n=1)
    again = await topics.consume(
        engine, "t", "g", lambda r: seen.append(r.seq), until_caught_up=True
    )
    assert seen[-1] == 6
    assert again.committed_seq == 6


async def test_consume_leaves_a_failed_page_uncommitted_and_refuses_a_rival(engine):
    import topics

    await fill(engine, n=4)

    def fail_at_3(rec: topics.Record) -> None:
        if rec.seq == 3:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        await topics.consume(engine, "t", "g", fail_at_3, limit=2, until_caught_up=True)
    assert (await engine.get_cursor("t", "g")).seq == 2

    async def rival(rec: topics.Record) -> None:
        await engine.put_cursor("t", "g", 4)

    with pytest.raises(CursorConflictError):
        await topics.consume(engine, "t", "g", rival, until_caught_up=True)
    assert (await engine.get_cursor("t", "g")).seq == 4


def test_consume_with_the_sync_facade_resumes_after_a_restart(tmp_path):
    import topics

    with topics.open(str(tmp_path)) as db:
        db.write("t", [{"data": i} for i in range(5)])
        seen: list[int] = []
        stats = topics.consume(
            db, "t", "billing", lambda r: seen.append(r.seq), limit=3, until_caught_up=True
        )
        assert (seen, stats.committed_seq) == ([1, 2, 3, 4, 5], 5)
        db.write("t", [{"data": 5}])
    with topics.open(str(tmp_path)) as db:
        seen = []
        topics.consume(db, "t", "billing", lambda r: seen.append(r.seq), until_caught_up=True)
        assert seen == [6]


# -- per-key bound and the metrics' cost (_cursor_ops rule 5) -------------------------------

READER = Principal(key_index=1, scopes=frozenset({"read"}), owner_id=owner_id_of("reader"))


@with_limits(max_cursors_per_key=2)
async def test_one_key_creates_at_most_its_cursors_however_it_commits(engine):
    await fill(engine, "a")
    await fill(engine, "b")
    await engine.put_cursor("a", "r0", 1, owner=READER)
    await engine.diff("b", cursor="r1", commit=True, owner=READER)
    throttled = {"limit": "max_cursors_per_key", "max": 2}
    with pytest.raises(ThrottledError) as refused:
        await engine.put_cursor("b", "r2", 1, owner=READER)
    assert refused.value.detail == throttled
    with pytest.raises(ThrottledError):
        await engine.diff("a", cursor="r2", commit=True, owner=READER)
    with pytest.raises(ThrottledError):
        await engine.create_watch({"a": {"cursor": "r2", "commit": True}}, owner=READER)
    feed = engine.open_watch_feed()
    try:
        with pytest.raises(ThrottledError):
            engine.watch_subscribe(feed, {"b": {"cursor": "r2", "commit": True}}, principal=READER)
        # A stream whose cursor is gone does not re-create it past the bound.
        hook = engine.watch_hub.on_delivered
        assert hook is not None
        hook(engine._registry.topics["a"], "r2", 3, READER)
        assert [c.cursor for c in await engine.list_cursors("a")] == ["r0"]
    finally:
        feed.close()
    assert (await engine.diff("a", cursor="r2")).record_count == 5  # no commit: no slot
    await engine.put_cursor("a", "r0", 4, owner=READER)  # its own cursors still commit
    await engine.put_cursor("a", "engine", 1)  # an engine caller is no key
    assert (await engine.delete_cursor("a", "r0")).deleted
    await engine.put_cursor("b", "r2", 1, owner=READER)  # the slot is free again


async def test_metrics_lags_build_only_the_cursors_they_show(engine, monkeypatch):
    for topic in ("a", "b", "c"):
        await fill(engine, topic)
        for i in range(20):
            await engine.put_cursor(topic, f"g{i:02d}", 1)
    built: list[str] = []
    real = CursorOps._cursor_info

    def counted(self: CursorOps, log: Any, cursor: str) -> Any:
        built.append(cursor)
        return real(self, log, cursor)

    monkeypatch.setattr(CursorOps, "_cursor_info", counted)
    shown = engine.cursor_lags(None, 25)
    assert [(c.topic, c.cursor) for c in shown] == [
        *(("a", f"g{i:02d}") for i in range(20)),
        *(("b", f"g{i:02d}") for i in range(5)),
    ]
    assert len(built) == 25, "a scrape built cursors it does not show"
    assert len(engine.cursor_lags()) == 60


def test_the_creating_key_survives_the_snapshot_and_the_log():
    """_cursors rule 5: the owner is in the manifest section and in CURSOR_PUT entries;
    entries and sections without one (older data) restore as no key."""
    held = Cursors()
    held.commit(1, "a", 1, 0, 3)
    held.commit(1, "b", 1, 0)
    logged = [
        (CURSOR_PUT, encode_put(2, "x", 1, 0, 3)),
        (CURSOR_PUT, encode_put(1, "a", 5, 0, 4)),  # a commit by another key: owner kept
        (CURSOR_PUT, b'[2, "old", 1, 0]'),
    ]
    again = Cursors()
    again.restore(held.snapshot(), logged)
    assert again.per_owner == {3: 2}
    assert again.get(1, "a") == Committed(5, 0, 3)
    again.drop_topic(2)
    assert again.per_owner == {3: 1}
    assert again.delete(1, "a")
    assert again.per_owner == {}
