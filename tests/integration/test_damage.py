"""One bad byte in a segment never takes the server down (issue 32, item 1).

A sealed ``disk`` segment is damaged four ways (a flipped byte mid-file, a truncation, a
zeroed 4 KiB page, a bad header), once while the engine runs (its cached copy dropped, so
the next read meets the file) and once while it is stopped. Either way: the engine serves;
the other topic reads in full; the damaged topic reads every record outside the
unreadable range and a reader from 0 gets one ``corrupt`` tombstone over exactly that
range (never narrower); writes go on; health and metrics name the file; a restart keeps
the quarantine. The tag index (``.tags``) and seal index (``.idx``) are only shortcuts:
damaging them costs no record.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import ujson

import topics.log.cold_segment as cold_segment
import topics.log.topic_log as topic_log
from topics._clock import ManualClock
from topics._core import iter_frames
from topics._storage.damage import Damage
from topics._storage.segment_files import HEADER_SIZE
from topics.engine import Engine, open_engine
from topics.log.cold_log import cold_tagged_seqs
from topics.log.cold_segment import ColdSegment, is_cold
from topics.log.damaged import quarantine, relpath

START_MS = 1_700_000_000_000
RECORDS = 400
KINDS = ["flip", "truncate", "zero_page", "header"]


@pytest.fixture(autouse=True)
def segment_bytes(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> int:
    # A zeroed page needs segments bigger than a page to leave a readable prefix.
    size = 16384 if "zero_page" in request.node.name else 2048
    monkeypatch.setattr(topic_log, "SEGMENT_TARGET_BYTES", size)
    # Whole-segment loads unless a test says otherwise (the tiny-cache pass shrinks blocks):
    # once a block read has checked the header it reads frames only, so a header damaged
    # later is met by the next whole load (a restart), not by them.
    monkeypatch.setattr(cold_segment, "BLOCK_BYTES", 128 << 10)
    return size


@asynccontextmanager
async def opened(path: Path) -> AsyncIterator[Engine]:
    async with open_engine(str(path), clock=ManualClock(START_MS), cache_bytes=4096) as e:
        yield e


async def fill(engine: Engine) -> None:
    for name in ("a", "b"):
        await engine.put_topic(name, {"durability": "disk"})
    # Enough for several sealed segments at any segment size.
    for i in range(0, RECORDS * topic_log.SEGMENT_TARGET_BYTES // 2048, 20):
        for name in ("a", "b"):
            recs = [{"data": {"i": i + j, "pad": "y" * 30}, "tag": f"t/{j % 3}"} for j in range(20)]
            await engine.write(name, recs)
    await engine._store.checkpoint(engine._registry)  # type: ignore[union-attr]


async def read_all(engine: Engine, topic: str) -> tuple[list[int], list[Any]]:
    """Every seq read from 0, and every tombstone met on the way."""
    seqs: list[int] = []
    tombs: list[Any] = []
    cursor = 0
    while True:
        res = await engine.diff(topic, from_seq=cursor, limit=1000)
        if res.tombstone is not None:
            tombs.append(res.tombstone)
        seqs += [r["$seq"] for r in ujson.loads(res.records_json)]
        if res.caught_up and res.next_from_seq == cursor:
            return seqs, tombs
        cursor = res.next_from_seq


def middle_cold(engine: Engine, topic: str) -> ColdSegment:
    log = engine._registry.get(topic)
    assert log is not None
    cold = [s for s in log.segments if is_cold(s)]
    assert len(cold) >= 4
    seg = cold[len(cold) // 2]
    assert isinstance(seg, ColdSegment)
    return seg


def damage(path: str, kind: str, base: int, salt: int) -> int:
    """Damage the segment file at ``path``; returns the first seq it can no longer read."""
    with open(path, "rb") as f:
        raw = f.read()
    frames = raw[HEADER_SIZE:]
    spans = iter_frames(frames, salt, True)

    def first_bad(offset: int) -> int:
        return base + next(i for i, (off, n) in enumerate(spans) if off + n > offset)

    mid = len(frames) // 2
    if kind == "header":
        with open(path, "r+b") as f:
            f.seek(10)
            f.write(bytes([raw[10] ^ 0xFF]))
        return base
    if kind == "flip":
        with open(path, "r+b") as f:
            f.seek(HEADER_SIZE + mid)
            f.write(bytes([raw[HEADER_SIZE + mid] ^ 0x01]))
        return first_bad(mid)
    if kind == "truncate":
        os.truncate(path, HEADER_SIZE + mid)
        return first_bad(mid)
    page = (HEADER_SIZE + mid) // 4096 * 4096 + 4096  # a page-aligned 4 KiB inside
    assert page + 4096 <= len(raw), "segments too small for a page"
    with open(path, "r+b") as f:
        f.seek(page)
        f.write(b"\0" * 4096)
    return first_bad(page - HEADER_SIZE)


def scribble(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


async def check_served(
    engine: Engine, first: int, last: int, before_a: list[int], before_b: list[int]
) -> None:
    """The issue's promises, with the unreadable range [first, last]."""
    assert await read_all(engine, "b") == (before_b, [])
    seqs, tombs = await read_all(engine, "a")
    assert seqs == [s for s in before_a if not first <= s <= last]
    assert len(tombs) == 1
    t = tombs[0]
    assert t.reason == "corrupt"
    assert (t.gap_from, t.gap_to) == (first, last)
    log = engine._registry.get("a")
    assert log is not None
    assert log.count == len(seqs)
    # A reader below the range reads up to it, then the tombstone; one past it reads on.
    res = await engine.diff("a", from_seq=first - 2, limit=1000)
    assert [r["$seq"] for r in ujson.loads(res.records_json)] == [first - 1]
    assert res.tombstone is None
    res = await engine.diff("a", from_seq=res.next_from_seq, limit=1000)
    assert res.tombstone is not None
    assert res.tombstone.reason == "corrupt"
    assert (res.tombstone.gap_from, res.tombstone.gap_to) == (first, last)
    if last > first:  # a cursor inside the range: the rest of it
        res = await engine.diff("a", from_seq=first, limit=1000)
        assert res.tombstone is not None
        assert (res.tombstone.reason, res.tombstone.gap_from) == ("corrupt", first + 1)
        assert res.tombstone.gap_to == last
    res = await engine.diff("a", from_seq=last, limit=5)
    assert res.tombstone is None
    assert [r["$seq"] for r in ujson.loads(res.records_json)] == list(range(last + 1, last + 6))
    # Health and metrics name it.
    (entry,) = engine.damaged_files()
    assert entry["topic"] == "a"
    assert entry["kind"] == "segment"
    assert str(entry["file"]).startswith("segments/")
    assert (entry["first_seq"], entry["last_seq"]) == (first, last)
    assert engine.storage_gauges()["topics_storage_damaged_files"] == 1
    # Writes after the head keep working.
    head = log.head
    await engine.write("a", [{"data": {"after": 1}}])
    res = await engine.diff("a", from_seq=head, limit=10)
    assert [r["data"] for r in ujson.loads(res.records_json)] == [{"after": 1}]


