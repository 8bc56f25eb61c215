"""Fault injection through the Fs seam: power cuts at every call, EIO/ENOSPC, torn writes.

The engine runs on :class:`tests.support.fakedisk.FakeDisk` (what survives a power loss:
only synced bytes and synced directory entries, plus a seeded torn landing of each file's
last pending write) and :class:`tests.support.faultfs.FaultFs` (one class of call fails
with an errno). After every fault the data directory is opened again and checked against
what the workload saw acknowledged:

1. acked => durable: every acknowledged fsync-class record is there with the same seq, ts,
   data, tag, node and meta, unless an acknowledged delete removed it;
2. no phantom, no silent gap: every record that is there was written with exactly that
   content at that seq, and below the highest surviving record nothing written and not
   deleted is missing (the WAL is replayed as a prefix);
3. deleted stays deleted: a record removed by an acknowledged delete never comes back;
4. floors never regress: the cap tombstone a reader got before the crash is still due;
5. no seq is reused: the next write lands above everything ever handed out;
6. recovery is idempotent: opening twice (clean close in between) gives the same state.

The sweep uses tiny segments (``SEGMENT_TARGET_BYTES``) so the short workload also seals
segments, writes indexes and drops a wholly deleted segment.
"""

from __future__ import annotations

import errno
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
import ujson

from tests.support.fakedisk import FakeDisk, SimulatedCrash
from tests.support.faultfs import FaultFs
from topics._clock import ManualClock
from topics._storage.fs import Fs
from topics.engine import Engine, open_engine
from topics.errors import InternalError
from topics.log import topic_log as _log

pytestmark = pytest.mark.crash

ROOT = "/data"
START_MS = 1_700_000_000_000


# -- what the workload saw ---------------------------------------------------------------


@dataclass
class Seen:
    """What a workload handed to the engine and what the engine acknowledged."""

    written: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)  # submitted
    acked: dict[str, set[int]] = field(default_factory=dict)
    deleted_acked: dict[str, set[int]] = field(default_factory=dict)
    deleted_any: dict[str, set[int]] = field(default_factory=dict)  # acked or not
    floor_acked: dict[str, int] = field(default_factory=dict)  # tombstone gap_to seen
    max_seq: dict[str, int] = field(default_factory=dict)  # every seq ever handed out

    async def write(self, engine: Engine, topic: str, records: list[dict[str, Any]]) -> None:
        # The workload is sequential: the batch lands at head+1 (atomic, §2).
        log = engine._registry.topics[topic]
        first = log.head + 1
        pending = {first + i: _expect(rec) for i, rec in enumerate(records)}
        self.written.setdefault(topic, {}).update(pending)
        try:
            res = await engine.write(topic, records)
        finally:
            if log.head >= first + len(records) - 1:  # handed out (maybe never acked)
                self.max_seq[topic] = max(self.max_seq.get(topic, 0), log.head)
        assert res.seqs == list(pending)
        for seq in pending:
            self.written[topic][seq]["$ts"] = log.last_ts
        self.acked.setdefault(topic, set()).update(pending)

    async def delete(self, engine: Engine, topic: str, **kwargs: Any) -> None:
        log = engine._registry.topics[topic]
        before = _live_seqs(log)
        try:
            await engine.delete_records(topic, **kwargs)
        finally:  # applied in memory before the first await: maybe durable, maybe not
            gone = before - _live_seqs(log)
            self.deleted_any.setdefault(topic, set()).update(gone)
        self.deleted_acked.setdefault(topic, set()).update(gone)

    async def note_floor(self, engine: Engine, topic: str) -> None:
        page = await engine.diff(topic, from_seq=0, limit=1)
        if page.tombstone is not None:
            self.floor_acked[topic] = max(self.floor_acked.get(topic, 0), page.tombstone.gap_to)


def _live_seqs(log: Any) -> set[int]:
    out = set()
    for seg in log.segments:
        for i in range(seg.count):
            if seg.is_live(i) and seg.base_seq + i >= log.earliest:
                out.add(seg.base_seq + i)
    return out


def _expect(rec: dict[str, Any]) -> dict[str, Any]:
    data = rec["data"]
    out: dict[str, Any] = {"data": ujson.loads(data) if isinstance(data, bytes) else data}
    for key, name in (("tag", "$tag"), ("node", "$node"), ("meta", "meta")):
        if rec.get(key) is not None:
            out[name] = rec[key]
    return out


