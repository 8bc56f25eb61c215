"""topics.Reader.diff takes issue 18's from_ts/to_ts/to_seq/where with the engine's meaning
(the Spark source reads through it)."""

from __future__ import annotations

from pathlib import Path

import topics
from topics._clock import ManualClock
from topics.engine import open_engine

T0 = 1_767_225_600_000


async def test_reader_diff_with_bounds_matches_the_engine(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    async with open_engine(str(tmp_path), clock=clock) as engine:
        await engine.put_topic("t", {"durability": "fsync"})
        for i in range(6):
            clock.set(T0 + i * 1000)
            await engine.write("t", [{"data": {"k": i % 2, "i": i}}])
        cases = [
            {"from_ts": T0 + 2000},
            {"from_ts": T0 + 1500, "to_ts": T0 + 3500},
            {"to_seq": 4, "where": ["data.k", "Eq", 1]},
            {"from_ts": T0 - 1, "where": ["data.i", "Ge", 4], "limit": 2},
        ]
        expected = [(await engine.diff("t", **c)).to_dict() for c in cases]
    with topics.Reader(str(tmp_path)) as reader:
        got = [reader.diff("t", **c).to_dict() for c in cases]  # type: ignore[arg-type]
    assert got == expected
    assert [r["$seq"] for r in got[0]["records"]] == [3, 4, 5, 6]
    assert got[1]["from_seq"] == 2
    assert got[1]["end_reached"] is True
    assert [r["$seq"] for r in got[2]["records"]] == [2, 4]