@pytest.mark.parametrize("kind", KINDS)
async def test_damage_found_at_read_time(tmp_path: Path, kind: str) -> None:
    async with opened(tmp_path) as engine:
        await fill(engine)
        before_a, _ = await read_all(engine, "a")
        before_b, _ = await read_all(engine, "b")
        seg = middle_cold(engine, "a")
        first = damage(seg.path, kind, seg.base_seq, seg.salt)
        last = seg.base_seq + seg.count - 1
        engine._store.cold.cache.clear()  # type: ignore[union-attr]
        await check_served(engine, first, last, before_a, before_b)
        assert engine._store.cold.cache.statistics().load_errors >= 1  # type: ignore[union-attr]
    # The quarantine outlives a restart: the manifest entry says so; the file stays.
    assert Path(seg.path).exists()  # noqa: ASYNC240 (a test, between engines)
    async with opened(tmp_path) as engine:
        seqs, tombs = await read_all(engine, "a")
        assert [(t.reason, t.gap_from, t.gap_to) for t in tombs] == [("corrupt", first, last)]
        assert seqs == [s for s in before_a if not first <= s <= last] + [before_a[-1] + 1]
        assert [e["first_seq"] for e in engine.damaged_files()] == [first]


@pytest.mark.parametrize("kind", KINDS)
async def test_damage_found_at_recovery(tmp_path: Path, kind: str) -> None:
    async with opened(tmp_path) as engine:
        await fill(engine)
        before_a, _ = await read_all(engine, "a")
        before_b, _ = await read_all(engine, "b")
        seg = middle_cold(engine, "a")
        path, base, last = seg.path, seg.base_seq, seg.base_seq + seg.count - 1
        salt = seg.salt
    first = damage(path, kind, base, salt)
    async with opened(tmp_path) as engine:  # starts: the damage is met on the first read
        await check_served(engine, first, last, before_a, before_b)
    async with opened(tmp_path) as engine:
        assert [e["file"] for e in engine.damaged_files()] == ["segments/" + os.path.basename(path)]
        _seqs, tombs = await read_all(engine, "a")
        assert [(t.reason, t.gap_from, t.gap_to) for t in tombs] == [("corrupt", first, last)]


