"""The Python APIs hand back what was written, tag included (issue 34, item 2): the
embedded engine (sync and async), both clients (their diff, their watch and the
WebSocket subscription) and the offline Reader read tags unless told ``include_tags=False``. The HTTP wire's own default
stays the contract's: ``include_tags`` is false unless the body asks."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import topics
from topics.client import WatchRecord

from .conftest import ServerProcess, unique

BATCH = [{"data": 1, "tag": "t-1", "node": "n1"}, {"data": 2}]
WRITTEN = [("t-1", "n1"), (None, None)]


def _tags(records: list[topics.Record]) -> list[tuple[str | None, str | None]]:
    return [(r.tag, r.node) for r in records]


def test_the_embedded_engine_and_the_reader_return_tags(tmp_path: Path) -> None:
    with topics.open(str(tmp_path)) as db:
        db.put_topic("o", {"durability": "fsync"})
        db.write("o", BATCH)
        assert _tags(db.diff("o").records) == WRITTEN
        assert _tags(db.diff("o", include_tags=False).records) == [(None, "n1"), (None, None)]
    with topics.Reader(str(tmp_path)) as reader:
        assert _tags(reader.diff("o").records) == WRITTEN
        assert reader.diff("o", include_tags=False).records[0].tag is None


def test_the_async_engine_returns_tags() -> None:
    async def main() -> None:
        async with topics.open_engine(None) as engine:
            await engine.write("o", BATCH)
            assert _tags((await engine.diff("o")).records) == WRITTEN

    anyio.run(main, backend="trio")


def test_the_sync_client_returns_tags_in_diff_and_watch(server: ServerProcess) -> None:
    name = unique("tags")
    with topics.Client(server.base_url) as c:
        c.write(name, BATCH)
        assert _tags(c.diff(name).records) == WRITTEN
        assert c.diff(name, include_tags=False).records[0].tag is None
        got: list[topics.Record] = []
        with c.watch([name]) as events:
            for ev in events:
                if isinstance(ev, WatchRecord):
                    got.append(ev.record)
                    if len(got) == 2:
                        break
        assert _tags(got) == WRITTEN


def test_the_websocket_subscription_returns_tags(server: ServerProcess) -> None:
    name = unique("wstags")
    with topics.Client(server.base_url) as c:
        c.write(name, BATCH)
        got: list[topics.Record] = []
        with c.ws() as ws:
            ws.subscribe(name, from_seq=0)
            for ev in ws:
                if isinstance(ev, WatchRecord):
                    got.append(ev.record)
                    if len(got) == 2:
                        break
            ws.unsubscribe(name)
            ws.subscribe(name, from_seq=0, include_tags=False)
            for ev in ws:
                if isinstance(ev, WatchRecord):
                    assert (ev.seq, ev.record.tag) == (1, None)  # written with tag "t-1"
                    break
    assert _tags(got) == WRITTEN


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_the_async_client_returns_tags_in_diff_and_watch(
    backend: str, server: ServerProcess
) -> None:
    name = unique("atags")

    async def main() -> None:
        async with topics.AsyncClient(server.base_url) as c:
            await c.write(name, BATCH)
            assert _tags((await c.diff(name)).records) == WRITTEN
            got: list[topics.Record] = []
            async with c.watch([name]) as events:
                async for ev in events:
                    if isinstance(ev, WatchRecord):
                        got.append(ev.record)
                        if len(got) == 2:
                            break
            assert _tags(got) == WRITTEN

    anyio.run(main, backend=backend)


def test_the_http_default_is_unchanged(server: ServerProcess) -> None:
    name = unique("wire")
    with topics.Client(server.base_url) as c:
        c.write(name, BATCH)
    with server.client() as http:
        plain = http.post(f"/v0/topics/{name}/diff", json={}).json()
        asked = http.post(f"/v0/topics/{name}/diff", json={"include_tags": True}).json()
    assert [r.get("$tag") for r in plain["records"]] == [None, None]
    assert plain["records"][0]["$node"] == "n1"
    assert [r.get("$tag") for r in asked["records"]] == ["t-1", None]
