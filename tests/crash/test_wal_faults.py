"""WAL under power loss and I/O errors: acked durable frames survive, nothing unacked
leaves a gap, and a failed write or fsync fails its batch and ends all writing.

Crash sweeps follow the reference's FAULT_TESTING.md: run the workload once to count its
mutating disk calls, then once per call with the fake disk losing power there, tear the
last pending write by seed, recover, and check against what was acknowledged.
"""

from __future__ import annotations

import errno
import time
from dataclasses import dataclass, field

import pytest
import trio
import trio.testing

from tests.support.fakedisk import FakeDisk, SimulatedCrash
from tests.support.faultfs import FaultFs
from topics._storage.fs import Fs
from topics._storage.wal import Wal, WalError, scan_wal
from topics._storage.wal_reader import wal_files

pytestmark = pytest.mark.crash

D = "/wal"


@dataclass
class Record:
    submitted: dict[int, tuple[bytes, bool]] = field(default_factory=dict)  # lsn -> (payload, sync)
    acked: set[int] = field(default_factory=set)
    failed: set[int] = field(default_factory=set)
    refused: int = 0  # submits that raised WalError at once (read-only)

    @property
    def acked_durable(self) -> int:
        """Highest LSN acked as synced: every LSN up to it must survive."""
        return max((lsn for lsn in self.acked if self.submitted[lsn][1]), default=0)


async def _submit(wal: Wal, rec: Record, payload: bytes, sync: bool) -> None:
    try:
        ticket = wal.submit(3, payload, sync=sync)
    except WalError:
        rec.refused += 1
        return
    rec.submitted[ticket.lsn] = (payload, sync)
    try:
        await ticket.wait()
    except WalError:
        rec.failed.add(ticket.lsn)
        return
    rec.acked.add(ticket.lsn)


async def _workload(fs: Fs, rec: Record, *, rounds: int = 10, max_file_bytes: int = 260) -> Wal:
    """Rounds of three concurrent submitters (two fsync-class, one disk-class)."""
    wal = Wal.create(fs, D, next_lsn=1, file_no=0, max_file_bytes=max_file_bytes)
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        for r in range(rounds):
            async with trio.open_nursery() as group:
                for k, sync in enumerate((True, False, True)):
                    group.start_soon(_submit, wal, rec, b"r%d-k%d-" % (r, k) * (1 + r % 3), sync)
        await wal.aclose()
    return wal


def _recover_and_check(disk: FakeDisk, rec: Record) -> list[int]:
    entries = list(scan_wal(disk, D, repair=True))
    lsns = [e.lsn for e in entries]
    assert lsns == list(range(1, len(lsns) + 1)), "LSNs strictly increasing, no gap"
    for e in entries:
        assert e.payload == rec.submitted[e.lsn][0]
    assert rec.acked <= set(lsns) | {lsn for lsn in rec.acked if not rec.submitted[lsn][1]}
    assert len(lsns) >= rec.acked_durable, "an acked fsync-class frame was lost"
    return lsns


async def _continue_after_recovery(disk: FakeDisk, lsns: list[int]) -> None:
    files = wal_files(disk, D)
    wal = Wal.create(disk, D, next_lsn=len(lsns) + 1, file_no=files[-1] + 1 if files else 0)
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        await wal.submit(3, b"after-recovery", sync=True).wait()
        await wal.aclose()
    again = [(e.lsn, e.payload) for e in scan_wal(disk, D, repair=False)]
    assert [lsn for lsn, _ in again] == [*lsns, len(lsns) + 1]
    assert again[-1][1] == b"after-recovery"


def _fresh_disk(crash_after: int | None = None) -> FakeDisk:
    """A disk holding the WAL directory; ``crash_after`` counts calls after that."""
    disk = FakeDisk()
    disk.makedirs(D)
    if crash_after is not None:
        disk.crash_after = disk.ops + crash_after
    return disk


async def _count_ops() -> int:
    disk = _fresh_disk()
    start = disk.ops
    await _workload(disk, Record())
    return disk.ops - start


@pytest.mark.slow
@pytest.mark.parametrize("torn", [True, False])
async def test_crash_at_every_disk_call_keeps_every_acked_frame(torn: bool) -> None:
    total = await _count_ops()
    assert total > 30
    for crash_at in range(1, total + 2):
        for seed in (crash_at, crash_at + 1000, crash_at + 2000) if torn else (0,):
            disk = _fresh_disk(crash_at)
            rec = Record()
            crashed = False
            try:
                await _workload(disk, rec)
            except* SimulatedCrash:
                crashed = True
            assert crashed == (crash_at <= total)
            disk.crash(seed=seed, torn=torn)
            lsns = _recover_and_check(disk, rec)
            if not crashed:
                assert set(lsns) == rec.acked == set(rec.submitted)
            await _continue_after_recovery(disk, lsns)


