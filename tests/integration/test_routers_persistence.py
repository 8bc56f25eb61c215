"""Routers across restarts and crashes (contract §6 "derived", §1.4, §3.3 source_trim;
docs/ROUTERS.md "Durability details").

Copies are never WAL-logged: a source append is one WAL frame whatever the fan-out, and
after a crash the router re-derives the copies after its checkpointed cursor. What must
hold, on a real data directory (clean close) and on ``FakeDisk`` images (a crash at any
moment keeps only what was durable):

* definitions survive (PUT and DELETE are synced WAL entries; the cascade of a topic
  delete too);
* no loss: every source record that survives is in dest at least once;
* ``exactly_once``: no source record twice in dest while its key is retained;
* no dest seq is handed out twice: re-derived copies land above every seq a reader may
  have seen before the crash;
* gap markers (``source_trim`` tombstones) survive.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel
import ujson

from tests.support.fakedisk import FakeDisk, SimulatedCrash
from topics._clock import ManualClock
from topics._storage.fs import Fs
from topics.engine import Engine, open_engine

START_MS = 1_700_000_000_000
ROOT = "/data"


@asynccontextmanager
async def opened(where: Path | FakeDisk, clock: ManualClock | None = None) -> AsyncIterator[Engine]:
    clock = clock or ManualClock(START_MS)
    if isinstance(where, FakeDisk):
        fs: Fs | None = where
        path = ROOT
    else:
        fs, path = None, str(where)
    async with open_engine(path, clock=clock, fs=fs) as engine:
        yield engine


async def until(predicate: Callable[[], bool]) -> None:
    """Yield until ``predicate`` holds (workers may be waiting on a WAL fsync thread)."""
    with trio.fail_after(20):
        while not predicate():
            await trio.lowlevel.checkpoint()


async def caught_up(engine: Engine, *names: str) -> None:
    """Wait until every named router has forwarded up to its source's head."""

    def done() -> bool:
        for name in names:
            router = engine._router_set.routers[name]
            source = engine._registry.get(router.config.source)
            assert source is not None
            if router.cursor < source.head:
                return False
        return True

    await until(done)


async def read_all(engine: Engine, topic: str, from_seq: int = 0) -> dict[str, Any]:
    records: list[dict[str, Any]] = []
    tombstones = []
    cursor = from_seq
    while True:
        page = await engine.diff(topic, from_seq=cursor, limit=1000, include_tags=True)
        if page.tombstone is not None:
            tombstones.append(page.tombstone.to_dict())
        records += ujson.loads(page.records_json)
        cursor = page.next_from_seq
        if page.caught_up:
            return {"records": records, "tombstones": tombstones, "head": page.head_seq}


def src_keys(records: list[dict[str, Any]]) -> list[int]:
    return [r["meta"]["_topics_router"]["src_seq"] for r in records]


async def checkpoint(engine: Engine) -> None:
    assert engine._store is not None
    await engine._store.checkpoint(engine._registry)


# -- clean restarts --------------------------------------------------------------------


async def test_routers_and_their_state_survive_a_clean_restart(tmp_path: Path) -> None:
    async with opened(tmp_path) as engine:
        await engine.put_topic("a", {"durability": "fsync"})
        await engine.put_router("a->b", {"source": "a", "dest": "b", "filter": "keep"})
        await engine.put_router(
            "a->c",
            {"source": "a", "dest": "c", "guarantee": "exactly_once", "preserve_node": False},
        )
        await engine.write("a", [{"data": i, "tag": "keep", "node": "n"} for i in range(5)])
        await engine.write("a", [{"data": "skip", "tag": "other"}])
        await caught_up(engine, "a->b", "a->c")
        before = {n: (await engine.get_router(n)).to_dict() for n in ("a->b", "a->c")}
    async with opened(tmp_path) as engine:
        after = {n: (await engine.get_router(n)).to_dict() for n in ("a->b", "a->c")}
        assert after == before
        assert after["a->b"]["forwarded_total"] == 5
        assert after["a->b"]["cursor"] == 6
        await engine.write("a", [{"data": 5, "tag": "keep"}])
        await caught_up(engine, "a->b", "a->c")
        b = await read_all(engine, "b")
        assert [r["data"] for r in b["records"]] == [0, 1, 2, 3, 4, 5]
        c = await read_all(engine, "c")
        assert src_keys(c["records"]) == [1, 2, 3, 4, 5, 6, 7]
        assert all("$node" not in r for r in c["records"])


async def test_a_router_deleted_before_a_restart_stays_deleted(tmp_path: Path) -> None:
    async with opened(tmp_path) as engine:
        await engine.put_topic("a")
        await engine.put_router("r", {"source": "a", "dest": "b"})
        await checkpoint(engine)
        await engine.delete_router("r")
    async with opened(tmp_path) as engine:
        assert (await engine.list_routers()).routers == []
        await engine.write("a", [{"data": 1}])
        assert engine.router_count == 0


