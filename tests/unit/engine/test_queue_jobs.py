"""Scheduled jobs, dedupe keys and dead-letter redrive (issue 19, docs/QUEUES.md).

Time is the engine's ManualClock; /work wake-ups run on trio time, which the
``autojump_clock`` fixture skips, never a sleep.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
import ujson

import topics
from topics._clock import ManualClock
from topics.engine import Engine, open_engine
from topics.errors import ForbiddenError, InvalidRequestError, NotAQueueError, TopicNotFoundError

from ._support import START_MS

LEASE = 1000


async def make_queue(engine: Engine, name: str = "q", **config: Any) -> None:
    await engine.put_topic(name, {"type": "queue", "lease_ms": LEASE} | config)


async def counters(engine: Engine, name: str = "q") -> dict[str, int]:
    state = await engine.get_topic(name, touch=False)
    assert state.queue is not None
    return state.queue


async def records(engine: Engine, name: str) -> list[Any]:
    return (await engine.diff(name, from_seq=0, limit=1000, include_tags=True)).records


# ---------------------------------------------------------------------------------
# scheduled jobs
# ---------------------------------------------------------------------------------


async def test_a_scheduled_job_has_its_seq_at_once_but_is_claimable_only_when_due(engine, clock):
    await make_queue(engine, lease_ms=60_000)
    res = await engine.write(
        "q",
        [
            {"data": "later", "delay_ms": 5000},
            {"data": "now"},
            {"data": "at", "deliver_at": START_MS + 2000},
        ],
    )
    assert res.seqs == [1, 2, 3]
    assert await counters(engine) == {
        "ready": 1,
        "in_flight": 0,
        "dead_lettered": 0,
        "scheduled": 2,
        "backoff": 0,
    }
    assert (await engine.claim("q", node="w", max=10)).seqs == (2,)
    clock.advance(1999)
    assert (await engine.claim("q", node="w", max=10)).seqs == ()
    clock.advance(1)
    assert (await counters(engine))["scheduled"] == 1
    assert (await engine.claim("q", node="w", max=10)).seqs == (3,)
    clock.advance(3000)
    job = (await engine.claim("q", node="w", max=10)).claimed[0]
    assert (job.seq, job.data, job.deliveries) == (1, "later", 1)
    assert job.meta == {"$deliver_at": START_MS + 5000}
    assert await counters(engine) == {
        "ready": 0,
        "in_flight": 3,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }


async def test_a_queue_created_by_the_write_schedules_and_keys_its_first_jobs(engine, clock):
    records = [{"data": 1, "delay_ms": 100, "dedupe_key": "a"}, {"data": 2}]
    res = await engine.write("nq", records, config={"type": "queue", "lease_ms": 60_000})
    assert (res.created, res.seqs, res.dedupe) == (True, [1, 2], [])
    assert (await counters(engine, "nq"))["scheduled"] == 1
    assert (await engine.write("nq", [{"data": 3, "dedupe_key": "a"}])).count == 0
    assert (await engine.claim("nq", node="w", max=5)).seqs == (2,)
    clock.advance(100)
    assert (await engine.claim("nq", node="w", max=5)).seqs == (1,)


async def test_a_router_copy_into_a_queue_keeps_its_schedule(engine, clock):
    """The stamp is the truth wherever the record came from: a copy is scheduled live as it
    would be after a restart (topics/queues/job_ops.py rule 2)."""
    await make_queue(engine, "jobs", lease_ms=60_000)
    await make_queue(engine, "incoming", lease_ms=60_000)  # its write stamps $deliver_at
    await engine.put_router("r", {"source": "incoming", "dest": "jobs"})
    assert (await counters(engine, "jobs"))["scheduled"] == 0  # the projection exists now
    await engine.write("incoming", [{"data": 1, "delay_ms": 500}, {"data": 2}])
    await trio.testing.wait_all_tasks_blocked()  # the router forwards
    assert (await counters(engine, "jobs"))["scheduled"] == 1
    assert (await engine.claim("jobs", node="w", max=5)).seqs == (2,)
    clock.advance(500)
    assert (await engine.claim("jobs", node="w", max=5)).seqs == (1,)


async def test_metrics_count_scheduled_jobs_per_queue(engine):
    from topics.wire.metrics import render_prometheus

    await make_queue(engine)
    await engine.write("q", [{"data": 1, "delay_ms": 1000}, {"data": 2, "delay_ms": 5}])
    await engine.write("log", [{"data": 1}])
    gauges = {g.topic: g for g in engine.statistics().topic_gauges}
    assert (gauges["q"].queue_scheduled, gauges["log"].queue_scheduled) == (2, None)
    text = render_prometheus(engine.statistics()).decode()
    assert 'topics_topic_queue_scheduled{topic="q"} 2' in text


async def test_due_jobs_go_out_in_seq_order_with_the_fresh_ones(engine, clock):
    await make_queue(engine, lease_ms=60_000)
    await engine.write(
        "q", [{"data": 1, "delay_ms": 100}, {"data": 2}, {"data": 3, "delay_ms": 50}]
    )
    assert (await engine.claim("q", node="w", max=1)).seqs == (2,)  # cursor passes 1 and 3
    await engine.write("q", [{"data": 4}, {"data": 5}])
    clock.advance(100)
    assert (await engine.claim("q", node="w", max=3)).seqs == (1, 3, 4)
    assert (await engine.claim("q", node="w", max=3)).seqs == (5,)


async def test_a_past_deliver_at_is_claimable_at_once_and_unstamped(engine):
    await make_queue(engine)
    await engine.write("q", [{"data": 1, "deliver_at": START_MS - 1}, {"data": 2, "delay_ms": 0}])
    assert (await engine.claim("q", node="w", max=5)).seqs == (1, 2)
    assert [r.meta for r in await records(engine, "q")] == [None, None]


async def test_stamps_keep_the_clients_meta(engine):
    await make_queue(engine)
    await engine.write("q", [{"data": 1, "meta": {"trace": "t1"}, "delay_ms": 10}])
    await engine.write("q", [{"data": 2, "meta": b'{"trace":"t2"}', "delay_ms": 10}])
    metas = [r.meta for r in await records(engine, "q")]
    assert metas == [
        {"trace": "t1", "$deliver_at": START_MS + 10},
        {"trace": "t2", "$deliver_at": START_MS + 10},
    ]


async def test_a_deleted_scheduled_job_stops_counting(engine, clock):
    await make_queue(engine)
    await engine.write("q", [{"data": 1, "tag": "x", "delay_ms": 100}, {"data": 2}])
    await engine.delete_records("q", match="x")
    assert await counters(engine) == {
        "ready": 1,
        "in_flight": 0,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }
    clock.advance(100)
    assert (await engine.claim("q", node="w", max=5)).seqs == (2,)


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({"data": 1, "deliver_at": START_MS + 5, "delay_ms": 5}, "records[0].delay_ms"),
        ({"data": 1, "delay_ms": -1}, "records[0].delay_ms"),
        ({"data": 1, "delay_ms": 366 * 86_400_000}, "records[0].delay_ms"),
        ({"data": 1, "deliver_at": "soon"}, "records[0].deliver_at"),
        ({"data": 1, "dedupe_key": ""}, "records[0].dedupe_key"),
        ({"data": 1, "dedupe_key": 7}, "records[0].dedupe_key"),
    ],
)
async def test_bad_job_fields_are_400_and_nothing_is_stored(engine, record, field):
    await make_queue(engine)
    with pytest.raises(InvalidRequestError) as info:
        await engine.write("q", [{"data": 0}, record])
    assert info.value.detail["field"] == field.replace("[0]", "[1]")
    assert (await engine.get_topic("q")).head_seq == 0


async def test_job_fields_on_a_log_topic_are_400(engine):
    await engine.put_topic("log")
    for record in ({"data": 1, "delay_ms": 5}, {"data": 1, "dedupe_key": "k"}):
        with pytest.raises(InvalidRequestError) as info:
            await engine.write("log", [record])
        assert "queue" in info.value.message
    with pytest.raises(InvalidRequestError):
        await engine.write("log", [{"data": 1}], dedupe="until_ack")
    assert (await engine.get_topic("log")).head_seq == 0


async def test_a_work_session_wakes_when_a_scheduled_job_comes_due(engine, clock, autojump_clock):
    await make_queue(engine)
    await engine.write("q", [{"data": 1, "delay_ms": 60_000}])
    got: list[tuple[int, ...]] = []
    async with engine.open_work_session("q", node="w", max=4) as session, trio.open_nursery() as n:

        async def pump() -> None:
            got.append((await session.next_jobs()).seqs)

        n.start_soon(pump)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        assert session.next_change_ms() == START_MS + 60_000
        clock.advance(60_000)
        await trio.sleep(61)  # trio time (autojump): the session's timer for the due time
        assert got == [(1,)]


async def test_the_worker_idle_wait_wakes_for_a_due_job(engine, clock, autojump_clock):
    await make_queue(engine)
    await engine.write("q", [{"data": 1, "delay_ms": 5000}])
    assert not await engine.wait_claimable("q", timeout_s=0.001)
    clock.advance(5000)
    assert await engine.wait_claimable("q", timeout_s=10)


async def test_the_worker_helper_waits_for_a_scheduled_job_and_sees_its_stamps(
    engine, clock, autojump_clock
):
    await make_queue(engine, lease_ms=60_000)
    await engine.write("q", [{"data": "later", "delay_ms": 5000, "dedupe_key": "k"}])
    seen: list[tuple[Any, ...]] = []
    done: list[Any] = []

    async def run() -> None:
        def handle(job: Any) -> None:
            seen.append((job.seq, job.data, job.deliver_at, job.dedupe_key))

        done.append(await topics.run_worker(engine, "q", "w", handle, until_empty=True))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.testing.wait_all_tasks_blocked()
        assert seen == []  # idle: the only job is not due (and until_empty counts it)
        clock.advance(5000)
        await trio.sleep(6)  # trio time (autojump): the worker's wait for the due time
    assert seen == [(1, "later", START_MS + 5000, "k")]
    assert done[0].acked == 1


async def test_scheduled_jobs_survive_a_restart_and_a_crash(tmp_path):
    clock = ManualClock(START_MS)
    async with open_engine(str(tmp_path), clock=clock) as engine:
        await make_queue(engine, durable=True, lease_ms=60_000)
        await engine.write("q", [{"data": 1, "delay_ms": 1000}, {"data": 2}])
    async with open_engine(str(tmp_path), clock=clock) as engine:
        assert (await counters(engine))["scheduled"] == 1
        assert (await engine.claim("q", node="w", max=5)).seqs == (2,)
        await engine.write("q", [{"data": 3, "delay_ms": 3000}])
        await engine._store.wal.flush()  # type: ignore[union-attr]
        engine._store = None  # a crash: no final checkpoint, the WAL replays
    async with open_engine(str(tmp_path), clock=clock) as engine:
        assert (await counters(engine))["scheduled"] == 2
        clock.advance(1000)
        assert (await engine.claim("q", node="w", max=5)).seqs == (1, 2)
        clock.advance(2000)
        assert (await engine.claim("q", node="w", max=5)).seqs == (3,)


async def test_durable_leases_and_scheduled_jobs_restore_together(tmp_path):
    clock = ManualClock(START_MS)
    async with open_engine(str(tmp_path), clock=clock) as engine:
        await make_queue(engine, durable=True, leases_durable=True)
        await engine.write(
            "q", [{"data": 1, "delay_ms": 1000}, {"data": 2}, {"data": 3, "delay_ms": 10}]
        )
        assert (await engine.claim("q", node="w", max=5)).seqs == (2,)
        clock.advance(10)
        assert (await engine.claim("q", node="w", max=5)).seqs == (3,)
    async with open_engine(str(tmp_path), clock=clock) as engine:
        assert await counters(engine) == {
            "ready": 0,
            "in_flight": 2,
            "dead_lettered": 0,
            "scheduled": 1,
            "backoff": 0,
        }
        clock.advance(990)
        assert (await engine.claim("q", node="x", max=5)).seqs == (1,)


# ---------------------------------------------------------------------------------
# dedupe keys
# ---------------------------------------------------------------------------------


async def test_a_held_key_is_not_appended_and_the_answer_names_the_holder(engine):
    await make_queue(engine)
    first = await engine.write("q", [{"data": "a", "dedupe_key": "k1"}])
    assert first.dedupe == []
    assert first.seqs == [1]
    again = await engine.write(
        "q", [{"data": "b", "dedupe_key": "k1"}, {"data": "c", "dedupe_key": "k2"}]
    )
    assert again.dedupe == [{"index": 0, "dedupe_key": "k1", "seq": 1, "outcome": "duplicate"}]
    assert again.seqs == [2]
    assert again.count == 1
    only = await engine.write("q", [{"data": "d", "dedupe_key": "k2"}])
    assert (only.count, only.seqs, only.head_seq) == (0, [], 2)
    assert only.to_dict()["dedupe"] == [
        {"index": 0, "dedupe_key": "k2", "seq": 2, "outcome": "duplicate"}
    ]
    assert [r.data for r in await records(engine, "q")] == ["a", "c"]


async def test_a_write_whose_jobs_were_all_duplicates_still_fences_older_epochs(engine):
    from topics.errors import ProducerFencedError

    await make_queue(engine)
    await engine.write("q", [{"data": 1, "dedupe_key": "k"}], producer_id="p", epoch=1)
    dup = await engine.write("q", [{"data": 2, "dedupe_key": "k"}], producer_id="p", epoch=2)
    assert dup.count == 0
    with pytest.raises(ProducerFencedError):
        await engine.write("q", [{"data": 3}], producer_id="p", epoch=1)


async def test_an_until_ack_key_frees_when_its_job_is_acked(engine):
    await make_queue(engine)
    await engine.write("q", [{"data": 1, "dedupe_key": "k"}])
    job = await engine.claim("q", node="w")
    assert (await engine.write("q", [{"data": 2, "dedupe_key": "k"}])).count == 0  # leased: held
    await engine.ack("q", node="w", seqs=list(job.seqs))
    assert (await engine.write("q", [{"data": 3, "dedupe_key": "k"}])).seqs == [2]


async def test_a_window_key_holds_after_the_ack_until_the_window_ends(engine, clock):
    await make_queue(engine)
    await engine.write("q", [{"data": 1, "dedupe_key": "k"}], dedupe="window", dedupe_ms=1000)
    job = await engine.claim("q", node="w")
    await engine.ack("q", node="w", seqs=list(job.seqs))
    clock.advance(999)
    held = await engine.write("q", [{"data": 2, "dedupe_key": "k"}])
    assert held.count == 0
    assert held.dedupe[0]["seq"] == 1
    clock.advance(1)
    assert (await engine.write("q", [{"data": 3, "dedupe_key": "k"}])).seqs == [2]


async def test_replace_swaps_an_unclaimed_job_for_the_new_one_at_the_tail(engine):
    await make_queue(engine)
    await engine.write("q", [{"data": "v1", "dedupe_key": "k", "delay_ms": 500}, {"data": "other"}])
    res = await engine.write(
        "q", [{"data": "v2", "dedupe_key": "k", "delay_ms": 500}], replace=True
    )
    assert res.seqs == [3]
    assert res.dedupe == [
        {"index": 0, "dedupe_key": "k", "seq": 3, "outcome": "replaced", "replaced_seq": 1}
    ]
    assert [(r.seq, r.data) for r in await records(engine, "q")] == [(2, "other"), (3, "v2")]
    assert await counters(engine) == {
        "ready": 1,
        "in_flight": 0,
        "dead_lettered": 0,
        "scheduled": 1,
        "backoff": 0,
    }
    # A claimed holder is not replaced: the new job is a duplicate.
    await engine.write("q", [{"data": "j1", "dedupe_key": "j"}])
    claimed = await engine.claim("q", node="w", max=5)
    assert claimed.seqs == (2, 4)
    res = await engine.write("q", [{"data": "j2", "dedupe_key": "j"}], replace=True)
    assert res.count == 0
    assert res.dedupe[0]["outcome"] == "duplicate"


async def test_dedupe_argument_errors(engine):
    await make_queue(engine)
    bad = [
        ({"dedupe": "forever"}, "dedupe"),
        ({"dedupe": "window"}, "dedupe_ms"),
        ({"dedupe": "window", "dedupe_ms": 0}, "dedupe_ms"),
        ({"dedupe_ms": 5}, "dedupe_ms"),
        ({"replace": "yes"}, "replace"),
    ]
    for kwargs, field in bad:
        with pytest.raises(InvalidRequestError) as info:
            await engine.write("q", [{"data": 1, "dedupe_key": "k"}], **kwargs)
        assert info.value.detail["field"] == field
    with pytest.raises(InvalidRequestError) as info:
        await engine.write("q", [{"data": 1, "dedupe_key": "k"}, {"data": 2, "dedupe_key": "k"}])
    assert info.value.detail["field"] == "records[1].dedupe_key"
    assert (await engine.get_topic("q")).head_seq == 0


async def test_dedupe_keys_survive_a_restart_and_a_crash(tmp_path):
    clock = ManualClock(START_MS)
    async with open_engine(str(tmp_path), clock=clock) as engine:
        await make_queue(engine, durable=True)
        await engine.write("q", [{"data": 1, "dedupe_key": "a"}])
        await engine.write("q", [{"data": 2, "dedupe_key": "w"}], dedupe="window", dedupe_ms=10_000)
        job = await engine.claim("q", node="x", max=5)
        await engine.ack("q", node="x", seqs=[2])  # the window key outlives its job
        assert job.seqs == (1, 2)
    async with open_engine(str(tmp_path), clock=clock) as engine:
        res = await engine.write(
            "q", [{"data": 3, "dedupe_key": "a"}, {"data": 4, "dedupe_key": "w"}]
        )
        assert [d["seq"] for d in res.dedupe or []] == [1, 2]
        await engine.write("q", [{"data": 5, "dedupe_key": "c"}])
        await engine._store.wal.flush()  # type: ignore[union-attr]
        engine._store = None  # a crash
    async with open_engine(str(tmp_path), clock=clock) as engine:
        res = await engine.write("q", [{"data": 6, "dedupe_key": "c"}])
        assert res.count == 0
        assert res.dedupe[0]["seq"] == 3
        clock.advance(10_000)
        assert (await engine.write("q", [{"data": 7, "dedupe_key": "w"}])).count == 1


# ---------------------------------------------------------------------------------
# redrive
# ---------------------------------------------------------------------------------


async def dead_letter(engine: Engine, clock: ManualClock, n: int, queue: str = "q") -> None:
    """Write ``n`` jobs to ``queue`` and let each exhaust max_deliveries=1."""
    await make_queue(engine, queue, max_deliveries=1, dead_letter="dlq")
    await engine.write(queue, [{"data": i, "tag": f"t{i}", "meta": {"m": i}} for i in range(n)])
    await engine.claim(queue, node="w", max=n)
    clock.advance(LEASE + 1)
    await engine.claim(queue, node="w", max=n)  # every job goes to the dead-letter topic


async def test_redrive_moves_jobs_back_with_provenance(engine, clock):
    await dead_letter(engine, clock, 3)
    assert [r.seq for r in await records(engine, "dlq")] == [1, 2, 3]
    clock.advance(7)
    res = await engine.redrive("dlq")
    assert res.to_dict() == {
        "topic": "dlq",
        "moved": 3,
        "skipped": 0,
        "remaining": 0,
        "batches": [{"to": "q", "count": 3, "first_seq": 4, "last_seq": 6}],
    }
    back = await records(engine, "q")
    assert [(r.seq, r.data, r.tag) for r in back] == [(4, 0, "t0"), (5, 1, "t1"), (6, 2, "t2")]
    meta = back[0].meta
    assert meta["m"] == 0
    assert meta["$dead_letter_from"] == "q"
    assert {k: meta[k] for k in meta if k.startswith("$redrive")} == {
        "$redrive_from": "dlq",
        "$redrive_src_seq": 1,
        "$redrive_origin": "q",
        "$redrive_origin_seq": 1,
        "$redrive_at": START_MS + LEASE + 1 + 7,
    }
    job = (await engine.claim("q", node="w", max=1)).claimed[0]
    assert (job.seq, job.deliveries) == (4, 1)
    assert await records(engine, "dlq") == []


async def test_redrive_to_max_and_where(engine, clock):
    await dead_letter(engine, clock, 4)
    await dead_letter(engine, clock, 2, queue="q2")
    await make_queue(engine, "other")
    res = await engine.redrive("dlq", where={"origin": "q2"}, max=1)
    assert (res.moved, res.remaining, res.batches[0]["to"]) == (1, 5, "q2")
    res = await engine.redrive("dlq", to="other", where={"match": ["tag", "Glob", "t1*"]})
    assert (res.moved, res.remaining) == (2, 3)  # t1 of q and t1 of q2
    assert sorted(r.tag for r in await records(engine, "other")) == ["t1", "t1"]


async def test_redrive_errors_and_skips(engine, clock):
    await dead_letter(engine, clock, 1)
    await engine.write("dlq", [{"data": "not a dead letter"}])
    with pytest.raises(TopicNotFoundError):
        await engine.redrive("nope")
    with pytest.raises(TopicNotFoundError):
        await engine.redrive("dlq", to="nope")
    await engine.put_topic("log")
    with pytest.raises(NotAQueueError):
        await engine.redrive("dlq", to="log")
    for kwargs in ({"max": 0}, {"where": {"tag": "x"}}, {"where": "q"}):
        with pytest.raises(InvalidRequestError):
            await engine.redrive("dlq", **kwargs)
    with pytest.raises(ForbiddenError):
        await engine.redrive("dlq", may_touch=lambda name: name.startswith("x"))
    assert len(await records(engine, "dlq")) == 2  # nothing moved by a refused call
    res = await engine.redrive("dlq")
    assert (res.moved, res.skipped, res.remaining) == (1, 1, 1)


async def test_redrive_batches_survive_a_crash_after_the_move(tmp_path):
    clock = ManualClock(START_MS)
    async with open_engine(str(tmp_path), clock=clock) as engine:
        await make_queue(engine, durable=True, max_deliveries=1, dead_letter="dlq")
        await engine.put_topic("dlq", {"durable": True})
        await engine.write("q", [{"data": i} for i in range(3)])
        await engine.claim("q", node="w", max=3)
        clock.advance(LEASE + 1)
        await engine.claim("q", node="w", max=3)
        assert (await engine.redrive("dlq")).moved == 3
        await engine._store.wal.flush()  # type: ignore[union-attr]
        engine._store = None
    async with open_engine(str(tmp_path), clock=clock) as engine:
        assert await records(engine, "dlq") == []
        assert [ujson.loads(ujson.dumps(r.data)) for r in await records(engine, "q")] == [0, 1, 2]