# -- running an engine on a disk that may lose power ----------------------------------


class SectorAtomicDisk(FakeDisk):
    """FakeDisk whose single-byte in-place writes land whole or not at all.

    The contract (§5) flips a record's delete flag with a one-byte write and calls it
    crash-safe because a byte never straddles a sector. FakeDisk's torn landing may garble
    the byte of a one-byte write, which the segment reader then rejects as corruption; that
    case is pinned separately (test_a_garbled_delete_flag_reads_as_deleted). Here such a
    write lands or is dropped, seeded; every other write tears as FakeDisk decides.
    """

    def crash(self, seed: int | None = None, *, torn: bool = True) -> None:
        rng = random.Random(seed)
        with self._lock:
            for path in sorted(self._durable_files):
                inode = self._durable_files[path]
                if inode.pending and inode.pending[-1][0] == "w" and len(inode.pending[-1][2]) == 1:
                    _, offset, data = inode.pending[-1]
                    durable = bytearray(inode.durable)
                    if torn and rng.random() < 0.5 and offset < len(durable):
                        durable[offset : offset + 1] = data
                    inode.durable = bytes(durable)
                    inode.pending.clear()
        super().crash(seed, torn=torn)


def _has_crash(exc: BaseException | None) -> bool:
    seen: set[int] = set()
    stack = [exc]
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


async def run_until_crash(
    fs: Fs, clock: ManualClock, body: Callable[[Engine], Awaitable[None]]
) -> bool:
    """Run ``body`` on an engine over ``fs``; True if the disk lost power meanwhile."""
    try:
        with trio.fail_after(20):
            async with open_engine(ROOT, clock=clock, fs=fs) as engine:
                await body(engine)
    except Exception as exc:
        if not _has_crash(exc):
            raise
        return True
    return False


async def read_topic(engine: Engine, topic: str, from_seq: int = 0) -> dict[str, Any]:
    records: list[dict[str, Any]] = []
    tombstone = None
    cursor, first = from_seq, True
    while True:
        page = await engine.diff(topic, from_seq=cursor, limit=1000, include_tags=True)
        if first:
            tombstone = page.tombstone.to_dict() if page.tombstone else None
            first = False
        records.extend(ujson.loads(page.records_json))
        cursor = page.next_from_seq
        if page.caught_up:
            return {"records": records, "tombstone": tombstone, "head": page.head_seq}


async def dump(engine: Engine) -> dict[str, Any]:
    out = {}
    for summary in (await engine.list_topics(page_size=1000)).topics:
        st = (await engine.get_topic(summary.topic, touch=False)).to_dict()
        st.pop("effective_priority")
        st.pop("last_read_ts")
        out[summary.topic] = {"state": st, **await read_topic(engine, summary.topic)}
    return out


def check_invariants(seen: Seen, view: dict[str, Any], *, gapless: set[str]) -> None:
    """Invariants 1-5 for the recovered ``view`` (a dump)."""
    for topic, acked in seen.acked.items():
        assert topic in view, f"topic {topic} with acked writes is gone"
        got = {r["$seq"]: r for r in view[topic]["records"]}
        written = seen.written[topic]
        for seq, rec in got.items():  # 2: no phantom
            assert seq in written, f"{topic}: seq {seq} was never written: {rec}"
            want = {"$seq": seq, **written[seq]}
            if "$ts" not in want:  # written, never acked: its ts is whatever it was
                want["$ts"] = rec["$ts"]
            assert rec == want, f"{topic}: seq {seq} differs"
        for seq in acked - seen.deleted_acked.get(topic, set()):  # 1: acked => durable
            if topic in seen.floor_acked and seq <= view[topic]["state"]["earliest_seq"] - 1:
                continue  # evicted by cap (checked by the floor below)
            assert seq in got, f"{topic}: acked seq {seq} is lost"
        for seq in seen.deleted_acked.get(topic, set()):  # 3: deleted stays deleted
            assert seq not in got, f"{topic}: deleted seq {seq} came back"
        if topic in gapless and got:  # 2: no hole below a survivor
            top = max(got)
            holes = [
                s
                for s in written
                if s < top and s not in got and s not in seen.deleted_any.get(topic, set())
            ]
            assert not holes, f"{topic}: silent gap at {holes[:5]} below surviving {top}"
        if topic in seen.floor_acked:  # 4: floors never regress
            tomb = view[topic]["tombstone"]
            assert tomb is not None
            assert tomb["gap_to"] >= seen.floor_acked[topic]
        head = view[topic]["state"]["head_seq"]
        assert head >= max(acked), f"{topic}: head {head} below acked {max(acked)}"


