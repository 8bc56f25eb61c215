"""The Fs seam: RealFs and FakeDisk honour the same contract; FakeDisk models power loss;
FaultFs fails exactly the call it was told to."""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.fakedisk import FakeDisk, SimulatedCrash
from tests.support.faultfs import FaultFs
from topics._storage.fs import DataDirLockedError, Fs, RealFs


@pytest.fixture(params=["real", "fake"])
def any_fs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Fs, str]]:
    if request.param == "real":
        yield RealFs(), str(tmp_path)
    else:
        disk = FakeDisk()
        disk.makedirs("/data")
        yield disk, "/data"


# -- the shared contract ------------------------------------------------------------------


def test_write_read_size_truncate_round_trip(any_fs: tuple[Fs, str]) -> None:
    fs, root = any_fs
    h = fs.open(f"{root}/f", create=True)
    h.write_at(0, b"hello")
    h.write_at(5, bytearray(b" world"))
    h.write_at(0, memoryview(b"J"))
    assert h.size() == 11
    assert h.read_at(0, 11) == b"Jello world"
    assert h.read_at(6, 100) == b"world"  # short only at end of file
    assert h.read_at(50, 10) == b""
    h.truncate(5)
    h.sync_data()
    h.sync_all()
    assert h.read_at(0, 100) == b"Jello"
    h.write_at(8, b"!")  # writing past the end leaves a hole of zeros
    assert h.read_at(0, 100) == b"Jello\x00\x00\x00!"
    h.close()
    h.close()  # closing twice is harmless


def test_open_missing_file_without_create_raises(any_fs: tuple[Fs, str]) -> None:
    fs, root = any_fs
    with pytest.raises(FileNotFoundError):
        fs.open(f"{root}/missing")
    with pytest.raises(FileNotFoundError):
        fs.open(f"{root}/nodir/f", create=True)


def test_read_only_handle_rejects_writes(any_fs: tuple[Fs, str]) -> None:
    fs, root = any_fs
    fs.open(f"{root}/f", create=True).close()
    h = fs.open(f"{root}/f")
    with pytest.raises(OSError, match=r"."):
        h.write_at(0, b"x")
    h.close()


def test_directory_operations(any_fs: tuple[Fs, str]) -> None:
    fs, root = any_fs
    fs.makedirs(f"{root}/a/b")
    fs.makedirs(f"{root}/a/b")  # exist_ok
    for name in ("c", "a2", "b1"):
        h = fs.open(f"{root}/a/{name}", create=True)
        h.write_at(0, name.encode())
        h.close()
    assert fs.listdir(f"{root}/a") == ["a2", "b", "b1", "c"]
    assert fs.exists(f"{root}/a/c")
    assert fs.exists(f"{root}/a/b")
    fs.rename(f"{root}/a/c", f"{root}/a/a2")  # replaces the destination atomically
    assert fs.listdir(f"{root}/a") == ["a2", "b", "b1"]
    assert fs.open(f"{root}/a/a2").read_at(0, 10) == b"c"
    fs.remove(f"{root}/a/b1")
    fs.sync_dir(f"{root}/a")
    assert not fs.exists(f"{root}/a/b1")
    with pytest.raises(FileNotFoundError):
        fs.remove(f"{root}/a/b1")
    with pytest.raises(FileNotFoundError):
        fs.rename(f"{root}/a/nope", f"{root}/a/x")


def test_lock_is_exclusive_and_names_the_path(any_fs: tuple[Fs, str]) -> None:
    fs, root = any_fs
    lock = fs.lock(f"{root}/LOCK")
    with pytest.raises(DataDirLockedError) as info:
        fs.lock(f"{root}/LOCK")
    assert info.value.path == f"{root}/LOCK"
    assert f"{root}/LOCK" in str(info.value)
    assert isinstance(info.value, OSError)
    lock.release()
    lock.release()  # harmless
    fs.lock(f"{root}/LOCK").release()


def test_real_fs_lock_file_is_created(tmp_path: Path) -> None:
    lock = RealFs().lock(str(tmp_path / "LOCK"))
    assert (tmp_path / "LOCK").exists()
    lock.release()


