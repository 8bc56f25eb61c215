"""Queues: claim, ack, nack, extend, expiry, dead letters, counters, cohorts, /work
sessions, durable leases and the worker helper (contract §10, docs/QUEUES.md).

Lease time is the engine's ManualClock (``clock.advance``), never a sleep; the coalescing
window and heartbeats run on trio time, which the ``autojump_clock`` fixture skips.
"""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing
import ujson

import topics
from topics._clock import ManualClock
from topics.engine import Engine, open_engine
from topics.errors import (
    BatchTooLargeError,
    InvalidRequestError,
    NotAQueueError,
    TopicNotFoundError,
)

from ._support import START_MS, with_limits

LEASE = 1000


async def make_queue(engine: Engine, name: str = "q", n: int = 0, **config: Any) -> None:
    await engine.put_topic(name, {"type": "queue", "lease_ms": LEASE, **config})
    if n:
        await engine.write(name, [{"data": i} for i in range(1, n + 1)])


async def counters(engine: Engine, name: str = "q") -> dict[str, int]:
    state = await engine.get_topic(name, touch=False)
    assert state.queue is not None
    return state.queue


async def live_seqs(engine: Engine, name: str = "q") -> list[int]:
    return [r.seq for r in (await engine.diff(name, from_seq=0, limit=1000)).records]


# ---------------------------------------------------------------------------------
# errors common to every endpoint
# ---------------------------------------------------------------------------------


async def test_every_queue_call_on_a_log_topic_is_not_a_queue(engine):
    await engine.write("log", [{"data": 1}])
    calls = [
        engine.claim("log", node="w"),
        engine.ack("log", node="w", seqs=[1]),
        engine.nack("log", node="w", seqs=[1]),
        engine.extend("log", node="w", seqs=[1], lease_ms=1000),
    ]
    for call in calls:
        with pytest.raises(NotAQueueError) as info:
            await call
        assert info.value.status == 409
        assert info.value.detail == {"topic": "log", "type": "log"}
    with pytest.raises(NotAQueueError):
        async with engine.open_work_session("log", node="w"):
            pass


async def test_every_queue_call_on_an_absent_topic_is_not_found_and_creates_nothing(engine):
    calls = [
        engine.claim("nope", node="w"),
        engine.ack("nope", node="w", seqs=[1]),
        engine.nack("nope", node="w", seqs=[1]),
        engine.extend("nope", node="w", seqs=[1], lease_ms=1000),
    ]
    for call in calls:
        with pytest.raises(TopicNotFoundError):
            await call
    assert (await engine.list_topics()).topics == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"node": None},
        {"node": ""},
        {"node": 7},
        {"node": "x" * 129},
        {"node": "w", "max": 0},
        {"node": "w", "max": -1},
        {"node": "w", "max": "3"},
        {"node": "w", "max": True},
        {"node": "w", "lease_ms": "1000"},
        {"node": "w", "lease_ms": -5},
    ],
)
async def test_claim_rejects_bad_arguments(engine, kwargs):
    await make_queue(engine, n=1)
    with pytest.raises(InvalidRequestError):
        await engine.claim("q", **kwargs)
    assert await counters(engine) == {
        "ready": 1,
        "in_flight": 0,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }


@pytest.mark.parametrize("op", ["ack", "nack", "extend"])
@pytest.mark.parametrize(
    "kwargs",
    [
        {"seqs": [1]},  # no node
        {"node": "w"},  # no seqs
        {"node": "w", "seqs": []},
        {"node": "w", "seqs": 1},
        {"node": "w", "seqs": [-1]},
        {"node": "w", "seqs": ["1"]},
        {"node": "w", "seqs": [True]},
        {"node": "w", "seqs": [1, 2], "lease_ids": ["lease_a"]},
        {"node": "w", "seqs": [1], "lease_ids": "lease_a"},
        {"node": "w", "seqs": [1], "lease_ids": [3]},
    ],
)
async def test_ack_nack_extend_reject_bad_arguments(engine, op, kwargs):
    await make_queue(engine, n=1)
    await engine.claim("q", node="w")
    args: dict[str, Any] = {"node": None, "seqs": None, **kwargs}
    if op == "extend":
        args["lease_ms"] = 1000
    with pytest.raises(InvalidRequestError):
        await getattr(engine, op)("q", **args)
    assert await counters(engine) == {
        "ready": 0,
        "in_flight": 1,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }


@with_limits(max_claim=3)
@pytest.mark.parametrize("op", ["ack", "nack", "extend"])
async def test_seqs_longer_than_max_claim_is_batch_too_large(engine, op):
    await make_queue(engine, n=1)
    args: dict[str, Any] = {"node": "w", "seqs": [1, 2, 3, 4]}
    if op == "extend":
        args["lease_ms"] = 1000
    with pytest.raises(BatchTooLargeError) as info:
        await getattr(engine, op)("q", **args)
    assert info.value.status == 400
    assert info.value.detail is not None
    assert info.value.detail["max"] == 3


# ---------------------------------------------------------------------------------
# claim (§10.2)
# ---------------------------------------------------------------------------------


async def test_claim_leases_jobs_ascending_with_lease_fields(engine):
    await make_queue(engine)
    await engine.write(
        "q",
        [
            {"data": {"a": 1}, "tag": "t1", "meta": {"trace": "z"}},
            {"data": [2]},
            {"data": None, "node": "src"},
        ],
    )
    res = await engine.claim("q", node="w1", max=16)
    assert res.count == 3
    assert res.ready == 0
    assert res.seqs == (1, 2, 3)
    body = res.to_dict()
    jobs = body["claimed"]
    assert [j["$seq"] for j in jobs] == [1, 2, 3]
    assert jobs[0]["$tag"] == "t1"
    assert jobs[0]["meta"] == {"trace": "z"}
    assert "$tag" not in jobs[1]
    assert "meta" not in jobs[1]
    assert jobs[2]["data"] is None
    assert jobs[2]["$node"] == "src"
    for job in jobs:
        assert re.fullmatch(r"lease_[0-9a-f]{24}", job["lease_id"])
        assert job["deadline"] == START_MS + LEASE
        assert job["deliveries"] == 1
        assert job["$ts"] == START_MS
    assert len({j["lease_id"] for j in jobs}) == 3
    assert body["count"] == 3
    assert body["ready"] == 0
    decoded = res.claimed
    assert decoded[0].data == {"a": 1}
    assert decoded[0].tag == "t1"
    assert decoded[0].lease_id == res.lease_ids[0]
    assert decoded[2].node == "src"
    assert decoded[1].meta is None


