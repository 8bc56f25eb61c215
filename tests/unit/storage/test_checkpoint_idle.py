"""A checkpoint with nothing new writes nothing (topics/_persistence/store.py rule 9)."""

from __future__ import annotations

from tests.support.fakedisk import FakeDisk
from topics import open_engine
from topics._clock import ManualClock
from topics.engine import Engine


async def _checkpoint(engine: Engine) -> int:
    store = engine._store
    assert store is not None
    await store.checkpoint(engine._registry)
    return store.generation


async def test_an_idle_checkpoint_keeps_the_manifest_and_any_change_writes_one() -> None:
    disk = FakeDisk()
    clock = ManualClock(1_700_000_000_000)
    async with open_engine("/data", clock=clock, fs=disk) as engine:
        await engine.write("t", [{"data": i} for i in range(10)])
        first = await _checkpoint(engine)
        manifest = {p: b for p, b in disk.snapshot().items() if "manifest" in p}
        assert await _checkpoint(engine) == first  # idle: nothing written
        clock.advance(60_000)
        assert await _checkpoint(engine) == first  # time alone changes nothing stored
        assert {p: b for p, b in disk.snapshot().items() if "manifest" in p} == manifest

        await engine.get_topic("t")  # a read time is in the manifest
        touched = await _checkpoint(engine)
        assert touched == first + 1
        assert await _checkpoint(engine) == touched

        await engine.write("t", [{"data": "more"}])
        written = await _checkpoint(engine)
        assert written == touched + 1

        await engine.delete_records("t", before_seq=3)
        assert await _checkpoint(engine) == written + 1
        assert await _checkpoint(engine) == written + 1
    async with open_engine("/data", clock=clock, fs=disk) as engine:
        state = await engine.get_topic("t", touch=False)
        assert (state.earliest_seq, state.head_seq) == (3, 11)
