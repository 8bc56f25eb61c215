"""The Fs seam: every file operation of the storage layer goes through this interface.

Role: the WAL, segment files, the manifest and recovery never call ``os.open``,
``os.fsync`` or ``open()`` on data files themselves; they take an :class:`Fs`. Production
uses :class:`RealFs`; crash tests swap in ``tests.support.fakedisk.FakeDisk`` (which models
what survives a power loss) or ``tests.support.faultfs.FaultFs`` (which injects EIO/ENOSPC).
(docs/STORAGE_FORMATS.md, "The Fs seam", states the same rules for readers of the format.)

Invariants every implementation keeps:

Rule 1: ``write_at`` writes every byte or raises; a short write is retried, never
  reported as success. Nothing written is durable until ``sync_data``/``sync_all``.
Rule 2: directory changes (create, rename, remove) are durable only after ``sync_dir``
  of the parent directory. ``rename`` atomically replaces its destination.
Rule 3: ``read_at`` may return fewer bytes than asked only at end of file.
Rule 4: ``lock`` never blocks: it takes the lock or raises :class:`DataDirLockedError`.
Rule 5: errors are ``OSError`` with the errno of the failing call; callers decide policy
  (the WAL, for instance, never retries a failed fsync). :func:`is_no_space` names the
  errnos of a full disk or quota (ENOSPC, EDQUOT): the only write errors worth retrying.
Rule 6: ``free_bytes`` is what an unprivileged writer can still allocate on the file
  system holding a path (``statvfs``: ``f_bavail * f_frsize``). It is a system call:
  callers cache it (``topics._storage.space``), never ask once per write.
"""

from __future__ import annotations

import errno as _errno
import fcntl
import os
from typing import Protocol

__all__ = [
    "Buffer",
    "DataDirLockedError",
    "DirLock",
    "FileHandle",
    "Fs",
    "RealFs",
    "StorageCorruptionError",
    "is_no_space",
]

Buffer = bytes | bytearray | memoryview

_NO_SPACE = frozenset({_errno.ENOSPC, getattr(_errno, "EDQUOT", _errno.ENOSPC)})


def is_no_space(exc: BaseException) -> bool:
    """True for the errors of a full disk or an exhausted quota (ENOSPC, EDQUOT)."""
    return isinstance(exc, OSError) and exc.errno in _NO_SPACE


class DataDirLockedError(OSError):
    """Another process (or another open in this one) holds the data directory lock.

    Args:
        path: the lock file that is held.
    """

    def __init__(self, path: str) -> None:
        super().__init__(
            _errno.EWOULDBLOCK,
            f"data directory lock {path} is held by another process; "
            "stop the other topics instance or open the directory read-only with topics.Reader",
            path,
        )
        self.path = path


class StorageCorruptionError(Exception):
    """Bytes on disk that were once durable no longer validate (never a torn tail).

    Args:
        message: what failed to validate and what to do next.
        path: the file holding the bad bytes.
        offset: byte offset of the first bad byte or record in ``path`` (-1 if unknown).
    """

    def __init__(self, message: str, *, path: str, offset: int = -1) -> None:
        super().__init__(f"{message} ({path} at offset {offset})")
        self.path = path
        self.offset = offset


class FileHandle(Protocol):
    """An open file addressed by absolute offsets (no shared file position)."""

    def write_at(self, offset: int, data: Buffer) -> None:
        """Write all of ``data`` at ``offset`` (looping on short writes)."""
        ...

    def read_at(self, offset: int, size: int) -> bytes:
        """Read up to ``size`` bytes at ``offset``; fewer only at end of file."""
        ...

    def size(self) -> int:
        """Current file size in bytes."""
        ...

    def truncate(self, size: int) -> None:
        """Cut (or zero-extend) the file to ``size`` bytes."""
        ...

    def sync_data(self) -> None:
        """fdatasync: make the file's bytes (and the size needed to read them) durable."""
        ...

    def sync_all(self) -> None:
        """fsync: make the file's bytes and all of its metadata durable."""
        ...

    def close(self) -> None:
        """Release the handle; closing twice is harmless."""
        ...


