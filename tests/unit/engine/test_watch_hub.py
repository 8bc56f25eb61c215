"""The watch hub (topics.watch.hub via Engine.create_watch/open_watch/watch_subscribe).

Engine-level behaviour of live delivery: session validation, the wid and its key binding,
GC on the engine clock, the caps, feed events (batching, caught-up, tombstones,
topic-deleted), wake-ups through the topic's ParkingLot, synchronous fan-out inside a
write, the shared read/encode cache, resume order and strong consistency.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, ClassVar

import pytest
import trio
import trio.testing
import ujson

from tests.support.fakedisk import FakeDisk
from topics._clock import ManualClock
from topics.auth import Principal
from topics.engine import Engine, open_engine
from topics.errors import (
    InvalidRequestError,
    NotFoundError,
    ThrottledError,
    TopicNotFoundError,
    UnauthorizedError,
)
from topics.watch.feed import WatchFeed
from topics.watch.hub import WatchStream
from topics.watch_types import (
    CaughtUpEvent,
    RecordBatch,
    SessionGoneError,
    TombstoneEvent,
    TopicDeletedEvent,
    WatchEvent,
)

from ._support import recs, with_limits

KEY_A = Principal(0, frozenset({"read"}))
KEY_B = Principal(1, frozenset({"read"}))


async def drain(feed: WatchFeed) -> list[WatchEvent]:
    """Every event the feed has now (after the relays have run)."""
    await trio.testing.wait_all_tasks_blocked()
    out: list[WatchEvent] = []
    while events := feed.poll():
        out.extend(events)
    return out


def kinds(events: list[WatchEvent]) -> list[str]:
    return [type(e).__name__ for e in events]


def seqs(events: list[WatchEvent]) -> list[int]:
    return [
        r["$seq"] for e in events if isinstance(e, RecordBatch) for r in ujson.loads(e.records_json)
    ]


async def open_session(engine: Engine, topics: dict[str, Any], **kw: Any) -> WatchStream:
    created = await engine.create_watch(topics, **kw)
    return engine.open_watch(created.wid, owner=kw.get("owner"))


# -- POST validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topics", "field"),
    [
        ({}, "topics"),
        ([], "topics"),
        ({"bad name!": {}}, "topics"),
        ({"a": {"from_seq": -1}}, "topics.a.from_seq"),
        ({"a": {"tail": "yes"}}, "topics.a.tail"),
        ({"a": {"form_seq": 1}}, "topics.a.form_seq"),
        ({"a": 7}, "topics.a"),
    ],
)
async def test_create_watch_rejects_malformed_topics(
    engine: Engine, topics: Any, field: str
) -> None:
    await engine.put_topic("a")
    with pytest.raises(InvalidRequestError) as info:
        await engine.create_watch(topics)
    assert info.value.detail is not None
    assert info.value.detail["field"] == field


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"consistency": "linear"}, "consistency"),
        ({"limit": -1}, "limit"),
        ({"include_data": 1}, "include_data"),
        ({"node": ""}, "node"),
        ({"heartbeat_ms": "x"}, "heartbeat_ms"),
    ],
)
async def test_create_watch_rejects_bad_options(
    engine: Engine, kw: dict[str, Any], field: str
) -> None:
    await engine.put_topic("a")
    with pytest.raises(InvalidRequestError) as info:
        await engine.create_watch({"a": {}}, **kw)
    assert info.value.detail is not None
    assert info.value.detail["field"] == field


@with_limits(max_watch_topics=2)
async def test_create_watch_caps_topics_per_watch(engine: Engine) -> None:
    for name in "abc":
        await engine.put_topic(name)
    await engine.create_watch({"a": {}, "b": {}})
    with pytest.raises(InvalidRequestError, match="at most 2"):
        await engine.create_watch({"a": {}, "b": {}, "c": {}})


async def test_unknown_topic_is_404_unless_lenient(engine: Engine) -> None:
    await engine.put_topic("a")
    with pytest.raises(TopicNotFoundError):
        await engine.create_watch({"a": {}, "ghost": {}})
    created = await engine.create_watch({"a": {}, "ghost": {}}, lenient=True)
    assert list(created.topics) == ["a"]
    with pytest.raises(TopicNotFoundError):  # nothing left to watch
        await engine.create_watch({"ghost": {}}, lenient=True)


async def test_tail_and_watermarks(engine: Engine, clock: ManualClock) -> None:
    await engine.put_topic("a", {"cap_records": 3})
    await engine.write("a", recs(*range(5)))
    created = await engine.create_watch({"a": {"tail": True}})
    assert created.topics["a"].to_dict() == {"from_seq": 5, "head_seq": 5, "earliest_seq": 3}
    created = await engine.create_watch({"a": {"from_seq": 1}})
    assert created.topics["a"].to_dict() == {"from_seq": 1, "head_seq": 5, "earliest_seq": 3}
    assert created.session_ttl_ms == 300_000


async def test_wid_is_128_random_bits(engine: Engine) -> None:
    await engine.put_topic("a")
    wids = {(await engine.create_watch({"a": {}})).wid for _ in range(50)}
    assert len(wids) == 50
    for wid in wids:
        assert wid.startswith("wid_")
        assert len(wid) == 26
        assert len(base64.urlsafe_b64decode(wid[4:] + "==")) == 16


# -- opening: errors, binding ------------------------------------------------------------------


async def test_open_errors(engine: Engine) -> None:
    await engine.put_topic("a")
    with pytest.raises(InvalidRequestError):
        engine.open_watch("wid_short")
    with pytest.raises(NotFoundError) as info:
        engine.open_watch("wid_" + "A" * 22)
    assert info.value.code == "not_found"


async def test_session_is_bound_to_the_creating_key(engine: Engine) -> None:
    await engine.put_topic("a")
    created = await engine.create_watch({"a": {}}, owner=KEY_A)
    with pytest.raises(UnauthorizedError):
        engine.open_watch(created.wid, owner=KEY_B)
    with pytest.raises(UnauthorizedError):
        engine.open_watch(created.wid, owner=None)
    engine.open_watch(created.wid, owner=KEY_A).close()
    dev = await engine.create_watch({"a": {}})  # auth disabled: the wid alone opens it
    engine.open_watch(dev.wid).close()


# -- GC and caps ---------------------------------------------------------------------------------


async def test_idle_session_is_collected_after_ttl(engine: Engine, clock: ManualClock) -> None:
    await engine.put_topic("a")
    created = await engine.create_watch({"a": {}})
    clock.advance(300_000)
    engine.open_watch(created.wid).close()  # exactly the ttl: still there; closing restarts it
    clock.advance(300_001)
    with pytest.raises(NotFoundError):
        engine.open_watch(created.wid)
    assert engine.watch_statistics().sessions == 0


async def test_gc_runs_on_create_and_never_takes_an_open_session(
    engine: Engine, clock: ManualClock
) -> None:
    await engine.put_topic("a")
    idle = await engine.create_watch({"a": {}})
    busy = await engine.create_watch({"a": {}})
    stream = engine.open_watch(busy.wid)
    clock.advance(10_000_000)
    await engine.create_watch({"a": {}})  # the POST collects the idle one
    assert engine.watch_hub.session(idle.wid) is None
    assert engine.watch_hub.session(busy.wid) is not None
    stream.close()
    clock.advance(1_000)
    engine.open_watch(busy.wid).close()  # the idle clock started at close, not at create


@with_limits(max_watch_sessions=2)
async def test_max_watch_sessions_is_429(engine: Engine, clock: ManualClock) -> None:
    await engine.put_topic("a")
    await engine.create_watch({"a": {}})
    await engine.create_watch({"a": {}})
    with pytest.raises(ThrottledError) as info:
        await engine.create_watch({"a": {}})
    assert info.value.detail == {"limit": "max_watch_sessions", "max": 2}
    clock.advance(300_001)
    await engine.create_watch({"a": {}})  # GC freed the slots


@with_limits(max_sse_connections=2, max_sse_connections_per_key=1)
async def test_connection_caps_global_and_per_key(engine: Engine) -> None:
    await engine.put_topic("a")
    a = await engine.create_watch({"a": {}}, owner=KEY_A)
    first = engine.open_watch(a.wid, owner=KEY_A)
    a2 = await engine.create_watch({"a": {}}, owner=KEY_A)
    with pytest.raises(ThrottledError) as info:
        engine.open_watch(a2.wid, owner=KEY_A)
    assert info.value.detail == {"limit": "max_sse_connections_per_key", "max": 1}
    slot = engine.acquire_stream_slot(-1)  # a dev-mode WebSocket: the global cap only
    b = await engine.create_watch({"a": {}}, owner=KEY_B)
    with pytest.raises(ThrottledError) as info:
        engine.open_watch(b.wid, owner=KEY_B)
    assert info.value.detail == {"limit": "max_sse_connections", "max": 2}
    first.close()
    slot.release()
    engine.open_watch(b.wid, owner=KEY_B).close()
    assert engine.watch_statistics().connections == 0


# -- events ------------------------------------------------------------------------------------


async def test_backlog_is_batched_within_limit_then_caught_up(engine: Engine) -> None:
    await engine.put_topic("a")
    await engine.write("a", recs(*range(7)))
    stream = await open_session(engine, {"a": {"from_seq": 0}}, limit=3)
    events = await drain(stream.feed)
    assert kinds(events) == ["RecordBatch"] * 3 + ["CaughtUpEvent"]
    batches = [e for e in events if isinstance(e, RecordBatch)]
    assert [(b.from_seq, b.to_seq, b.head_seq) for b in batches] == [
        (0, 3, 7),
        (3, 6, 7),
        (6, 7, 7),
    ]
    assert seqs(events) == list(range(1, 8))
    assert events[-1] == CaughtUpEvent("a", 7, 7)
    await engine.write("a", recs(7))
    events = await drain(stream.feed)  # live: records, no second caught-up
    assert kinds(events) == ["RecordBatch"]
    stream.close()


async def test_byte_budget_still_delivers_one_record(engine: Engine) -> None:
    await engine.put_topic("a")
    await engine.write("a", recs("x" * 500, "y" * 500))
    stream = await open_session(engine, {"a": {}}, max_batch_bytes=10)
    events = await drain(stream.feed)
    assert [len(ujson.loads(e.records_json)) for e in events if isinstance(e, RecordBatch)] == [
        1,
        1,
    ]
    stream.close()


async def test_caught_up_on_every_backlog_to_live_transition(engine: Engine) -> None:
    await engine.put_topic("a")
    stream = await open_session(engine, {"a": {}}, limit=2)
    assert kinds(await drain(stream.feed)) == ["CaughtUpEvent"]
    await engine.write("a", recs(1, 2, 3, 4, 5))  # more than one window: a backlog again
    assert kinds(await drain(stream.feed)) == ["RecordBatch"] * 3 + ["CaughtUpEvent"]
    stream.close()


async def test_projection_and_node_filter(engine: Engine) -> None:
    await engine.put_topic("a")
    await engine.write("a", [{"data": 1, "tag": "t", "meta": {"m": 1}}])
    await engine.write("a", recs(2), node="me")
    await engine.write("a", recs(3), node="other")
    stream = await open_session(
        engine, {"a": {}}, node="me", include_data=False, include_tags=True, include_meta=False
    )
    events = await drain(stream.feed)
    records = [r for e in events if isinstance(e, RecordBatch) for r in ujson.loads(e.records_json)]
    assert [(r["$seq"], "data" in r, r.get("$tag"), "meta" in r) for r in records] == [
        (1, False, "t", False),
        (3, False, None, False),
    ]
    assert events[-1] == CaughtUpEvent("a", 3, 3)  # the filtered seq 2 still moved the cursor
    stream.close()


async def test_cursor_below_the_floor_gets_from_seq_too_old_on_connect(engine: Engine) -> None:
    await engine.put_topic("a", {"cap_records": 2})
    await engine.write("a", recs(*range(5)))
    stream = await open_session(engine, {"a": {"from_seq": 0}})
    events = await drain(stream.feed)
    tomb = events[0]
    assert isinstance(tomb, TombstoneEvent)
    assert (tomb.tombstone.reason, tomb.tombstone.gap_from, tomb.tombstone.gap_to) == (
        "from_seq_too_old",
        1,
        3,
    )
    assert tomb.cursor == 3
    assert seqs(events) == [4, 5]
    # Later loss while streaming keeps the engine's reason.
    await engine.write("a", recs(*range(5)))  # the watcher at seq 5 falls behind the floor
    events = await drain(stream.feed)
    assert isinstance(events[0], TombstoneEvent)
    assert events[0].tombstone.reason == "cap"
    stream.close()


async def test_recreated_and_deleted_topics(engine: Engine) -> None:
    await engine.put_topic("a")
    await engine.put_topic("b")
    await engine.write("a", recs(1, 2))
    stream = await open_session(engine, {"a": {}, "b": {}})
    await drain(stream.feed)
    await engine.delete_topic("a")
    events = await drain(stream.feed)
    assert events == [TopicDeletedEvent("a", 2, 2)]
    await engine.write("b", recs(1))  # the rest of the stream continues
    assert kinds(await drain(stream.feed)) == ["RecordBatch"]
    stream.close()
    # A cursor from the future (deleted + recreated) is a "recreated" tombstone.
    await engine.write("a", recs(1))
    created = await engine.create_watch({"a": {"from_seq": 9}})
    events = await drain(engine.open_watch(created.wid).feed)
    assert isinstance(events[0], TombstoneEvent)
    assert events[0].tombstone.reason == "recreated"


async def test_lossy_topic_degrades_to_a_tombstone_and_a_jump(engine: Engine) -> None:
    await engine.put_topic("lossy", {"ttl_ms": 60_000})
    await engine.put_topic("durable")
    await engine.write("lossy", recs(*range(10)))
    await engine.write("durable", recs(*range(10)))
    stream = await open_session(engine, {"lossy": {}, "durable": {}})
    assert stream.feed.degrade_lossy() == ["lossy"]
    events = await drain(stream.feed)
    lossy = [e for e in events if e.topic == "lossy"]
    assert isinstance(lossy[0], TombstoneEvent)
    assert lossy[0].tombstone.reason == "from_seq_too_old"
    assert (lossy[0].tombstone.gap_from, lossy[0].tombstone.gap_to) == (1, 10)
    assert kinds(lossy[1:]) == ["CaughtUpEvent"]
    assert seqs([e for e in events if e.topic == "durable"]) == list(range(1, 11))
    stream.close()


# -- wake-ups and the shared cache -----------------------------------------------------------


async def test_a_write_wakes_the_feed_through_the_parking_lot(engine: Engine) -> None:
    await engine.put_topic("a")
    stream = await open_session(engine, {"a": {"tail": True}})
    await drain(stream.feed)
    woke = trio.Event()

    async def waiter() -> None:
        await stream.feed.wait()
        woke.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        stream.feed.poll()  # swallow the relay's start-up mark
        assert not woke.is_set()
        await engine.write("a", recs(1))
        await woke.wait()
    assert seqs(await drain(stream.feed)) == [1]
    stream.close()


async def test_one_read_and_one_encoding_for_many_watchers(engine: Engine) -> None:
    await engine.put_topic("a")
    streams = [await open_session(engine, {"a": {"tail": True}}) for _ in range(100)]
    for s in streams:
        await drain(s.feed)
    hub = engine.watch_hub
    before = hub.reads
    await engine.write("a", recs(1, 2))
    await trio.testing.wait_all_tasks_blocked()
    batches = [e for s in streams for e in s.feed.poll() if isinstance(e, RecordBatch)]
    assert len(batches) == 100
    assert hub.reads - before == 1  # one read for everyone at the same cursor and shape
    assert all(b is batches[0] for b in batches)
    for s in streams:
        s.close()


# -- synchronous fan-out (hub rule 1) ----------------------------------------------------------


class Told:
    """A listener (``topics.listener_types.ChangeListener``) whose ``changed`` is ``fn``;
    ``stopped`` records the stream's end, as a frontend's final frame would carry it."""

    def __init__(self, fn: Callable[[], bool], stream: WatchStream | None = None) -> None:
        self.fn = fn
        self.stream = stream
        self.ends: list[object] = []

    def changed(self) -> bool:
        return self.fn()

    def stopped(self) -> None:
        assert self.stream is not None
        self.ends.append(self.stream.end)


def record_deliveries(stream: WatchStream) -> list[tuple[bool, list[int]]]:
    """Make ``stream``'s feed deliver through a hook (as an idle SSE stream does) that notes
    whether it ran in the test's own task (inside the publishing call) and what it read."""
    calls: list[tuple[bool, list[int]]] = []
    me = trio.lowlevel.current_task()

    def deliver() -> bool:
        calls.append((trio.lowlevel.current_task() is me, seqs(stream.feed.poll())))
        return True

    stream.feed.attach(Told(deliver))
    return calls