async def test_source_trim_tombstones_survive_a_restart(tmp_path: Path) -> None:
    async with opened(tmp_path) as engine:
        await engine.put_topic("a", {"cap_records": 2})
        await engine.put_router("r", {"source": "a", "dest": "b"})
        await engine.write("a", [{"data": i} for i in range(5)])
        await caught_up(engine, "r")
        before = await read_all(engine, "b")
    assert before["tombstones"][0]["reason"] == "source_trim"
    async with opened(tmp_path) as engine:
        assert await read_all(engine, "b") == before


# -- crashes (FakeDisk images) ------------------------------------------------------------


async def test_put_and_delete_survive_a_crash_between_checkpoints() -> None:
    disk = FakeDisk()
    async with opened(disk) as engine:
        await engine.put_topic("a")
        await engine.put_router("keep", {"source": "a", "dest": "b"})
        await engine.put_router("gone", {"source": "a", "dest": "c"})
        await checkpoint(engine)
        await engine.put_router("new", {"source": "a", "dest": "d", "filter": ["tag", "Eq", "x"]})
        await engine.put_router("keep", {"source": "a", "dest": "b", "preserve_tag": False})
        await engine.delete_router("gone")
        image = disk.clone()  # the power fails here: nothing checkpointed since
    async with opened(image) as engine:
        names = [r.router for r in (await engine.list_routers()).routers]
        assert names == ["keep", "new"]
        assert (await engine.get_router("keep")).config.preserve_tag is False
        assert (await engine.get_router("new")).config.filter == ("tag", "Eq", "x")
        assert engine._registry.get("d") is not None  # the auto-created dest too


async def test_an_auto_created_source_and_its_router_survive_a_crash() -> None:
    disk = FakeDisk()
    async with opened(disk) as engine:
        await engine.put_router("r", {"source": "fresh.src", "dest": "fresh.dst"})
        image = disk.clone()  # nothing checkpointed: the WAL alone holds all three
    async with opened(image) as engine:
        assert [r.router for r in (await engine.list_routers()).routers] == ["r"]
        assert engine._registry.get("fresh.src") is not None
        await engine.write("fresh.src", [{"data": 1}])
        await caught_up(engine, "r")
        assert (await engine.get_topic("fresh.dst")).head_seq == 1


async def test_a_topic_delete_cascade_survives_a_crash() -> None:
    disk = FakeDisk()
    async with opened(disk) as engine:
        await engine.put_topic("a")
        await engine.put_router("r", {"source": "a", "dest": "b"})
        await checkpoint(engine)
        assert (await engine.delete_topic("b")).routers_removed == ["r"]
        await engine.put_topic("b")  # a new instance of the name
        image = disk.clone()
    async with opened(image) as engine:
        assert engine.router_count == 0


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
@pytest.mark.parametrize("checkpoint_at", [0, 3, 6])
async def test_a_crash_mid_forwarding_loses_nothing(guarantee: str, checkpoint_at: int) -> None:
    """Batches go to an fsync source; the router forwards as they come; a checkpoint is
    taken after ``checkpoint_at`` batches; the power fails after the last one."""
    disk = FakeDisk()
    clock = ManualClock(START_MS)
    seen_dest_seqs: list[int] = []
    async with opened(disk, clock) as engine:
        await engine.put_topic("src", {"durability": "fsync"})
        await engine.put_topic("dst", {"durability": "fsync"})
        await engine.put_router("r", {"source": "src", "dest": "dst", "guarantee": guarantee})
        for batch in range(8):
            await engine.write("src", [{"data": [batch, i]} for i in range(3)])
            if batch % 2:
                await caught_up(engine, "r")  # some batches forwarded before the crash
            if batch + 1 == checkpoint_at:
                await caught_up(engine, "r")
                await checkpoint(engine)
        seen_dest_seqs = [r["$seq"] for r in (await read_all(engine, "dst"))["records"]]
        image = disk.clone()
    async with opened(image, clock) as engine:
        await caught_up(engine, "r")
        src = (await read_all(engine, "src"))["records"]
        dst = await read_all(engine, "dst")
    assert [r["data"] for r in src] == [[b, i] for b in range(8) for i in range(3)]  # fsync
    copies = [r["data"] for r in dst["records"]]
    for record in src:  # no loss
        assert record["data"] in copies
    if guarantee == "exactly_once":
        assert sorted(src_keys(dst["records"])) == sorted(set(src_keys(dst["records"])))
        assert len(copies) == len(src)
    # copies kept from before the crash keep their seqs; re-derived ones come after every
    # seq handed out before it (a reader's cursor never skips a re-derived copy)
    kept = [r["$seq"] for r in dst["records"] if r["$seq"] in seen_dest_seqs]
    new = [r["$seq"] for r in dst["records"] if r["$seq"] not in seen_dest_seqs]
    assert kept == seen_dest_seqs[: len(kept)]
    assert all(seq > max(seen_dest_seqs, default=0) for seq in new)
    # The only tombstone is the crash's: dest seqs handed out after the checkpoint (whose
    # copies were lost and re-derived) are reported as a lost range, never silently.
    for tomb in dst["tombstones"]:
        assert tomb["reason"] == "cap"
        assert tomb["gap_from"] > max(kept, default=0)
    assert len(dst["tombstones"]) <= 1


