"""Real-process crash tests for issue 19's queue jobs: SIGKILL mid-redrive, and with
scheduled and deduplicated jobs being written.

The child (this module run as a script) opens an engine on a data directory and, in
``redrive`` mode, dead-letters ``JOBS`` jobs (``{"i": i}``) and then moves them back with
many small redrives, checkpointing now and then; in ``deadletter`` mode it claims and nacks
jobs on their last delivery (each nack moves them to the dead-letter topic before it
answers); in ``schedule`` mode it writes scheduled
jobs under dedupe keys and prints ``WROTE seq deliver_at key`` once each write returned.
The parent kills it at a random moment and reopens the directory:

* redrive: every job is in exactly one place, the queue or the dead-letter topic (the
  append to the queue and the delete from the dead-letter topic are one step and go out
  in one WAL write);
* deadletter: no job is lost (each is in the queue or the dead-letter topic);
* schedule: every reported job is still there, not claimable before its time and holding
  its key.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel

from tests.support.child import Child

pytestmark = [pytest.mark.crash, pytest.mark.slow]

QUEUE, DLQ = "q", "dlq"
JOBS = 1500
HERE = Path(__file__)


# -- the child ----------------------------------------------------------------------------


def _emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def child_main(data_dir: str, seed: int, mode: str) -> None:
    from topics.engine import open_engine

    rng = random.Random(seed)
    async with open_engine(data_dir) as engine:
        store = engine._store
        assert store is not None
        if mode == "redrive":
            await engine.put_topic(DLQ, {"durable": True})
            config = {"type": "queue", "durable": True, "max_deliveries": 1, "dead_letter": DLQ}
            await engine.put_topic(QUEUE, config)
            await engine.write(QUEUE, [{"data": {"i": i}} for i in range(JOBS)])
            while (await engine.get_topic(QUEUE, touch=False)).count:
                # fresh jobs are leased and nacked; a nacked one is dead-lettered when next
                # picked (max_deliveries 1)
                claim = await engine.claim(QUEUE, node="w", max=1000)
                if claim.count:
                    await engine.nack(QUEUE, node="w", seqs=list(claim.seqs))
            assert (await engine.get_topic(DLQ)).count == JOBS
            await store.checkpoint(engine._registry)
            _emit("READY")
            moves = 0
            while (await engine.get_topic(DLQ, touch=False)).count:
                await engine.redrive(DLQ, max=rng.randint(1, 9))
                moves += 1
                if moves % 25 == 0:
                    await store.checkpoint(engine._registry)
                # ~300 redrives spread over >= 0.3 s (the WAL task runs meanwhile), so the
                # parent's kill at 0.05-0.3 s lands mid-phase on a fast machine too.
                await trio.sleep(0.001)
            _emit("DONE")
        elif mode == "deadletter":
            await engine.put_topic(DLQ, {"durable": True})
            config = {
                "type": "queue",
                "durable": True,
                "leases_durable": True,
                "max_deliveries": 1,
                "dead_letter": DLQ,
            }
            await engine.put_topic(QUEUE, config)
            await engine.write(QUEUE, [{"data": {"i": i}} for i in range(JOBS)])
            await store.checkpoint(engine._registry)
            _emit("READY")
            rounds = 0
            while (await engine.get_topic(QUEUE, touch=False)).count:
                # every nack is of a last delivery: it writes the dead letter before it answers
                claim = await engine.claim(QUEUE, node="w", max=rng.randint(1, 9))
                if claim.count:
                    await engine.nack(QUEUE, node="w", seqs=list(claim.seqs), delay_ms=60_000)
                rounds += 1
                if rounds % 25 == 0:
                    await store.checkpoint(engine._registry)
                await trio.sleep(0.001)  # (spread over >= 0.3 s, as in redrive mode)
            _emit("DONE")
        else:
            await engine.put_topic(QUEUE, {"type": "queue", "durable": True})
            _emit("READY")
            n = 0
            while True:
                n += 1
                delay = rng.randint(3_600_000, 7_200_000)
                key = f"k{n}"
                mode_args: dict[str, Any] = {}
                if n % 2:
                    mode_args = {"dedupe": "window", "dedupe_ms": 86_400_000}
                res = await engine.write(
                    QUEUE, [{"data": n, "delay_ms": delay, "dedupe_key": key}], **mode_args
                )
                record = (await engine.diff(QUEUE, from_seq=res.first_seq - 1, limit=1)).records
                _emit(f"WROTE {res.first_seq} {record[0].meta['$deliver_at']} {key}")
                if n % 40 == 0:
                    await store.checkpoint(engine._registry)
                await trio.lowlevel.checkpoint()


# -- the parent ---------------------------------------------------------------------------


def _child(data_dir: Path, seed: int, mode: str) -> Child:
    return Child(HERE, str(data_dir), str(seed), mode)


async def _contents(data_dir: Path) -> dict[str, list[int]]:
    from topics.engine import open_engine

    out: dict[str, list[int]] = {}
    async with open_engine(str(data_dir)) as engine:
        for topic in (QUEUE, DLQ):
            found: list[int] = []
            page = await engine.diff(topic, from_seq=0, limit=1000)
            while True:
                found += [r.data["i"] for r in page.records]
                if page.caught_up:
                    break
                page = await engine.diff(topic, from_seq=page.next_from_seq, limit=1000)
            out[topic] = found
    return out


def test_sigkill_mid_redrive_leaves_each_job_in_exactly_one_place(tmp_path: Path) -> None:
    rng = random.Random(19)
    midway = 0
    for round_no in range(4):
        data_dir = tmp_path / f"r{round_no}"
        child = _child(data_dir, round_no + 1, "redrive")
        child.wait_for("READY", timeout_s=60.0)
        time.sleep(rng.uniform(0.05, 0.3))
        lines = child.kill()
        seen = trio.run(_contents, data_dir)
        everywhere = seen[QUEUE] + seen[DLQ]
        assert len(everywhere) == len(set(everywhere)), "a job is in two places"
        assert sorted(everywhere) == list(range(JOBS)), "a job was lost"
        if seen[QUEUE] and seen[DLQ] and "DONE" not in lines:
            midway += 1
    assert midway, "no kill landed mid-redrive: the test proved nothing"


def test_sigkill_mid_dead_lettering_loses_no_job(tmp_path: Path) -> None:
    """Jobs dead-lettered at their nack: a kill at any point leaves every job in the queue
    or the dead-letter topic, and recovery sends on what the kill caught mid-move (a
    duplicate copy is the worst case, as for the claim-time move before: module docs)."""
    rng = random.Random(34)
    midway = 0
    for round_no in range(3):
        data_dir = tmp_path / f"d{round_no}"
        child = _child(data_dir, round_no + 1, "deadletter")
        child.wait_for("READY", timeout_s=60.0)
        time.sleep(rng.uniform(0.05, 0.3))
        lines = child.kill()
        seen = trio.run(_contents, data_dir)
        assert len(seen[QUEUE]) == len(set(seen[QUEUE])), "a job is in the queue twice"
        assert sorted(set(seen[QUEUE] + seen[DLQ])) == list(range(JOBS)), "a job was lost"
        if seen[QUEUE] and seen[DLQ] and "DONE" not in lines:
            midway += 1
    assert midway, "no kill landed mid-way: the test proved nothing"


def test_sigkill_keeps_scheduled_jobs_and_their_keys(tmp_path: Path) -> None:
    child = _child(tmp_path, 5, "schedule")
    child.wait_for("READY", timeout_s=60.0)
    time.sleep(0.4)
    lines = child.kill()
    wrote = [line.split()[1:] for line in lines if line.startswith("WROTE")]
    assert len(wrote) > 10, "the child wrote too little: the test proved nothing"

    async def check() -> None:
        from topics._clock import ManualClock
        from topics.engine import open_engine

        clock = ManualClock(time.time_ns() // 1_000_000)
        async with open_engine(str(tmp_path), clock=clock) as engine:
            state = await engine.get_topic(QUEUE, touch=False)
            assert state.queue is not None
            assert state.queue["scheduled"] >= len(wrote)  # (a last unreported write may count)
            assert state.queue["ready"] == 0
            assert (await engine.claim(QUEUE, node="x", max=1000)).count == 0
            for seq, _, key in wrote:
                again = await engine.write(QUEUE, [{"data": 0, "dedupe_key": key}])
                assert again.count == 0
                assert again.dedupe is not None
                assert again.dedupe[0]["seq"] == int(seq)
            last = max(int(at) for _, at, _ in wrote)
            clock.set(last)
            due = await engine.claim(QUEUE, node="x", max=1000)
            assert set(due.seqs) >= {int(seq) for seq, _, _ in wrote}

    trio.run(check)


if __name__ == "__main__":
    trio.run(child_main, sys.argv[1], int(sys.argv[2]), sys.argv[3])