async def test_a_quiet_topic_is_delivered_inside_the_write(
    engine: Engine, mock_clock: trio.testing.MockClock
) -> None:
    await engine.put_topic("a")
    stream = await open_session(engine, {"a": {"tail": True}})
    await drain(stream.feed)
    calls = record_deliveries(stream)
    mock_clock.jump(1)
    await engine.write("a", recs(1))
    assert calls == [(True, [1])]
    # Within the quiet window the topic counts as busy: the relay delivers once the
    # publisher yields (and would coalesce more publishes into the same pass).
    await engine.write("a", recs(2))
    await trio.testing.wait_all_tasks_blocked()
    assert calls[1:] == [(False, [2])]
    mock_clock.jump(1)
    await engine.write("a", recs(3))
    assert calls[2:] == [(True, [3])]
    stream.close()


async def test_many_listeners_and_strong_ones_go_through_the_relay(
    engine: Engine, mock_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("topics.watch.hub.SYNC_FANOUT", 2)
    await engine.put_topic("a")
    streams = [await open_session(engine, {"a": {"tail": True}}) for _ in range(3)]
    for s in streams:
        await drain(s.feed)
    calls = [record_deliveries(s) for s in streams]
    mock_clock.jump(1)
    await engine.write("a", recs(1))
    await trio.testing.wait_all_tasks_blocked()
    assert calls == [[(False, [1])]] * 3
    streams.pop().close()  # two listeners: at the bound, synchronous again
    calls.pop()
    mock_clock.jump(1)
    await engine.write("a", recs(2))
    assert calls == [[(False, [1]), (True, [2])]] * 2
    strong = await open_session(engine, {"a": {"tail": True}}, consistency="strong")
    await drain(strong.feed)
    streams.pop().close()  # still two listeners, one of them strong (rule 5)
    strong_calls = record_deliveries(strong)
    mock_clock.jump(1)
    await engine.write("a", recs(3))
    await trio.testing.wait_all_tasks_blocked()
    assert calls[0][2:] == [(False, [3])]
    assert strong_calls == [(False, [3])]
    streams[0].close()
    strong.close()


async def test_a_failing_synchronous_delivery_never_fails_the_write(
    engine: Engine, mock_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    await engine.put_topic("a")
    stream = await open_session(engine, {"a": {"tail": True}})
    await drain(stream.feed)
    calls: list[list[int]] = []

    def deliver() -> bool:
        if not calls:
            calls.append([])
            raise RuntimeError("boom")
        calls.append(seqs(stream.feed.poll()))
        return True

    stream.feed.attach(Told(deliver))
    mock_clock.jump(1)
    result = await engine.write("a", recs(1))
    assert result.seqs == [1]
    await trio.testing.wait_all_tasks_blocked()
    assert calls == [[], [1]]  # the relay delivered what the failed call did not
    assert "synchronous watch fan-out failed" in caplog.text
    stream.close()


async def test_the_publish_hook_lives_while_the_topic_is_watched(engine: Engine) -> None:
    await engine.put_topic("a")
    log = engine._registry.get("a")
    assert log is not None
    assert log.listeners == ()
    one = await open_session(engine, {"a": {"tail": True}})
    two = await open_session(engine, {"a": {"tail": True}})
    assert len(log.listeners) == 1  # one listener per watched topic, however many feeds
    one.close()
    assert len(log.listeners) == 1
    two.close()
    assert log.listeners == ()


# -- resume order ------------------------------------------------------------------------------


async def test_session_cursors_move_only_on_commit_and_rewind_never_advances(
    engine: Engine,
) -> None:
    await engine.put_topic("a")
    await engine.put_topic("b")
    await engine.write("a", recs(*range(10)))
    await engine.write("b", recs(*range(10)))
    created = await engine.create_watch({"a": {}, "b": {}})
    stream = engine.open_watch(created.wid)
    await drain(stream.feed)
    stream.commit("a", 10, None, False)  # only "a"'s frame left the server
    stream.close()
    session = engine.watch_hub.session(created.wid)
    assert session is not None
    assert session.cursors() == {"a": 10, "b": 0}
    # Last-Event-ID rewinds "a" to 4; "b" at 7 would be an advance: ignored.
    stream = engine.open_watch(created.wid, rewind={"a": 4, "b": 7, "ghost": 1})
    assert {n: w.from_seq for n, w in stream.watermarks().items()} == {"a": 4, "b": 0}
    stream.close()


async def test_checkpoint_rewind_undoes_later_frames(engine: Engine) -> None:
    await engine.put_topic("a")
    created = await engine.create_watch({"a": {}})
    stream = engine.open_watch(created.wid)
    for cursor in (1, 2, 3):
        stream.commit("a", cursor, stream.next_frame_no(), False)
    stream.close()
    stream = engine.open_watch(created.wid, rewind=1)  # frame 1 carried cursor 1
    assert stream.watermarks()["a"].from_seq == 1
    stream.close()


async def test_newer_stream_supersedes_and_kill_is_410(engine: Engine) -> None:
    await engine.put_topic("a")
    created = await engine.create_watch({"a": {}})
    old = engine.open_watch(created.wid)
    told = Told(lambda: True, old)
    old.attach(told, direct=False)
    new = engine.open_watch(created.wid)
    assert told.ends == ["superseded"]
    old.commit("a", 99, None, False)  # a superseded stream's frames no longer count
    old.close()
    session = engine.watch_hub.session(created.wid)
    assert session is not None
    assert session.stream is new
    assert session.cursors() == {"a": 0}
    assert engine.close_watch(created.wid)
    assert isinstance(new.end, SessionGoneError)
    assert new.end.status == 410
    new.close()
    with pytest.raises(NotFoundError):
        engine.open_watch(created.wid)


# -- strong consistency ------------------------------------------------------------------------


class _GatedHandle:
    def __init__(self, inner: Any, gate: threading.Event, armed: list[bool]) -> None:
        self._inner, self._gate, self._armed = inner, gate, armed

    def sync_data(self) -> None:
        if self._armed[0]:
            assert self._gate.wait(30)
        self._inner.sync_data()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class GatedDisk(FakeDisk):
    """A fake disk whose fdatasync waits for ``gate`` while ``armed``."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.armed = [False]

    def open(self, path: str, *, write: bool = False, create: bool = False) -> Any:
        return _GatedHandle(super().open(path, write=write, create=create), self.gate, self.armed)


@pytest.fixture
async def durable_engine() -> AsyncIterator[tuple[Engine, GatedDisk]]:
    disk = GatedDisk()
    async with open_engine("/data", clock=ManualClock(), fs=disk) as eng:
        yield eng, disk
    disk.gate.set()


@pytest.fixture
def _release(durable_engine: tuple[Engine, GatedDisk]) -> Iterator[None]:
    yield
    durable_engine[1].gate.set()


@pytest.mark.usefixtures("_release")
async def test_strong_watch_sees_fsync_records_only_after_the_sync(
    durable_engine: tuple[Engine, GatedDisk],
) -> None:
    engine, disk = durable_engine
    await engine.put_topic("f", {"durability": "fsync"})
    await engine.write("f", recs(0))  # reserves seqs ahead (a synced watermark entry)
    strong = await open_session(engine, {"f": {"tail": True}}, consistency="strong")
    eventual = await open_session(engine, {"f": {"tail": True}})
    await drain(strong.feed)
    await drain(eventual.feed)
    disk.armed[0] = True
    async with trio.open_nursery() as nursery:
        nursery.start_soon(engine.write, "f", recs(1, 2))
        assert seqs(await drain(eventual.feed)) == [2, 3]  # published: eventual sees it at once
        assert await drain(strong.feed) == []  # not yet synced
        disk.gate.set()
        await strong.feed.wait()
    events = await drain(strong.feed)
    assert seqs(events) == [2, 3]
    assert [e.head_seq for e in events if isinstance(e, RecordBatch)] == [3]
    strong.close()
    eventual.close()


async def test_strong_watch_on_a_memory_engine_is_immediate(engine: Engine) -> None:
    await engine.put_topic("a", {"durability": "fsync"})
    stream = await open_session(engine, {"a": {}}, consistency="strong")
    await engine.write("a", recs(1))
    assert seqs(await drain(stream.feed)) == [1]
    stream.close()


async def test_listeners_see_a_batch_only_after_its_wal_entry_is_submitted(
    durable_engine: tuple[Engine, GatedDisk], mock_clock: trio.testing.MockClock
) -> None:
    """Apply -> WAL -> fan-out: the synchronous pass inside the write (and any wake-up)
    runs after the batch's WAL entry was queued, so no reader is handed a batch the WAL
    has not been asked to keep."""
    engine, _ = durable_engine
    store = engine._store
    assert store is not None
    await engine.put_topic("w", {"durability": "disk"})
    await engine.write("w", recs(0))  # creates the segment and reserves seqs ahead
    stream = await open_session(engine, {"w": {"tail": True}})
    await drain(stream.feed)
    seen: list[tuple[list[int], int]] = []

    def deliver() -> bool:
        seen.append((seqs(stream.feed.poll()), store.wal.next_lsn))
        return True

    stream.feed.attach(Told(deliver))
    mock_clock.jump(1)  # a quiet topic: the pass runs inside the write
    before = store.wal.next_lsn
    await engine.write("w", recs(1))
    assert seen
    assert seen[0][0] == [2]
    assert seen[0][1] > before  # the APPEND entry had its LSN when the watcher read it
    stream.close()


# -- group delivery (hub rule 8) ---------------------------------------------------------------


class FakeSink:
    """An idle one-topic direct stream as the hub sees it (``topics.listener_types``):
    records every group call and takes the batch unless told to decline."""

    groups: ClassVar[list[tuple[list[int], int]]] = []  # (seqs, sinks in the call)

    def __init__(self, stream: WatchStream, decline: bool = False) -> None:
        self.stream = stream
        self.decline = decline
        self.got: list[list[int]] = []
        stream.feed.attach(self)
        stream.group(self)
        self.singles: list[list[int]] = []

    def changed(self) -> bool:
        """One by one (hub rule 1): what the group did not take."""
        events = self.stream.feed.poll()
        self.singles.append(seqs(events))
        for ev in events:
            self.stream.commit(ev.topic, ev.cursor, None, False)
        return True

    @staticmethod
    def write_group(batch: RecordBatch, sinks: list[Any]) -> list[Any]:
        got = seqs([batch])
        FakeSink.groups.append((got, len(sinks)))
        declined = []
        for sink in sinks:
            if sink.decline:
                declined.append(sink)
            else:
                sink.got.append(got)
                sink.stream.commit(batch.topic, batch.to_seq, None, False)
        return declined


async def test_idle_sinks_at_one_cursor_get_one_read_and_one_group_call(
    engine: Engine, mock_clock: trio.testing.MockClock
) -> None:
    await engine.put_topic("a")
    streams = [await open_session(engine, {"a": {"tail": True}}) for _ in range(5)]
    for s in streams:
        await drain(s.feed)
    FakeSink.groups = []
    sinks = [FakeSink(s) for s in streams[:4]]
    sinks[3].decline = True
    plain = record_deliveries(streams[4])  # no sink: served one by one
    hub = engine.watch_hub
    before = hub.reads
    mock_clock.jump(1)
    await engine.write("a", recs(1, 2))
    assert FakeSink.groups == [([1, 2], 4)]  # inside the write, one call for the group
    assert hub.reads - before == 1
    assert [s.got for s in sinks] == [[[1, 2]]] * 3 + [[]]
    assert sinks[3].singles == [[1, 2]]  # declined: its own read, the same records
    assert plain == [(True, [1, 2])]
    assert [s.session.cursors() for s in streams[:4]] == [{"a": 2}] * 4
    # The feeds moved on: the next write delivers only the new record.
    mock_clock.jump(1)
    await engine.write("a", recs(3))
    assert FakeSink.groups[1:] == [([3], 4)]
    assert sinks[0].got == [[1, 2], [3]]
    for s in streams:
        s.close()


async def test_group_delivery_leaves_anything_but_a_live_batch_to_each_stream(
    engine: Engine, mock_clock: trio.testing.MockClock
) -> None:
    await engine.put_topic("a", {"cap_records": 2, "discard": "old"})
    streams = [await open_session(engine, {"a": {"tail": True}}) for _ in range(2)]
    for s in streams:
        await drain(s.feed)
    FakeSink.groups = []
    behind, live = FakeSink(streams[0]), FakeSink(streams[1])
    mock_clock.jump(1)
    await engine.write("a", recs(1))
    assert FakeSink.groups == [([1], 2)]
    # A stream at another cursor is a group of its own; a cap loss is a tombstone, which
    # only the one-by-one path renders.
    streams[0].feed.topics["a"].cursor = 0
    mock_clock.jump(1)
    await engine.write("a", recs(2, 3, 4))
    assert FakeSink.groups[1:] == []
    assert behind.singles == [[3, 4]]
    assert live.singles == [[3, 4]]
    events = streams[0].feed.poll()
    assert events == []
    for s in streams:
        s.close()


async def test_a_topic_deleted_under_idle_sinks_reaches_them_one_by_one(
    engine: Engine, mock_clock: trio.testing.MockClock
) -> None:
    await engine.put_topic("a")
    stream = await open_session(engine, {"a": {"tail": True}})
    await drain(stream.feed)
    FakeSink.groups = []
    sink = FakeSink(stream)
    seen: list[str] = []

    def deliver() -> bool:
        seen.extend(kinds(stream.feed.poll()))
        return True

    stream.feed.attach(Told(deliver))
    mock_clock.jump(1)
    await engine.delete_topic("a")
    await trio.testing.wait_all_tasks_blocked()
    assert FakeSink.groups == []
    assert sink.got == []
    assert seen == ["TopicDeletedEvent"]
    stream.close()


async def test_a_failing_group_delivery_falls_back_to_each_stream(
    engine: Engine, mock_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    await engine.put_topic("a")
    streams = [await open_session(engine, {"a": {"tail": True}}) for _ in range(2)]
    for s in streams:
        await drain(s.feed)
    sinks = [FakeSink(s) for s in streams]

    def broken(batch: RecordBatch, sinks: list[Any]) -> list[Any]:
        raise RuntimeError("boom")

    monkeypatch.setattr(FakeSink, "write_group", staticmethod(broken))
    mock_clock.jump(1)
    result = await engine.write("a", recs(1))
    assert result.seqs == [1]  # the write itself never fails
    assert [s.singles for s in sinks] == [[[1]], [[1]]]
    for s in streams:
        s.close()
