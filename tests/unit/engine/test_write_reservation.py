"""Seq reservations (the durable watermark) under concurrent writers, on a real data dir.

A write may hand out seqs only below a synced WATERMARK entry. Concurrent writers share
the reservation in flight instead of each logging (and waiting for) its own, and the next
one is started before the current one runs out.
"""

from __future__ import annotations

from pathlib import Path

import trio

from topics._storage import entries
from topics.engine import open_engine
from topics.ops.durability import WATERMARK_RESERVE

BATCH = [{"data": {"n": i}} for i in range(100)]


def _count_watermarks(engine: object) -> list[int]:
    store = engine._store  # type: ignore[attr-defined]
    wal = store.wal
    seen: list[int] = []
    submit = wal.submit

    def counting(entry_type: int, payload: bytes, *, sync: bool) -> object:
        if entry_type == entries.WATERMARK:
            assert sync, "a reservation must be synced before it is relied on"
            seen.append(entry_type)
        return submit(entry_type, payload, sync=sync)

    wal.submit = counting
    return seen


async def test_concurrent_writers_share_reservations(tmp_path: Path) -> None:
    writers, rounds = 16, 20
    async with open_engine(str(tmp_path / "data")) as engine:
        await engine.put_topic("t", {})
        watermarks = _count_watermarks(engine)
        log = engine._registry.topics["t"]

        async def writer() -> None:
            for _ in range(rounds):
                res = await engine.write("t", BATCH, return_seqs=False)
                # Every seq handed out sits below the durable watermark.
                assert res.last_seq <= log.watermark

        async with trio.open_nursery() as nursery:
            for _ in range(writers):
                nursery.start_soon(writer)
        total = writers * rounds * len(BATCH)
        assert log.head == total
        # One reservation per half reserve (plus the first and the one in flight), not
        # one per writer that ran into the end of the current one.
        assert len(watermarks) <= total // (WATERMARK_RESERVE // 2) + 2
    async with open_engine(str(tmp_path / "data")) as engine:
        res = await engine.write("t", BATCH[:1])
        assert res.first_seq > total  # no seq handed out before is reused


async def test_a_reservation_started_ahead_is_used_by_the_next_writer(tmp_path: Path) -> None:
    async with open_engine(str(tmp_path / "data")) as engine:
        await engine.put_topic("t", {})
        log = engine._registry.topics["t"]
        start = log.watermark
        # Use a bit more than half of the reserve: the write that crosses the half-way
        # mark starts the next reservation without waiting for it.
        n = 0
        while log.watermark - log.head >= WATERMARK_RESERVE // 2:
            await engine.write("t", BATCH, return_seqs=False)
            n += 1
        assert log.watermark == start  # started, not yet applied
        await engine._store.wal.flush()  # type: ignore[union-attr]
        await engine.write("t", BATCH, return_seqs=False)
        assert log.watermark > start  # applied by the next write, which did not wait
        assert log.head == (n + 1) * len(BATCH)
