"""Real-process crash tests for queues: SIGKILL a child with jobs in flight, reopen, check.

The child (this module run as a script) opens an engine on a data directory, keeps a
fsync-class queue fed and runs several workers that claim, ack, nack and abandon jobs,
forcing checkpoints now and then (so recovery goes through both the manifest snapshot of
the leases and the WAL replay after it). It prints a line per acknowledged operation:

* ``PRODUCED first last`` after a write returned (fsync class: durable);
* ``CLAIM seq lease_id ...`` after a claim returned;
* ``ACK seq ...`` after an ack returned (the deletes are synced before it returns).

``random`` mode: the parent kills it at a random moment, round after round on the same
directory, and checks that nothing is lost (a produced job is live, or it was claimed and
then acked), that an acked job stays deleted, that ``ready + in_flight == count``, and
that with ``leases_durable: false`` every in-flight job is claimable again.

``quiesce`` mode: the workers stop, the child prints every lease it still holds
(``HELD seq lease_id``) and ``QUIESCED``, and is killed while idle (no clean shutdown, no
final checkpoint). With ``leases_durable: true`` the restarted engine holds exactly those
leases (the holders can ack with their lease ids); with ``false`` it holds none.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support.child import Child

pytestmark = [pytest.mark.crash, pytest.mark.slow]

TOPIC = "q"
LEASE_MS = 600_000  # nothing expires during a round: every in-flight lease is still held
HERE = Path(__file__)


# -- the child ----------------------------------------------------------------------------


def _emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def child_main(data_dir: str, durable_leases: bool, seed: int, mode: str) -> None:
    from topics.engine import open_engine

    rng = random.Random(seed)
    async with open_engine(data_dir) as engine:
        if engine._registry.get(TOPIC) is None:
            config = {
                "type": "queue",
                "durable": True,
                "lease_ms": LEASE_MS,
                "leases_durable": durable_leases,
            }
            await engine.put_topic(TOPIC, config)
        store = engine._store
        assert store is not None
        stop = trio.Event()
        held: dict[int, str] = {}

        async def producer() -> None:
            while not stop.is_set():
                n = rng.randint(1, 20)
                res = await engine.write(TOPIC, [{"data": {"r": seed, "i": i}} for i in range(n)])
                _emit(f"PRODUCED {res.first_seq} {res.last_seq}")
                await trio.sleep(rng.uniform(0, 0.01))

        async def worker(k: int) -> None:
            node = f"w{k}"
            while not stop.is_set():
                res = await engine.claim(TOPIC, node=node, max=rng.randint(1, 8))
                if res.count:
                    _emit(
                        "CLAIM "
                        + " ".join(
                            f"{s}:{lid}" for s, lid in zip(res.seqs, res.lease_ids, strict=True)
                        )
                    )
                    held.update(zip(res.seqs, res.lease_ids, strict=True))
                await trio.sleep(rng.uniform(0, 0.005))
                mine = [(s, lid) for s, lid in zip(res.seqs, res.lease_ids, strict=True)]
                rng.shuffle(mine)
                acks = [p for p in mine if rng.random() < 0.6]
                nacks = [p for p in mine if p not in acks and rng.random() < 0.5]
                if acks:
                    out = await engine.ack(
                        TOPIC,
                        node=node,
                        seqs=[s for s, _ in acks],
                        lease_ids=[lid for _, lid in acks],
                    )
                    assert out.acked == len(acks), out
                    for s, _ in acks:
                        held.pop(s, None)
                    _emit("ACK " + " ".join(str(s) for s, _ in acks))
                if nacks:
                    await engine.nack(
                        TOPIC,
                        node=node,
                        seqs=[s for s, _ in nacks],
                        lease_ids=[lid for _, lid in nacks],
                    )
                    for s, _ in nacks:
                        held.pop(s, None)
                # the rest is abandoned: held until the (long) lease would expire

        async def checkpointer() -> None:
            while True:
                await trio.sleep(rng.uniform(0.02, 0.08))
                if stop.is_set():
                    return
                await store.checkpoint(engine._registry)

        _emit("READY")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(producer)
            for k in range(4):
                nursery.start_soon(worker, k)
            nursery.start_soon(checkpointer)
            if mode == "quiesce":
                await trio.sleep(rng.uniform(0.2, 0.4))
                stop.set()
        # quiesce: every task has finished its last operation (each awaited its WAL ticket).
        # One more claim after the last checkpoint: its leases exist only in the WAL.
        extra = await engine.write(TOPIC, [{"data": "late"}] * 3)
        _emit(f"PRODUCED {extra.first_seq} {extra.last_seq}")
        late = await engine.claim(TOPIC, node="late", max=3)
        assert late.count == 3
        held.update(zip(late.seqs, late.lease_ids, strict=True))
        for seq, lease_id in sorted(held.items()):
            _emit(f"HELD {seq} {lease_id}")
        _emit("QUIESCED")
        await trio.sleep_forever()


# -- the parent ---------------------------------------------------------------------------


def _child(data_dir: Path, durable_leases: bool, seed: int, mode: str) -> Child:
    return Child(HERE, str(data_dir), "1" if durable_leases else "0", str(seed), mode)


class Ledger:
    """What the child reported over every round."""

    def __init__(self) -> None:
        self.produced: set[int] = set()
        self.claimed: set[int] = set()
        self.acked: set[int] = set()
        self.held: dict[int, str] = {}

    def read(self, lines: list[str]) -> None:
        self.held = {}
        for line in lines:
            word, *rest = line.split()
            if word == "PRODUCED":
                self.produced.update(range(int(rest[0]), int(rest[1]) + 1))
            elif word == "CLAIM":
                self.claimed.update(int(p.split(":")[0]) for p in rest)
            elif word == "ACK":
                self.acked.update(int(s) for s in rest)
            elif word == "HELD":
                self.held[int(rest[0])] = rest[1]


async def _inspect(data_dir: Path) -> dict[str, Any]:
    from topics._clock import ManualClock
    from topics.engine import open_engine

    out: dict[str, Any] = {}
    async with open_engine(str(data_dir), clock=ManualClock(time.time_ns() // 1_000_000)) as engine:
        state = await engine.get_topic(TOPIC, touch=False)
        assert state.queue is not None
        out["counters"] = state.queue
        out["count"] = state.count
        page = await engine.diff(TOPIC, from_seq=0, limit=1000)
        live: list[int] = []
        while True:
            live += [r.seq for r in page.records]
            if page.caught_up:
                break
            page = await engine.diff(TOPIC, from_seq=page.next_from_seq, limit=1000)
        out["live"] = set(live)
        q = engine._queues.states[engine._registry.topics[TOPIC].topic_id]
        out["leases"] = {seq: lease.lease_id for seq, lease in q.leases.items()}
    return out


def _check_nothing_lost(ledger: Ledger, seen: dict[str, Any]) -> None:
    live = seen["live"]
    assert not live & ledger.acked, "an acknowledged ack did not survive"
    gone = ledger.produced - live
    assert gone <= ledger.claimed, (
        f"jobs vanished without being claimed: {sorted(gone - ledger.claimed)[:10]}"
    )
    counters = seen["counters"]
    assert counters["ready"] + counters["in_flight"] == seen["count"]
    assert set(seen["leases"]) <= live


@pytest.mark.parametrize("durable_leases", [False, True], ids=["leases-volatile", "leases-durable"])
def test_sigkill_mid_traffic_loses_no_job(tmp_path: Path, durable_leases: bool) -> None:
    ledger = Ledger()
    rng = random.Random(7 + durable_leases)
    for round_no in range(3):
        child = _child(tmp_path, durable_leases, round_no + 1, "random")
        child.wait_for("READY")
        time.sleep(rng.uniform(0.15, 0.5))
        ledger.read(child.kill())
        seen = trio.run(_inspect, tmp_path)
        _check_nothing_lost(ledger, seen)
        if not durable_leases:
            assert seen["counters"]["in_flight"] == 0  # every in-flight job is claimable again
            assert seen["counters"]["ready"] == seen["count"]
    assert ledger.acked, "the workers never acked anything: the test proved nothing"


def test_sigkill_while_idle_restores_durable_leases_exactly(tmp_path: Path) -> None:
    ledger = Ledger()
    for round_no in range(2):
        child = _child(tmp_path, True, 11 + round_no, "quiesce")
        child.wait_for("QUIESCED")
        ledger.read(child.kill())
        seen = trio.run(_inspect, tmp_path)
        _check_nothing_lost(ledger, seen)
        # Round 2's child started with round 1's leases still held by dead workers; the
        # ones it did not touch are still there too, so compare only what round N held.
        assert set(ledger.held) <= set(seen["leases"])
        for seq, lease_id in ledger.held.items():
            assert seen["leases"][seq] == lease_id
    assert ledger.held, "no lease was held at the kill: the test proved nothing"


def test_sigkill_while_idle_without_durable_leases_frees_every_job(tmp_path: Path) -> None:
    ledger = Ledger()
    child = _child(tmp_path, False, 21, "quiesce")
    child.wait_for("QUIESCED")
    ledger.read(child.kill())
    assert ledger.held
    seen = trio.run(_inspect, tmp_path)
    _check_nothing_lost(ledger, seen)
    assert seen["leases"] == {}
    assert seen["counters"] == {
        "ready": seen["count"],
        "in_flight": 0,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }
    assert set(ledger.held) <= seen["live"]


if __name__ == "__main__":
    trio.run(child_main, sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), sys.argv[4])
