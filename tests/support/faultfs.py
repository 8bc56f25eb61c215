"""FaultFs: an Fs wrapper that fails one class of call with an errno (EIO, ENOSPC, ...).

Role: fault-injection tests (tests/crash) wrap a RealFs or FakeDisk and check that the
storage layer turns a failed write or fsync into an error for everything that depended
on it, and never into an acknowledgement.

Rule 1: calls are counted per op class ("write_at", "sync_data", "sync_all", "truncate",
  "open", "rename", "remove", "sync_dir"), across all handles of this FaultFs, 1-based.
Rule 2: the ``at``-th call of ``op`` raises ``OSError(errno)`` *instead of* reaching the
  inner Fs (a failed write leaves nothing behind; a failed fsync makes nothing durable).
  With ``always=True`` every later call of that class fails too.
Rule 3: every other call passes straight through.
"""

from __future__ import annotations

import errno as _errno
import os

from topics._storage.fs import Buffer, DirLock, FileHandle, Fs

__all__ = ["OPS", "FaultFs"]

OPS = ("write_at", "sync_data", "sync_all", "truncate", "open", "rename", "remove", "sync_dir")


class _FaultHandle:
    def __init__(self, fault: FaultFs, inner: FileHandle) -> None:
        self._fault = fault
        self._inner = inner

    def write_at(self, offset: int, data: Buffer) -> None:
        self._fault._maybe_fail("write_at")
        self._inner.write_at(offset, data)

    def read_at(self, offset: int, size: int) -> bytes:
        return self._inner.read_at(offset, size)

    def size(self) -> int:
        return self._inner.size()

    def truncate(self, size: int) -> None:
        self._fault._maybe_fail("truncate")
        self._inner.truncate(size)

    def sync_data(self) -> None:
        self._fault._maybe_fail("sync_data")
        self._inner.sync_data()

    def sync_all(self) -> None:
        self._fault._maybe_fail("sync_all")
        self._inner.sync_all()

    def close(self) -> None:
        self._inner.close()


class FaultFs:
    """Wrap ``inner`` and fail the ``at``-th call of ``op`` with ``OSError(errno)``.

    Args:
        inner: the Fs that does the real work.
        op: one of :data:`OPS`.
        at: 1-based index of the first failing call of that op class.
        errno: the errno to raise (EIO by default; ENOSPC for a full disk).
        always: keep failing every later call of ``op`` too.
    """

    def __init__(
        self, inner: Fs, *, op: str, at: int, errno: int = _errno.EIO, always: bool = False
    ) -> None:
        if op not in OPS:
            raise ValueError(f"unknown op {op!r}; expected one of {OPS}")
        if at < 1:
            raise ValueError("at is 1-based")
        self.inner = inner
        self.op = op
        self.at = at
        self.errno = errno
        self.always = always
        self.calls: dict[str, int] = dict.fromkeys(OPS, 0)
        self.fired = 0

    def _maybe_fail(self, op: str) -> None:
        self.calls[op] += 1
        if op != self.op:
            return
        n = self.calls[op]
        if n == self.at or (self.always and n > self.at):
            self.fired += 1
            raise OSError(self.errno, f"injected: {os.strerror(self.errno)} ({op} #{n})")

    def open(self, path: str, *, write: bool = False, create: bool = False) -> FileHandle:
        self._maybe_fail("open")
        return _FaultHandle(self, self.inner.open(path, write=write, create=create))

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def listdir(self, path: str) -> list[str]:
        return self.inner.listdir(path)

    def makedirs(self, path: str) -> None:
        self.inner.makedirs(path)

    def rename(self, src: str, dst: str) -> None:
        self._maybe_fail("rename")
        self.inner.rename(src, dst)

    def remove(self, path: str) -> None:
        self._maybe_fail("remove")
        self.inner.remove(path)

    def sync_dir(self, path: str) -> None:
        self._maybe_fail("sync_dir")
        self.inner.sync_dir(path)

    def lock(self, path: str) -> DirLock:
        return self.inner.lock(path)

    def free_bytes(self, path: str) -> int:
        return self.inner.free_bytes(path)
