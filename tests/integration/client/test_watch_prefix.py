"""Prefix watches and the backlog guard through the Python client (sync, async under trio
and asyncio, the WebSocket), against the real server, plus the watch state's session
re-creation for a prefix watch (no I/O)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
import ujson

import topics
from topics.client import MemoryCursorStore, WatchRecord
from topics.client._watch_state import WatchSpec, WatchState
from topics.watch_types import BacklogExceededEvent, CaughtUpEvent, TopicAddedEvent

from .conftest import ServerProcess, unique


def _until(events: Iterator[Any], pred: Any, limit: int = 100) -> list[Any]:
    got: list[Any] = []
    for ev in events:
        got.append(ev)
        if pred(ev) or len(got) >= limit:
            return got
    raise AssertionError(f"the watch ended: {got}")


def test_sync_prefix_watch_yields_topic_added_then_the_records(client: topics.Client) -> None:
    prefix = unique("cp") + "."
    client.write(prefix + "a", [{"data": "a1"}])
    store = MemoryCursorStore()
    with client.watch([], topic_prefix=prefix, cursor_store=store) as events:
        got = _until(events, lambda e: isinstance(e, CaughtUpEvent))
        assert [(e.topic, e.data) for e in got if isinstance(e, WatchRecord)] == [
            (prefix + "a", "a1")
        ]
        client.write(prefix + "b", [{"data": "b1"}, {"data": "b2"}])  # a new topic
        got = _until(events, lambda e: isinstance(e, CaughtUpEvent))
        assert got[0] == TopicAddedEvent(prefix + "b", prefix, 2, 0)
        assert [e.data for e in got if isinstance(e, WatchRecord)] == ["b1", "b2"]
        assert events.cursors == {prefix + "a": 1, prefix + "b": 2}
    assert store.load() == {prefix + "a": 1, prefix + "b": 2}


def test_sync_backlog_guard_yields_backlog_exceeded(client: topics.Client) -> None:
    name = unique("cb")
    client.write(name, [{"data": i} for i in range(40)])
    with client.watch(name, max_backlog=10) as events:
        got = _until(events, lambda e: isinstance(e, CaughtUpEvent))
        assert got[0] == BacklogExceededEvent(name, 0, 40, 40, 10, 40)
        assert not [e for e in got if isinstance(e, WatchRecord)]
        assert events.cursors == {name: 40}
    refused = client.watch(name, max_backlog=10, on_backlog="error")
    with pytest.raises(topics.ConflictError) as info, refused:
        next(refused)
    assert info.value.code == "backlog_exceeded"


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_async_prefix_watch_and_backlog(backend: str, server: ServerProcess) -> None:
    prefix = unique("ca") + "."

    async def main() -> None:
        async with topics.AsyncClient(server.base_url) as c:
            await c.write(prefix + "big", [{"data": i} for i in range(30)])
            got: list[Any] = []
            async with c.watch([], topic_prefix={prefix: {"max_backlog": 5}}) as events:
                async for ev in events:
                    got.append(ev)
                    if isinstance(ev, CaughtUpEvent) and ev.topic == prefix + "big":
                        await c.write(prefix + "new", [{"data": "n"}])
                    if isinstance(ev, WatchRecord):
                        break
            assert got[0] == BacklogExceededEvent(prefix + "big", 0, 30, 30, 5, 30)
            assert TopicAddedEvent(prefix + "new", prefix, 1, 0) in got
            assert (got[-1].topic, got[-1].data) == (prefix + "new", "n")

    anyio.run(main, backend=backend)


def test_websocket_client_prefix_subscribe(client: topics.Client) -> None:
    prefix = unique("cw") + "."
    client.write(prefix + "old", [{"data": "o"}] * 20)
    with client.ws() as ws:
        sub = ws.subscribe([], topic_prefix=[prefix], max_backlog=5)
        assert list(sub["topics"]) == [prefix + "old"]
        client.write(prefix + "new", [{"data": "n"}])
        got = _until(iter(ws), lambda e: isinstance(e, WatchRecord))
        assert BacklogExceededEvent(prefix + "old", 0, 20, 20, 5, 20) in got
        assert TopicAddedEvent(prefix + "new", prefix, 1, 0) in got
        assert got[-1].topic == prefix + "new"
        gone = ws.unsubscribe(topic_prefix=prefix)
        assert sorted(gone["topics"]) == [prefix + "new", prefix + "old"]


def test_a_recreated_prefix_session_names_what_it_holds_and_drops_tail() -> None:
    spec = WatchSpec.build([], True, None, 15_000, {"topic_prefix": ["p."]})
    state = WatchState(spec, None)
    first = ujson.loads(state.create_call().body or b"")
    assert first["topic_prefix"] == {"p.": {"tail": True}}
    assert first["topics"] == {}
    state.on_created({"wid": "wid_" + "A" * 22, "topics": {"p.a": {"from_seq": 7}}})
    assert state.committed == {"p.a": 7}
    state.feed(
        b"id: eyJwLmEiOjcsInAuYiI6MH0\nevent: topic-added\n"
        b'data: {"topic":"p.b","prefix":"p.","from_seq":0,"head_seq":3}\n\n'
    )
    assert state.joined == {"p.a", "p.b"}
    state.session_gone()
    again = ujson.loads(state.create_call().body or b"")
    assert again["topic_prefix"] == {"p.": {}}  # topics created meanwhile: from their start
    assert again["topics"] == {"p.a": {"from_seq": 7}, "p.b": {"from_seq": 0}}
    assert state.create_call().params == {"lenient": "true"}  # one may be gone meanwhile
    state.on_created({"wid": "wid_" + "B" * 22, "topics": {"p.b": {"from_seq": 0}}})
    assert (state.joined, state.committed) == ({"p.b"}, {"p.b": 0})  # p.a was deleted
    assert state.active