# -- the scripted workload for the crash-point sweep -----------------------------------


async def workload(engine: Engine, seen: Seen) -> None:
    """put_topic, fsync writes, a tag delete, a checkpoint, more writes and deletes."""
    await engine.put_topic("f", {"durability": "fsync"})
    await engine.put_topic("c", {"durability": "fsync", "cap_records": 4})
    for i in range(4):
        await seen.write(
            engine,
            "f",
            [{"data": {"i": i, "j": j}, "tag": f"g{(i + j) % 3}", "node": "n"} for j in range(3)],
        )
        await seen.write(engine, "c", [{"data": i, "meta": {"m": i}}, {"data": f"{i}b"}])
        await seen.note_floor(engine, "c")
    await seen.delete(engine, "f", match="g1")
    await engine._store.checkpoint(engine._registry)
    for i in range(4, 7):
        await seen.write(engine, "f", [{"data": {"i": i}, "tag": f"g{i % 3}"}, {"data": b"[1]"}])
        await seen.write(engine, "c", [{"data": i}])
        await seen.note_floor(engine, "c")
    await seen.delete(engine, "f", match="g2")  # also flags bytes already on disk
    await seen.delete(engine, "f", before_seq=3)
    await engine._store.checkpoint(engine._registry)
    await seen.write(engine, "f", [{"data": "last", "tag": "g0"}])


def small_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_log, "SEGMENT_TARGET_BYTES", 200)


async def verify_recovery(disk: FakeDisk, clock: ManualClock, seen: Seen) -> None:
    """Open the crashed image twice; check the invariants, idempotence and new writes."""
    views = []
    for _ in range(2):
        async with open_engine(ROOT, clock=clock, fs=disk) as engine:
            views.append(await dump(engine))
    assert views[0] == views[1], "recovery is not idempotent"
    check_invariants(seen, views[0], gapless={"f"})
    async with open_engine(ROOT, clock=clock, fs=disk) as engine:
        for topic in seen.acked:  # 5: no seq reused, writes continue above the head
            res = await engine.write(topic, [{"data": "after"}])
            assert res.first_seq > max(seen.max_seq[topic], views[1][topic]["state"]["head_seq"])
        await engine._store.checkpoint(engine._registry)  # checkpoints work on the image
        after = await dump(engine)
    async with open_engine(ROOT, clock=clock, fs=disk) as engine:
        assert await dump(engine) == after