async def test_claim_defaults_to_one_job_and_counts_the_rest_as_ready(engine):
    await make_queue(engine, n=5)
    res = await engine.claim("q", node="w1")
    assert (res.seqs, res.ready) == ((1,), 4)
    assert await counters(engine) == {
        "ready": 4,
        "in_flight": 1,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }
    res = await engine.claim("q", node="w2", max=3)
    assert (res.seqs, res.ready) == ((2, 3, 4), 1)


@with_limits(max_claim=4)
async def test_claim_max_is_clamped_to_max_claim(engine):
    await make_queue(engine, n=10)
    res = await engine.claim("q", node="w", max=1000)
    assert res.count == 4


@pytest.mark.parametrize(
    ("asked", "effective"), [(None, LEASE), (5000, 5000), (1, 100), (10**12, 86_400_000)]
)
async def test_claim_lease_ms_defaults_to_the_topic_and_is_clamped(engine, asked, effective):
    await make_queue(engine, n=1)
    res = await engine.claim("q", node="w", lease_ms=asked)
    assert res.claimed[0].deadline == START_MS + effective


async def test_claim_on_an_empty_queue_returns_nothing(engine):
    await make_queue(engine)
    res = await engine.claim("q", node="w", max=5)
    assert res.to_dict() == {"topic": "q", "claimed": [], "count": 0, "ready": 0}


async def test_claim_skips_deleted_records_and_jobs_in_flight(engine):
    await make_queue(engine)
    await engine.write("q", [{"data": i, "tag": f"t{i}"} for i in range(1, 7)])
    await engine.delete_records("q", match="t2")
    await engine.delete_records("q", before_seq=2)
    first = await engine.claim("q", node="a", max=2)
    assert first.seqs == (3, 4)
    second = await engine.claim("q", node="b", max=10)
    assert second.seqs == (5, 6)


async def test_claim_never_sees_jobs_written_after_a_recreate_as_old_leases(engine):
    await make_queue(engine, n=2)
    await engine.claim("q", node="w", max=2)
    await engine.delete_topic("q")
    await make_queue(engine, n=2)
    assert await counters(engine) == {
        "ready": 2,
        "in_flight": 0,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }
    res = await engine.claim("q", node="w", max=5)
    assert [j.deliveries for j in res.claimed] == [1, 1]


# ---------------------------------------------------------------------------------
# visibility timeout (§10.3)
# ---------------------------------------------------------------------------------


async def test_lease_expires_only_after_its_deadline(engine, clock):
    await make_queue(engine, n=1)
    await engine.claim("q", node="a")
    clock.advance(LEASE)  # now == deadline: still held
    assert (await engine.claim("q", node="b")).count == 0
    assert await counters(engine) == {
        "ready": 0,
        "in_flight": 1,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }
    clock.advance(1)  # now > deadline: expired, claimable again
    assert await counters(engine) == {
        "ready": 1,
        "in_flight": 0,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }
    res = await engine.claim("q", node="b")
    assert res.seqs == (1,)
    assert res.claimed[0].deliveries == 2
    assert res.claimed[0].deadline == START_MS + LEASE + 1 + LEASE


