"""The bounded handle cache (topics/_storage/handles.py) and segment writers that use it.

A counting Fs wraps the fake disk and tracks how many handles are open at once, so the
bound is checked on what actually reaches the seam, not on the cache's own bookkeeping.
"""

from __future__ import annotations

import errno
from typing import Any

import pytest
import ujson

from tests.support.fakedisk import FakeDisk
from tests.support.faultfs import FaultFs
from topics._clock import ManualClock
from topics._core import encode_batch
from topics._storage.fs import Buffer, DirLock, FileHandle, Fs
from topics._storage.handles import HandleCache, out_of_descriptors
from topics._storage.segment_edits import remove_segment
from topics._storage.segment_files import (
    HEADER_SIZE,
    SegmentWriter,
    open_for_append,
    read_segment,
    segment_path,
)
from topics.engine import open_engine
from topics.settings import Limits

D = "/seg"
SALT = 0x5EED
LIMITS = Limits().encode_limits


def _frames(first_seq: int, n: int) -> bytes:
    records = [{"data": {"n": first_seq + i}} for i in range(n)]
    return encode_batch(records, first_seq, 1_700_000_000_000, None, SALT, LIMITS, ujson.dumps)[0]


class _CountedHandle:
    def __init__(self, fs: CountingFs, inner: FileHandle) -> None:
        self._fs = fs
        self._inner = inner
        self.closed = False

    def write_at(self, offset: int, data: Buffer) -> None:
        self._inner.write_at(offset, data)

    def read_at(self, offset: int, size: int) -> bytes:
        return self._inner.read_at(offset, size)

    def size(self) -> int:
        return self._inner.size()

    def truncate(self, size: int) -> None:
        self._inner.truncate(size)

    def sync_data(self) -> None:
        self._inner.sync_data()

    def sync_all(self) -> None:
        self._inner.sync_all()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._fs.open_now -= 1
        self._inner.close()


