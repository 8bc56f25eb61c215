"""Issue 18 through the Python client (sync and async) and the embedded handle: the same
from_ts/to_seq/where/cloudevents answers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

import topics

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
