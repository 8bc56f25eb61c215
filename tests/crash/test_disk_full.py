"""A disk that fills: the WAL stalls instead of failing, and everything resumes by itself.

The fake disk (``FakeDisk(capacity=...)``, fakedisk.py Rule 6) lands the prefix of a write
that fits and then raises ENOSPC, as a real short ``pwrite`` does. What must hold
(wal.py Rule 9, ops/durability.py Rule 4, store.py rule 8):

1. the partial frame is cut back: the file ends at its last whole frame;
2. the stalled batch keeps its LSNs and is written first once space returns, with no
   restart; later writes then succeed;
3. callers learn at once: the engine answers ``insufficient_storage`` (507), ``outcome:
   unknown`` for a change caught in the WAL, ``not_stored`` for one refused up front;
4. nothing acknowledged is lost, across a clean reopen and across a power cut;
5. a failed cut, or a full disk seen by an fsync, is still fatal (fsyncgate);
6. the free-space reserve refuses writes before the disk is full, and checkpoints that hit
   ENOSPC back off and retry instead of ending the engine.

The WAL's retry backoff runs on trio's real clock (RETRY_MIN_S, 50 ms), so each test waits
for the retry with ``wait_progress`` under a bound instead of sleeping.
"""

from __future__ import annotations

import errno
from typing import Any

import pytest
import trio

from tests.support.fakedisk import FakeDisk
from tests.support.faultfs import FaultFs
from topics._clock import ManualClock
from topics._persistence import store as store_module
from topics._storage.wal import Wal, WalError, WalFullError, scan_wal
from topics._storage.wal_reader import wal_files
from topics.engine import Engine, open_engine
from topics.errors import InsufficientStorageError
from topics.settings import Limits

from .test_engine_faults import ROOT, START_MS, Seen, check_invariants, dump, read_topic

pytestmark = pytest.mark.crash

D = "/wal"
WAIT_S = 10.0


def _disk() -> FakeDisk:
    disk = FakeDisk()
    disk.makedirs(D)
    return disk


async def _until_not_full(wal: Wal) -> None:
    with trio.fail_after(WAIT_S):
        while wal.full:
            await wal.wait_progress()


# -- the WAL alone ------------------------------------------------------------------------