async def count_ops(monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """Mutating calls up to the end of the workload, and in total (with the close)."""
    small_segments(monkeypatch)
    disk = FakeDisk()
    seen = Seen()
    end = 0

    async def body(engine: Engine) -> None:
        nonlocal end
        await workload(engine, seen)
        end = disk.ops

    assert not await run_until_crash(disk, ManualClock(START_MS), body)
    return end, disk.ops


async def crash_at(n: int, seed: int, torn: bool) -> tuple[FakeDisk, Seen, bool]:
    disk = SectorAtomicDisk(crash_after=n)
    seen = Seen()
    clock = ManualClock(START_MS)
    crashed = await run_until_crash(disk, clock, lambda engine: workload(engine, seen))
    disk.crash(seed, torn=torn)
    return disk, seen, crashed


async def test_crash_point_sweep_untorn(monkeypatch: pytest.MonkeyPatch) -> None:
    """A power cut before every mutating call of the workload and its close."""
    _, total = await count_ops(monkeypatch)
    for n in range(1, total + 2):
        disk, seen, crashed = await crash_at(n, n, torn=False)
        assert crashed == (n <= total)
        try:
            await verify_recovery(disk, ManualClock(START_MS), seen)
        except BaseException as exc:
            exc.add_note(f"crash before op {n}/{total} (untorn)")
            raise


async def test_crash_point_sweep_torn(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same sweep, the last pending write of each file landing partly (seeded)."""
    _, total = await count_ops(monkeypatch)
    for n in range(1, total + 1):
        for seed in (n, n + 10_000):
            disk, seen, _ = await crash_at(n, seed, torn=True)
            try:
                await verify_recovery(disk, ManualClock(START_MS), seen)
            except BaseException as exc:
                exc.add_note(f"crash before op {n}/{total}, torn seed {seed}")
                raise


# -- targeted crash points ---------------------------------------------------------------


async def _ops_where(
    monkeypatch: pytest.MonkeyPatch, match: Callable[[str, str], bool]
) -> list[int]:
    """1-based op numbers of the workload's calls that ``match(op, path)``."""
    small_segments(monkeypatch)
    disk = FakeDisk()
    assert not await run_until_crash(disk, ManualClock(START_MS), lambda e: workload(e, Seen()))
    return [i + 1 for i, (op, path) in enumerate(disk.trace) if match(op, path)]


@pytest.mark.parametrize("after", [0, 1, 2], ids=["at-rename", "before-dirsync", "after-dirsync"])
async def test_crash_between_segment_data_and_index(
    monkeypatch: pytest.MonkeyPatch, after: int
) -> None:
    """Seal = sync the frames, write ``.idx.tmp``, sync, rename, sync the directory; the
    manifest that says "sealed" comes later. A crash anywhere in there must recover."""
    renames = await _ops_where(monkeypatch, lambda op, p: op == "rename" and ".idx.tmp" in p)
    assert renames, "the workload seals no segment"
    for n in renames[:3]:
        disk, seen, crashed = await crash_at(n + after, 7, torn=True)
        assert crashed
        await verify_recovery(disk, ManualClock(START_MS), seen)


@pytest.mark.parametrize(
    "after", [-1, 0, 1, 2], ids=["tmp-unsynced", "at-rename", "renamed", "dir-synced"]
)
async def test_crash_between_manifest_temp_write_and_rename(
    monkeypatch: pytest.MonkeyPatch, after: int
) -> None:
    renames = await _ops_where(
        monkeypatch, lambda op, p: op == "rename" and "MANIFEST" in p and ".tmp" in p
    )
    assert len(renames) >= 2
    for n in renames:
        disk, seen, crashed = await crash_at(n + after, 3, torn=True)
        assert crashed
        await verify_recovery(disk, ManualClock(START_MS), seen)


# -- EIO / ENOSPC -------------------------------------------------------------------------


# A full disk on a WAL *write* stalls instead of failing (wal.py Rule 9, tests/crash/
# test_disk_full.py); on an fdatasync it is as fatal as EIO (fsyncgate).
@pytest.mark.parametrize(
    ("op", "code"),
    [("write_at", errno.EIO), ("sync_data", errno.EIO), ("sync_data", errno.ENOSPC)],
    ids=["write_at-EIO", "sync_data-EIO", "sync_data-ENOSPC"],
)
async def test_wal_failure_fails_the_write_and_refuses_later_ones(op: str, code: int) -> None:
    disk = FakeDisk()
    fault = FaultFs(disk, op=op, at=10**9, errno=code)
    clock = ManualClock(START_MS)
    seen = Seen()
    try:
        async with open_engine(ROOT, clock=clock, fs=fault) as engine:
            await engine.put_topic("f", {"durability": "fsync"})
            for i in range(3):
                await seen.write(engine, "f", [{"data": i, "tag": "a"}])
            fault.at = fault.calls[op] + 1  # the next WAL write or fdatasync fails
            with pytest.raises(Exception) as failed:
                await seen.write(engine, "f", [{"data": "lost", "tag": "a"}])
            assert fault.fired == 1
            assert "WAL" in str(failed.value)
            # The engine refuses further changes with a clear error ...
            with pytest.raises(InternalError) as refused:
                await engine.write("f", [{"data": "refused"}])
            assert refused.value.detail == {"storage": "read_only"}
            with pytest.raises(InternalError):
                await engine.put_topic("g")
            with pytest.raises(InternalError):
                await engine.delete_records("f", before_seq=2)
            # ... and a checkpoint must not make the failed write durable behind its back.
            with pytest.raises(Exception):  # noqa: B017 - any refusal will do
                await engine._store.checkpoint(engine._registry)
    except Exception as exc:  # closing an engine whose WAL failed may report it again
        if "WAL" not in str(exc) and not _mentions_wal(exc):
            raise
    # A failed write left nothing in the file; after a failed fdatasync its bytes may still
    # be in the file (the outcome of a write whose fsync failed is unknown; see
    # test_a_write_whose_fsync_failed_stays_failed_after_restart).
    maybe = ["lost"] if op == "sync_data" else []
    for crash in (False, True):
        if crash:
            disk.crash(1, torn=True)
        async with open_engine(ROOT, clock=clock, fs=disk) as engine:
            got = [r["data"] for r in (await read_topic(engine, "f"))["records"]]
            assert got[:3] == [0, 1, 2]
            assert set(got[3:]) <= {"again", *maybe}
            assert (await engine.write("f", [{"data": "again"}])).first_seq > 4


async def test_a_write_whose_fsync_failed_stays_failed_after_restart() -> None:
    disk = FakeDisk()
    fault = FaultFs(disk, op="sync_data", at=10**9)
    clock = ManualClock(START_MS)
    try:
        async with open_engine(ROOT, clock=clock, fs=fault) as engine:
            await engine.put_topic("f", {"durability": "fsync"})
            await engine.write("f", [{"data": "ok"}])
            fault.at = fault.calls["sync_data"] + 1
            with pytest.raises(Exception, match="WAL"):
                await engine.write("f", [{"data": "failed"}])
    except Exception as exc:
        if not _mentions_wal(exc):
            raise
    async with open_engine(ROOT, clock=clock, fs=disk) as engine:
        got = [r["data"] for r in (await read_topic(engine, "f"))["records"]]
        assert got == ["ok"]


def _mentions_wal(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_mentions_wal(e) for e in exc.exceptions)
    return "WAL" in str(exc)


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC], ids=["EIO", "ENOSPC"])
async def test_segment_write_failure_in_a_checkpoint_loses_nothing(code: int) -> None:
    """A checkpoint whose segment write fails raises; the WAL still holds everything."""
    disk = FakeDisk()
    fault = FaultFs(disk, op="write_at", at=10**9, errno=code)
    clock = ManualClock(START_MS)
    seen = Seen()
    try:
        async with open_engine(ROOT, clock=clock, fs=fault) as engine:
            await engine.put_topic("f", {"durability": "fsync"})
            for i in range(5):
                await seen.write(engine, "f", [{"data": i}])
            fault.at = fault.calls["write_at"] + 2  # segment header ok, frames fail
            with pytest.raises(OSError):
                await engine._store.checkpoint(engine._registry)
            for i in range(5, 8):  # the WAL still works
                await seen.write(engine, "f", [{"data": i}])
    except Exception as exc:
        if not any(isinstance(e, OSError) for e in _leaves(exc)):
            raise
    disk.crash(5, torn=True)
    async with open_engine(ROOT, clock=clock, fs=disk) as engine:
        check_invariants(seen, await dump(engine), gapless={"f"})


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


