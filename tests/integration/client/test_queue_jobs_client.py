"""Scheduled jobs, dedupe keys and redrive through the Python client (sync and async), the
embedded facade and the worker helper's job view (issue 19), against the real server."""

from __future__ import annotations

import time
from typing import Any

import pytest
import trio

import topics
from tests.support.server import ServerProcess

from .conftest import unique


def _dead_letter(db: Any, queue: str, dlq: str, n: int) -> None:
    db.put_topic(queue, {"type": "queue", "max_deliveries": 1, "dead_letter": dlq})
    db.write(queue, [{"data": i} for i in range(n)])
    claim = db.claim(queue, node="w", max=n)
    db.nack(queue, node="w", seqs=list(claim.seqs))
    assert db.claim(queue, node="w", max=n).count == 0  # each job went to the dead letters


def test_schedule_dedupe_and_redrive(client: topics.Client) -> None:
    q = unique("jq")
    client.put_topic(q, {"type": "queue"})
    later = client.schedule(q, {"n": 1}, delay_ms=3_600_000, dedupe_key="n1", tag="t")
    assert (later.seqs, later.dedupe) == ([1], [])
    assert client.get_topic(q).queue == {
        "ready": 0,
        "in_flight": 0,
        "dead_lettered": 0,
        "scheduled": 1,
        "backoff": 0,
    }
    dup = client.schedule(q, {"n": 2}, dedupe_key="n1")
    assert dup.count == 0
    assert dup.dedupe == [{"index": 0, "dedupe_key": "n1", "seq": 1, "outcome": "duplicate"}]
    swap = client.schedule(q, {"n": 3}, dedupe_key="n1", replace=True)
    assert swap.dedupe is not None
    assert swap.dedupe[0]["replaced_seq"] == 1
    job = client.claim(q, node="w").claimed[0]
    assert (job.seq, job.data, job.dedupe_key, job.deliver_at) == (2, {"n": 3}, "n1", None)
    window = client.write(q, [{"data": 4, "dedupe_key": "w"}], dedupe="window", dedupe_ms=60_000)
    assert window.seqs == [3]
    with pytest.raises(topics.InvalidRequestError):
        client.write(q, [{"data": 5}], dedupe="sometimes")
    dlq = unique("jdlq")
    src = unique("jsrc")
    _dead_letter(client, src, dlq, 2)
    res = client.redrive(dlq, max=1)
    assert (res.moved, res.remaining, res.batches[0]["to"]) == (1, 1, src)
    back = client.claim(src, node="w").claimed[0]
    assert back.redriven_from == dlq
    with client.ws() as ws:
        ack = ws.publish(q, [{"data": 6, "dedupe_key": "w"}], dedupe="window", dedupe_ms=1000)
        assert ack.dedupe is not None
        assert ack.dedupe[0]["outcome"] == "duplicate"


def test_the_embedded_facade_has_the_same_calls() -> None:
    with topics.open() as db:
        db.put_topic("q", {"type": "queue"})
        res = db.schedule("q", 1, delay_ms=60_000, dedupe_key="k")
        assert db.schedule("q", 2, dedupe_key="k").count == 0
        assert res.seqs == [1]
        _dead_letter(db, "src", "dlq", 1)
        assert db.redrive("dlq").moved == 1


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_async_client(backend: str, server: ServerProcess) -> None:
    async def main() -> None:
        q, dlq, src = unique("ajq"), unique("ajdlq"), unique("ajsrc")
        async with topics.AsyncClient(server.base_url) as c:
            await c.put_topic(q, {"type": "queue"})
            at = int(time.time() * 1000) + 3_600_000
            first = await c.schedule(q, "x", deliver_at=at, dedupe_key="k")
            assert first.seqs == [1]
            again = await c.schedule(q, "y", dedupe_key="k", replace=True)
            assert again.dedupe is not None
            assert again.dedupe[0]["outcome"] == "replaced"
            assert (await c.get_topic(q)).queue["scheduled"] == 0  # type: ignore[index]
            await c.put_topic(src, {"type": "queue", "max_deliveries": 1, "dead_letter": dlq})
            await c.write(src, [{"data": 1}])
            claim = await c.claim(src, node="w")
            await c.nack(src, node="w", seqs=list(claim.seqs))
            assert (await c.claim(src, node="w")).count == 0
            assert (await c.redrive(dlq, to=src)).moved == 1
            async with c.work(src, node="w", stream=False) as jobs:
                async for job in jobs:
                    assert job.meta is not None
                    assert job.meta["$redrive_from"] == dlq
                    await job.ack()
                    break

    if backend == "trio":
        trio.run(main)
    else:
        import asyncio

        asyncio.run(main())


def test_the_sync_worker_sees_the_stamps(client: topics.Client) -> None:
    q = unique("wq")
    client.put_topic(q, {"type": "queue"})
    client.schedule(q, {"n": 1}, dedupe_key="once")
    with client.work(q, node="w", stream=False) as jobs:
        for job in jobs:
            assert job.meta == {"$dedupe_key": "once"}
            assert job.job.dedupe_key == "once"
            job.ack()
            break