async def test_a_crash_while_dest_pushes_back_resumes_after_the_restart() -> None:
    disk = FakeDisk()
    async with opened(disk) as engine:
        await engine.put_topic("a", {"durability": "fsync"})
        await engine.put_topic("b", {"cap_records": 2, "discard": "reject"})
        await engine.put_router("r", {"source": "a", "dest": "b"})
        await engine.write("a", [{"data": i} for i in range(5)])
        await until(lambda: engine._router_set.routers["r"].cursor == 2)
        await checkpoint(engine)
        image = disk.clone()
    async with opened(image) as engine:
        assert (await engine.get_router("r")).cursor == 2
        await engine.put_topic("b", {"cap_records": 0})
        await caught_up(engine, "r")
        assert [r["data"] for r in (await read_all(engine, "b"))["records"]] == [0, 1, 2, 3, 4]


# -- derived: one WAL frame per source append -------------------------------------------


async def test_a_source_append_is_one_wal_frame_whatever_the_fan_out(tmp_path: Path) -> None:
    async with opened(tmp_path) as engine:
        await engine.put_topic("a")
        names = [f"r{i}" for i in range(5)]
        for i, name in enumerate(names):
            await engine.put_router(name, {"source": "a", "dest": f"d{i}"})
        await engine.write("a", [{"data": 0}])
        await caught_up(engine, *names)  # the dests' first watermark reservations
        assert engine._store is not None
        await engine._store.wal.flush()
        stats = engine.wal_statistics()
        assert stats is not None
        before = stats.frames_total
        for i in range(10):
            await engine.write("a", [{"data": i}])
            await caught_up(engine, *names)
        await engine._store.wal.flush()
        stats = engine.wal_statistics()
        assert stats is not None
        assert stats.frames_total - before == 10
        for i in range(5):
            assert len((await read_all(engine, f"d{i}"))["records"]) == 11


# -- a crash at every mutating disk call -------------------------------------------------


async def _sweep_workload(engine: Engine) -> None:
    await engine.put_topic("src", {"durability": "fsync"})
    await engine.put_router("once", {"source": "src", "dest": "d1", "guarantee": "exactly_once"})
    await engine.put_router("gone", {"source": "src", "dest": "d2"})
    for i in range(3):
        await engine.write("src", [{"data": [i, j]} for j in range(2)])
    await caught_up(engine, "once")
    await checkpoint(engine)
    await engine.delete_router("gone")
    for i in range(3, 5):
        await engine.write("src", [{"data": [i, 0]}])
    await caught_up(engine, "once")


def _is_crash(exc: BaseException) -> bool:
    """True when ``exc`` is, wraps or was caused by the fake disk's power loss."""
    stack: list[BaseException | None] = [exc]
    seen: set[int] = set()
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, SimulatedCrash):
            return True
        if isinstance(e, BaseExceptionGroup):
            stack.extend(e.exceptions)
        stack.extend([e.__cause__, e.__context__])
    return False


async def _run_until_crash(disk: FakeDisk) -> None:
    try:
        async with opened(disk) as engine:
            await _sweep_workload(engine)
    except Exception as exc:
        if not _is_crash(exc):
            raise


@pytest.mark.slow
async def test_recovery_after_a_crash_at_every_disk_call() -> None:
    total = FakeDisk()
    async with opened(total) as engine:
        await _sweep_workload(engine)
    assert total.ops > 50
    for n in range(1, total.ops + 1):
        disk = FakeDisk(crash_after=n)
        await _run_until_crash(disk)
        disk.crash(seed=n, torn=True)
        async with opened(disk) as engine:
            routers = {r.router for r in (await engine.list_routers()).routers}
            assert routers <= {"once", "gone"}, n
            if "once" not in routers:
                continue
            await caught_up(engine, "once")
            src = (await read_all(engine, "src"))["records"]
            dst = (await read_all(engine, "d1"))["records"]
            keys = src_keys(dst)
            assert len(keys) == len(set(keys)), f"crash at op {n}: a duplicate copy"
            assert sorted(r["data"] for r in dst) == sorted(r["data"] for r in src), n