# -- specific crash scenarios -------------------------------------------------------------


async def test_acked_fsync_records_survive_a_crash_with_a_reserved_watermark() -> None:
    """The head jumps to the reserved watermark after a crash (no seq reused), and every
    acknowledged record below it is still there."""
    disk = FakeDisk()
    clock = ManualClock(START_MS)
    seen = Seen()

    async def body(engine: Engine) -> None:
        await engine.put_topic("f", {"durability": "fsync"})
        for i in range(3):
            await seen.write(engine, "f", [{"data": i, "tag": "t", "node": "x"}])
        disk.crash_after = disk.ops + 1

    assert await run_until_crash(disk, clock, body)
    disk.crash(0)
    async with open_engine(ROOT, clock=clock, fs=disk) as engine:
        view = await read_topic(engine, "f")
        check_invariants(
            seen, {"f": {"state": (await engine.get_topic("f")).to_dict(), **view}}, gapless={"f"}
        )
        assert [r["data"] for r in view["records"]] == [0, 1, 2]
        assert view["tombstone"] is None
        st = await engine.get_topic("f", touch=False)
        assert st.head_seq >= 3
        assert (st.count, st.earliest_seq) == (3, 1)
        res = await engine.write("f", [{"data": 3}])
        assert res.first_seq == st.head_seq + 1
        # A reader that had everything before the crash continues without loss.
        after = await read_topic(engine, "f", 3)
        assert [r["data"] for r in after["records"]] == [3]


