"""History bigger than memory (issue 31): sealed segments of ``disk``/``fsync`` topics
live in their files and are read back through a byte-bounded cache.

The strongest check here is differential: the same operations on a ``memory`` topic
(every record stays in RAM, the behaviour before issue 31) and on a ``disk`` topic (its
sealed segments go cold after each checkpoint) must give the same records, tombstones
and counters, with a cache so small that nearly every read reloads a segment.
"""

from __future__ import annotations

import errno
import os
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import ujson

import topics.log.cold_segment as cold_segment
import topics.log.topic_log as topic_log
from topics._clock import ManualClock
from topics._storage.fs import RealFs
from topics._storage.segment_edits import mark_deleted
from topics._storage.segment_files import segment_path
from topics.engine import Engine, open_engine
from topics.errors import StorageUnavailableError
from topics.log.cold_segment import ColdSegment, is_cold

START_MS = 1_700_000_000_000
TINY_CACHE = 2048


@pytest.fixture(autouse=True, params=["whole", "blocks"])
def small_segments(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """1 KiB segments; read whole, or in blocks of a few frames (cold_segment rule 6)."""
    monkeypatch.setattr(topic_log, "SEGMENT_TARGET_BYTES", 1024)
    monkeypatch.setattr(cold_segment, "BLOCK_BYTES", 1 << 20 if request.param == "whole" else 200)


@asynccontextmanager
async def opened(
    path: Path, clock: ManualClock, cache: int = TINY_CACHE, fs: Any = None
) -> AsyncIterator[Engine]:
    async with open_engine(str(path), clock=clock, cache_bytes=cache, fs=fs) as engine:
        yield engine


async def checkpoint(engine: Engine) -> None:
    await engine._store.checkpoint(engine._registry)  # type: ignore[union-attr]


async def read_all(engine: Engine, topic: str) -> tuple[list[Any], Any]:
    """Every record from seq 0 (in pages of 1000) and the first page's tombstone."""
    out: list[Any] = []
    seq = 0
    first_tombstone: Any = "unset"
    while True:
        res = await engine.diff(topic, from_seq=seq, limit=1000)
        if first_tombstone == "unset":
            first_tombstone = res.tombstone
        page = ujson.loads(res.records_json)
        out += [(r["$seq"], r.get("$tag"), r["data"]) for r in page]
        if res.caught_up or res.next_from_seq == seq:
            return out, first_tombstone
        seq = res.next_from_seq


def counters(engine: Engine, topic: str) -> tuple[int, int, int, int, int]:
    log = engine._registry.get(topic)
    assert log is not None
    return (log.head, log.earliest, log.count, log.bytes, log.evict_floor)


def cold_count(engine: Engine, topic: str) -> int:
    log = engine._registry.get(topic)
    assert log is not None
    return sum(is_cold(seg) for seg in log.segments)


def batch(rng: random.Random, start: int, n: int) -> list[dict[str, Any]]:
    tags = ["a/1", "a/2", "b/1", None, None]
    out: list[dict[str, Any]] = []
    for i in range(n):
        rec: dict[str, Any] = {"data": {"i": start + i, "pad": "x" * rng.randrange(0, 40)}}
        tag = rng.choice(tags)
        if tag is not None:
            rec["tag"] = tag
        out.append(rec)
    return out


async def test_sealed_segments_leave_memory_after_a_checkpoint(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    async with opened(tmp_path, clock) as engine:
        for name in ("hot", "cold"):
            await engine.put_topic(name, {"durability": "memory" if name == "hot" else "disk"})
        for i in range(30):
            recs = [{"data": {"i": i * 10 + j}} for j in range(10)]
            await engine.write("hot", recs)
            await engine.write("cold", recs)
        before = await read_all(engine, "cold")
        await checkpoint(engine)
        log = engine._registry.get("cold")
        assert log is not None
        assert len(log.segments) > 3
        assert cold_count(engine, "cold") == len(log.segments) - 1  # the open tail stays
        assert cold_count(engine, "hot") == 0  # memory topics keep their records in RAM
        assert await read_all(engine, "cold") == before
        assert [r[2] for r in before[0]] == [{"i": i} for i in range(300)]
        stats = engine._store.cold.cache.statistics()  # type: ignore[union-attr]
        assert stats.bytes <= TINY_CACHE or stats.entries == 1


class CountingFs(RealFs):
    def __init__(self) -> None:
        super().__init__()
        self.opened: list[str] = []

    def open(self, path: str, *, write: bool = False, create: bool = False) -> Any:
        self.opened.append(path)
        return super().open(path, write=write, create=create)


async def test_restart_reads_no_sealed_segment(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    async with opened(tmp_path, clock) as engine:
        for i in range(40):
            await engine.write("t", [{"data": {"i": i * 10 + j}} for j in range(10)])
        before = await read_all(engine, "t")
    fs = CountingFs()
    async with opened(tmp_path, clock, fs=fs) as engine:
        log = engine._registry.get("t")
        assert log is not None
        assert cold_count(engine, "t") == len(log.segments) - 1 > 3
        segment_reads = [p for p in fs.opened if p.endswith(".seg")]
        assert len(segment_reads) <= 1, segment_reads  # at most the unsealed tail
        assert await read_all(engine, "t") == before


@pytest.mark.parametrize("seed", range(6))
async def test_cold_topic_behaves_as_a_memory_topic(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    clock = ManualClock(START_MS)
    config: dict[str, Any] = {}
    if seed % 3 == 1:
        config["cap_records"] = rng.randrange(80, 200)
    if seed % 3 == 2:
        config["ttl_ms"] = 60_000
    written = went_cold = 0
    engine_cm = opened(tmp_path, clock)
    engine = await engine_cm.__aenter__()
    try:
        await engine.put_topic("hot", {**config, "durability": "memory"})
        await engine.put_topic("cold", {**config, "durability": "disk"})
        for step in range(60):
            op = rng.random()
            if op < 0.5:
                recs = batch(rng, written, rng.randrange(1, 30))
                written += len(recs)
                await engine.write("hot", recs)
                await engine.write("cold", recs)
            elif op < 0.6:
                match: Any = rng.choice(
                    ["a/1", "b/1", ["tag", "Glob", "a/*"], ["tag", "Eq", "a/2"]]
                )
                before = rng.choice([None, written // 2 + 1])
                for name in ("hot", "cold"):
                    await engine.delete_records(name, match=match, before_seq=before)
            elif op < 0.65:
                bound = rng.randrange(1, written + 2)
                for name in ("hot", "cold"):
                    await engine.delete_records(name, before_seq=bound)
            elif op < 0.75:
                clock.advance(rng.randrange(1_000, 30_000))
                for name in ("hot", "cold"):
                    engine._app.apply_retention(engine._registry.get(name))
            elif op < 0.9:
                await checkpoint(engine)
            else:
                await engine_cm.__aexit__(None, None, None)
                engine_cm = opened(tmp_path, clock)
                engine = await engine_cm.__aenter__()
            hot, cold = await read_all(engine, "hot"), await read_all(engine, "cold")
            assert cold == hot, f"step {step}"
            assert counters(engine, "cold") == counters(engine, "hot"), f"step {step}"
            went_cold = max(went_cold, cold_count(engine, "cold"))
        assert went_cold > 0  # the run exercised cold segments
    finally:
        await engine_cm.__aexit__(None, None, None)


async def test_an_unreadable_file_fails_that_read_only(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    async with opened(tmp_path, clock) as engine:
        for i in range(30):
            await engine.write("t", [{"data": {"i": i * 10 + j}} for j in range(10)])
            await engine.write("other", [{"data": i}])
        await checkpoint(engine)
        log = engine._registry.get("t")
        assert log is not None
        first = log.segments[0]
        assert isinstance(first, ColdSegment)
        engine._store.cold.cache.clear()  # type: ignore[union-attr]
        path = first.path
        os.rename(path, path + ".away")
        with pytest.raises(StorageUnavailableError) as caught:
            await engine.diff("t", from_seq=0, limit=10)
        assert caught.value.status == 503
        assert caught.value.retry_after
        assert (await engine.diff("other", from_seq=0, limit=100)).record_count == 30
        os.rename(path + ".away", path)
        res = await engine.diff("t", from_seq=0, limit=10)
        assert [r["data"]["i"] for r in ujson.loads(res.records_json)] == list(range(10))


async def test_retention_drops_whole_cold_segments_without_reading_them(tmp_path: Path) -> None:
    """Caps and TTL drop whole cold segments from their counters; only a segment they
    cut through the middle is read (its records' sizes are in its frames)."""
    clock = ManualClock(START_MS)
    async with opened(tmp_path, clock) as engine:
        await engine.put_topic("t", {"cap_records": 200, "ttl_ms": 60_000})
        for i in range(20):
            await engine.write("t", [{"data": {"i": i * 10 + j}} for j in range(10)])
        await checkpoint(engine)
        log = engine._registry.get("t")
        assert log is not None
        held = len(log.segments)
        cache = engine._store.cold.cache  # type: ignore[union-attr]
        cache.clear()
        misses = cache.misses
        await engine.write("t", [{"data": {"i": 200 + j}} for j in range(120)])
        assert cache.misses - misses <= 1
        assert len(log.segments) < held - 2
        head, earliest, count, _, floor = counters(engine, "t")
        assert (head, count) == (320, 200)
        assert earliest == floor == 121
        clock.advance(61_000)
        engine._app.apply_retention(log)
        assert cache.misses - misses <= 1  # every record expired: no segment is read
        assert counters(engine, "t")[1:4] == (321, 0, 0)


async def test_a_file_with_more_delete_flags_than_counted_wins(tmp_path: Path) -> None:
    """cold_segment rule 3: flags a later (failed) checkpoint wrote are adopted, and the
    topic's counters move with them."""
    clock = ManualClock(START_MS)
    async with opened(tmp_path, clock) as engine:
        for i in range(20):
            await engine.write("t", [{"data": {"i": i * 10 + j}} for j in range(10)])
        await checkpoint(engine)
        log = engine._registry.get("t")
        assert log is not None
        seg = log.segments[1]
        assert isinstance(seg, ColdSegment)
        engine._store.cold.cache.clear()  # type: ignore[union-attr]
        count, size = log.count, log.bytes
        frame_end = seg.offset_of(2) + seg.frame_len(2)
        engine._store.cold.cache.clear()  # type: ignore[union-attr]
        mark_deleted(
            RealFs(),
            segment_path(str(tmp_path / "segments"), seg.topic_id, seg.base_seq),
            [frame_end],
        )
        seg.loaded()
        assert seg.is_live(2) is False
        assert seg.live_count == seg.count - seg.retired - 1
        assert log.count == count - 1
        assert log.bytes < size


class FlakyReads(RealFs):
    """Fails opening (EMFILE) or reading (EIO) segment files while ``failing`` is set."""

    def __init__(self, error: int) -> None:
        super().__init__()
        self.error = error
        self.failing = False

    def open(self, path: str, *, write: bool = False, create: bool = False) -> Any:
        if self.failing and path.endswith(".seg") and not write:
            if self.error == errno.EMFILE:
                raise OSError(errno.EMFILE, "Too many open files", path)
            inner = super().open(path, write=write, create=create)
            return _FailingReads(inner, self.error)
        return super().open(path, write=write, create=create)


class _FailingReads:
    def __init__(self, inner: Any, error: int) -> None:
        self._inner, self._error = inner, error

    def read_at(self, offset: int, size: int) -> bytes:
        if offset > 0:  # the header reads; the frames fail
            raise OSError(self._error, os.strerror(self._error))
        return bytes(self._inner.read_at(offset, size))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.mark.parametrize("error", [errno.EMFILE, errno.EIO])
async def test_emfile_and_eio_fail_one_read_and_the_next_one_retries(
    tmp_path: Path, error: int
) -> None:
    clock = ManualClock(START_MS)
    fs = FlakyReads(error)
    async with opened(tmp_path, clock, fs=fs) as engine:
        for i in range(30):
            await engine.write("t", [{"data": {"i": i * 10 + j}} for j in range(10)])
        await checkpoint(engine)
        cache = engine._store.cold.cache  # type: ignore[union-attr]
        cache.clear()
        fs.failing = True
        with pytest.raises(StorageUnavailableError) as caught:
            await engine.diff("t", from_seq=0, limit=10)
        assert caught.value.detail is not None
        assert caught.value.detail["errno"] == error
        assert cache.load_errors == 1
        # The tail is in memory: reads near the head do not need a file.
        log = engine._registry.get("t")
        assert log is not None
        tail = log.segments[-1].base_seq
        assert (await engine.diff("t", from_seq=tail, limit=10)).record_count > 0
        await engine.write("t", [{"data": "still writable"}])
        fs.failing = False
        res = await engine.diff("t", from_seq=0, limit=10)
        assert [r["data"]["i"] for r in ujson.loads(res.records_json)] == list(range(10))
