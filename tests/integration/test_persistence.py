"""Persistence round trips on a real data directory (docs/ARCHITECTURE.md "Durability";
docs/STORAGE_FORMATS.md; contract §0.10, §2, §5).

Every test opens an engine on ``tmp_path``, changes something, closes it cleanly (or forces
a checkpoint with ``engine._store.checkpoint``) and opens the directory again. What must
survive a clean close:

* every durability class keeps its topic config and its head (no seq is ever handed out
  twice); ``memory``/``disk``/``fsync`` keep their records exactly (seq, ts, data, tag,
  node, meta); ``ephemeral`` records are gone and a reader below the old head gets a
  tombstone;
* deletes (by tag and by ``before_seq``) stay deleted, also for records whose segment bytes
  were already on disk before the delete (the trailer flag byte is flipped in place);
* cap/TTL floors: a tombstone due before a restart is due after it, with the same gap;
* topic delete + recreate, config changes, the data directory lock, the read-only Reader.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import ujson

import topics
from topics._clock import ManualClock
from topics._persistence.recovery import recover
from topics._persistence.store import StorePaths
from topics._storage import segment_files
from topics._storage.fs import RealFs
from topics.engine import Engine, open_engine
from topics.log import topic_log as _log

START_MS = 1_700_000_000_000
CLASSES = ("memory", "disk", "fsync")


# -- helpers ---------------------------------------------------------------------------


@asynccontextmanager
async def opened(path: Path, clock: ManualClock, **kwargs: Any) -> AsyncIterator[Engine]:
    async with open_engine(str(path), clock=clock, **kwargs) as engine:
        yield engine


async def read_all(engine: Engine | topics.Reader, topic: str, from_seq: int = 0) -> dict[str, Any]:
    """Every record after ``from_seq`` (decoded, with tags), the first page's tombstone and
    the head, following the cursor until caught up."""
    records: list[dict[str, Any]] = []
    tombstone = None
    first = True
    cursor = from_seq
    while True:
        if isinstance(engine, topics.Reader):
            page = engine.diff(topic, from_seq=cursor, limit=1000, include_tags=True)
        else:
            page = await engine.diff(topic, from_seq=cursor, limit=1000, include_tags=True)
        if first:
            tombstone = page.tombstone.to_dict() if page.tombstone else None
            first = False
        records.extend(ujson.loads(page.records_json))
        cursor = page.next_from_seq
        if page.caught_up:
            return {"records": records, "tombstone": tombstone, "head": page.head_seq}


async def state(engine: Engine, topic: str) -> dict[str, Any]:
    """Topic state without the read-recency fields (reads move them)."""
    st = await engine.get_topic(topic, touch=False)
    out = st.to_dict()
    for volatile in ("effective_priority", "last_read_ts"):
        out.pop(volatile, None)
    return out


async def dump(engine: Engine) -> dict[str, Any]:
    """Everything observable about every topic: state, records, tombstones from 0."""
    out: dict[str, Any] = {}
    page = await engine.list_topics(page_size=1000)
    for summary in page.topics:
        name = summary.topic
        out[name] = {"state": await state(engine, name), **await read_all(engine, name)}
    return out


def batch(prefix: str, n: int, *, start: int = 0) -> list[dict[str, Any]]:
    """Records using every field: data as a value or as raw JSON bytes, tag, node, meta."""
    out: list[dict[str, Any]] = []
    for i in range(start, start + n):
        rec: dict[str, Any] = {"data": {"p": prefix, "i": i, "s": "é" * (i % 3)}}
        if i % 4 == 1:
            rec["data"] = f'{{"raw":{i},"p":"{prefix}"}}'.encode()
        if i % 3 != 2:
            rec["tag"] = f"{prefix}-t{i % 5}"
        if i % 2:
            rec["node"] = f"n{i % 3}"
        if i % 5 == 0:
            rec["meta"] = {"k": i, "v": [prefix]}
        out.append(rec)
    return out


def seqs(view: dict[str, Any]) -> list[int]:
    return [r["$seq"] for r in view["records"]]


# -- every durability class ------------------------------------------------------------


@pytest.mark.parametrize("durability", CLASSES)
async def test_records_survive_a_clean_restart_exactly(tmp_path: Path, durability: str) -> None:
    clock = ManualClock(START_MS)
    async with opened(tmp_path, clock) as engine:
        await engine.put_topic("t", {"durability": durability, "ttl_ms": 0})
        for b in range(5):
            await engine.write("t", batch("a", 7, start=b * 7), node="batchnode")
            clock.advance(13)
        await engine._store.checkpoint(engine._registry)  # some bytes in segment files ...
        for b in range(5, 8):
            await engine.write("t", batch("a", 7, start=b * 7))  # ... and some only in the WAL
            clock.advance(7)
        before = await dump(engine)
    assert before["t"]["state"]["head_seq"] == 56
    async with opened(tmp_path, clock) as engine:
        after = await dump(engine)
        assert after == before
        res = await engine.write("t", [{"data": "next"}])
        assert res.seqs == [57]


async def test_ephemeral_keeps_config_and_head_but_not_records(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    cfg = {"durability": "ephemeral", "cap_records": 50, "priority": 3}
    async with opened(tmp_path, clock) as engine:
        await engine.put_topic("e", cfg)
        await engine.write("e", batch("e", 6))
        await engine._store.checkpoint(engine._registry)
        await engine.write("e", batch("e", 4))
        before = await engine.get_topic("e", touch=False)
    assert before.head_seq == 10
    async with opened(tmp_path, clock) as engine:
        st = await engine.get_topic("e", touch=False)
        assert st.config == before.config
        assert (st.head_seq, st.count, st.bytes, st.earliest_seq) == (10, 0, 0, 11)
        # The records were lost involuntarily: a reader below the head is told so.
        view = await read_all(engine, "e")
        assert view["records"] == []
        assert view["tombstone"] is not None
        assert (view["tombstone"]["gap_from"], view["tombstone"]["gap_to"]) == (1, 10)
        # A reader that had everything sees nothing missing.
        assert (await read_all(engine, "e", 10))["tombstone"] is None
        # No seq is handed out twice.
        assert (await engine.write("e", [{"data": 1}])).seqs == [11]
        assert [r["data"] for r in (await read_all(engine, "e", 10))["records"]] == [1]


async def test_ephemeral_records_written_after_the_last_checkpoint_never_reuse_seqs(
    tmp_path: Path,
) -> None:
    clock = ManualClock(START_MS)
    async with opened(tmp_path, clock) as engine:
        await engine.put_topic("e", {"durability": "ephemeral"})
        await engine.write("e", batch("e", 3))
    for round_ in range(3):
        async with opened(tmp_path, clock) as engine:
            st = await engine.get_topic("e", touch=False)
            assert st.head_seq == 3 + 2 * round_
            res = await engine.write("e", batch("x", 2))
            assert res.first_seq == st.head_seq + 1


# -- deletes ---------------------------------------------------------------------------


async def test_tag_and_before_seq_deletes_survive_restart_and_checkpoint(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    async with opened(tmp_path, clock) as engine:
        await engine.put_topic("d", {"durability": "fsync"})
        await engine.write("d", batch("d", 40))
        # Deletes logged only in the WAL (no checkpoint has seen the records yet).
        assert (await engine.delete_records("d", match="d-t1")).deleted > 0
        assert (await engine.delete_records("d", before_seq=4)).deleted == 2  # seq 2 went by tag
        await engine._store.checkpoint(engine._registry)
        # Deletes after a checkpoint: flags of bytes already in the segment file.
        assert (await engine.delete_records("d", match=["tag", "Glob", "d-t3*"])).deleted > 0
        assert (await engine.delete_records("d", before_seq=9, match="d-t4")).deleted == 1
        await engine._store.checkpoint(engine._registry)
        expected = await dump(engine)
    tag_of = {r + 1: (f"d-t{r % 5}" if r % 3 != 2 else None) for r in range(40)}
    gone = {
        s for s, t in tag_of.items() if t in ("d-t1", "d-t3") or s < 4 or (t == "d-t4" and s < 9)
    }
    assert seqs(expected["d"]) == sorted(set(tag_of) - gone)
    for _ in range(2):
        async with opened(tmp_path, clock) as engine:
            assert await dump(engine) == expected


async def test_delete_of_a_record_already_on_disk_flips_its_flag_in_place(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    paths = StorePaths(str(tmp_path))
    async with opened(tmp_path, clock) as engine:
        await engine.put_topic("f", {"durability": "disk"})
        await engine.write("f", [{"data": i, "tag": "odd" if i % 2 else "even"} for i in range(10)])
        await engine._store.checkpoint(engine._registry)
        (seg_file,) = os.listdir(paths.segments)
        path = os.path.join(paths.segments, seg_file)
        before = await trio.Path(path).read_bytes()
        await engine.delete_records("f", match="odd")
        await engine._store.checkpoint(engine._registry)
        after = await trio.Path(path).read_bytes()
        # Same length, and only trailer bytes changed (0 -> 1), one per deleted record.
        assert len(after) == len(before)
        changed = [i for i in range(len(before)) if before[i] != after[i]]
        assert len(changed) == 5
        assert all((before[i], after[i]) == (0, 1) for i in changed)
        # The flipped bytes are the last byte of the frames of seqs 2, 4, 6, 8, 10.
        data = segment_files.read_segment(RealFs(), path, verify=True)
        ends = []
        off = 0
        frames = data.frames
        while off < len(frames):
            length = int.from_bytes(frames[off : off + 4], "little")
            ends.append(segment_files.HEADER_SIZE + off + length - 1)
            off += length
        assert changed == [ends[i] for i in range(1, 10, 2)]
        # The WAL after the checkpoint no longer replays the delete: the flag is the witness.
        expected = await dump(engine)
    async with opened(tmp_path, clock) as engine:
        assert await dump(engine) == expected
        assert [r["data"] for r in expected["f"]["records"]] == [0, 2, 4, 6, 8]


async def test_deletes_in_sealed_segments_survive_and_a_wholly_deleted_segment_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_log, "SEGMENT_TARGET_BYTES", 400)  # a few records per segment
    clock = ManualClock(START_MS)
    paths = StorePaths(str(tmp_path))
    async with opened(tmp_path, clock) as engine:
        await engine.put_topic("s", {"durability": "fsync"})
        for i in range(12):
            await engine.write("s", [{"data": "x" * 60, "tag": f"b{i}"} for _ in range(3)])
        await engine._store.checkpoint(engine._registry)
        seg_files = sorted(n for n in os.listdir(paths.segments) if n.endswith(".seg"))
        idx_files = [n for n in os.listdir(paths.segments) if n.endswith(".idx")]
        assert len(seg_files) >= 4  # several segments ...
        assert idx_files  # ... sealed ones among them
        # One record inside a sealed segment, then every record of another sealed one.
        await engine.delete_records("s", match="b2")
        second = len(seg_files)
        await engine._store.checkpoint(engine._registry)
        deleted_all = 0
        for tag in ("b4", "b5", "b6", "b7"):
            deleted_all += (await engine.delete_records("s", match=tag)).deleted
        assert deleted_all == 12
        # Dropped files go once no kept manifest lists them (the previous one is a fallback).
        for _ in range(2):
            await engine._store.checkpoint(engine._registry)
        after_files = sorted(n for n in os.listdir(paths.segments) if n.endswith(".seg"))
        assert len(after_files) < second  # wholly dead sealed segments are dropped
        for name in after_files:  # what is left still verifies, flags and all
            segment_files.read_segment(RealFs(), os.path.join(paths.segments, name), verify=True)
        expected = await dump(engine)
    tags = [r["$tag"] for r in expected["s"]["records"]]
    assert not {"b2", "b4", "b5", "b6", "b7"} & set(tags)
    assert len(tags) == 36 - 3 - 12
    async with opened(tmp_path, clock) as engine:
        assert await dump(engine) == expected


# -- floors ----------------------------------------------------------------------------


async def test_cap_floor_survives_restart_with_the_same_gap(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    async with opened(tmp_path, clock) as engine:
        await engine.put_topic("c", {"durability": "disk", "cap_records": 4})
        for i in range(5):
            await engine.write("c", [{"data": i * 10 + j} for j in range(3)])
        before = await read_all(engine, "c")
        await engine._store.checkpoint(engine._registry)
        await engine.write("c", [{"data": "late"}])  # cap moves again, only in the WAL
        before_late = await read_all(engine, "c")
    assert before["tombstone"] == {
        "gap_from": 1,
        "gap_to": 11,
        "reason": "cap",
        "missed_estimate": 11,
        "earliest_seq": 12,
        "head_seq": 15,
    }
    assert before_late["tombstone"]["gap_to"] == 12
    async with opened(tmp_path, clock) as engine:
        assert await read_all(engine, "c") == before_late
        assert (await read_all(engine, "c", 5))["tombstone"]["gap_from"] == 6
        assert (await read_all(engine, "c", 12))["tombstone"] is None


async def test_ttl_floor_survives_restart_with_the_same_gap(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    async with opened(tmp_path, clock) as engine:
        await engine.put_topic("t", {"durability": "fsync", "ttl_ms": 1000})
        await engine.write("t", [{"data": i} for i in range(4)])
        clock.advance(600)
        await engine.write("t", [{"data": i} for i in range(4, 7)])
        clock.advance(600)  # the first batch is due now ...
        applied = await read_all(engine, "t")  # ... and applied by this read
        clock.advance(500)  # the second batch is due too, but nothing looks before close
    assert applied["tombstone"]["gap_to"] == 4
    async with opened(tmp_path, clock) as engine:
        view = await read_all(engine, "t")
        assert view["records"] == []
        assert view["tombstone"] == {
            "gap_from": 1,
            "gap_to": 7,
            "reason": "ttl",
            "missed_estimate": 7,
            "earliest_seq": 8,
            "head_seq": 7,
        }
    async with opened(tmp_path, clock) as engine:
        assert await read_all(engine, "t") == view


async def test_ttl_due_before_restart_is_still_due_after_it(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    async with opened(tmp_path, clock) as engine:
        await engine.put_topic("t", {"durability": "disk", "ttl_ms": 500})
        await engine.write("t", [{"data": 1}, {"data": 2}])
        clock.advance(200)
        await engine.write("t", [{"data": 3}])
    clock.advance(400)  # seqs 1-2 are due while the engine is closed; seq 3 is not
    async with opened(tmp_path, clock) as engine:
        view = await read_all(engine, "t")
        assert seqs(view) == [3]
        assert (view["tombstone"]["gap_from"], view["tombstone"]["gap_to"]) == (1, 2)
        assert view["tombstone"]["reason"] == "ttl"


# -- topics ----------------------------------------------------------------------------


async def test_topic_delete_and_recreate_across_restarts(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    paths = StorePaths(str(tmp_path))
    async with opened(tmp_path, clock) as engine:
        await engine.put_topic("r", {"durability": "fsync", "priority": 7})
        await engine.write("r", batch("old", 5))
        await engine._store.checkpoint(engine._registry)
        old_files = set(os.listdir(paths.segments))
        assert old_files
    async with opened(tmp_path, clock) as engine:
        assert (await engine.delete_topic("r")).deleted
    async with opened(tmp_path, clock) as engine:
        assert [t.topic for t in (await engine.list_topics()).topics] == []
        # Its files go once no kept manifest lists them (the previous one is a fallback).
        for _ in range(2):
            await engine._store.checkpoint(engine._registry)
        assert not old_files & set(os.listdir(paths.segments))
        res = await engine.write("r", [{"data": "new"}], config={"durability": "disk"})
        assert res.created
        assert res.seqs == [1]
        # Delete and recreate again inside one session, then restart.
        await engine.delete_topic("r")
        await engine.put_topic("r", {"durability": "memory"})
        await engine.write("r", [{"data": "newer"}, {"data": "newest"}])
        expected = await dump(engine)
    async with opened(tmp_path, clock) as engine:
        assert await dump(engine) == expected
        assert [r["data"] for r in expected["r"]["records"]] == ["newer", "newest"]
        assert expected["r"]["state"]["config"]["durability"] == "memory"


async def test_config_changes_survive_restart(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    async with opened(tmp_path, clock) as engine:
        await engine.put_topic("k", {"durability": "fsync"})
        await engine.write("k", batch("k", 3))
        await engine._store.checkpoint(engine._registry)
        await engine.put_topic("k", {"priority": 9, "cap_records": 100, "discard": "reject"})
        await engine.put_topic("k2", {"durable": False, "ttl_ms": 5000, "dedupe_node": False})
        await engine.put_topic("k2", {"durability": "memory", "auto_create": False})
        cfg_k = (await engine.get_topic("k", touch=False)).config
        cfg_k2 = (await engine.get_topic("k2", touch=False)).config
    async with opened(tmp_path, clock) as engine:
        assert (await engine.get_topic("k", touch=False)).config == cfg_k
        assert (await engine.get_topic("k2", touch=False)).config == cfg_k2
        assert (cfg_k.priority, cfg_k.discard, cfg_k.durability) == (9, "reject", "fsync")
        assert (cfg_k2.durability, cfg_k2.auto_create, cfg_k2.ttl_ms) == ("memory", False, 5000)


async def test_class_change_keeps_the_records_stored_before_it(tmp_path: Path) -> None:
    """§1.1: config changes apply going forward and never rewrite stored records."""
    clock = ManualClock(START_MS)
    async with opened(tmp_path, clock) as engine:
        await engine.put_topic("m", {"durability": "fsync"})
        await engine.write("m", batch("m", 3))
        await engine.put_topic("m", {"durability": "disk"})
        await engine.write("m", batch("m", 2, start=3))
        expected = await dump(engine)
    async with opened(tmp_path, clock) as engine:
        assert await dump(engine) == expected


# -- the data directory ----------------------------------------------------------------


async def test_a_locked_data_dir_raises_the_documented_error(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    async with opened(tmp_path, clock):
        with pytest.raises(topics.DataDirLockedError):
            async with opened(tmp_path, clock):
                pass  # pragma: no cover


def _only(group: BaseException, kind: type[BaseException]) -> BaseException:
    """The one leaf exception of a (nested) exception group, which must be a ``kind``."""
    while isinstance(group, BaseExceptionGroup) and len(group.exceptions) == 1:
        group = group.exceptions[0]
    assert isinstance(group, kind), repr(group)
    return group


async def test_a_second_open_of_a_locked_data_dir_raises(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    async with opened(tmp_path, clock) as engine:
        await engine.put_topic("x", {"durability": "fsync"})
        with pytest.raises(BaseException) as second:
            async with opened(tmp_path, clock):
                pass  # pragma: no cover
        _only(second.value, topics.DataDirLockedError)
        # A Reader needs no lock: it opens beside the engine.
        with topics.Reader(str(tmp_path)) as reader:
            assert reader.topics() == ["x"]
        # The failed open changed nothing: the first engine still writes.
        assert (await engine.write("x", [{"data": 1}])).seqs == [1]
    async with opened(tmp_path, clock) as engine:  # released on close
        assert (await engine.get_topic("x", touch=False)).head_seq == 1


async def test_reader_beside_a_live_engine_sees_a_consistent_prefix(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)

    def content(seq: int) -> dict[str, int]:  # batch i holds seqs 3i+1 .. 3i+3
        return {"i": (seq - 1) // 3, "j": (seq - 1) % 3}

    async def write_batch(engine: Engine, i: int) -> None:
        res = await engine.write("live", [{"data": {"i": i, "j": j}} for j in range(3)])
        assert res.seqs == [3 * i + 1, 3 * i + 2, 3 * i + 3]

    def check(reader: topics.Reader, at_least: int, at_most: int) -> int:
        head = reader.head_seq("live")
        assert at_least <= head <= at_most
        page = reader.diff("live", from_seq=0, limit=1000)
        # A prefix of what was written: contiguous from 1, same content, no tombstone.
        assert [(r.seq, r.data) for r in page.records] == [
            (s, content(s)) for s in range(1, head + 1)
        ]
        assert page.tombstone is None
        assert (page.head_seq, page.caught_up) == (head, True)
        assert page.next_from_seq == head  # a cursor the engine will continue from
        return head

    async with opened(tmp_path, clock) as engine:
        await engine.put_topic("live", {"durability": "fsync"})
        await engine.put_topic("lazy", {"durability": "disk"})
        for i in range(10):
            await write_batch(engine, i)
        await engine.write("lazy", [{"data": "l"}])

        reader = await trio.to_thread.run_sync(topics.Reader, str(tmp_path))
        # fsync writes are durable before they are acked, so all 30 are visible.
        seen = check(reader, 30, 30)
        assert reader.topics() == ["lazy", "live"]
        started = 30

        async def writer() -> None:
            nonlocal started
            for i in range(10, 40):
                started = 3 * i + 3
                await write_batch(engine, i)
                if i == 25:
                    await engine._store.checkpoint(engine._registry)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            for _ in range(8):  # refresh while the engine writes and checkpoints
                await trio.to_thread.run_sync(reader.refresh)
                seen = check(reader, seen, started)
                await trio.sleep(0.002)
        await trio.to_thread.run_sync(reader.refresh)
        assert check(reader, seen, 120) == 120
        # A reader's cursor at its head continues exactly where the engine goes on.
        await write_batch(engine, 40)
        await trio.to_thread.run_sync(reader.refresh)
        page = reader.diff("live", from_seq=120)
        assert [r.seq for r in page.records] == [121, 122, 123]
        reader.close()


async def test_reader_of_a_closed_data_dir_matches_the_engine(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    async with opened(tmp_path, clock) as engine:
        await engine.put_topic("a", {"durability": "fsync", "cap_records": 5})
        await engine.write("a", batch("a", 9))
        await engine.delete_records("a", match="a-t4")
        expected = await read_all(engine, "a")
    with topics.Reader(str(tmp_path)) as reader:
        assert await read_all(reader, "a") == expected


async def test_recovery_twice_gives_the_same_state(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    async with opened(tmp_path, clock) as engine:
        await engine.put_topic("a", {"durability": "fsync", "cap_records": 30})
        await engine.put_topic("b", {"durability": "disk", "ttl_ms": 10_000})
        await engine.put_topic("c", {"durability": "ephemeral"})
        await engine.put_topic("d", {"durability": "memory"})
        for i in range(6):
            for name in "abcd":
                await engine.write(name, batch(name, 4, start=i * 4))
            if i == 3:
                await engine._store.checkpoint(engine._registry)
            clock.advance(1000)
        await engine.delete_records("a", match=["tag", "Glob", "a-t1*"])
        await engine.delete_records("b", before_seq=6)
        await engine.delete_topic("d")
        await engine.put_topic("d", {"durability": "disk"})
        await engine.write("d", batch("d2", 2))
    dumps = []
    for _ in range(2):
        async with opened(tmp_path, clock) as engine:
            dumps.append(await dump(engine))
    assert dumps[0] == dumps[1]
    assert set(dumps[0]) == {"a", "b", "c", "d"}
    # And the raw recovery result, read-only, twice (no engine in between).
    paths = StorePaths(str(tmp_path))
    raw = [recover(RealFs(), paths, repair=False) for _ in range(2)]
    assert _registry_view(raw[0].registry) == _registry_view(raw[1].registry)


def _registry_view(registry: Any) -> list[tuple[Any, ...]]:
    out = []
    for name in registry.names:
        log = registry.topics[name]
        frames = b"".join(bytes(seg.view()) for seg in log.segments)
        out.append(
            (
                name,
                log.topic_id,
                log.head,
                log.earliest,
                log.count,
                log.bytes,
                log.cap_floor,
                log.ttl_floor,
                log.config,
                frames,
            )
        )
    return out
