"""The WAL: group commit, the periodic tick, rotation, torn tails, corruption, trim."""

from __future__ import annotations

import errno
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from tests.support.fakedisk import FakeDisk
from tests.support.faultfs import FaultFs
from topics._core import crc32c
from topics._storage import entries
from topics._storage.fs import Fs, RealFs
from topics._storage.wal import Wal, WalCorruptionError, WalError, WalTicket, scan_wal
from topics._storage.wal_reader import (
    FRAME_HEADER_SIZE,
    HEADER_SIZE,
    WalSkip,
    encode_frames,
    encode_header,
    last_lsn,
    read_wal_header,
    wal_files,
    wal_path,
)
from topics.log.producer_state import ProducerClaim, encode_append_producer

D = "/wal"


def _disk() -> FakeDisk:
    disk = FakeDisk()
    disk.makedirs(D)
    return disk


def _payload(i: int) -> bytes:
    return (b"entry-%d|" % i) * (1 + i % 7)


def _scan(
    fs: Fs, *, repair: bool = False, from_lsn: int = 0, dir: str = D
) -> list[tuple[int, int, bytes]]:
    return [
        (e.lsn, e.entry_type, e.payload)
        for e in scan_wal(fs, dir, from_lsn=from_lsn, repair=repair)
    ]


async def _wait_until(predicate: Callable[[], bool], timeout_s: float = 5) -> None:
    """Poll in virtual time: with the autojump clock the writer's disk call runs in a
    thread in real time while trio's clock may jump, so wait for the effect itself."""
    with trio.fail_after(timeout_s):
        while not predicate():  # noqa: ASYNC110 - the effect comes from a worker thread
            await trio.sleep(0.001)


async def _write_each(wal: Wal, payloads: list[bytes]) -> None:
    """One batch per entry, so small files rotate often."""
    for p in payloads:
        await wal.submit(7, p, sync=True).wait()


async def _write_all(wal: Wal, payloads: list[bytes], *, sync: bool = True) -> list[WalTicket]:
    tickets = [wal.submit(7, p, sync=sync) for p in payloads]
    for t in tickets:
        await t.wait()
    return tickets


# -- round trips ---------------------------------------------------------------------------


async def test_round_trip_of_many_entries_across_rotations() -> None:
    disk = _disk()
    wal = Wal.create(disk, D, next_lsn=1, file_no=0, max_file_bytes=1024)
    payloads = [_payload(i) for i in range(400)]
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        for start in range(0, 400, 37):
            await _write_all(wal, payloads[start : start + 37], sync=start % 2 == 0)
        await wal.aclose()
    stats = wal.statistics()
    assert stats.frames_total == 400
    assert stats.rotations_total >= 5
    assert len(wal_files(disk, D)) == stats.rotations_total + 1
    assert _scan(disk) == [(i + 1, 7, p) for i, p in enumerate(payloads)]
    assert last_lsn(disk, D) == 400


async def test_round_trip_on_the_real_file_system(tmp_path: Path) -> None:
    fs = RealFs()
    wal = Wal.create(fs, str(tmp_path), next_lsn=10, file_no=3, max_file_bytes=4096)
    payloads = [_payload(i) for i in range(200)]
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        await _write_all(wal, payloads)
        await wal.aclose()
    assert _scan(fs, dir=str(tmp_path)) == [(i + 10, 7, p) for i, p in enumerate(payloads)]
    assert wal_files(fs, str(tmp_path))[0] == 3


