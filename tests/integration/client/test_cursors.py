"""Named cursors (consumer groups) through the client, sync and async, on the real server:
the cursor methods, diff from a cursor, ``consume``, ``watch(group=...)`` and WebSocket /
SSE subscriptions that commit after delivery."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import topics
from topics.client import AsyncClient, Client, ServerCursorStore, WatchRecord
from topics.types import Record
from topics.watch_types import CaughtUpEvent

from .conftest import ServerProcess, unique


def _fill(client: Client, topic: str, n: int) -> None:
    client.write(topic, [{"data": i} for i in range(1, n + 1)])


def _records(events: Iterator[Any], n: int) -> list[WatchRecord]:
    out: list[WatchRecord] = []
    for ev in events:
        if isinstance(ev, WatchRecord):
            out.append(ev)
            if len(out) == n:
                break
    return out


def test_cursor_methods(client: Client) -> None:
    name = unique("cur")
    _fill(client, name, 5)
    info = client.put_cursor(name, "billing", 2)
    assert isinstance(info, topics.CursorInfo)
    assert (info.seq, info.lag, info.head_seq) == (2, 3, 5)
    assert client.get_cursor(name, "billing").seq == 2
    client.put_cursor(name, "billing", 4, expect_seq=2)
    with pytest.raises(topics.CursorConflictError) as err:
        client.put_cursor(name, "billing", 5, expect_seq=2)
    assert err.value.detail is not None
    assert err.value.detail["seq"] == 4
    assert [(c.cursor, c.lag) for c in client.list_cursors(name)] == [("billing", 1)]
    assert client.delete_cursor(name, "billing").deleted
    with pytest.raises(topics.CursorNotFoundError):
        client.get_cursor(name, "billing")


def test_diff_from_a_cursor_with_commit(client: Client) -> None:
    name = unique("curdiff")
    _fill(client, name, 5)
    res = client.diff(name, cursor="g", commit=True, limit=2)
    assert [r.seq for r in res.records] == [1, 2]
    res = client.diff(name, cursor="g")
    assert [r.seq for r in res.records] == [3, 4, 5]
    assert client.get_cursor(name, "g").seq == 2


def test_consume_commits_each_batch_and_resumes(client: Client) -> None:
    name = unique("consume")
    _fill(client, name, 5)
    seen: list[int] = []
    stats = client.consume(name, "g", lambda r: seen.append(r.seq), limit=2, until_caught_up=True)
    assert seen == [1, 2, 3, 4, 5]
    assert (stats.records, stats.batches, stats.committed_seq) == (5, 3, 5)
    _fill(client, name, 2)
    again: list[int] = []
    client.consume(name, "g", lambda r: again.append(r.seq), until_caught_up=True)
    assert again == [6, 7]


def test_consume_does_not_commit_a_batch_whose_handler_failed(client: Client) -> None:
    name = unique("consumefail")
    _fill(client, name, 4)

    def handler(rec: Record) -> None:
        if rec.seq == 3:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        client.consume(name, "g", handler, limit=2, until_caught_up=True)
    assert client.get_cursor(name, "g").seq == 2  # the failed batch comes again
    seen: list[int] = []
    client.consume(name, "g", lambda r: seen.append(r.seq), until_caught_up=True)
    assert seen == [3, 4]


def test_consume_refuses_to_overwrite_a_rival_commit(client: Client) -> None:
    name = unique("rival")
    _fill(client, name, 3)

    def handler(rec: Record) -> None:
        client.put_cursor(name, "g", 3)  # another member of the group moved the cursor

    with pytest.raises(topics.CursorConflictError):
        client.consume(name, "g", handler, until_caught_up=True)
    assert client.get_cursor(name, "g").seq == 3


def test_watch_with_a_group_resumes_from_the_server(client: Client) -> None:
    name = unique("wgroup")
    _fill(client, name, 4)
    with client.watch([name], group="g") as events:
        got = _records(events, 4)
        next(events)  # taking the next item commits the frame of the four records
    assert [r.seq for r in got] == [1, 2, 3, 4]
    assert client.get_cursor(name, "g").seq == 4
    _fill(client, name, 2)
    with client.watch([name], group="g") as events:
        first = _records(events, 1)[0]
    assert first.seq == 5
    store = ServerCursorStore(client, "g", [name, unique("never")])
    assert store.load() == {name: 4}


def test_ws_subscribe_from_a_cursor_commits_after_delivery(client: Client) -> None:
    name = unique("wscur")
    _fill(client, name, 3)
    client.put_cursor(name, "g", 1)
    with client.ws() as ws:
        sub = ws.subscribe(name, cursor="g", commit=True)
        assert sub["topics"][name]["from_seq"] == 1
        got = _records(iter(ws), 2)
        ws.ping()  # answered after every frame before it has left (and committed)
    assert [r.seq for r in got] == [2, 3]
    assert client.get_cursor(name, "g").seq == 3


def test_ws_subscribe_without_commit_leaves_the_cursor(client: Client) -> None:
    name = unique("wsnocommit")
    _fill(client, name, 3)
    with client.ws() as ws:
        ws.subscribe({name: {"cursor": "g"}})
        assert [r.seq for r in _records(iter(ws), 3)] == [1, 2, 3]
        ws.ping()
    with pytest.raises(topics.CursorNotFoundError):
        client.get_cursor(name, "g")


def test_sse_watch_from_a_cursor_commits_after_delivery(client: Client) -> None:
    name = unique("ssecur")
    _fill(client, name, 3)
    with client.watch({name: {"cursor": "g", "commit": True}}) as events:
        assert [r.seq for r in _records(events, 3)] == [1, 2, 3]
        # The server commits once the frame's bytes left; that is no later than they
        # arrived here, give or take the server's next step: a few round trips at most.
        for _ in range(500):
            if client.get_cursor(name, "g").seq == 3:
                break
    assert client.get_cursor(name, "g").seq == 3


async def test_async_client_cursors_and_consume(server: ServerProcess) -> None:
    name = unique("acur")
    with Client(server.base_url) as sync:
        _fill(sync, name, 3)
    async with AsyncClient(server.base_url) as client:
        await client.put_cursor(name, "g", 1)
        assert [c.seq for c in await client.list_cursors(name)] == [1]
        seen: list[int] = []

        async def handler(rec: Record) -> None:
            seen.append(rec.seq)

        stats = await client.consume(name, "g", handler, until_caught_up=True)
        assert seen == [2, 3]
        assert stats.committed_seq == 3
        assert (await client.get_cursor(name, "g")).seq == 3
        res = await client.diff(name, cursor="g", commit=True)
        assert res.records == []
        assert (await client.delete_cursor(name, "g")).deleted


async def test_async_watch_with_a_group_commits_to_the_server(server: ServerProcess) -> None:
    name = unique("awgroup")
    async with AsyncClient(server.base_url) as client:
        await client.write(name, [{"data": 1}, {"data": 2}])
        await client.put_cursor(name, "g", 1)
        got: list[int] = []
        async with client.watch([name], group="g") as events:
            async for ev in events:
                if isinstance(ev, WatchRecord):
                    got.append(ev.seq)
                if isinstance(ev, CaughtUpEvent):
                    break  # taking this item committed the frame of record 2
        assert got == [2]  # resumed after the group's cursor
        assert (await client.get_cursor(name, "g")).seq == 2


def test_ws_commit_explicitly_after_handling(client: Client) -> None:
    name = unique("wsexplicit")
    _fill(client, name, 3)
    with client.ws() as ws:
        ws.subscribe(name, cursor="g")  # no server-side commit: the consumer commits
        got = _records(iter(ws), 3)
        info = ws.commit(name, "g", got[-1].seq, expect_seq=0)
        assert (info.seq, info.lag) == (3, 0)
        with pytest.raises(topics.CursorConflictError) as err:
            ws.commit(name, "g", 2, expect_seq=0)
        assert topics.client.request_id_of(err.value) is not None
        ws.ping()  # the connection survives a refused commit
    assert client.get_cursor(name, "g").seq == 3


async def test_async_ws_commit(server: ServerProcess) -> None:
    name = unique("awscommit")
    async with AsyncClient(server.base_url) as client:
        await client.write(name, [{"data": 1}])
        async with await client.ws() as ws:
            info = await ws.commit(name, "g", 1)
        assert info.seq == 1
        assert (await client.get_cursor(name, "g")).seq == 1
