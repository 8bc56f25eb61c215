"""``client.work`` / ``client.run_worker``: jobs from the /work stream or claim polling,
lease heartbeats, lease ids on every call, ack on success, nack with backoff on failure."""

from __future__ import annotations

import time

import pytest

import topics
from topics.client import Client

from .conftest import FaultyTransport, ServerProcess, unique


def _queue(client: Client, n: int, **config: object) -> str:
    q = unique("wq")
    client.put_topic(q, {"type": "queue", **config})
    if n:
        client.write(q, [{"data": i} for i in range(n)])
    return q


@pytest.mark.parametrize("stream", [True, False])
def test_jobs_are_acked_when_the_body_completes(server: ServerProcess, stream: bool) -> None:
    transport = FaultyTransport()
    with topics.Client(server.base_url, transport=transport) as client:
        q = _queue(client, 5)
        seen = []
        with client.work(q, node="w1", max=2, stream=stream) as jobs:
            for job in jobs:
                seen.append(job.data)  # done when the loop asks for the next job ...
                if len(seen) == 5:
                    job.ack()  # ... or when settled explicitly (a break alone hands it back)
                    break
        assert seen == [0, 1, 2, 3, 4]
        assert (jobs.stats.claimed, jobs.stats.acked, jobs.stats.lost) == (5, 5, 0)
        assert client.get_topic(q).count == 0
    paths = [r.url.path for r in transport.requests]
    assert any(p.endswith("/work") for p in paths) == stream
    assert any(p.endswith("/claim") for p in paths) != stream
    acks = [r for r in transport.requests if r.url.path.endswith("/ack")]
    assert acks
    assert all(b'"lease_ids":["lease_' in r.content for r in acks)


def test_failed_job_is_nacked_with_backoff_and_the_loop_goes_on(client: Client) -> None:
    q = _queue(client, 3)
    seen = []
    with client.work(q, node="w1", stream=False, backoff_ms=60_000) as jobs:
        for job in jobs:
            with job:
                seen.append(job.data)
                if job.data == 1:
                    raise RuntimeError("handler failed")
            if len(seen) == 3:
                break
    assert seen == [0, 1, 2]
    assert (jobs.stats.acked, jobs.stats.nacked) == (2, 1)
    state = client.get_topic(q)
    assert state.count == 1
    assert state.queue == {  # the failed job waits out its backoff: counted as such
        "ready": 0,
        "in_flight": 0,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 1,
    }


def test_leaving_the_loop_hands_back_unhandled_jobs(client: Client) -> None:
    q = _queue(client, 4)
    jobs = client.work(q, node="w1", max=4, stream=False)

    def crash_in_the_loop_body() -> None:
        with jobs:
            for job in jobs:
                if job.data == 1:
                    raise KeyError("crash in the loop body")

    with pytest.raises(KeyError):
        crash_in_the_loop_body()
    assert (jobs.stats.acked, jobs.stats.nacked) == (1, 3)
    # An exception was seen: the crashing job and the untouched ones wait out the backoff.
    assert client.get_topic(q).queue == {
        "ready": 0,
        "in_flight": 0,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 3,
    }
    q2 = _queue(client, 3)
    with client.work(q2, node="w1", max=3, stream=False) as jobs:
        for _ in jobs:
            break  # no exception: released at once for another worker
    assert client.get_topic(q2).queue == {
        "ready": 3,
        "in_flight": 0,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }


@pytest.mark.slow
def test_heartbeat_keeps_a_long_job_leased(client: Client) -> None:
    q = _queue(client, 1)
    with client.work(q, node="w1", lease_ms=600, stream=False) as jobs:
        for job in jobs:
            with job:
                time.sleep(1.5)  # over two lease lengths
                assert not job.lost
                assert client.claim(q, node="thief").count == 0  # still ours
            break
    assert jobs.stats.extended >= 2
    assert (jobs.stats.acked, jobs.stats.lost) == (1, 0)


@pytest.mark.slow
def test_lost_lease_is_reported_not_acked(client: Client) -> None:
    q = _queue(client, 1)
    with client.work(q, node="w1", lease_ms=200, stream=False) as jobs:
        for job in jobs:
            with job:
                jobs._stop.set()  # no heartbeat: let the lease expire
                time.sleep(0.4)
                stolen = client.claim(q, node="thief")
                assert stolen.count == 1
            break  # the ack goes out on the way out, and comes back skipped
    assert (jobs.stats.acked, jobs.stats.lost) == (0, 1)
    assert client.get_topic(q).queue == {
        "ready": 0,
        "in_flight": 1,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }


def test_run_worker_until_empty(client: Client) -> None:
    q = _queue(client, 6)
    done: list[int] = []
    stats = client.run_worker(q, "w1", lambda job: done.append(job.data), max=4, until_empty=True)
    assert sorted(done) == list(range(6))
    assert stats == topics.WorkerStats(claimed=6, acked=6, nacked=0, extended=0, lost=0)


def test_missing_queue_and_log_topic_are_errors(client: Client) -> None:
    with pytest.raises(topics.TopicNotFoundError):
        next(iter(client.work(unique("none"), node="w")))
    log = unique("log")
    client.put_topic(log)
    with pytest.raises(topics.NotAQueueError):
        next(iter(client.work(log, node="w", lease_ms=1000)))