class DirLock(Protocol):
    """An exclusive lock on a data directory, held until released or the process dies."""

    def release(self) -> None:
        """Drop the lock; releasing twice is harmless."""
        ...


class Fs(Protocol):
    """The file system as the storage layer sees it. Paths are plain ``str``."""

    def open(self, path: str, *, write: bool = False, create: bool = False) -> FileHandle:
        """Open ``path`` for reading (and writing when ``write``); ``create`` implies write
        access and creates the file when missing. Raises FileNotFoundError otherwise."""
        ...

    def exists(self, path: str) -> bool: ...

    def listdir(self, path: str) -> list[str]:
        """Entry names in ``path``, sorted."""
        ...

    def makedirs(self, path: str) -> None:
        """Create ``path`` and missing parents; an existing directory is fine."""
        ...

    def rename(self, src: str, dst: str) -> None:
        """Atomically move ``src`` to ``dst``, replacing ``dst`` if present."""
        ...

    def remove(self, path: str) -> None: ...

    def sync_dir(self, path: str) -> None:
        """Make creations, renames and removals of entries in directory ``path`` durable."""
        ...

    def lock(self, path: str) -> DirLock:
        """Take the exclusive lock file ``path`` (created when missing) without blocking.

        Raises:
            DataDirLockedError: the lock is held elsewhere.
        """
        ...

    def free_bytes(self, path: str) -> int:
        """Bytes still available to this process on the file system holding ``path``."""
        ...


class _RealFileHandle:
    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def write_at(self, offset: int, data: Buffer) -> None:
        view = memoryview(data).cast("B")
        while view:
            n = os.pwrite(self._fd, view, offset)
            if n <= 0:  # pwrite never returns 0 for a non-empty buffer; guard the loop anyway
                raise OSError(_errno.EIO, "pwrite wrote no bytes")
            view = view[n:]
            offset += n

    def read_at(self, offset: int, size: int) -> bytes:
        first = os.pread(self._fd, size, offset)
        if len(first) == size or not first:
            return first
        parts = [first]
        got = len(first)
        while got < size:
            more = os.pread(self._fd, size - got, offset + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)

    def sync_data(self) -> None:
        if hasattr(os, "fdatasync"):
            os.fdatasync(self._fd)
        else:  # pragma: no cover - macOS has no fdatasync
            os.fsync(self._fd)

    def sync_all(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


class _RealDirLock:
    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            # Closing the descriptor drops the flock; unlocking first keeps the order
            # obvious if the fd was ever duplicated.
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


class RealFs:
    """The operating system's file system (os.pread/os.pwrite/os.fdatasync/flock)."""

    def open(self, path: str, *, write: bool = False, create: bool = False) -> FileHandle:
        flags = os.O_CLOEXEC
        if write or create:
            flags |= os.O_RDWR
        else:
            flags |= os.O_RDONLY
        if create:
            flags |= os.O_CREAT
        return _RealFileHandle(os.open(path, flags, 0o644))

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def remove(self, path: str) -> None:
        os.remove(path)

    def sync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def lock(self, path: str) -> DirLock:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        locked = False
        try:
            # flock (not fcntl record locks): it belongs to this open file description,
            # so a second open of the same file in this process conflicts too, and the
            # kernel drops it when the process dies, so a crash never leaves it stuck.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            locked = True
        except BlockingIOError:
            raise DataDirLockedError(path) from None
        finally:
            if not locked:
                os.close(fd)
        return _RealDirLock(fd)

    def free_bytes(self, path: str) -> int:
        st = os.statvfs(path)
        # f_bavail, not f_bfree: the blocks reserved for root are not ours to count on.
        return st.f_bavail * st.f_frsize