async def test_a_full_disk_stalls_the_batch_cuts_the_partial_frame_and_resumes() -> None:
    disk = _disk()
    wal = Wal.create(disk, D, next_lsn=1, file_no=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        await wal.submit(3, b"a" * 100, sync=True).wait()
        whole = disk.used_bytes()
        disk.capacity = whole + 50  # the next frame lands half, then ENOSPC
        stalled = wal.submit(3, b"b" * 100, sync=True)
        with pytest.raises(WalFullError):
            await stalled.wait()
        assert ("truncate", f"{D}/{0:016x}.wal") in disk.trace
        assert disk.used_bytes() == whole, "the partial frame was cut back"
        assert [e.lsn for e in scan_wal(disk, D, repair=False)] == [1]
        assert wal.full
        assert not wal.read_only
        assert stalled.stalled
        # While stalled, submits still queue (the owner applied them) and answer at once.
        queued = wal.submit(3, b"c", sync=False)
        with pytest.raises(WalFullError):
            await queued.wait()
        with pytest.raises(WalFullError):
            await wal.flush()
        disk.capacity = None  # space returns
        await _until_not_full(wal)
        await stalled.wait()
        await queued.wait()
        await wal.submit(3, b"d", sync=True).wait()
        stats = wal.statistics()
        assert (stats.full, stats.read_only, stats.stalls_total) == (False, False, 1)
        await wal.aclose()
    disk.crash(seed=1, torn=True)
    got = [(e.lsn, e.payload) for e in scan_wal(disk, D, repair=True)]
    assert got == [(1, b"a" * 100), (2, b"b" * 100), (3, b"c"), (4, b"d")]


@pytest.mark.parametrize("space_back", [False, True], ids=["still-full", "space-back"])
async def test_closing_while_stalled_makes_one_last_attempt(space_back: bool) -> None:
    disk = _disk()
    wal = Wal.create(disk, D, next_lsn=1, file_no=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        await wal.submit(3, b"acked", sync=True).wait()
        disk.capacity = disk.used_bytes() + 10
        stalled = wal.submit(3, b"x" * 64, sync=True)
        with pytest.raises(WalFullError):
            await stalled.wait()
        if space_back:
            disk.capacity = None
        with trio.fail_after(WAIT_S):
            await wal.aclose()
    if space_back:
        await stalled.wait()
    else:
        assert stalled.failed
        with pytest.raises(WalError):
            await stalled.wait()
    disk.crash(seed=2, torn=True)
    lsns = [e.lsn for e in scan_wal(disk, D, repair=True)]
    assert lsns == ([1, 2] if space_back else [1])


async def test_a_rotation_that_meets_a_full_disk_removes_the_new_file_and_retries() -> None:
    disk = _disk()
    wal = Wal.create(disk, D, next_lsn=1, file_no=0, max_file_bytes=100)
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        await wal.submit(3, b"a" * 80, sync=True).wait()  # the file is now over 100 bytes
        disk.capacity = disk.used_bytes() + 10  # not even the next file's header fits
        stalled = wal.submit(3, b"b", sync=True)
        with pytest.raises(WalFullError):
            await stalled.wait()
        assert wal_files(disk, D) == [0], "the half-created file is gone"
        disk.capacity = None
        await _until_not_full(wal)
        await stalled.wait()
        assert wal.statistics().rotations_total == 1
        await wal.aclose()
    disk.crash(seed=3, torn=True)
    assert wal_files(disk, D) == [0, 1]
    assert [e.lsn for e in scan_wal(disk, D, repair=True)] == [1, 2]


async def test_a_cut_that_fails_makes_the_wal_read_only() -> None:
    disk = _disk()
    fault = FaultFs(disk, op="truncate", at=1)  # the cut back is the first truncate
    wal = Wal.create(fault, D, next_lsn=1, file_no=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        await wal.submit(3, b"a", sync=True).wait()
        disk.capacity = disk.used_bytes() + 5
        with pytest.raises(WalError) as failed:
            await wal.submit(3, b"b" * 50, sync=True).wait()
        assert not isinstance(failed.value, WalFullError)
        assert wal.read_only
        assert not wal.full
        with pytest.raises(WalError, match="read-only"):
            wal.submit(3, b"c", sync=True)
        await wal.aclose()


async def test_a_full_disk_on_fdatasync_is_still_fatal() -> None:
    """fsyncgate: after a failed fsync the kernel may have dropped the dirty pages and
    marked them clean; a retry would "succeed" without the data. Never retried."""
    disk = _disk()
    fault = FaultFs(disk, op="sync_data", at=2, errno=errno.ENOSPC)
    wal = Wal.create(fault, D, next_lsn=1, file_no=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        await wal.submit(3, b"a", sync=True).wait()
        with pytest.raises(WalError) as failed:
            await wal.submit(3, b"b", sync=True).wait()
        assert not isinstance(failed.value, WalFullError)
        assert wal.read_only
        assert not wal.full
        await wal.aclose()
    assert fault.calls["sync_data"] == 2


# -- the engine ---------------------------------------------------------------------------


def _no_reserve() -> Limits:
    """The WAL's own ENOSPC handling, without the reserve refusing writes first."""
    return Limits(min_free_bytes=0)


async def _until_storage_ok(engine: Engine) -> None:
    assert engine._store is not None
    with trio.fail_after(WAIT_S):
        while engine.storage_state() != "ok":
            await engine._store.wal.wait_progress()


async def test_engine_answers_507_while_full_and_resumes_without_a_restart() -> None:
    disk = FakeDisk()
    clock = ManualClock(START_MS)
    seen = Seen()
    big = "x" * 300
    async with open_engine(ROOT, clock=clock, fs=disk, limits=_no_reserve()) as engine:
        await engine.put_topic("f", {"durability": "fsync"})
        await engine.put_topic("d", {"durability": "disk"})
        for i in range(3):
            await seen.write(engine, "f", [{"data": i}])
        disk.capacity = disk.used_bytes() + 40
        with pytest.raises(InsufficientStorageError) as caught:
            await engine.write("f", [{"data": big}], idempotency_key="k1")
        assert caught.value.status == 507
        assert caught.value.code == "insufficient_storage"
        assert caught.value.detail == {"storage": "disk_full", "outcome": "unknown"}
        assert engine.storage_state() == "disk_full"
        assert engine.storage_gauges()["topics_storage_degraded"] == 1
        # New changes are refused before anything is applied.
        heads = {t: engine._registry.topics[t].head for t in ("f", "d")}
        for attempt in (
            engine.write("f", [{"data": "refused"}]),
            engine.write("d", [{"data": "refused"}]),
            engine.put_topic("g"),
            engine.delete_records("f", before_seq=2),
        ):
            with pytest.raises(InsufficientStorageError) as refused:
                await attempt
            assert refused.value.detail is not None
            assert refused.value.detail["outcome"] == "not_stored"
        assert {t: engine._registry.topics[t].head for t in ("f", "d")} == heads
        assert "g" not in engine._registry.topics
        # Reads go on.
        assert [r["data"] for r in (await read_topic(engine, "f"))["records"]][:3] == [0, 1, 2]
        disk.capacity = None  # space returns: no restart
        await _until_storage_ok(engine)
        retried = await engine.write("f", [{"data": big}], idempotency_key="k1")
        assert retried.seqs == [4], "the write whose outcome was unknown was stored"
        seen.written["f"][4] = {"data": big}
        seen.acked["f"].add(4)
        for topic in ("f", "d"):
            await seen.write(engine, topic, [{"data": f"after-{topic}"}])
        assert engine.storage_gauges()["topics_storage_degraded"] == 0
    for crash in (False, True):
        if crash:
            disk.crash(4, torn=True)
        async with open_engine(ROOT, clock=clock, fs=disk) as engine:
            view = await dump(engine)
            check_invariants(seen, view, gapless={"f", "d"})
            assert [r["data"] for r in view["f"]["records"]] == [0, 1, 2, big, "after-f"]


async def test_the_reserve_refuses_writes_before_the_disk_is_full() -> None:
    disk = FakeDisk()
    clock = ManualClock(START_MS)
    limits = Limits(min_free_bytes=10_000)
    async with open_engine(ROOT, clock=clock, fs=disk, limits=limits) as engine:
        assert engine._space is not None
        await engine.put_topic("f", {"durability": "fsync"})
        await engine.write("f", [{"data": 1}])
        disk.capacity = disk.used_bytes() + 9_000  # under the reserve, far from full
        engine._space.refresh()  # the reading the background task takes every second
        head = engine._registry.topics["f"].head
        with pytest.raises(InsufficientStorageError) as refused:
            await engine.write("f", [{"data": 2}])
        detail = refused.value.detail
        assert detail is not None
        assert (detail["storage"], detail["outcome"]) == ("below_reserve", "not_stored")
        assert detail["min_free_bytes"] == 10_000
        assert detail["free_bytes"] == 9_000
        assert engine._registry.topics["f"].head == head
        assert engine.storage_state() == "below_reserve"
        gauges = engine.storage_gauges()
        assert {k: v for k, v in gauges.items() if k.startswith("topics_storage_")} == {
            "topics_storage_degraded": 1,
            "topics_storage_free_bytes": 9_000,
            "topics_storage_min_free_bytes": 10_000,
            "topics_storage_damaged_files": 0,
        }
        assert not engine._store.wal.full if engine._store else False
        disk.capacity = None
        engine._space.refresh()
        assert engine.storage_state() == "ok"
        await engine.write("f", [{"data": 2}])
    async with open_engine(ROOT, clock=clock, fs=disk) as engine:
        assert [r["data"] for r in (await read_topic(engine, "f"))["records"]] == [1, 2]


async def test_a_checkpoint_that_meets_a_full_disk_backs_off_and_retries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(store_module, "CHECKPOINT_RETRY_MIN_S", 0.01)
    disk = FakeDisk()
    clock = ManualClock(START_MS)
    async with open_engine(ROOT, clock=clock, fs=disk, limits=_no_reserve()) as engine:
        store = engine._store
        assert store is not None
        await engine.put_topic("f", {"durability": "fsync"})
        await engine.write("f", [{"data": "x" * 500}])
        generation = store.generation
        disk.capacity = disk.used_bytes() + 100  # the segment bytes do not fit
        done = trio.Event()
        failed_thrice = trio.Event()
        failures: list[OSError] = []
        real_checkpoint = store.checkpoint

        async def counted(registry: Any, **kwargs: Any) -> None:
            try:
                await real_checkpoint(registry, **kwargs)
            except OSError as exc:
                failures.append(exc)
                if len(failures) == 3:
                    failed_thrice.set()
                raise

        async def checkpoint() -> None:
            await store._checkpoint_retrying(engine._registry)
            done.set()

        monkeypatch.setattr(store, "checkpoint", counted)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(checkpoint)
            with trio.fail_after(WAIT_S):
                await failed_thrice.wait()  # backing off, not ending the engine
            assert all(exc.errno == errno.ENOSPC for exc in failures)
            assert not done.is_set()
            assert store.generation == generation
            disk.capacity = None
            with trio.fail_after(WAIT_S):
                await done.wait()
        assert store.generation == generation + 1
        await engine.write("f", [{"data": "after"}])
    async with open_engine(ROOT, clock=clock, fs=disk) as engine:
        got: list[Any] = [r["data"] for r in (await read_topic(engine, "f"))["records"]]
        assert got == ["x" * 500, "after"]


async def test_a_rotation_out_of_descriptors_stalls_and_retries_instead_of_failing() -> None:
    """EMFILE when the next WAL file is opened: nothing was created and the shortage passes,
    so the batch stalls (Rule 9) instead of turning the WAL read-only, which would stop the
    engine at its next checkpoint."""
    disk = _disk()
    fault = FaultFs(disk, op="open", at=2, errno=errno.EMFILE)  # #1 is the first file
    wal = Wal.create(fault, D, next_lsn=1, file_no=0, max_file_bytes=100)
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        await wal.submit(3, b"a" * 80, sync=True).wait()  # the file is now over 100 bytes
        stalled = wal.submit(3, b"b", sync=True)
        with pytest.raises(WalFullError, match="Too many open files"):
            await stalled.wait()
        assert not wal.read_only
        await _until_not_full(wal)  # the next attempt opens the file
        await stalled.wait()
        assert fault.fired == 1
        assert wal.statistics().rotations_total == 1
        await wal.aclose()
    assert wal_files(disk, D) == [0, 1]


# -- the way out: checkpoints keep half the reserve, deletes give space back ---------------


async def test_a_checkpoint_that_would_eat_the_reserve_waits_instead_of_filling_the_disk() -> None:
    """store.py rule 8, space.py rule 5: a WAL backlog larger than the free space is not
    written into segments until the volume is full; nothing is written at all."""
    disk = FakeDisk()
    clock = ManualClock(START_MS)
    async with open_engine(
        ROOT, clock=clock, fs=disk, limits=Limits(min_free_bytes=40_000)
    ) as engine:
        store, space = engine._store, engine._space
        assert store is not None
        assert space is not None
        await engine.put_topic("f", {"durability": "fsync"})
        for i in range(10):
            await engine.write("f", [{"data": f"{i}" + "x" * 5_000}])  # ~50 KB, WAL only
        # Above the reserve (writes go on), but the ~50 KB checkpoint would leave less
        # than half of it free.
        disk.capacity = disk.used_bytes() + 60_000
        space.refresh()
        assert engine.storage_state() == "ok"
        used, generation = disk.used_bytes(), store.generation
        with pytest.raises(OSError) as deferred:
            await store.checkpoint(engine._registry)
        assert deferred.value.errno == errno.ENOSPC
        assert disk.used_bytes() == used, "the checkpoint wrote nothing"
        assert store.generation == generation
        disk.capacity = None
        await store.checkpoint(engine._registry)
        assert store.generation == generation + 1
    async with open_engine(ROOT, clock=clock, fs=disk) as engine:
        assert len((await read_topic(engine, "f"))["records"]) == 10


async def test_a_checkpoint_that_meets_a_full_disk_removes_the_files_it_created() -> None:
    disk = FakeDisk()
    clock = ManualClock(START_MS)
    async with open_engine(ROOT, clock=clock, fs=disk, limits=_no_reserve()) as engine:
        store = engine._store
        assert store is not None
        await engine.put_topic("f", {"durability": "fsync"})
        await engine.write("f", [{"data": "x" * 5_000}])
        used = disk.used_bytes()
        disk.capacity = used + 1_000  # the segment file is created, its bytes do not fit
        with pytest.raises(OSError) as failed:
            await store.checkpoint(engine._registry)
        assert failed.value.errno == errno.ENOSPC
        assert disk.used_bytes() == used, "the half-written segment file was left behind"
        disk.capacity = None


async def test_below_the_reserve_a_topic_delete_is_accepted_and_gives_writes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fill, writes refused, delete a topic (accepted), space freed by the checkpoints that
    follow (store.py rule 10, every LOW_SPACE_INTERVAL_S), writes accepted again."""
    monkeypatch.setattr(store_module, "LOW_SPACE_INTERVAL_S", 0.01)
    disk = FakeDisk()
    clock = ManualClock(START_MS)
    limits = Limits(min_free_bytes=20_000)
    async with open_engine(ROOT, clock=clock, fs=disk, limits=limits) as engine:
        store, space = engine._store, engine._space
        assert store is not None
        assert space is not None
        await engine.put_topic("keep", {"durability": "fsync"})
        await engine.write("keep", [{"data": "kept"}])
        await engine.put_topic("old", {"durability": "fsync"})
        await store.checkpoint(engine._registry)  # part of "old" in segments, part WAL only
        for i in range(12):
            await engine.write("old", [{"data": f"{i}" + "x" * 5_000}])
            if i == 5:
                await store.checkpoint(engine._registry)
        disk.capacity = disk.used_bytes() + 15_000  # below the reserve
        space.refresh()
        for attempt in (engine.write("keep", [{"data": "refused"}]), engine.put_topic("new")):
            with pytest.raises(InsufficientStorageError) as refused:
                await attempt
            assert refused.value.detail is not None
            assert refused.value.detail["storage"] == "below_reserve"
        # Deleting records and topics is how space comes back: both are accepted.
        trimmed = await engine.delete_records("keep", before_seq=1)
        assert trimmed.deleted == 0
        deleted = await engine.delete_topic("old")
        assert deleted.deleted
        with trio.fail_after(WAIT_S):
            while engine.storage_state() != "ok":
                await trio.sleep(0.01)
                space.refresh()  # the reading the background task takes every second
        # Its ~60 KB in the WAL (the file it was in is trimmed) and the segment files
        # that held half of it again are gone.
        assert disk.free_bytes(ROOT) >= 15_000 + 80_000
        await engine.write("keep", [{"data": "after"}])
    async with open_engine(ROOT, clock=clock, fs=disk) as engine:
        assert [r["data"] for r in (await read_topic(engine, "keep"))["records"]] == [
            "kept",
            "after",
        ]
        assert "old" not in engine._registry.topics
