"""Issue 18 through the Python client (sync and async) and the embedded handle: the same
from_ts/to_seq/where/cloudevents answers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

import topics
from topics.client import WatchRecord
from topics.watch_types import EndReachedEvent

from .conftest import ServerProcess, unique


@pytest.fixture(params=["embedded", "remote"])
def db(request: pytest.FixtureRequest, server: ServerProcess) -> Iterator[Any]:
    handle: Any = (
        topics.open(None) if request.param == "embedded" else topics.Client(server.base_url)
    )
    with handle:
        yield handle


def test_bounds_where_and_cloudevents(db: Any) -> None:
    t = unique("bounded")
    db.write(t, [{"data": {"kind": k, "n": i}} for i, k in enumerate("abab", 1)])
    ts = db.diff(t).records[2].ts
    page = db.diff(t, from_ts=ts)
    assert page.from_seq is not None
    assert page.from_seq <= 2  # records may share a millisecond
    assert [r.seq for r in page.records][-2:] == [3, 4]
    page = db.diff(t, where=("data.kind", "Eq", "b"), to_seq=3)
    assert [r.seq for r in page.records] == [2]
    assert page.end_reached is True
    assert page.next_from_seq == 3
    page = db.diff(t, where=["data.n", "In", [1, 4]], format="cloudevents")
    assert page.format == "cloudevents"
    assert page.record_count == 2
    assert [e["id"] for e in page.events] == [f"{t}@1", f"{t}@4"]
    with pytest.raises(topics.InvalidRequestError, match="where"):
        db.diff(t, where=["data.n", "Around", 1])


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_async_client_bounds(server: ServerProcess, backend: str) -> None:
    t = unique("abounded")

    async def main() -> None:
        async with topics.AsyncClient(server.base_url) as c:
            await c.write(t, [{"data": {"n": i}} for i in range(5)])
            page = await c.diff(t, where=["data.n", "Ge", 3], to_seq=4)
            assert [r.data for r in page.records] == [{"n": 3}]
            assert page.end_reached is True
            page = await c.diff(t, from_ts=0, format="cloudevents", limit=1)
            assert page.from_seq == 0
            assert page.events[0]["topicsseq"] == 1

    anyio.run(main, backend=backend)


def test_watch_with_bounds_where_and_end(client: topics.Client) -> None:
    t = unique("wbounded")
    client.write(t, [{"data": {"k": i % 2}} for i in range(6)])
    got: list[Any] = []
    with client.watch({t: {"from_seq": 0, "to_seq": 5}}, where=["data.k", "Eq", 1]) as events:
        for ev in events:
            got.append(ev)
            if isinstance(ev, EndReachedEvent):
                break
    assert [e.seq for e in got if isinstance(e, WatchRecord)] == [2, 4]
    assert got[-1] == EndReachedEvent(t, 6, 5)


def test_watch_cloudevents_records(client: topics.Client) -> None:
    t = unique("wce")
    client.write(t, [{"data": {"a": 1}, "meta": {"type": "t.x"}}])
    with client.watch({t: {"from_seq": 0, "to_seq": 1}}, format="cloudevents") as events:
        rec = next(e for e in events if isinstance(e, WatchRecord))
    assert rec.seq == 1
    assert rec.data["type"] == "t.x"
    assert rec.data["data"] == {"a": 1}


def test_ws_subscribe_with_bounds(client: topics.Client) -> None:
    t = unique("wsb")
    client.write(t, [{"data": {"k": i}} for i in range(4)])
    got: list[Any] = []
    with client.ws() as ws:
        ws.subscribe(t, from_seq=0, to_seq=3, where=["data.k", "Ge", 1])
        for ev in ws:
            got.append(ev)
            if isinstance(ev, EndReachedEvent):
                break
    assert [e.seq for e in got if isinstance(e, WatchRecord)] == [2, 3]
    assert isinstance(got[-1], EndReachedEvent)
    assert got[-1].cursor == 3