async def test_entry_types_and_empty_or_memoryview_payloads_round_trip() -> None:
    disk = _disk()
    wal = Wal.create(disk, D, next_lsn=1, file_no=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        wal.submit(0, b"", sync=False)
        wal.submit(255, memoryview(b"view"), sync=False)
        await wal.submit(9, bytearray(b"ba"), sync=True).wait()
        await wal.aclose()
    assert _scan(disk) == [(1, 0, b""), (2, 255, b"view"), (3, 9, b"ba")]


def test_submit_rejects_bad_entry_types() -> None:
    wal = Wal.create(_disk(), D, next_lsn=1, file_no=0)
    with pytest.raises(ValueError, match="u8"):
        wal.submit(256, b"x", sync=False)


# -- group commit ------------------------------------------------------------------------


async def _concurrent_sync_submitters(fs: Fs, dir: str, writers: int, rounds: int) -> Wal:
    wal = Wal.create(fs, dir, next_lsn=1, file_no=0)
    resolved: list[int] = []

    async def submitter(i: int) -> None:
        for r in range(rounds):
            ticket = wal.submit(1, b"w%d-r%d" % (i, r), sync=True)
            append_ms, fsync_ms = await ticket.wait()
            assert ticket.done
            assert append_ms >= 0
            assert fsync_ms >= 0
            resolved.append(ticket.lsn)

    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        async with trio.open_nursery() as inner:
            for i in range(writers):
                inner.start_soon(submitter, i)
        await wal.aclose()
    assert sorted(resolved) == list(range(1, writers * rounds + 1))
    return wal


async def test_concurrent_sync_submitters_share_fsyncs() -> None:
    disk = _disk()
    wal = await _concurrent_sync_submitters(disk, D, writers=64, rounds=5)
    stats = wal.statistics()
    assert stats.frames_total == 320
    assert stats.fsyncs_total < stats.frames_total / 4
    assert stats.batches_total < stats.frames_total / 4
    assert stats.queue_depth_peak > 1
    assert stats.fsync_latency_us.count == stats.fsyncs_total
    assert sum(stats.fsync_latency_us.counts) == stats.fsync_latency_us.count
    assert [lsn for lsn, _, _ in _scan(disk)] == list(range(1, 321))


async def test_concurrent_sync_submitters_share_fsyncs_on_a_real_disk(tmp_path: Path) -> None:
    wal = await _concurrent_sync_submitters(RealFs(), str(tmp_path), writers=64, rounds=3)
    stats = wal.statistics()
    assert stats.fsyncs_total < stats.frames_total / 4


async def test_every_batch_takes_all_queued_frames_in_one_write() -> None:
    disk = _disk()
    wal = Wal.create(disk, D, next_lsn=1, file_no=0)
    tickets = [wal.submit(1, b"x", sync=True) for _ in range(50)]  # queued before the writer runs
    assert wal.statistics().queue_depth == 50
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        for t in tickets:
            await t.wait()
        stats = wal.statistics()
        assert (stats.batches_total, stats.fsyncs_total, stats.queue_depth) == (1, 1, 0)
        await wal.aclose()


# -- the periodic tick ---------------------------------------------------------------------


async def test_unsynced_frames_resolve_after_the_write_and_the_tick_syncs_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    disk = _disk()
    wal = Wal.create(disk, D, next_lsn=1, file_no=0, sync_interval_ms=50)
    path = wal_path(D, 0)
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        start = trio.current_time()
        tickets = await _write_all(wal, [b"a", b"b", b"c"], sync=False)
        assert all(t.done for t in tickets)
        assert wal.statistics().fsyncs_total == 0
        assert wal.written_lsn == 3
        assert wal.synced_lsn == 0
        assert disk.durable_bytes(path) == disk.read_bytes(path)[:HEADER_SIZE]  # written only
        await trio.sleep_until(start + 0.049)
        assert wal.statistics().fsyncs_total == 0
        await _wait_until(lambda: wal.synced_lsn == 3)
        assert trio.current_time() >= start + 0.05
        assert wal.statistics().fsyncs_total == 1
        assert disk.durable_bytes(path) == disk.read_bytes(path)
        await trio.sleep(10)  # nothing unsynced: the writer sleeps without ticking
        assert wal.statistics().fsyncs_total == 1
        await wal.aclose()


async def test_a_sync_frame_syncs_earlier_unsynced_frames_too(
    autojump_clock: trio.testing.MockClock,
) -> None:
    disk = _disk()
    wal = Wal.create(disk, D, next_lsn=1, file_no=0, sync_interval_ms=1000)
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        await _write_all(wal, [b"a", b"b"], sync=False)
        await wal.submit(1, b"c", sync=True).wait()
        assert wal.synced_lsn == 3
        assert wal.statistics().fsyncs_total == 1
        await trio.sleep(5)
        assert wal.statistics().fsyncs_total == 1
        await wal.aclose()


async def test_flush_waits_for_written_frames_to_be_synced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    disk = _disk()
    wal = Wal.create(disk, D, next_lsn=1, file_no=0, sync_interval_ms=60_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        wal.submit(1, b"a", sync=False)
        wal.submit(1, b"b", sync=False)
        start = trio.current_time()
        await wal.flush()
        assert trio.current_time() - start < 1  # a flush does not wait for the tick
        assert wal.synced_lsn == 2
        await wal.flush()  # nothing new: returns at once
        await wal.aclose()
    disk.crash(seed=1)
    assert [lsn for lsn, _, _ in _scan(disk)] == [1, 2]


async def test_aclose_makes_unsynced_frames_durable() -> None:
    disk = _disk()
    wal = Wal.create(disk, D, next_lsn=1, file_no=0, sync_interval_ms=60_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        await _write_all(wal, [b"a", b"b"], sync=False)
        await wal.aclose()
    with pytest.raises(WalError, match="closed"):
        wal.submit(1, b"late", sync=True)
    disk.crash(seed=2)
    assert [p for _, _, p in _scan(disk)] == [b"a", b"b"]


async def test_sync_interval_zero_syncs_every_batch() -> None:
    disk = _disk()
    wal = Wal.create(disk, D, next_lsn=1, file_no=0, sync_interval_ms=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        await _write_all(wal, [b"a"], sync=False)
        assert wal.synced_lsn == 1
        await wal.aclose()


# -- cancellation, backpressure, misuse ----------------------------------------------------


async def test_a_cancelled_writer_fails_pending_tickets_instead_of_hanging() -> None:
    disk = _disk()
    wal = Wal.create(disk, D, next_lsn=1, file_no=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        nursery.cancel_scope.cancel()
    ticket_after = None
    with pytest.raises(WalError):
        ticket_after = wal.submit(1, b"x", sync=True)
    assert ticket_after is None
    await wal.aclose()


async def test_queued_frames_fail_when_the_writer_is_cancelled_before_taking_them() -> None:
    wal = Wal.create(_disk(), D, next_lsn=1, file_no=0)
    with trio.CancelScope() as scope:
        scope.cancel()
        ticket = wal.submit(1, b"x", sync=True)
        await wal.run()
    assert ticket.done
    with pytest.raises(WalError):
        await ticket.wait()


def test_backpressure_counts_submits_past_the_budget_without_blocking() -> None:
    wal = Wal.create(_disk(), D, next_lsn=1, file_no=0, max_queue_bytes=100)
    assert not wal.over_budget()
    wal.submit(1, bytes(50), sync=False)
    assert not wal.over_budget()
    assert wal.statistics().submit_full_total == 0
    wal.submit(1, bytes(50), sync=False)  # 140 bytes queued: still accepted
    assert wal.over_budget()
    assert wal.statistics().submit_full_total == 1
    assert wal.statistics().queue_depth == 2


async def test_over_budget_clears_once_the_writer_catches_up() -> None:
    wal = Wal.create(_disk(), D, next_lsn=1, file_no=0, max_queue_bytes=100)
    tickets = [wal.submit(1, bytes(80), sync=False) for _ in range(3)]
    assert wal.over_budget()
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        await tickets[-1].wait()
        assert not wal.over_budget()
        await wal.aclose()


def test_create_refuses_to_reuse_or_skip_file_numbers() -> None:
    disk = _disk()
    Wal.create(disk, D, next_lsn=1, file_no=4)
    with pytest.raises(ValueError, match="must follow"):
        Wal.create(disk, D, next_lsn=1, file_no=4)
    with pytest.raises(ValueError, match="must follow"):
        Wal.create(disk, D, next_lsn=1, file_no=6)
    with pytest.raises(ValueError, match="next_lsn"):
        Wal.create(disk, D, next_lsn=0, file_no=5)
    Wal.create(disk, D, next_lsn=1, file_no=5)


async def test_second_writer_task_is_refused() -> None:
    wal = Wal.create(_disk(), D, next_lsn=1, file_no=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        with pytest.raises(RuntimeError, match="once"):
            await wal.run()
        await wal.aclose()


async def test_write_failure_makes_the_wal_read_only() -> None:
    fault = FaultFs(_disk(), op="write_at", at=2)  # write 1 is the header
    wal = Wal.create(fault, D, next_lsn=1, file_no=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        ticket = wal.submit(1, b"x", sync=True)
        with pytest.raises(WalError, match="not committed"):
            await ticket.wait()
        assert wal.statistics().read_only
        with pytest.raises(WalError, match="read-only"):
            wal.submit(1, b"y", sync=False)
        with pytest.raises(WalError):
            await wal.flush()
        await wal.aclose()


# -- torn tails and corruption -----------------------------------------------------------


async def _written_disk(count: int, *, max_file_bytes: int = 64 << 20) -> FakeDisk:
    disk = _disk()
    wal = Wal.create(disk, D, next_lsn=1, file_no=0, max_file_bytes=max_file_bytes)
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        await _write_each(wal, [_payload(i) for i in range(count)])
        await wal.aclose()
    return disk


async def _continue_writing(disk: FakeDisk, payloads: list[bytes]) -> None:
    """What recovery does after the scan: a fresh file, LSNs after the last good one."""
    last = last_lsn(disk, D) or 0
    wal = Wal.create(disk, D, next_lsn=last + 1, file_no=wal_files(disk, D)[-1] + 1)
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        await _write_all(wal, payloads)
        await wal.aclose()


async def test_torn_tail_at_every_cut_is_repaired_and_writing_continues() -> None:
    base = await _written_disk(5)
    path = wal_path(D, 0)
    entries = list(scan_wal(base, D, repair=False))
    last_off, end = entries[-1].offset, len(base.read_bytes(path))
    expected = [(i + 1, 7, _payload(i)) for i in range(4)]
    for cut in range(last_off, end):
        disk = base.clone()
        h = disk.open(path, write=True)
        h.truncate(cut)
        h.sync_all()  # the torn state is what the disk durably holds
        assert _scan(disk, repair=False) == expected  # a reader just stops at the tail
        assert len(disk.read_bytes(path)) == cut
        assert _scan(disk, repair=True) == expected
        assert len(disk.read_bytes(path)) == last_off  # cut back to the last good frame
        disk.crash(seed=cut)  # the repair was durable
        assert len(disk.read_bytes(path)) == last_off
        await _continue_writing(disk, [b"after"])
        assert _scan(disk) == [*expected, (5, 7, b"after")]


async def test_a_garbled_byte_anywhere_in_the_last_frame_ends_the_log_there() -> None:
    base = await _written_disk(3)
    path = wal_path(D, 0)
    entries = list(scan_wal(base, D, repair=False))
    last_off, end = entries[-1].offset, len(base.read_bytes(path))
    for pos in range(last_off, end):
        disk = base.clone()
        disk.poke(path, pos, bytes([disk.read_bytes(path)[pos] ^ 0x5A]))
        assert [lsn for lsn, _, _ in _scan(disk, repair=True)] == [1, 2], pos
        assert len(disk.read_bytes(path)) == last_off
        await _continue_writing(disk, [b"next"])
        assert [lsn for lsn, _, _ in _scan(disk)] == [1, 2, 3]


@pytest.mark.parametrize("fill", [bytes(100), b"\xff" * 7, b"garbage!" * 50])
async def test_zero_or_garbage_fill_after_the_last_frame_is_cut(fill: bytes) -> None:
    disk = await _written_disk(3)
    path = wal_path(D, 0)
    size = len(disk.read_bytes(path))
    disk.poke(path, size, fill)
    assert [lsn for lsn, _, _ in _scan(disk, repair=True)] == [1, 2, 3]
    assert len(disk.read_bytes(path)) == size


async def test_frames_from_another_file_never_validate() -> None:
    """Stale bytes with the right layout but another file's salt are a torn tail."""
    disk = await _written_disk(2)
    other = await _written_disk(3)
    path = wal_path(D, 0)
    foreign = other.read_bytes(path)
    third = list(scan_wal(other, D, repair=False))[2]
    disk.poke(path, len(disk.read_bytes(path)), foreign[third.offset :])
    assert [lsn for lsn, _, _ in _scan(disk, repair=True)] == [1, 2]


async def test_newest_file_with_a_torn_header_is_removed_by_repair() -> None:
    disk = await _written_disk(3)
    h = disk.open(wal_path(D, 1), create=True)
    h.write_at(0, b"TOPICW")  # a crash while creating the next file
    assert [lsn for lsn, _, _ in _scan(disk, repair=False)] == [1, 2, 3]
    assert wal_files(disk, D) == [0, 1]
    assert [lsn for lsn, _, _ in _scan(disk, repair=True)] == [1, 2, 3]
    assert wal_files(disk, D) == [0]
    await _continue_writing(disk, [b"x"])
    assert wal_files(disk, D) == [0, 1]


async def test_corruption_in_an_older_file_raises_naming_file_and_offset() -> None:
    disk = await _written_disk(60, max_file_bytes=512)
    assert len(wal_files(disk, D)) >= 3
    victim = next(e for e in scan_wal(disk, D, repair=False) if e.file_no == 1)
    path = wal_path(D, 1)
    disk.poke(path, victim.offset + FRAME_HEADER_SIZE, b"\x00")
    for repair in (False, True):
        with pytest.raises(WalCorruptionError) as info:
            _scan(disk, repair=repair)
        assert info.value.path == path
        assert info.value.offset == victim.offset
        assert path in str(info.value)
    assert len(disk.read_bytes(path)) > victim.offset  # never silently truncated


async def test_truncated_older_file_is_corruption_not_a_tail() -> None:
    disk = await _written_disk(60, max_file_bytes=512)
    path = wal_path(D, 0)
    disk.open(path, write=True).truncate(len(disk.read_bytes(path)) - 3)
    with pytest.raises(WalCorruptionError, match="not the newest"):
        _scan(disk, repair=True)


async def test_a_missing_file_in_the_middle_is_corruption() -> None:
    disk = await _written_disk(60, max_file_bytes=512)
    disk.remove(wal_path(D, 1))
    with pytest.raises(WalCorruptionError, match="missing"):
        _scan(disk, repair=True)


async def test_a_checksum_valid_frame_out_of_lsn_order_is_corruption() -> None:
    disk = await _written_disk(2)
    path = wal_path(D, 0)
    salt = read_wal_header(disk, path).salt
    # A frame that validates but repeats LSN 2: a bug, never a torn write.
    disk.poke(path, len(disk.read_bytes(path)), bytes(encode_frames([(2, 7, b"dup")], salt)))
    with pytest.raises(WalCorruptionError, match="LSN 2 where 3"):
        _scan(disk, repair=True)


async def test_lsns_must_increase_across_files() -> None:
    disk = await _written_disk(3)
    Wal.create(disk, D, next_lsn=2, file_no=1)  # claims to start below the last LSN
    with pytest.raises(WalCorruptionError, match="does not follow"):
        _scan(disk)


# -- a tolerant scan (recovery of a writer, wal_reader Rule 6) --------------------------------


def _tolerant(fs: Fs, *, repair: bool = False) -> tuple[list[int], list[WalSkip]]:
    skips: list[WalSkip] = []
    lsns = [e.lsn for e in scan_wal(fs, D, repair=repair, on_skip=skips.append)]
    return lsns, skips


async def test_a_tolerant_scan_skips_one_bad_frame_of_an_older_file() -> None:
    disk = await _written_disk(60, max_file_bytes=512)
    victim = next(e for e in scan_wal(disk, D, repair=False) if e.file_no == 1)
    disk.poke(wal_path(D, 1), victim.offset + FRAME_HEADER_SIZE, b"\x00")
    lsns, [skip] = _tolerant(disk, repair=True)
    assert lsns == [n for n in range(1, 61) if n != victim.lsn]
    assert (skip.first_lsn, skip.last_lsn) == (victim.lsn, victim.lsn)
    assert (skip.path, skip.offset) == (wal_path(D, 1), victim.offset)
    assert skip.problem == "bad frame CRC"


async def test_a_tolerant_scan_skips_a_cut_file_and_a_missing_one_up_to_the_next() -> None:
    disk = await _written_disk(60, max_file_bytes=512)
    firsts = [read_wal_header(disk, wal_path(D, n)).first_lsn for n in wal_files(disk, D)]
    disk.open(wal_path(D, 0), write=True).truncate(len(disk.read_bytes(wal_path(D, 0))) - 3)
    disk.remove(wal_path(D, 2))
    lsns, skips = _tolerant(disk, repair=True)
    assert [(s.file_no, s.last_lsn) for s in skips] == [(0, firsts[1] - 1), (2, firsts[3] - 1)]
    assert skips[1].problem == "missing"
    assert lsns == [
        n for n in range(1, 61) if n != firsts[1] - 1 and not firsts[2] <= n < firsts[3]
    ]


async def test_a_tolerant_scan_still_cuts_a_torn_tail_of_the_newest_file() -> None:
    disk = await _written_disk(3)
    path = wal_path(D, 0)
    last = list(scan_wal(disk, D, repair=False))[-1]
    disk.poke(path, last.offset + FRAME_HEADER_SIZE, b"\xee")
    lsns, skips = _tolerant(disk, repair=True)
    assert (lsns, skips) == ([1, 2], [])
    assert len(disk.read_bytes(path)) == last.offset


async def test_a_tolerant_scan_keeps_frames_after_damage_in_the_newest_file() -> None:
    disk = await _written_disk(5)
    path = wal_path(D, 0)
    second = list(scan_wal(disk, D, repair=False))[1]
    disk.poke(path, second.offset, b"\xff\xff\xff\x7f")  # a garbage length
    lsns, [skip] = _tolerant(disk, repair=True)
    assert lsns == [1, 3, 4, 5]
    assert (skip.first_lsn, skip.last_lsn) == (2, 2)


# -- from_lsn and trim ---------------------------------------------------------------------


async def test_scan_from_lsn_skips_whole_files_below_it() -> None:
    disk = await _written_disk(100, max_file_bytes=600)
    files = wal_files(disk, D)
    assert len(files) > 4
    # Rot in a file wholly below from_lsn is never read.
    first_of_2 = read_wal_header(disk, wal_path(D, 2)).first_lsn
    disk.poke(wal_path(D, 0), HEADER_SIZE + 3, b"\xee")
    assert [lsn for lsn, _, _ in _scan(disk, from_lsn=first_of_2 + 1)] == list(
        range(first_of_2 + 1, 101)
    )
    assert _scan(disk, from_lsn=101) == []


async def test_trim_removes_only_files_wholly_below_the_lsn() -> None:
    disk = _disk()
    wal = Wal.create(disk, D, next_lsn=1, file_no=0, max_file_bytes=600)
    async with trio.open_nursery() as nursery:
        await nursery.start(wal.run)
        await _write_each(wal, [_payload(i) for i in range(100)])
        files = wal_files(disk, D)
        firsts = [read_wal_header(disk, wal_path(D, n)).first_lsn for n in files]
        assert wal.trim(firsts[1] - 1) == 0  # file 0 still holds LSN firsts[1]-1
        assert wal.trim(firsts[1]) == 1
        assert wal_files(disk, D) == files[1:]
        assert wal.trim(firsts[3]) == 2
        assert wal.trim(10_000) == len(files) - 4  # everything but the current file
        assert wal_files(disk, D) == [wal.file_no]
        assert wal.trim(10_000) == 0
        await _write_all(wal, [b"more"])
        await wal.aclose()
    disk.crash(seed=5)  # removals were durable, one by one
    lsns = [lsn for lsn, _, _ in _scan(disk)]
    assert lsns == list(range(firsts[-1], 102))


async def test_trim_knows_files_from_before_a_restart() -> None:
    disk = await _written_disk(60, max_file_bytes=600)
    before = wal_files(disk, D)
    wal = Wal.create(disk, D, next_lsn=61, file_no=before[-1] + 1)
    assert wal.trim(61) == len(before)
    assert wal_files(disk, D) == [before[-1] + 1]


def test_header_layout_is_stable() -> None:
    disk = _disk()
    Wal.create(disk, D, next_lsn=42, file_no=0x1234)
    raw = disk.read_bytes(wal_path(D, 0x1234))
    assert len(raw) == HEADER_SIZE == 40
    magic, version, size, _salt, file_no, first = struct.unpack_from("<8sHHIQQ", raw)
    assert (magic, version, size, file_no, first) == (b"TOPICWAL", 3, 40, 0x1234, 42)


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_version_file_is_still_read(version: int) -> None:
    """Version 2 only adds the HEAD entry (entries.py rule 5), version 3 the
    APPEND_PRODUCER and PRODUCER entries (rule 6): a directory written by either
    recovers unchanged."""
    disk = _disk()
    frames = encode_frames([(1, 3, b"old")], 0x12345678)
    head = bytearray.fromhex(
        f"544f50494357414c0{version}0028007856341205000000000000000100000000000000000000000000000000"
    )[:HEADER_SIZE]
    head[36:40] = struct.pack("<I", crc32c(bytes(head[:36])))
    path = wal_path(D, 5)
    disk.open(path, write=True, create=True).write_at(0, bytes(head) + bytes(frames))
    assert read_wal_header(disk, path).version == version
    assert _scan(disk) == [(1, 3, b"old")]


@pytest.mark.parametrize("err", [errno.EIO, errno.ENOSPC])
async def test_scan_surfaces_read_errors(err: int) -> None:
    disk = await _written_disk(2)
    fault = FaultFs(disk, op="open", at=1, errno=err)
    with pytest.raises(OSError, match="injected"):
        _scan(fault)


def test_golden_vectors() -> None:
    """Format version 3 bytes; any change here must bump WAL_FORMAT_VERSION."""
    frames = encode_frames([(1, 7, b"abc"), (2, 0, b"")], 0x12345678)
    assert bytes(frames).hex() == (
        "0300000057528d2301000000000000000700000061626300000000e7f304ad020000000000000000000000"
    )
    assert encode_header(5, 0x12345678, 42).hex() == (
        "544f50494357414c030028007856341205000000000000002a0000000000000000000000b8986b6f"
    )
    # The APPEND_PRODUCER entry version 3 added (entries.py rule 6): topic 3, salt,
    # producer "p" at epoch 7, key "k", then the frames (here two stand-in bytes).
    claim = ProducerClaim("p", 7)
    assert (entries.APPEND_PRODUCER, encode_append_producer(3, 0x12345678, claim, "k", b"FR")) == (
        10,
        bytes.fromhex("030000000000000078563412070000000000000001000100706b4652"),
    )
    # The HEAD entry version 2 added (entries.py rule 5): topic 3's head is exactly 4101.
    assert (entries.HEAD, entries.encode_u64s(3, 4101).hex()) == (
        9,
        "03000000000000000510000000000000",
    )