async def test_unsealed_tail_damaged_at_recovery(tmp_path: Path) -> None:
    """A segment recovery still reads (the open tail) that fails its checks is quarantined
    up to the head (widened: the manifest does not record its count), not fatal."""
    async with opened(tmp_path) as engine:
        await fill(engine)
        log = engine._registry.get("a")
        assert log is not None
        tail = log.segments[-1]
        assert not is_cold(tail)
        assert tail.count > 2
        before, _ = await read_all(engine, "a")
        head = log.head
        path = engine._store.files[(log.topic_id, tail.base_seq)].path  # type: ignore[union-attr]
        base, salt = tail.base_seq, tail.salt
    first = damage(path, "flip", base, salt)
    async with opened(tmp_path) as engine:
        seqs, tombs = await read_all(engine, "a")
        assert [(t.reason, t.gap_from, t.gap_to) for t in tombs] == [("corrupt", first, head)]
        assert seqs == [s for s in before if s < first]
        (entry,) = engine.damaged_files()
        assert entry["widened"] is True
        await engine.write("a", [{"data": {"after": 1}}])
        seqs, _ = await read_all(engine, "a")
        assert seqs[-1] == head + 1
    async with opened(tmp_path) as engine:
        seqs, tombs = await read_all(engine, "a")
        assert [(t.gap_from, t.gap_to) for t in tombs] == [(first, head)]
        assert seqs[-1] == head + 1


async def test_quarantine_is_one_function(tmp_path: Path) -> None:
    """What the online scrub calls when it finds a bad segment itself."""
    async with opened(tmp_path) as engine:
        await fill(engine)
        before, _ = await read_all(engine, "a")
        seg = middle_cold(engine, "a")
        log = engine._registry.get("a")
        assert log is not None
        first, last = seg.base_seq + 3, seg.base_seq + seg.count - 1
        quarantine(log, seg, Damage(relpath(seg), "segment", "crc", first_seq=first, offset=99))
        seqs, tombs = await read_all(engine, "a")
        assert [(t.reason, t.gap_from, t.gap_to) for t in tombs] == [("corrupt", first, last)]
        assert seqs == [s for s in before if not first <= s <= last]
        assert log.count == len(seqs)


async def test_tag_and_seal_index_damage_costs_nothing(tmp_path: Path) -> None:
    async with opened(tmp_path) as engine:
        await fill(engine)
        before, _ = await read_all(engine, "a")
        seg = middle_cold(engine, "a")
        bound = seg.base_seq + seg.count
        tagged = cold_tagged_seqs(seg, "Eq", b"t/1", bound)
        assert tagged
        for suffix in (".tags", ".idx"):
            scribble(seg.path + suffix, 50, b"\xff" * 8)
        engine._store.cold.cache.clear()  # type: ignore[union-attr]
        assert cold_tagged_seqs(seg, "Eq", b"t/1", bound) == tagged  # from the frames
        assert await read_all(engine, "a") == (before, [])
    async with opened(tmp_path) as engine:
        assert await read_all(engine, "a") == (before, [])
        assert engine.damaged_files() == []


async def test_a_watch_gets_the_corrupt_tombstone(tmp_path: Path) -> None:
    from tests.unit.engine.test_watch_hub import drain, open_session
    from topics.watch_types import RecordBatch, TombstoneEvent

    async with opened(tmp_path) as engine:
        await fill(engine)
        before, _ = await read_all(engine, "a")
        seg = middle_cold(engine, "a")
        first = damage(seg.path, "flip", seg.base_seq, seg.salt)
        last = seg.base_seq + seg.count - 1
        engine._store.cold.cache.clear()  # type: ignore[union-attr]
        stream = await open_session(engine, {"a": {"from_seq": 0}})
        events: list[Any] = []
        for _ in range(100):  # bounded: a feed that never catches up fails, not hangs
            events += await drain(stream.feed)
            if events and type(events[-1]).__name__ == "CaughtUpEvent":
                break
        tombs = [e.tombstone for e in events if isinstance(e, TombstoneEvent)]
        assert [(t.reason, t.gap_from, t.gap_to) for t in tombs] == [("corrupt", first, last)]
        got = [
            r["$seq"]
            for e in events
            if isinstance(e, RecordBatch)
            for r in ujson.loads(e.records_json)
        ]
        assert got == [s for s in before if not first <= s <= last]


@pytest.mark.parametrize("kind", ["flip", "truncate"])
async def test_damage_found_by_a_block_read(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads of a big segment load one block (cold_segment rule 6); a bad frame in a block
    quarantines the segment the same way, from its first bad frame."""
    monkeypatch.setattr(cold_segment, "BLOCK_BYTES", 512)
    async with opened(tmp_path) as engine:
        await fill(engine)
        before_a, _ = await read_all(engine, "a")
        before_b, _ = await read_all(engine, "b")
        seg = middle_cold(engine, "a")
        assert seg.nbytes > 512
        first = damage(seg.path, kind, seg.base_seq, seg.salt)
        last = seg.base_seq + seg.count - 1
        engine._store.cold.cache.clear()  # type: ignore[union-attr]
        await check_served(engine, first, last, before_a, before_b)