@pytest.mark.parametrize("durability", ["disk", "memory"])
async def test_synced_disk_records_survive_a_crash(durability: str) -> None:
    disk = FakeDisk()
    clock = ManualClock(START_MS)
    seen = Seen()

    async def body(engine: Engine) -> None:
        await engine.put_topic("d", {"durability": durability})
        for i in range(4):
            await seen.write(engine, "d", [{"data": i}])
        await engine._store.wal.flush()  # the periodic tick, without waiting for it
        await engine.write("d", [{"data": "tail"}])  # acked, never synced
        disk.crash_after = disk.ops + 1

    assert await run_until_crash(disk, clock, body)
    disk.crash(0, torn=False)
    async with open_engine(ROOT, clock=clock, fs=disk) as engine:
        view = await read_topic(engine, "d")
        assert [r["data"] for r in view["records"]] == [0, 1, 2, 3]
        assert (await engine.write("d", [{"data": "x"}])).first_seq > 5


async def test_ephemeral_topic_after_a_crash_keeps_config_and_never_reuses_seqs() -> None:
    disk = FakeDisk()
    clock = ManualClock(START_MS)

    async def body(engine: Engine) -> None:
        await engine.put_topic("e", {"durability": "ephemeral", "priority": 4})
        await engine.write("e", [{"data": i} for i in range(5)])
        disk.crash_after = disk.ops + 1

    assert await run_until_crash(disk, clock, body)
    disk.crash(0)
    async with open_engine(ROOT, clock=clock, fs=disk) as engine:
        st = await engine.get_topic("e", touch=False)
        assert (st.config.priority, st.count) == (4, 0)
        assert st.head_seq >= 5
        view = await read_topic(engine, "e")
        assert view["records"] == []
        assert view["tombstone"] is not None
        assert (await engine.write("e", [{"data": 1}])).first_seq > 5


async def test_concurrent_writers_creating_a_topic_survive_a_crash() -> None:
    """Several writes race to auto-create one fsync topic; all are acked, so all survive."""
    for attempt in range(20):
        disk = FakeDisk()
        clock = ManualClock(START_MS)
        acked: dict[int, Any] = {}

        async def body(
            engine: Engine, disk: FakeDisk = disk, acked: dict[int, Any] = acked
        ) -> None:
            async def one(k: int) -> None:
                res = await engine.write(
                    "auto", [{"data": [k, j]} for j in range(2)], config={"durability": "fsync"}
                )
                for j, seq in enumerate(res.seqs or []):
                    acked[seq] = [k, j]

            async with trio.open_nursery() as nursery:
                for k in range(4):
                    nursery.start_soon(one, k)
            disk.crash_after = disk.ops + 1

        assert await run_until_crash(disk, clock, body)
        disk.crash(attempt)
        async with open_engine(ROOT, clock=clock, fs=disk) as engine:
            view = await read_topic(engine, "auto")
            got = {r["$seq"]: r["data"] for r in view["records"]}
            assert got == acked, f"attempt {attempt}: recovered {got}, acked {acked}"


async def test_recovery_after_a_torn_wal_tail_then_more_crashes() -> None:
    """Crash, recover, write, crash again (several times): every acked record survives
    every round, and the WAL files keep their numbering."""
    disk = FakeDisk()
    clock = ManualClock(START_MS)
    seen = Seen()
    for round_ in range(5):

        async def body(engine: Engine, round_: int = round_) -> None:
            if round_ == 0:
                await engine.put_topic("f", {"durability": "fsync"})
            for i in range(3):
                await seen.write(engine, "f", [{"data": [round_, i]}])
            if round_ % 2:
                await engine._store.checkpoint(engine._registry)
            disk.crash_after = disk.ops + 1 + round_ * 2

        await run_until_crash(disk, clock, body)
        disk.crash(round_, torn=True)
    async with open_engine(ROOT, clock=clock, fs=disk) as engine:
        check_invariants(seen, await dump(engine), gapless={"f"})