async def test_power_loss_during_the_tail_repair_is_recoverable() -> None:
    total = await _count_ops()
    repairs_seen = 0
    for crash_at in range(3, total, 3):
        base = _fresh_disk(crash_at)
        rec = Record()
        try:
            await _workload(base, rec)
        except* SimulatedCrash:
            pass
        base.crash(seed=crash_at)
        probe = base.clone()
        list(scan_wal(probe, D, repair=True))
        repairs_seen += probe.ops > 0
        for k in range(1, probe.ops + 1):  # lose power at each call of the repair itself
            attempt = base.clone()
            attempt.crash_after = k
            with pytest.raises(SimulatedCrash):
                list(scan_wal(attempt, D, repair=True))
            attempt.crash(seed=k)
            lsns = _recover_and_check(attempt, rec)
            await _continue_after_recovery(attempt, lsns)
    assert repairs_seen > 0


# -- injected I/O errors ---------------------------------------------------------------


def _assert_failed_cleanly(wal: Wal, rec: Record) -> None:
    stats = wal.statistics()
    assert stats.read_only
    assert rec.failed, "the failing batch's tickets raised"
    assert rec.acked.isdisjoint(rec.failed)
    assert max(rec.acked, default=0) < min(rec.failed), "nothing acked after the failure"
    assert rec.refused > 0, "later submits were refused at once"


# ENOSPC/EDQUOT on a frame write is not fatal (wal.py Rule 9): tests/crash/test_disk_full.py.
@pytest.mark.parametrize("err", [errno.EIO, errno.EROFS])
@pytest.mark.parametrize("at", [2, 3, 6])
async def test_write_error_fails_its_batch_and_makes_the_wal_read_only(err: int, at: int) -> None:
    disk = _fresh_disk()
    fault = FaultFs(disk, op="write_at", at=at, errno=err)  # write 1 is the first header
    rec = Record()
    wal = await _workload(fault, rec, max_file_bytes=64 << 20)
    _assert_failed_cleanly(wal, rec)
    writes = fault.calls["write_at"]
    assert writes == at, "no write after the failed one"
    disk.crash(seed=at, torn=True)
    lsns = _recover_and_check(disk, rec)
    assert set(lsns) == rec.acked, "the failed write left nothing behind"
    await _continue_after_recovery(disk, lsns)


@pytest.mark.parametrize("err", [errno.EIO, errno.ENOSPC])
@pytest.mark.parametrize("at", [1, 2, 5])
async def test_fsync_error_fails_its_batch_and_is_never_retried(err: int, at: int) -> None:
    disk = _fresh_disk()
    fault = FaultFs(disk, op="sync_data", at=at, errno=err)
    rec = Record()
    wal = await _workload(fault, rec, max_file_bytes=64 << 20)
    _assert_failed_cleanly(wal, rec)
    assert fault.calls["sync_data"] == at, "a failed fsync is never retried (fsyncgate)"
    assert fault.calls["write_at"] == at + 1, "nothing written after the failed fsync"
    # Without tearing, the unsynced frames of the failed batch are simply gone. (With
    # tearing some may land: unacked frames may survive, as with any crash.)
    disk.crash(seed=at, torn=False)
    lsns = _recover_and_check(disk, rec)
    assert set(lsns) == rec.acked
    assert set(lsns).isdisjoint(rec.failed)


@pytest.mark.parametrize(("op", "at"), [("sync_all", 2), ("sync_dir", 2), ("open", 2)])
async def test_rotation_errors_fail_the_batch(op: str, at: int) -> None:
    disk = _fresh_disk()
    fault = FaultFs(disk, op=op, at=at)  # call 1 of each belongs to the first file
    rec = Record()
    wal = await _workload(fault, rec, max_file_bytes=200)
    _assert_failed_cleanly(wal, rec)
    assert wal.statistics().rotations_total == 0
    disk.crash(seed=1)
    lsns = _recover_and_check(disk, rec)
    await _continue_after_recovery(disk, lsns)


async def test_failed_periodic_sync_makes_the_wal_read_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    disk = _fresh_disk()
    fault = FaultFs(disk, op="sync_data", at=1)
    wal = Wal.create(fault, D, next_lsn=1, file_no=0, sync_interval_ms=50)
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        await wal.submit(1, b"disk-class", sync=False).wait()  # acked after the write
        await trio.sleep(1)  # the tick's fdatasync fails...
        # ...in a worker thread, which the autojump clock does not wait for: give the
        # thread real time to finish (bounded), yielding so trio sees its result.
        deadline = time.monotonic() + 10
        while not wal.statistics().read_only and time.monotonic() < deadline:
            time.sleep(0.001)  # noqa: ASYNC251 - real time for a worker thread, on purpose
            await trio.lowlevel.checkpoint()
        assert wal.statistics().read_only
        with pytest.raises(WalError, match="read-only"):
            wal.submit(1, b"next", sync=True)
        await wal.aclose()
    assert fault.calls["sync_data"] == 1


def test_create_fails_cleanly_when_the_header_cannot_be_synced() -> None:
    disk = _fresh_disk()
    with pytest.raises(OSError, match="injected"):
        Wal.create(FaultFs(disk, op="sync_all", at=1), D, next_lsn=1, file_no=0)
    disk.crash(seed=0)
    assert list(scan_wal(disk, D, repair=True)) == []
