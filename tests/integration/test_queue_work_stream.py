"""The /work stream (§10.8) on the raw-ASGI path: it counts against the §11 long-lived
connection caps shared with watch streams, and gives its slot back however it ends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
import trio
import trio.testing
import ujson

from topics.wire.sse import Comment, Event, Retry

from .conftest import InProc, settings_with
from .test_watch_sse import SseClient, is_event, post_watch, running, sse

SSE = [("accept", "text/event-stream")]


@asynccontextmanager
async def work(inproc: InProc, query: str) -> AsyncIterator[SseClient]:
    async with running(SseClient(inproc.app, f"/v0/topics/jobs/work?{query}", SSE)) as client:
        yield client


async def _queue(http: httpx.AsyncClient, n: int) -> None:
    r = await http.put("/v0/topics/jobs", json={"type": "queue", "lease_ms": 600000})
    assert r.status_code in (200, 201), r.text
    if n:
        records = [{"data": i} for i in range(1, n + 1)]
        r = await http.post("/v0/topics/jobs", json={"records": records})
        assert r.status_code == 200, r.text


async def _queue_counts(http: httpx.AsyncClient) -> dict[str, int]:
    counts: dict[str, int] = (await http.get("/v0/topics/jobs")).json()["queue"]
    return counts


async def test_work_stream_opens_and_delivers_through_the_dispatcher(inproc: InProc) -> None:
    async with inproc.client() as http:
        await _queue(http, 3)
        async with work(inproc, "node=w&max=2") as client:
            assert client.status == 200
            assert client.response_headers[b"content-type"] == b"text/event-stream"
            assert client.response_headers[b"cache-control"] == b"no-store"
            assert b"x-request-id" in client.response_headers
            await client.until(lambda: len(client.events("job")) == 2)
            assert isinstance(client.items[0], Retry)
            assert isinstance(client.items[1], Comment)
            assert client.items[1].is_heartbeat
            jobs = [ujson.loads(e.data) for e in client.events("job")]
            assert [e.id for e in client.events("job")] == ["1", "2"]
            assert [j["$seq"] for j in jobs] == [1, 2]
            assert await _queue_counts(http) == {
                "ready": 1,
                "in_flight": 2,
                "dead_lettered": 0,
                "scheduled": 0,
                "backoff": 0,
            }
            body = {"node": "w", "seqs": [1, 2], "lease_ids": [j["lease_id"] for j in jobs]}
            assert (await http.post("/v0/topics/jobs/ack", json=body)).json()["acked"] == 2
            await client.until(lambda: len(client.events("job")) == 3)
        await trio.testing.wait_all_tasks_blocked()
        # the disconnect released the third job's lease long before its 10-minute expiry
        assert await _queue_counts(http) == {
            "ready": 1,
            "in_flight": 0,
            "dead_lettered": 0,
            "scheduled": 0,
            "backoff": 0,
        }


@pytest.mark.parametrize("http_settings", [settings_with(max_sse_connections=1)])
async def test_work_stream_shares_the_connection_cap_with_watch(inproc: InProc) -> None:
    async with inproc.client() as http:
        await _queue(http, 1)
        wid = (await post_watch(http, {"topics": {"jobs": {}}}))["wid"]
        async with work(inproc, "node=w") as client:
            await client.until(lambda: len(client.events("job")) == 1)
            # a second /work stream and a watch stream both find the one slot taken
            r = await http.get("/v0/topics/jobs/work?node=x", headers=dict(SSE))
            assert r.status_code == 429
            assert r.json()["error"]["detail"]["limit"] == "max_sse_connections"
            r = await http.get(f"/v0/watch/{wid}", headers=dict(SSE))
            assert r.status_code == 429
            metrics = (await http.get("/v0/metrics")).text
            assert "topics_sse_connections 1" in metrics
        await trio.testing.wait_all_tasks_blocked()
        # the closed /work stream gave its slot back: a watch stream gets it
        async with sse(inproc, wid) as watcher:
            assert watcher.status == 200
            await watcher.read_until(is_event("caught-up"))
        await trio.testing.wait_all_tasks_blocked()
        # and a refused /work stream leased nothing
        assert await _queue_counts(http) == {
            "ready": 1,
            "in_flight": 0,
            "dead_lettered": 0,
            "scheduled": 0,
            "backoff": 0,
        }


@pytest.mark.parametrize("http_settings", [settings_with(max_sse_connections=1)])
async def test_work_stream_gives_its_slot_back_when_the_queue_is_deleted(
    inproc: InProc,
) -> None:
    async with inproc.client() as http:
        await _queue(http, 0)
        async with work(inproc, "node=w") as client:
            await client.until(lambda: len(client.items) >= 2)  # retry + heartbeat: open
            assert (await http.delete("/v0/topics/jobs")).json()["deleted"] is True
            await client.read_body()
            errors = [i for i in client.items if isinstance(i, Event)]
            assert [e.event for e in errors] == ["error"]
            assert ujson.loads(errors[0].data)["error_code"] == "topic_not_found"
        await trio.testing.wait_all_tasks_blocked()
        await _queue(http, 1)
        async with work(inproc, "node=w") as client:
            assert client.status == 200
            await client.until(lambda: len(client.events("job")) == 1)


def test_job_frames_match_the_general_sse_encoder() -> None:
    from topics.frontends.http.queue_fast import _job_frames
    from topics.queue_types import ClaimResult
    from topics.wire.sse import encode_event

    fragments = (b'{"$seq":7,"data":"a\\nb"}', b'{"$seq":9,"data":{"k":[1,2]}}')
    res = ClaimResult("q.1", fragments, (7, 9), ("l7", "l9"), ready=0)
    expected = b"".join(
        encode_event(str(seq), "job", frag)
        for seq, frag in zip(res.seqs, res.stream_fragments(), strict=True)
    )
    assert _job_frames(res) == expected
    # a raw line break (never produced by the renderer) still gets one data: line per line
    odd = ClaimResult("q", (b'{"$seq":1,\n"data":0}',), (1,), ("l",), ready=0)
    assert _job_frames(odd) == encode_event("1", "job", b'{"topic":"q","$seq":1,\n"data":0}')