async def test_reclaimed_jobs_are_handed_out_before_fresh_ones(engine, clock):
    await make_queue(engine, n=6)
    await engine.claim("q", node="a", max=2)  # 1, 2
    clock.advance(LEASE // 2)
    await engine.claim("q", node="a", max=1)  # 3
    clock.advance(LEASE // 2 + 1)  # 1 and 2 expire; 3 still held
    res = await engine.claim("q", node="b", max=3)
    assert res.seqs == (1, 2, 4)
    assert [j.deliveries for j in res.claimed] == [2, 2, 1]


async def test_expired_lease_cannot_be_acked_or_extended(engine, clock):
    await make_queue(engine, n=1)
    res = await engine.claim("q", node="a")
    clock.advance(LEASE + 1)
    ack = await engine.ack("q", node="a", seqs=[1], lease_ids=list(res.lease_ids))
    assert (ack.acked, ack.skipped) == (0, [1])
    ext = await engine.extend("q", node="a", seqs=[1], lease_ms=5000)
    assert (ext.extended, ext.skipped, ext.deadlines) == (0, [1], {})
    assert await live_seqs(engine) == [1]


# ---------------------------------------------------------------------------------
# ack (§10.4)
# ---------------------------------------------------------------------------------


async def test_ack_deletes_held_jobs_and_skips_the_rest(engine):
    await make_queue(engine, n=4)
    res = await engine.claim("q", node="a", max=2)  # 1, 2
    await engine.claim("q", node="b")  # 3
    ack = await engine.ack("q", node="a", seqs=[1, 2, 3, 4, 99])
    assert ack.to_dict() == {
        "topic": "q",
        "acked": 2,
        "skipped": [3, 4, 99],
        "ready": 1,
        "in_flight": 1,
    }
    assert ack.fsync_ms == 0.0
    assert await live_seqs(engine) == [3, 4]
    state = await engine.get_topic("q", touch=False)
    assert (state.count, state.earliest_seq) == (2, 3)
    again = await engine.ack("q", node="a", seqs=list(res.seqs))
    assert (again.acked, again.skipped) == (0, [1, 2])


async def test_ack_counts_a_repeated_seq_once(engine):
    await make_queue(engine, n=1)
    await engine.claim("q", node="a")
    ack = await engine.ack("q", node="a", seqs=[1, 1])
    assert (ack.acked, ack.skipped) == (1, [1])


async def test_ack_with_lease_ids_fences_stale_deliveries(engine, clock):
    await make_queue(engine, n=2)
    old = await engine.claim("q", node="a", max=2)
    clock.advance(LEASE + 1)
    new = await engine.claim("q", node="a", max=1)  # same node re-claims seq 1
    assert new.seqs == (1,)
    assert new.lease_ids[0] != old.lease_ids[0]
    stale = await engine.ack("q", node="a", seqs=[1], lease_ids=[old.lease_ids[0]])
    assert (stale.acked, stale.skipped) == (0, [1])
    fresh = await engine.ack("q", node="a", seqs=[1], lease_ids=list(new.lease_ids))
    assert (fresh.acked, fresh.skipped) == (1, [])


async def test_ack_past_the_deadline_after_a_reclaim_elsewhere_is_skipped(engine, clock):
    await make_queue(engine, n=1)
    await engine.claim("q", node="slow")
    clock.advance(LEASE + 1)
    await engine.claim("q", node="fast")
    late = await engine.ack("q", node="slow", seqs=[1])
    assert (late.acked, late.skipped) == (0, [1])
    assert (await engine.ack("q", node="fast", seqs=[1])).acked == 1


async def test_ack_on_an_fsync_queue_reports_a_synced_delete(tmp_path):
    async with open_engine(str(tmp_path)) as engine:
        await make_queue(engine, n=2, durable=True)
        await engine.claim("q", node="a", max=2)
        ack = await engine.ack("q", node="a", seqs=[1, 2])
        assert ack.acked == 2
        assert ack.fsync_ms > 0


# ---------------------------------------------------------------------------------
# nack (§10.5)
# ---------------------------------------------------------------------------------


async def test_nack_without_delay_makes_the_job_claimable_at_once(engine):
    await make_queue(engine, n=2)
    await engine.claim("q", node="a", max=2)
    nack = await engine.nack("q", node="a", seqs=[2, 1, 7])
    assert nack.to_dict() == {
        "topic": "q",
        "nacked": 2,
        "skipped": [7],
        "ready": 2,
        "in_flight": 0,
    }
    res = await engine.claim("q", node="b", max=5)
    assert res.seqs == (1, 2)
    assert [j.deliveries for j in res.claimed] == [2, 2]


async def test_nack_delay_hides_the_job_until_it_elapses(engine, clock):
    await make_queue(engine, n=2)
    await engine.claim("q", node="a")
    nack = await engine.nack("q", node="a", seqs=[1], delay_ms=500)
    assert (nack.nacked, nack.ready, nack.in_flight) == (1, 1, 0)  # seq 2 is ready
    state = await engine.get_topic("q", touch=False)
    assert state.count == 2  # ready + in_flight == count - delayed
    assert (await engine.claim("q", node="b", max=5)).seqs == (2,)
    clock.advance(499)
    assert (await engine.claim("q", node="b")).count == 0
    clock.advance(1)
    assert await counters(engine) == {
        "ready": 1,
        "in_flight": 1,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }
    res = await engine.claim("q", node="b")
    assert res.seqs == (1,)
    assert res.claimed[0].deliveries == 2


async def test_nack_delay_is_clamped_and_must_be_a_non_negative_integer(engine, clock):
    await make_queue(engine, n=1)
    await engine.claim("q", node="a")
    with pytest.raises(InvalidRequestError):
        await engine.nack("q", node="a", seqs=[1], delay_ms=-1)
    await engine.nack("q", node="a", seqs=[1], delay_ms=10**15)
    clock.advance(86_400_000 - 1)
    assert (await engine.claim("q", node="b")).count == 0
    clock.advance(1)
    assert (await engine.claim("q", node="b")).count == 1


async def test_nack_of_another_nodes_lease_or_with_a_stale_lease_id_is_skipped(engine):
    await make_queue(engine, n=1)
    await engine.claim("q", node="a")
    assert (await engine.nack("q", node="b", seqs=[1])).skipped == [1]
    assert (await engine.nack("q", node="a", seqs=[1], lease_ids=["lease_00"])).skipped == [1]
    assert await counters(engine) == {
        "ready": 0,
        "in_flight": 1,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }


# ---------------------------------------------------------------------------------
# extend (§10.6)
# ---------------------------------------------------------------------------------


async def test_extend_sets_a_new_deadline_from_now(engine, clock):
    await make_queue(engine, n=2)
    res = await engine.claim("q", node="a", max=2)
    clock.advance(800)
    ext = await engine.extend("q", node="a", seqs=[1, 2, 3], lease_ms=5000, lease_ids=None)
    deadline = START_MS + 800 + 5000
    assert ext.to_dict() == {
        "topic": "q",
        "extended": 2,
        "skipped": [3],
        "deadlines": {"1": deadline, "2": deadline},
    }
    clock.advance(5000)
    assert await counters(engine) == {
        "ready": 0,
        "in_flight": 2,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }
    clock.advance(1)
    again = await engine.claim("q", node="b", max=2)
    assert [j.deliveries for j in again.claimed] == [2, 2]  # extending did not count
    assert again.lease_ids != res.lease_ids


async def test_extend_can_shorten_a_lease(engine, clock):
    await make_queue(engine, n=1)
    await engine.claim("q", node="a", lease_ms=60_000)
    await engine.extend("q", node="a", seqs=[1], lease_ms=100)
    clock.advance(101)
    assert (await engine.claim("q", node="b")).seqs == (1,)


async def test_extend_requires_lease_ms_and_clamps_it(engine):
    await make_queue(engine, n=1)
    await engine.claim("q", node="a")
    with pytest.raises(InvalidRequestError) as info:
        await engine.extend("q", node="a", seqs=[1], lease_ms=None)  # type: ignore[arg-type]
    assert info.value.detail == {"field": "lease_ms"}
    ext = await engine.extend("q", node="a", seqs=[1], lease_ms=1)
    assert ext.deadlines == {1: START_MS + 100}


async def test_extend_with_a_stale_lease_id_is_skipped(engine):
    await make_queue(engine, n=1)
    await engine.claim("q", node="a")
    ext = await engine.extend("q", node="a", seqs=[1], lease_ms=5000, lease_ids=["lease_x"])
    assert (ext.extended, ext.skipped) == (0, [1])


# ---------------------------------------------------------------------------------
# dead letters (§10.6)
# ---------------------------------------------------------------------------------


async def expire_and_claim(engine, clock, rounds: int) -> list[Any]:
    out = []
    for _ in range(rounds):
        out.append(await engine.claim("q", node="w", max=10))
        clock.advance(LEASE + 1)
    return out


async def test_job_past_max_deliveries_moves_to_the_dead_letter_topic(engine, clock):
    await make_queue(engine, max_deliveries=2, dead_letter="dlq")
    await engine.write(
        "q",
        [
            {"data": {"job": 1}, "tag": "t:1", "meta": {"trace": "z9"}, "node": "producer"},
            {"data": {"job": 2}},
        ],
    )
    first, second, third = await expire_and_claim(engine, clock, 3)
    assert [j.deliveries for j in first.claimed] == [1, 1]
    assert [j.deliveries for j in second.claimed] == [2, 2]
    assert third.count == 0
    assert third.ready == 0
    assert await counters(engine) == {
        "ready": 0,
        "in_flight": 0,
        "dead_lettered": 2,
        "scheduled": 0,
        "backoff": 0,
    }
    assert await live_seqs(engine) == []
    dlq = await engine.get_topic("dlq", touch=False)
    assert dlq.type == "log"
    assert dlq.count == 2
    moved = ujson.loads((await engine.diff("dlq", from_seq=0, include_tags=True)).records_json)
    assert moved[0]["data"] == {"job": 1}
    assert moved[0]["$tag"] == "t:1"
    assert moved[0]["meta"] == {
        "trace": "z9",
        "$dead_letter_from": "q",
        "$dead_letter_deliveries": 2,
        "$dead_letter_src_seq": 1,
    }
    assert "$node" not in moved[0]
    assert moved[1]["meta"] == {
        "$dead_letter_from": "q",
        "$dead_letter_deliveries": 2,
        "$dead_letter_src_seq": 2,
    }


async def dead_letters(engine: Engine, name: str = "dlq") -> list[Any]:
    """The dead-letter topic's records, without looking at the queue (a look would
    apply its expiry itself)."""
    if name not in {t.topic for t in (await engine.list_topics()).topics}:
        return []
    return list((await engine.diff(name, from_seq=0, limit=1000)).records)


async def test_a_nack_on_the_last_delivery_dead_letters_before_it_answers(engine, clock):
    # The job never waits out its backoff or a next claim: a worker that drains the queue
    # finds the dead letter when its last nack returns.
    await make_queue(engine, max_deliveries=2, dead_letter="dlq", n=1)
    first = await engine.claim("q", node="w")
    await engine.nack("q", node="w", seqs=list(first.seqs), delay_ms=5000)
    assert await dead_letters(engine) == []
    clock.advance(5000)
    second = await engine.claim("q", node="w")
    assert second.claimed[0].deliveries == 2
    nack = await engine.nack("q", node="w", seqs=list(second.seqs), delay_ms=5000)
    assert (nack.nacked, nack.ready, nack.in_flight) == (1, 0, 0)
    moved = await dead_letters(engine)
    assert [(r.data, r.meta["$dead_letter_deliveries"]) for r in moved] == [(1, 2)]
    assert (await engine.get_topic("q", touch=False)).count == 0
    assert await counters(engine) == {
        "ready": 0,
        "in_flight": 0,
        "dead_lettered": 1,
        "scheduled": 0,
        "backoff": 0,
    }


async def test_a_lease_expiring_on_the_last_delivery_dead_letters_at_its_deadline(
    engine, clock, autojump_clock
):
    # Nobody claims or looks at the queue: the expiry timer alone moves the job, when the
    # engine's clock passes the deadline (and not before).
    await make_queue(engine, max_deliveries=1, dead_letter="dlq", n=2)
    await engine.claim("q", node="crashed", max=2)
    await engine.extend("q", node="crashed", seqs=[2], lease_ms=3 * LEASE)
    await trio.sleep(2 * LEASE / 1000)  # trio time passes; the engine's clock does not
    assert await dead_letters(engine) == []
    clock.advance(LEASE + 1)  # seq 1's lease is past its deadline; seq 2's is not
    await trio.sleep(2 * LEASE / 1000)
    assert [r.data for r in await dead_letters(engine)] == [1]
    clock.advance(2 * LEASE)
    await trio.sleep(3 * LEASE / 1000)
    assert [r.data for r in await dead_letters(engine)] == [1, 2]
    assert await counters(engine) == {
        "ready": 0,
        "in_flight": 0,
        "dead_lettered": 2,
        "scheduled": 0,
        "backoff": 0,
    }


async def test_an_expiry_seen_by_a_look_dead_letters_without_a_claim(engine, clock):
    await make_queue(engine, max_deliveries=1, dead_letter="dlq", n=1)
    await engine.claim("q", node="crashed")
    clock.advance(LEASE + 1)
    await engine.get_topic("q", touch=False)  # any look applies the expiry
    await trio.testing.wait_all_tasks_blocked()
    assert [r.data for r in await dead_letters(engine)] == [1]
    assert (await engine.get_topic("q", touch=False)).count == 0


async def test_a_nacked_job_in_backoff_is_counted_as_backoff(engine, clock):
    await make_queue(engine, n=3)
    res = await engine.claim("q", node="w", max=2)
    await engine.nack("q", node="w", seqs=[res.seqs[0]], delay_ms=500)
    assert await counters(engine) == {
        "ready": 1,
        "in_flight": 1,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 1,
    }
    clock.advance(500)
    assert (await counters(engine))["backoff"] == 0
    assert (await counters(engine))["ready"] == 2


async def test_dead_lettered_jobs_do_not_take_a_claimers_share(engine, clock):
    await make_queue(engine, max_deliveries=1, dead_letter="dlq", n=1)
    await engine.claim("q", node="w")
    clock.advance(LEASE + 1)
    await engine.write("q", [{"data": "fresh"}])
    res = await engine.claim("q", node="w")
    assert res.seqs == (2,)
    assert (await counters(engine))["dead_lettered"] == 1


async def test_dead_letter_topic_may_be_an_existing_queue(engine, clock):
    await make_queue(engine, "dlq")
    await make_queue(engine, max_deliveries=1, dead_letter="dlq", n=1)
    await engine.claim("q", node="w")
    clock.advance(LEASE + 1)
    await engine.claim("q", node="w")
    res = await engine.claim("dlq", node="ops")
    assert res.claimed[0].meta == {
        "$dead_letter_from": "q",
        "$dead_letter_deliveries": 1,
        "$dead_letter_src_seq": 1,
    }


@pytest.mark.parametrize(
    "config", [{"max_deliveries": 0, "dead_letter": "dlq"}, {"max_deliveries": 1}]
)
async def test_without_max_deliveries_or_dead_letter_a_job_is_reclaimed_forever(
    engine, clock, config
):
    await make_queue(engine, n=1, **config)
    results = await expire_and_claim(engine, clock, 5)
    assert [r.claimed[0].deliveries for r in results] == [1, 2, 3, 4, 5]
    assert (await counters(engine))["dead_lettered"] == 0
    assert (await engine.list_topics()).topics[0].topic == "q"


async def test_a_full_dead_letter_topic_leaves_the_job_claimable(engine, clock):
    await engine.put_topic("dlq", {"cap_records": 1, "discard": "reject"})
    await engine.write("dlq", [{"data": "occupant"}])
    await make_queue(engine, max_deliveries=1, dead_letter="dlq", n=1)
    await engine.claim("q", node="w")
    clock.advance(LEASE + 1)
    assert (await engine.claim("q", node="w")).count == 0
    assert await counters(engine) == {
        "ready": 1,
        "in_flight": 0,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }
    await engine.delete_records("dlq", before_seq=10)
    assert (await engine.claim("q", node="w")).count == 0  # moved now
    assert await counters(engine) == {
        "ready": 0,
        "in_flight": 0,
        "dead_lettered": 1,
        "scheduled": 0,
        "backoff": 0,
    }


async def test_dead_lettered_counter_resets_when_the_topic_is_recreated(engine, clock):
    await make_queue(engine, max_deliveries=1, dead_letter="dlq", n=1)
    await engine.claim("q", node="w")
    clock.advance(LEASE + 1)
    await engine.claim("q", node="w")
    assert (await counters(engine))["dead_lettered"] == 1
    await engine.delete_topic("q")
    await make_queue(engine)
    assert (await counters(engine))["dead_lettered"] == 0


# ---------------------------------------------------------------------------------
# counters (§10.7) and metrics
# ---------------------------------------------------------------------------------


async def test_log_topics_have_no_queue_counters(engine):
    await engine.write("log", [{"data": 1}])
    state = await engine.get_topic("log")
    assert state.queue is None
    assert "queue" not in state.to_dict()


async def test_statistics_report_queue_gauges(engine):
    await make_queue(engine, n=3)
    await engine.write("log", [{"data": 1}])
    await engine.claim("q", node="w", max=2)
    stats = engine.statistics()
    assert stats.queue_topics == 1
    assert stats.queue_leases_in_flight == 2
    gauges = {g.topic: g for g in stats.topic_gauges}
    assert (gauges["q"].queue_ready, gauges["q"].queue_in_flight) == (1, 2)
    assert gauges["log"].queue_ready is None
    from topics.wire.metrics import render_prometheus

    text = render_prometheus(stats).decode()
    assert "topics_queue_leases_in_flight 2" in text
    assert 'topics_topic_queue_ready{topic="q"} 1' in text
    assert 'topics_topic_queue_in_flight{topic="q"} 2' in text
    assert 'topics_topic_queue_scheduled{topic="q"} 0' in text


async def test_deletes_made_elsewhere_leave_the_counters_exact(engine):
    await make_queue(engine)
    await engine.write("q", [{"data": i, "tag": f"t{i}"} for i in range(1, 5)])
    await engine.claim("q", node="w", max=2)  # 1, 2
    await engine.delete_records("q", match="t1")  # an in-flight job
    await engine.delete_records("q", match="t3")  # a ready job
    assert await counters(engine) == {
        "ready": 1,
        "in_flight": 1,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }
    ack = await engine.ack("q", node="w", seqs=[1, 2])
    assert (ack.acked, ack.skipped) == (1, [1])


async def test_ttl_expiry_of_leased_jobs_leaves_the_counters_exact(engine, clock):
    await make_queue(engine, ttl_ms=10_000, n=2)
    await engine.claim("q", node="w")
    clock.advance(500)
    await engine.write("q", [{"data": 3}])
    clock.advance(9_600)  # jobs 1-2 expired by TTL; 3 lives
    assert await counters(engine) == {
        "ready": 1,
        "in_flight": 0,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }
    assert (await engine.claim("q", node="w", max=5)).seqs == (3,)


# ---------------------------------------------------------------------------------
# the coalescing window (claim_jitter_ms)
# ---------------------------------------------------------------------------------


async def test_a_cohort_in_the_window_is_served_evenly_in_one_pass(engine, autojump_clock):
    await make_queue(engine, n=9, claim_jitter_ms=50)
    results: dict[str, Any] = {}
    t0 = trio.current_time()

    async def claimer(node: str, delay: float) -> None:
        await trio.sleep(delay)
        results[node] = (await engine.claim("q", node=node, max=10), trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(claimer, "a", 0)
        nursery.start_soon(claimer, "b", 0.01)
        nursery.start_soon(claimer, "c", 0.049)
    counts = sorted(r.count for r, _ in results.values())
    assert counts == [3, 3, 3]
    # every claimer got its answer when the window of the first closed
    assert {round(t - t0, 3) for _, t in results.values()} == {0.05}
    claimed = sorted(s for r, _ in results.values() for s in r.seqs)
    assert claimed == list(range(1, 10))
    for r, _ in results.values():
        assert list(r.seqs) == sorted(r.seqs)


async def test_a_cohort_is_divided_in_proportion_to_each_max(engine, autojump_clock):
    await make_queue(engine, n=6, claim_jitter_ms=20)
    results: dict[str, int] = {}

    async def claimer(node: str, want: int) -> None:
        results[node] = (await engine.claim("q", node=node, max=want)).count

    async with trio.open_nursery() as nursery:
        nursery.start_soon(claimer, "big", 8)
        nursery.start_soon(claimer, "small", 4)
    assert results == {"big": 4, "small": 2}


async def test_a_claim_after_the_window_starts_a_new_cohort(engine, autojump_clock):
    await make_queue(engine, n=4, claim_jitter_ms=30)
    first = await engine.claim("q", node="a", max=10)
    assert first.count == 4
    await engine.write("q", [{"data": 5}])
    t0 = trio.current_time()
    second = await engine.claim("q", node="b", max=10)
    assert second.seqs == (5,)
    assert trio.current_time() - t0 == pytest.approx(0.03)


async def test_a_claimer_cancelled_in_the_window_takes_nothing(engine, autojump_clock):
    await make_queue(engine, n=4, claim_jitter_ms=50)
    got: list[int] = []

    async def patient() -> None:
        got.append((await engine.claim("q", node="p", max=10)).count)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(patient)
        with trio.move_on_after(0.01):
            await engine.claim("q", node="quitter", max=10)
    assert got == [4]


# ---------------------------------------------------------------------------------
# /work sessions (§10.8, engine side)
# ---------------------------------------------------------------------------------


async def test_work_session_keeps_at_most_max_in_flight_and_refills_on_ack(engine):
    await make_queue(engine, n=5)
    deliveries: list[tuple[int, ...]] = []
    async with engine.open_work_session("q", node="w", max=2) as session:

        async def pump() -> None:
            while True:
                deliveries.append((await session.next_jobs()).seqs)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump)
            await trio.testing.wait_all_tasks_blocked()
            assert deliveries == [(1, 2)]
            assert session.in_flight == 2
            await engine.ack("q", node="w", seqs=[1])
            await trio.testing.wait_all_tasks_blocked()
            assert deliveries == [(1, 2), (3,)]
            await engine.nack("q", node="w", seqs=[2, 3])
            await trio.testing.wait_all_tasks_blocked()
            assert deliveries == [(1, 2), (3,), (2, 3)]
            nursery.cancel_scope.cancel()


async def test_work_session_wakes_on_append(engine):
    await make_queue(engine)
    got: list[tuple[int, ...]] = []
    async with (
        engine.open_work_session("q", node="w", max=4) as session,
        trio.open_nursery() as nursery,
    ):

        async def pump() -> None:
            got.append((await session.next_jobs()).seqs)

        nursery.start_soon(pump)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        await engine.write("q", [{"data": 1}, {"data": 2}])
        await trio.testing.wait_all_tasks_blocked()
        assert got == [(1, 2)]


async def test_work_session_wakes_when_a_lease_elsewhere_expires(engine, clock):
    await make_queue(engine, n=1)
    await engine.claim("q", node="crashed")
    got: list[tuple[int, ...]] = []
    async with (
        engine.open_work_session("q", node="w") as session,
        trio.open_nursery() as nursery,
    ):

        async def pump() -> None:
            got.append((await session.next_jobs()).seqs)

        nursery.start_soon(pump)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        clock.advance(LEASE + 1)
        await engine.get_topic("q")  # any look at the queue applies the expiry
        await trio.testing.wait_all_tasks_blocked()
        assert got == [(1,)]


async def test_closing_a_work_session_releases_its_leases_at_once(engine):
    await make_queue(engine, n=3)
    polled = await engine.claim("q", node="w")  # a poll claim by the same node
    async with engine.open_work_session("q", node="w", max=5) as session:
        res = await session.next_jobs()
        assert res.seqs == (2, 3)
        await engine.ack("q", node="w", seqs=[2])
        assert await counters(engine) == {
            "ready": 0,
            "in_flight": 2,
            "dead_lettered": 0,
            "scheduled": 0,
            "backoff": 0,
        }
    # seq 3 was delivered on the session: released; seq 1 came from a poll: kept
    assert await counters(engine) == {
        "ready": 1,
        "in_flight": 1,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }
    again = await engine.claim("q", node="other", max=5)
    assert again.seqs == (3,)
    assert again.claimed[0].deliveries == 2
    assert (await engine.ack("q", node="w", seqs=list(polled.seqs))).acked == 1


async def test_work_session_reports_a_deleted_topic(engine):
    await make_queue(engine)
    errors: list[Exception] = []
    async with engine.open_work_session("q", node="w") as session:

        async def pump() -> None:
            try:
                await session.next_jobs()
            except TopicNotFoundError as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump)
            await trio.testing.wait_all_tasks_blocked()
            await engine.delete_topic("q")
    assert len(errors) == 1


async def test_work_session_validates_at_open(engine):
    await make_queue(engine)
    with pytest.raises(InvalidRequestError):
        async with engine.open_work_session("q", node="", max=1):
            pass
    with pytest.raises(InvalidRequestError):
        async with engine.open_work_session("q", node="w", max=0):
            pass
    with pytest.raises(TopicNotFoundError):
        async with engine.open_work_session("zz", node="w"):
            pass


# ---------------------------------------------------------------------------------
# many workers at once
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_many_workers_drain_the_queue_with_every_job_acked_once_or_dead_lettered(
    engine, clock, seed
):
    rng = random.Random(seed)
    total = 400
    await make_queue(engine, max_deliveries=4, dead_letter="dlq")
    for start in range(0, total, 50):
        await engine.write("q", [{"data": {"job": i}} for i in range(start, start + 50)])
    acked: list[int] = []

    async def worker(k: int) -> None:
        node = f"w{k}"
        while True:
            res = await engine.claim("q", node=node, max=rng.randint(1, 8))
            if res.count == 0:
                state = await engine.get_topic("q", touch=False)
                if state.count == 0:
                    return
                clock.advance(rng.randint(0, LEASE // 2))  # let abandoned leases expire
                await trio.lowlevel.checkpoint()
                continue
            for job in res.claimed:
                roll = rng.random()
                if roll < 0.6:
                    ack = await engine.ack("q", node=node, seqs=[job.seq], lease_ids=[job.lease_id])
                    if ack.acked:
                        acked.append(job.data["job"])
                elif roll < 0.8:
                    await engine.nack("q", node=node, seqs=[job.seq], delay_ms=rng.randint(0, 50))
                elif roll < 0.9:
                    await engine.extend("q", node=node, seqs=[job.seq], lease_ms=LEASE)
                # else: abandon it (the lease expires)
                await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        for k in range(12):
            nursery.start_soon(worker, k)
    dead = [r.data["job"] for r in (await engine.diff("dlq", from_seq=0, limit=1000)).records]
    assert len(acked) == len(set(acked)), "a job was acked twice"
    assert not set(acked) & set(dead), "a job was both acked and dead-lettered"
    assert sorted(acked + dead) == list(range(total)), "a job was lost"
    assert await counters(engine) == {
        "ready": 0,
        "in_flight": 0,
        "dead_lettered": len(dead),
        "scheduled": 0,
        "backoff": 0,
    }


# ---------------------------------------------------------------------------------
# persistence of leases
# ---------------------------------------------------------------------------------


async def test_durable_leases_survive_a_restart(tmp_path):
    clock = ManualClock(START_MS)
    async with open_engine(str(tmp_path), clock=clock) as engine:
        await make_queue(engine, n=6, leases_durable=True, max_deliveries=3, dead_letter="dlq")
        held = await engine.claim("q", node="a", max=2)  # 1, 2
        other = await engine.claim("q", node="b", max=2)  # 3, 4
        await engine.ack("q", node="b", seqs=[3])
        await engine.nack("q", node="b", seqs=[4], delay_ms=5000)
        await engine.extend("q", node="a", seqs=[2], lease_ms=9000)
        before = await counters(engine)
    assert before == {"ready": 2, "in_flight": 2, "dead_lettered": 0, "scheduled": 0, "backoff": 1}
    async with open_engine(str(tmp_path), clock=clock) as engine:
        assert await counters(engine) == before
        assert (await engine.claim("q", node="c", max=10)).seqs == (5, 6)
        ack = await engine.ack("q", node="a", seqs=[1], lease_ids=[held.lease_ids[0]])
        assert ack.acked == 1
        clock.advance(LEASE + 1)  # 5 and 6 expire; seq 2 was extended to 9000 ms
        assert (await counters(engine))["in_flight"] == 1
        clock.advance(5000)
        res = await engine.claim("q", node="c", max=10)
        assert 4 in res.seqs
        job4 = next(j for j in res.claimed if j.seq == 4)
        assert job4.deliveries == 2  # the delivery count survived
        assert other.lease_ids[1] != job4.lease_id


async def test_a_last_delivery_held_across_a_restart_is_dead_lettered_at_once(tmp_path):
    clock = ManualClock(START_MS)
    async with open_engine(str(tmp_path), clock=clock) as engine:
        await make_queue(engine, n=1, leases_durable=True, max_deliveries=1, dead_letter="dlq")
        await engine.claim("q", node="gone")
    clock.advance(LEASE + 1)  # the lease ran out while the engine was down
    async with open_engine(str(tmp_path), clock=clock) as engine:
        # Nobody looks at the queue (a look would apply the expiry itself): the timer
        # started at recovery moves the job, and the move wakes the queue's waiters.
        (q,) = engine._queue_ops.queues.states.values()
        with trio.fail_after(5):
            while not q.dead_lettered:
                await q.lot.park()
        assert [r.data for r in await dead_letters(engine)] == [1]
        assert (await engine.get_topic("q", touch=False)).count == 0


async def test_durable_leases_replay_from_the_wal_after_a_crash(tmp_path):
    """No clean shutdown: the lease events are replayed from the WAL, not a checkpoint."""
    clock = ManualClock(START_MS)
    async with open_engine(str(tmp_path), clock=clock) as engine:
        await make_queue(engine, n=4, leases_durable=True, durable=True)
        await engine._store.checkpoint(engine._registry)  # type: ignore[union-attr]
        held = await engine.claim("q", node="a", max=3)
        await engine.ack("q", node="a", seqs=[1])
        await engine.nack("q", node="a", seqs=[2])
        await engine._store.wal.flush()  # type: ignore[union-attr]
        # Simulate a crash: drop the store before the final checkpoint.
        engine._store = None
    async with open_engine(str(tmp_path), clock=clock) as engine:
        assert await live_seqs(engine) == [2, 3, 4]
        assert await counters(engine) == {
            "ready": 2,
            "in_flight": 1,
            "dead_lettered": 0,
            "scheduled": 0,
            "backoff": 0,
        }
        assert (await engine.ack("q", node="a", seqs=[3], lease_ids=[held.lease_ids[2]])).acked == 1


async def test_without_durable_leases_every_in_flight_job_is_claimable_after_a_restart(tmp_path):
    clock = ManualClock(START_MS)
    async with open_engine(str(tmp_path), clock=clock) as engine:
        await make_queue(engine, n=4, durable=True, max_deliveries=1, dead_letter="dlq")
        await engine.claim("q", node="a", max=2)
        await engine.ack("q", node="a", seqs=[1])
        clock.advance(LEASE + 1)
        res = await engine.claim("q", node="a")  # seq 2 is dead-lettered; 3 is leased
        assert res.seqs == (3,)
        assert await counters(engine) == {
            "ready": 1,
            "in_flight": 1,
            "dead_lettered": 1,
            "scheduled": 0,
            "backoff": 0,
        }
    async with open_engine(str(tmp_path), clock=clock) as engine:
        assert await live_seqs(engine) == [3, 4]  # the ack and the dead letter were durable
        assert await counters(engine) == {
            "ready": 2,
            "in_flight": 0,
            "dead_lettered": 1,
            "scheduled": 0,
            "backoff": 0,
        }
        res = await engine.claim("q", node="b", max=5)
        assert res.seqs == (3, 4)
        assert [j.deliveries for j in res.claimed] == [1, 1]


# ---------------------------------------------------------------------------------
# the sync facade and the worker helper
# ---------------------------------------------------------------------------------


def test_sync_facade_claim_ack_nack_extend():
    with topics.open(None, clock=ManualClock(START_MS)) as db:
        db.put_topic("q", {"type": "queue"})
        db.write("q", [{"data": 1}, {"data": 2}])
        res = db.claim("q", node="w", max=2)
        assert res.seqs == (1, 2)
        assert db.extend("q", node="w", seqs=[1], lease_ms=500).extended == 1
        assert db.nack("q", node="w", seqs=[2], lease_ids=[res.lease_ids[1]]).nacked == 1
        assert db.ack("q", node="w", seqs=[1]).acked == 1
        assert db.get_topic("q").queue == {
            "ready": 1,
            "in_flight": 0,
            "dead_lettered": 0,
            "scheduled": 0,
            "backoff": 0,
        }
        db.write("log", [{"data": 1}])
        with pytest.raises(NotAQueueError):
            db.claim("log", node="w")


async def test_async_worker_acks_successes_and_backs_off_failures(engine, clock):
    await make_queue(engine, n=6)
    seen: list[tuple[int, int]] = []

    async def handler(job: topics.Job) -> None:
        seen.append((job.seq, job.deliveries))
        await trio.lowlevel.checkpoint()
        if job.data % 3 == 0 and job.deliveries == 1:
            raise RuntimeError("transient")

    worker = topics.Worker(engine, "q", "w", handler, max=4, backoff_ms=100, until_empty=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker.run)
        await trio.testing.wait_all_tasks_blocked()
        assert worker.stats.nacked == 2  # jobs 3 and 6, delayed 100 ms
        assert await counters(engine) == {
            "ready": 0,
            "in_flight": 0,
            "dead_lettered": 0,
            "scheduled": 0,
            "backoff": 2,
        }
        clock.advance(100)
        await engine.get_topic("q")  # the delay elapsed: wakes the idle worker
    assert worker.stats.acked == 6
    assert worker.stats.lost == 0
    assert sorted(s for s, d in seen if d == 2) == [3, 6]
    assert await live_seqs(engine) == []


async def test_a_worker_draining_the_queue_returns_after_its_dead_letters_exist(engine, clock):
    await make_queue(engine, n=3, max_deliveries=1, dead_letter="jobs.dead")

    async def handler(job: topics.Job) -> None:
        if job.data == 2:
            raise RuntimeError("poison")

    worker = topics.Worker(engine, "q", "w", handler, max=4, until_empty=True)
    with trio.fail_after(5):
        await worker.run()
    assert (worker.stats.acked, worker.stats.nacked) == (2, 1)
    assert [r.data for r in await dead_letters(engine, "jobs.dead")] == [2]


async def test_async_worker_heartbeats_a_long_job(engine, autojump_clock):
    await make_queue(engine, n=1)

    async def slow(job: topics.Job) -> None:
        await trio.sleep(3 * LEASE / 1000)  # three lease lengths of trio time

    stats = await topics.run_worker(engine, "q", "w", slow, until_empty=True)
    assert stats.extended >= 8  # every lease_ms / 3
    assert (stats.acked, stats.lost) == (1, 0)


def test_sync_worker_drains_the_queue_with_nacks_and_backoff():
    calls: list[int] = []

    def handler(job: topics.Job) -> None:
        calls.append(job.seq)
        if job.seq == 2 and job.deliveries < 3:
            raise ValueError("flaky")

    with topics.open(None) as db:
        db.put_topic("q", {"type": "queue", "lease_ms": 5000})
        db.write("q", [{"data": i} for i in range(5)])
        stats = topics.run_worker(db, "q", "w", handler, max=2, backoff_ms=1, until_empty=True)
        assert db.get_topic("q").count == 0
    assert (stats.acked, stats.nacked, stats.lost) == (5, 2, 0)
    assert calls.count(2) == 3


def test_worker_backoff_is_exponential_and_capped():
    worker = topics.Worker(None, "q", "w", print, backoff_ms=100, max_backoff_ms=1000)  # type: ignore[arg-type]
    assert [worker.backoff_delay_ms(d) for d in (1, 2, 3, 4, 5, 9)] == [
        100,
        200,
        400,
        800,
        1000,
        1000,
    ]