# -- FakeDisk: what survives a power loss -------------------------------------------------


def _disk() -> FakeDisk:
    disk = FakeDisk()
    disk.makedirs("/d")
    return disk


def _durable_file(disk: FakeDisk, path: str, data: bytes) -> None:
    h = disk.open(path, create=True)
    h.write_at(0, data)
    h.sync_data()
    h.close()
    disk.sync_dir("/d")


def test_unsynced_writes_are_lost_and_synced_writes_kept() -> None:
    disk = _disk()
    _durable_file(disk, "/d/f", b"durable")
    h = disk.open("/d/f", write=True)
    h.write_at(7, b"-pending")
    assert disk.read_bytes("/d/f") == b"durable-pending"
    assert disk.durable_bytes("/d/f") == b"durable"
    disk.crash(torn=False)
    assert disk.read_bytes("/d/f") == b"durable"
    h = disk.open("/d/f", write=True)
    h.write_at(7, b"+synced")
    h.sync_all()
    disk.crash(seed=1)
    assert disk.read_bytes("/d/f") == b"durable+synced"


def test_unsynced_truncate_is_undone_by_a_crash() -> None:
    disk = _disk()
    _durable_file(disk, "/d/f", b"0123456789")
    disk.open("/d/f", write=True).truncate(3)
    disk.crash(torn=False)
    assert disk.read_bytes("/d/f") == b"0123456789"


def test_created_file_survives_only_after_sync_dir() -> None:
    disk = _disk()
    h = disk.open("/d/new", create=True)
    h.write_at(0, b"x")
    h.sync_all()  # the bytes are durable, the name is not
    assert "/d/new" in disk.pending_paths()
    disk.crash(seed=0)
    assert not disk.exists("/d/new")
    h = disk.open("/d/new", create=True)
    h.write_at(0, b"x")
    h.sync_all()
    disk.sync_dir("/d")
    disk.crash(seed=0)
    assert disk.read_bytes("/d/new") == b"x"


def test_rename_and_remove_are_durable_only_after_sync_dir() -> None:
    disk = _disk()
    _durable_file(disk, "/d/old", b"old")
    _durable_file(disk, "/d/tmp", b"new")
    disk.rename("/d/tmp", "/d/old")
    disk.crash(seed=3)
    assert disk.read_bytes("/d/old") == b"old"
    assert disk.exists("/d/tmp")
    disk.rename("/d/tmp", "/d/old")
    disk.sync_dir("/d")
    disk.crash(seed=3)
    assert disk.read_bytes("/d/old") == b"new"
    assert not disk.exists("/d/tmp")
    disk.remove("/d/old")
    disk.crash(seed=3)
    assert disk.exists("/d/old")
    disk.remove("/d/old")
    disk.sync_dir("/d")
    disk.crash(seed=3)
    assert not disk.exists("/d/old")


def _torn_image(seed: int) -> bytes:
    disk = _disk()
    _durable_file(disk, "/d/f", b"A" * 16)
    h = disk.open("/d/f", write=True)
    h.write_at(16, b"B" * 16)
    h.write_at(32, bytes(range(1, 65)))  # the last pending write is the one that may tear
    disk.crash(seed=seed)
    return disk.read_bytes("/d/f")


def test_torn_tails_are_deterministic_by_seed_and_vary_across_seeds() -> None:
    images = [_torn_image(seed) for seed in range(64)]
    assert images == [_torn_image(seed) for seed in range(64)]
    kinds = set()
    for image in images:
        assert image[:16] == b"A" * 16  # durable bytes are never touched
        tail = image[16:]
        if not tail:
            kinds.add("dropped")
            continue
        # An earlier pending write never lands: its range is a hole of zeros.
        assert tail[:16] == bytes(16)
        landed = tail[16:]
        expected = bytes(range(1, 65))[: len(landed)]
        if landed == expected:
            kinds.add("prefix")
        elif sum(a != b for a, b in zip(landed, expected, strict=True)) == 1:
            kinds.add("garbled")
        else:
            nonzero = landed.rstrip(b"\x00")
            assert expected.startswith(nonzero)
            kinds.add("zero-filled")
    assert kinds == {"dropped", "prefix", "garbled", "zero-filled"}


