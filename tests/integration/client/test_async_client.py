"""``topics.AsyncClient`` under both trio and asyncio (through httpx/anyio): the calls,
errors, retries, the watch iterator, the worker and the WebSocket, against the real server."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest

import topics
from topics.client import MemoryCursorStore, RetryPolicy, WatchRecord, request_id_of
from topics.watch_types import CaughtUpEvent

from .conftest import ServerProcess, error_response, unique

BACKENDS = ["trio", "asyncio"]


def run(backend: str, fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn, backend=backend)


class AsyncFaulty(httpx.AsyncBaseTransport):
    """The async twin of conftest.FaultyTransport (faults before the real server)."""

    def __init__(self, faults: list[Any]) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.faults = faults
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.faults:
            return self.faults.pop(0)(request)  # type: ignore[no-any-return]
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize("backend", BACKENDS)
def test_calls_and_errors(backend: str, server: ServerProcess) -> None:
    async def main() -> None:
        name, q = unique("as"), unique("aq")
        async with topics.AsyncClient(server.base_url) as c:
            assert (await c.put_topic(name)).created
            w = await c.write(name, [{"data": b"1.50"}, {"data": {"x": 1}, "tag": "t"}])
            assert isinstance(w, topics.WriteResult)
            assert w.seqs == [1, 2]
            page = await c.diff(name, from_seq=0)
            assert b"1.50" in page.records_json
            assert [r.seq for r in page.records] == [1, 2]
            assert (await c.get_topic(name)).head_seq == 2
            assert [t.topic async for t in c.iter_topics(prefix=name)] == [name]
            assert (await c.list_topics(prefix=name)).topics[0].count == 2
            assert (await c.delete_records(name, match="t")).deleted == 1
            await c.put_topic(q, {"type": "queue"})
            await c.write(q, [{"data": 1}])
            claim = await c.claim(q, node="w")
            ids = list(claim.lease_ids)
            assert (
                await c.extend(q, node="w", seqs=[1], lease_ms=5000, lease_ids=ids)
            ).extended == 1
            assert (await c.nack(q, node="w", seqs=[1], lease_ids=ids)).nacked == 1
            again = await c.claim(q, node="w")
            assert (await c.ack(q, node="w", seqs=[1], lease_ids=list(again.lease_ids))).acked == 1
            r = await c.put_router(f"{name}->{q}x", {"source": name, "dest": f"{q}x"})
            assert (await c.get_router(r.router)).config.source == name
            assert len((await c.list_routers(source=name)).routers) == 1
            assert (await c.delete_router(r.router)).deleted
            assert (await c.health())["status"] == "ok"
            assert (await c.ready())["status"] == "ready"
            assert "topics_topics" in await c.metrics()
            assert (await c.delete_topic(name)).deleted
            with pytest.raises(topics.TopicNotFoundError) as err:
                await c.get_topic(name)
            assert request_id_of(err.value)

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_retries_honour_the_server(backend: str, server: ServerProcess) -> None:
    async def main() -> None:
        throttled = error_response(429, "throttled", detail={"retry_after_ms": 20})
        transport = AsyncFaulty([throttled, throttled])
        policy = RetryPolicy(base_delay_s=0.001)
        async with topics.AsyncClient(server.base_url, transport=transport, retry=policy) as c:
            start = anyio.current_time()
            assert (await c.health())["status"] == "ok"
            assert anyio.current_time() - start >= 0.04
        assert len(transport.requests) == 3

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_watch_iterator(backend: str, server: ServerProcess) -> None:
    async def main() -> None:
        name = unique("aw")
        store = MemoryCursorStore()
        async with topics.AsyncClient(server.base_url) as c:
            await c.write(name, [{"data": 1}, {"data": 2}])
            got: list[Any] = []
            async with c.watch(name, cursor_store=store) as events:
                async for ev in events:
                    got.append(ev)
                    if isinstance(ev, CaughtUpEvent):
                        await c.write(name, [{"data": 3}])
                    if len(got) == 4:
                        break
            assert [e.data for e in got if isinstance(e, WatchRecord)] == [1, 2, 3]
            assert store.cursors == {name: 2}  # the caught-up frame was fully taken

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_worker(backend: str, server: ServerProcess) -> None:
    async def main() -> None:
        q = unique("awq")
        async with topics.AsyncClient(server.base_url) as c:
            await c.put_topic(q, {"type": "queue"})
            await c.write(q, [{"data": i} for i in range(4)])
            seen: list[int] = []

            async def handle(job: topics.Job) -> None:
                await anyio.lowlevel.checkpoint()
                seen.append(job.data)
                if job.data == 2 and job.deliveries == 1:
                    raise ValueError("boom")  # fails once, then succeeds on redelivery

            stats = await c.run_worker(q, "w1", handle, max=2, until_empty=True, backoff_ms=1)
            assert sorted(seen) == [0, 1, 2, 2, 3]  # 2 was retried
            assert (stats.acked, stats.nacked, stats.lost) == (4, 1, 0)
            assert (await c.get_topic(q)).count == 0

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_worker_stream_and_websocket(backend: str, server: ServerProcess) -> None:
    async def main() -> None:
        q, room = unique("awq"), unique("room")
        async with topics.AsyncClient(server.base_url) as c:
            await c.put_topic(q, {"type": "queue"})
            await c.write(q, [{"data": "job"}])
            async with c.work(q, node="w") as jobs:
                async for job in jobs:
                    async with job:
                        assert job.data == "job"
                    break
            assert jobs.stats.acked == 1
            await c.write(room, [{"data": "hello"}])
            async with await c.ws() as ws:
                sub = await ws.subscribe(room, from_seq=0)
                assert sub["op"] == "subscribed"
                assert isinstance(sub, topics.client.Subscribed)
                assert sub.topics[room].head_seq == 1
                ack = await ws.publish(room, [{"data": b"[1.50]"}])
                assert ack.last_seq == 2
                await ws.ping()
                got = []
                async for ev in ws:
                    got.append(ev)
                    if isinstance(ev, WatchRecord) and ev.seq == 2:
                        break
                assert [e.data for e in got if isinstance(e, WatchRecord)] == ["hello", [1.5]]

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_conditions(backend: str, server: ServerProcess) -> None:
    async def main() -> None:
        name = unique("acond")
        async with topics.AsyncClient(server.base_url) as c:
            first = await c.write(
                name, [{"data": 1}], expected_head_seq=0, producer_id="p", epoch=1
            )
            assert first.seqs == [1]
            with pytest.raises(topics.HeadMismatchError) as err:
                await c.write(name, [{"data": 2}], expected_head_seq=0)
            assert err.value.detail["head_seq"] == 1
            await c.write(name, [{"data": 2}], producer_id="p", epoch=2)
            with pytest.raises(topics.ProducerFencedError):
                await c.write(name, [{"data": 3}], producer_id="p", epoch=1)
            assert (await c.get_topic(name)).head_seq == 2

    run(backend, main)