class CountingFs:
    """Passes every call to ``inner``; counts opens and the most handles open at once."""

    def __init__(self, inner: Fs) -> None:
        self.inner = inner
        self.opens = 0
        self.open_now = 0
        self.open_peak = 0

    def open(self, path: str, *, write: bool = False, create: bool = False) -> FileHandle:
        handle = _CountedHandle(self, self.inner.open(path, write=write, create=create))
        self.opens += 1
        self.open_now += 1
        self.open_peak = max(self.open_peak, self.open_now)
        return handle

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def listdir(self, path: str) -> list[str]:
        return self.inner.listdir(path)

    def makedirs(self, path: str) -> None:
        self.inner.makedirs(path)

    def rename(self, src: str, dst: str) -> None:
        self.inner.rename(src, dst)

    def remove(self, path: str) -> None:
        self.inner.remove(path)

    def sync_dir(self, path: str) -> None:
        self.inner.sync_dir(path)

    def lock(self, path: str) -> DirLock:
        return self.inner.lock(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # seam calls this test does not count pass through


def _disk_with_files(*names: str) -> tuple[FakeDisk, CountingFs]:
    disk = FakeDisk()
    disk.makedirs(D)
    for name in names:
        h = disk.open(f"{D}/{name}", create=True)
        h.write_at(0, name.encode())
        h.close()
    return disk, CountingFs(disk)


def test_a_cached_handle_is_reused_without_another_open() -> None:
    _, fs = _disk_with_files("a")
    cache = HandleCache(fs, 4)
    first = cache.acquire(f"{D}/a")
    cache.release(f"{D}/a")
    assert cache.acquire(f"{D}/a") is first
    cache.release(f"{D}/a")
    stats = cache.statistics()
    assert (fs.opens, stats.hits_total, stats.misses_total, stats.open) == (1, 1, 1, 1)


def test_the_least_recently_used_handle_is_evicted_and_closed() -> None:
    _, fs = _disk_with_files("a", "b", "c")
    cache = HandleCache(fs, 2)
    a = cache.acquire(f"{D}/a")
    cache.release(f"{D}/a")
    cache.acquire(f"{D}/b")
    cache.release(f"{D}/b")
    cache.acquire(f"{D}/a")  # a is now the most recently used: b goes next
    cache.release(f"{D}/a")
    cache.acquire(f"{D}/c")
    cache.release(f"{D}/c")
    assert f"{D}/b" not in cache
    assert f"{D}/a" in cache
    assert isinstance(a, _CountedHandle)
    assert not a.closed
    assert (fs.open_now, cache.statistics().evictions_total) == (2, 1)


def test_a_handle_reopened_after_eviction_reads_the_same_bytes() -> None:
    _, fs = _disk_with_files("a", "b")
    cache = HandleCache(fs, 1)
    before = cache.acquire(f"{D}/a").read_at(0, 100)
    cache.release(f"{D}/a")
    cache.acquire(f"{D}/b")
    cache.release(f"{D}/b")
    assert f"{D}/a" not in cache
    after = cache.acquire(f"{D}/a").read_at(0, 100)
    assert before == after == b"a"
    assert fs.opens == 3


def test_pinned_handles_are_never_evicted() -> None:
    _, fs = _disk_with_files("a", "b", "c")
    cache = HandleCache(fs, 1)
    handles = [cache.acquire(f"{D}/{n}") for n in "abc"]
    assert len(cache) == 3  # over capacity only by what is in use right now
    handles[0].read_at(0, 1)  # none of them was closed under its user
    for n in "abc":
        cache.release(f"{D}/{n}")
    assert len(cache) == fs.open_now == 1


def test_a_read_only_handle_is_reopened_for_a_writer() -> None:
    disk, fs = _disk_with_files("a")
    cache = HandleCache(fs, 2)
    cache.acquire(f"{D}/a")
    cache.release(f"{D}/a")
    cache.acquire(f"{D}/a", write=True).write_at(0, b"A")
    cache.release(f"{D}/a")
    assert disk.read_bytes(f"{D}/a") == b"A"
    assert (fs.opens, fs.open_now) == (2, 1)


def test_discard_and_close_release_every_descriptor() -> None:
    _, fs = _disk_with_files("a", "b")
    cache = HandleCache(fs, 4)
    cache.acquire(f"{D}/a")  # pinned: discard closes it anyway
    cache.discard(f"{D}/a")
    cache.acquire(f"{D}/b")
    cache.release(f"{D}/b")
    cache.close()
    assert fs.open_now == len(cache) == 0


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity"):
        HandleCache(FakeDisk(), 0)


def test_out_of_descriptors_means_emfile_or_enfile_only() -> None:
    assert out_of_descriptors(OSError(errno.EMFILE, "x"))
    assert out_of_descriptors(OSError(errno.ENFILE, "x"))
    assert not out_of_descriptors(OSError(errno.EIO, "x"))
    assert not out_of_descriptors(ValueError("x"))


# -- segment writers through the cache ----------------------------------------------------


def _writers(fs: Fs, cache: HandleCache, n: int) -> list[SegmentWriter]:
    fs.makedirs(D)
    return [
        SegmentWriter.create(
            fs, segment_path(D, t, 1), topic_id=t, base_seq=1, salt=SALT, handles=cache
        )
        for t in range(1, n + 1)
    ]


def test_many_segment_writers_hold_no_more_handles_than_the_bound() -> None:
    disk = FakeDisk()
    fs = CountingFs(disk)
    cache = HandleCache(fs, 8)
    fs.makedirs(D)
    writers = []
    for t in range(1, 301):  # as a checkpoint does: create, append, sync, next
        w = SegmentWriter.create(
            fs, segment_path(D, t, 1), topic_id=t, base_seq=1, salt=SALT, handles=cache
        )
        w.append(_frames(1, 2))
        w.sync()
        writers.append(w)
    for w in writers:  # a second round reopens what was evicted
        w.append(_frames(3, 1))
        w.sync()
    assert fs.open_peak <= 8  # an acquire makes room before it opens
    assert len(cache) <= 8
    assert fs.opens > 300  # the second round did reopen evicted files
    for w in writers:
        frames = read_segment(disk, w.path, max_length=w.synced_length).frames
        assert frames == _frames(1, 2) + _frames(3, 1)


def test_a_writer_with_unsynced_bytes_keeps_its_handle_through_evictions() -> None:
    disk = FakeDisk()
    fs = CountingFs(disk)
    cache = HandleCache(fs, 2)
    dirty, *others = _writers(fs, cache, 6)
    dirty.sync()
    dirty.append(_frames(1, 3))  # unsynced from here on
    for w in others:
        w.append(_frames(1, 1))
        w.sync()
    assert dirty.path in cache  # never closed with bytes the next fsync must cover
    opens = fs.opens
    assert dirty.sync() == len(_frames(1, 3))
    assert fs.opens == opens  # synced through the very handle that wrote them
    assert read_segment(disk, dirty.path, max_length=dirty.synced_length).frames == _frames(1, 3)


def test_a_reopened_writer_appends_through_the_cache() -> None:
    disk = FakeDisk()
    cache = HandleCache(disk, 1)
    (w,) = _writers(disk, cache, 1)
    w.append(_frames(1, 2))
    w.sync()
    w.close()
    assert w.path not in cache
    again = open_for_append(disk, w.path, durable_length=w.synced_length, handles=cache)
    again.append(_frames(3, 2))
    again.sync()
    assert read_segment(disk, w.path, max_length=again.synced_length).frames == _frames(1, 4)
    remove_segment(disk, w.path, handles=cache)
    assert len(cache) == 0


def test_an_open_that_runs_out_of_descriptors_leaves_the_writer_usable() -> None:
    disk = FakeDisk()
    fault = FaultFs(disk, op="open", at=10**9, errno=errno.EMFILE)
    cache = HandleCache(fault, 1)
    first, second = _writers(fault, cache, 2)
    first.append(_frames(1, 1))
    first.sync()
    second.sync()  # evicts first's handle
    fault.at = fault.calls["open"] + 1
    with pytest.raises(OSError) as caught:
        first.append(_frames(2, 1))
    assert out_of_descriptors(caught.value)
    first.append(_frames(2, 1))  # descriptors are back: nothing was half-written
    first.sync()
    assert read_segment(disk, first.path, max_length=first.synced_length).frames == _frames(1, 2)


def test_a_failed_write_closes_the_writers_handle() -> None:
    disk = FakeDisk()
    fault = FaultFs(disk, op="write_at", at=10**9)
    cache = HandleCache(fault, 4)
    (w,) = _writers(fault, cache, 1)
    w.sync()
    fault.at = fault.calls["write_at"] + 1
    with pytest.raises(OSError, match="injected"):
        w.append(_frames(1, 1))
    assert w.path not in cache  # the next writer gets a fresh descriptor
    with pytest.raises(OSError, match="failed earlier"):
        w.append(_frames(1, 1))
    assert disk.open(w.path).size() == HEADER_SIZE


async def test_the_engine_bounds_segment_handles_by_its_max_open_files_limit() -> None:
    fs = CountingFs(FakeDisk())
    limits = Limits(max_open_files=4)
    async with open_engine(
        "/data", clock=ManualClock(1_700_000_000_000), fs=fs, limits=limits
    ) as engine:
        assert engine._store is not None
        assert engine._store.handles.capacity == 4
        for i in range(50):
            await engine.write(f"t{i}", [{"data": i}])
        await engine._store.checkpoint(engine._registry)
        assert len(engine._store.handles) <= 4
    # 4 segment handles, the WAL file, and one one-shot open (a manifest or an index).
    assert fs.open_peak <= 6
    assert fs.open_now == 0  # closing the engine closed every handle