async def test_a_garbled_delete_flag_reads_as_deleted() -> None:
    async def body(engine: Engine, disk: FakeDisk, marks: list[int]) -> None:
        await engine.put_topic("f", {"durability": "fsync"})
        await engine.write("f", [{"data": i, "tag": f"t{i}"} for i in range(4)])
        await engine._store.checkpoint(engine._registry)
        await engine.delete_records("f", match="t1")
        marks.append(disk.ops)
        await engine._store.checkpoint(engine._registry)  # flips seq 2's flag in place

    dry = FakeDisk()
    marks: list[int] = []
    assert not await run_until_crash(dry, ManualClock(START_MS), lambda e: body(e, dry, marks))
    # The fdatasync right after the one-byte flag write: crash there, the flag pending.
    flag_sync = next(
        i + 1
        for i, (op, path) in enumerate(dry.trace)
        if i >= marks[0] and op == "sync_data" and path.endswith(".seg")
    )
    for seed in range(64):
        disk = FakeDisk(crash_after=flag_sync)
        assert await run_until_crash(
            disk, ManualClock(START_MS), lambda e, disk=disk: body(e, disk, [])
        )
        disk.crash(seed, torn=True)
        seg = next(p for p in disk.snapshot() if p.endswith(".seg"))
        frames = disk.snapshot()[seg][40:]
        ends = []
        off = 0
        while off < len(frames):
            off += int.from_bytes(frames[off : off + 4], "little")
            ends.append(off - 1)
        if frames[ends[1]] not in (0, 1):
            break
    else:  # pragma: no cover
        pytest.fail("no seed garbles the flag byte")
    async with open_engine(ROOT, clock=ManualClock(START_MS), fs=disk) as engine:
        got = [r["data"] for r in (await read_topic(engine, "f"))["records"]]
        assert got == [0, 2, 3]


async def test_a_torn_header_in_the_newest_wal_file_is_repaired_and_numbering_goes_on() -> None:
    """A crash while a new WAL file's header was being written leaves a short file. The
    writer's recovery removes it, and the next WAL file must follow the remaining ones."""
    disk = FakeDisk()
    clock = ManualClock(START_MS)
    async with open_engine(ROOT, clock=clock, fs=disk) as engine:
        await engine.put_topic("f", {"durability": "fsync"})
        await engine.write("f", [{"data": 1}])
    wal_dir = f"{ROOT}/wal"
    newest = max(int(name[:16], 16) for name in disk.listdir(wal_dir))
    torn = disk.open(f"{wal_dir}/{newest + 1:016x}.wal", create=True)
    torn.write_at(0, b"TOPICWAL\x01")  # 9 of the 40 header bytes
    torn.sync_all()
    disk.sync_dir(wal_dir)
    disk.crash(0)
    for _ in range(2):
        async with open_engine(ROOT, clock=clock, fs=disk) as engine:
            got = [r["data"] for r in (await read_topic(engine, "f"))["records"]]
            assert got[0] == 1
            await engine.write("f", [{"data": 2}])


async def test_an_empty_segment_is_never_named_by_a_manifest() -> None:
    """A write rejected after a fresh segment was opened leaves an empty in-memory segment;
    a checkpoint must not list a file that holds nothing durable (it would not survive)."""
    disk = FakeDisk()
    clock = ManualClock(START_MS)

    async def body(engine: Engine) -> None:
        await engine.put_topic("f", {"durability": "fsync"})
        with pytest.raises(Exception):  # noqa: B017 - invalid_request
            await engine.write("f", [{"data": float("nan")}])
        await engine._store.checkpoint(engine._registry)
        disk.crash_after = disk.ops + 1

    assert await run_until_crash(disk, clock, body)
    disk.crash(0)
    async with open_engine(ROOT, clock=clock, fs=disk) as engine:
        assert (await engine.write("f", [{"data": 1}])).first_seq >= 1
        assert [r["data"] for r in (await read_topic(engine, "f"))["records"]] == [1]


async def test_reader_on_a_crashed_image_sees_the_durable_prefix_and_repairs_nothing() -> None:
    import topics

    disk = FakeDisk()
    clock = ManualClock(START_MS)
    seen = Seen()

    async def body(engine: Engine) -> None:
        await engine.put_topic("f", {"durability": "fsync"})
        for i in range(5):
            await seen.write(engine, "f", [{"data": i, "tag": "x"}])
        disk.crash_after = disk.ops + 1

    assert await run_until_crash(disk, clock, body)
    disk.crash(3, torn=True)
    before = disk.snapshot()
    with topics.Reader(ROOT, fs=disk) as reader:
        page = reader.diff("f", from_seq=0, include_tags=True)
        assert [r.data for r in page.records] == [0, 1, 2, 3, 4]
        assert reader.head_seq("f") == 5  # the writer's jump is the writer's business
    assert disk.snapshot() == before  # read-only: no repair, no write
    async with open_engine(ROOT, clock=clock, fs=disk) as engine:
        check_invariants(seen, await dump(engine), gapless={"f"})