def test_crash_without_tearing_keeps_exactly_the_durable_image() -> None:
    disk = _disk()
    _durable_file(disk, "/d/f", b"abc")
    disk.open("/d/f", write=True).write_at(3, b"def")
    image = disk.snapshot()
    disk.crash(torn=False)
    assert disk.snapshot() == image == {"/d/f": b"abc"}


def test_crash_after_raises_at_the_nth_mutating_call_and_freezes() -> None:
    disk = _disk()
    start = disk.ops
    disk.crash_after = start + 3
    h = disk.open("/d/f", create=True)  # op 1
    h.write_at(0, b"one")  # op 2
    with pytest.raises(SimulatedCrash):
        h.sync_data()  # op 3: never happens
    with pytest.raises(SimulatedCrash):
        h.write_at(3, b"two")  # frozen: the process is dead
    assert h.read_at(0, 10) == b"one"  # reads still see the frozen state
    disk.crash(torn=False)
    assert not disk.exists("/d/f")  # the name was never synced
    assert not disk.frozen


def test_handles_from_before_a_crash_are_dead() -> None:
    disk = _disk()
    _durable_file(disk, "/d/f", b"x")
    h = disk.open("/d/f", write=True)
    disk.crash(seed=0)
    with pytest.raises(OSError, match="before a crash") as info:
        h.read_at(0, 1)
    assert info.value.errno == errno.EBADF


def test_clone_copies_the_durable_image_only() -> None:
    disk = _disk()
    _durable_file(disk, "/d/f", b"kept")
    disk.open("/d/f", write=True).write_at(4, b"lost")
    other = disk.clone()
    assert other.read_bytes("/d/f") == b"kept"
    other.open("/d/f", write=True).write_at(0, b"K")
    assert disk.read_bytes("/d/f") == b"keptlost"  # independent copies


def test_locks_vanish_with_the_process() -> None:
    disk = _disk()
    disk.lock("/d/LOCK")
    disk.crash(seed=0)
    disk.lock("/d/LOCK").release()


# -- FaultFs ----------------------------------------------------------------------------


def test_fault_fs_fails_the_nth_call_of_one_op_once() -> None:
    disk = _disk()
    fault = FaultFs(disk, op="write_at", at=2, errno=errno.ENOSPC)
    h = fault.open("/d/f", create=True)
    h.write_at(0, b"a")
    with pytest.raises(OSError, match="injected") as info:
        h.write_at(1, b"b")
    assert info.value.errno == errno.ENOSPC
    h.write_at(1, b"c")  # once only
    assert disk.read_bytes("/d/f") == b"ac"  # the failed write never reached the disk
    assert fault.fired == 1
    assert fault.calls["write_at"] == 3


def test_fault_fs_always_keeps_failing() -> None:
    disk = _disk()
    fault = FaultFs(disk, op="sync_data", at=1, always=True)
    h = fault.open("/d/f", create=True)
    for _ in range(3):
        with pytest.raises(OSError, match="injected") as info:
            h.sync_data()
        assert info.value.errno == errno.EIO
    h.sync_all()  # another op class passes through
    assert fault.fired == 3


@pytest.mark.parametrize("op", ["rename", "sync_dir", "open", "truncate", "sync_all", "remove"])
def test_fault_fs_covers_every_op_class(op: str) -> None:
    disk = _disk()
    _durable_file(disk, "/d/f", b"x")
    fault = FaultFs(disk, op=op, at=1)
    calls: dict[str, Callable[[], object]] = {
        "rename": lambda: fault.rename("/d/f", "/d/g"),
        "sync_dir": lambda: fault.sync_dir("/d"),
        "open": lambda: fault.open("/d/f"),
        "truncate": lambda: fault.open("/d/f", write=True).truncate(0),
        "sync_all": lambda: fault.open("/d/f").sync_all(),
        "remove": lambda: fault.remove("/d/f"),
    }
    with pytest.raises(OSError, match="injected"):
        calls[op]()
    assert disk.exists("/d/f")
