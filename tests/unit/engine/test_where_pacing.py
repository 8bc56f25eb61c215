"""Filtered diffs of one key get a fair share of the loop (topics/ops/where_pacing.py).

The cost of a read is measured by the pacer's timer; these tests give it a timer they
move themselves, so a "4 ms" filtered read costs exactly 4 ms, and trio's autojump clock
shows how long each answer was held.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from topics.auth import DEV_PRINCIPAL, Principal, owner_id_of
from topics.engine import Engine
from topics.ops.where_pacing import BURST_S, WherePacer

from ._support import with_limits

WHERE = ["data.n", "Eq", 1]
A = Principal(key_index=0, scopes=frozenset({"read", "write"}), owner_id=owner_id_of("a"))
B = Principal(key_index=1, scopes=frozenset({"read", "write"}), owner_id=owner_id_of("b"))


class StepTimer:
    """A cost timer that moves ``step`` seconds per read (two calls: before, after)."""

    def __init__(self, step: float) -> None:
        self.now = 100.0
        self.step = step
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        if self.calls % 2 == 0:  # the "after" of a read: it cost one step
            self.now += self.step
        return self.now + trio.current_time()


async def _held(engine: Engine, owner: Principal | None, where: object = WHERE) -> float:
    t0 = trio.current_time()
    await engine.diff("t", from_seq=0, where=where, owner=owner)
    return trio.current_time() - t0


def test_the_pacer_lets_a_burst_through_then_settles_at_the_share() -> None:
    pacer = WherePacer(10)
    waits = [pacer.charge(1, 0.004, i * 0.004) for i in range(20)]  # back to back, 4 ms each
    burst = int(BURST_S / 0.04)  # each read moves the key's clock 40 ms at a 10 % share
    assert waits[:burst] == [0.0] * burst
    assert all(w > 0 for w in waits[burst + 1 :])
    # Had it waited each time, the key's clock runs 40 ms per 4 ms of work: 10 %.
    assert pacer.charge(2, 0.004, 0.08) == 0.0  # another key is not behind the first
    assert WherePacer(0).charge(1, 5.0, 0.0) == 0.0  # 0 = off


@with_limits(where_cpu_share=10)
async def test_a_key_sending_costly_filtered_reads_back_to_back_gets_its_share(
    engine: Engine, autojump_clock: trio.testing.MockClock
) -> None:
    await engine.write("t", [{"data": {"n": i % 3}} for i in range(30)])
    timer = StepTimer(0.004)
    engine._read_ops.where_pacer.timer = timer
    held = [await _held(engine, A) for _ in range(40)]
    busy = 0.004 * len(held)
    # 40 reads of 4 ms: the first few answer at once, then the key is held to 10 %.
    assert held[0] == 0.0
    assert sum(held) + busy == pytest.approx(busy * 10 - BURST_S, rel=0.05)
    # Another key's filtered read, an unfiltered read and an embedded read are not held.
    assert await _held(engine, B) == 0.0
    assert await _held(engine, A, where=None) == 0.0
    assert await _held(engine, None) == 0.0


@with_limits(where_cpu_share=0)
async def test_share_zero_paces_nothing(
    engine: Engine, autojump_clock: trio.testing.MockClock
) -> None:
    await engine.write("t", [{"data": {"n": 1}}])
    engine._read_ops.where_pacer.timer = StepTimer(0.004)
    assert [await _held(engine, DEV_PRINCIPAL) for _ in range(100)] == [0.0] * 100
