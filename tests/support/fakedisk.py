"""FakeDisk: an in-memory Fs that models what survives a power loss.

Role: crash tests run the storage layer against this disk, cut the power at any mutating
call, and reopen from what was durable (tests/crash, STYLE.md §11).

Model (the rules crash tests rely on):

Rule 1: every file (inode) has *current* bytes (what reads see) and *durable* bytes.
  ``write_at`` and ``truncate`` change only the current bytes and are remembered as
  pending; ``sync_data``/``sync_all`` on any handle of the file make the current bytes
  durable.
Rule 2: the directory namespace has a current and a durable view too. Creating, renaming
  and removing an entry changes the current view; ``sync_dir(parent)`` makes the durable
  view of that directory's entries equal to the current one. Directories themselves
  (``makedirs``) are durable at once.
Rule 3: ``crash(seed, torn)`` is a power loss: the durable namespace and durable bytes
  become the whole disk. With ``torn=True`` the LAST pending write of each surviving file
  may additionally land partly: dropped, a prefix kept, a prefix kept with one byte
  garbled, or the written range zero-filled after a prefix (the size grew but the data
  never hit the platter). Which, and how much, is decided by ``random.Random(seed)`` over
  the files in path order, so a seed always tears the same way.
Rule 4: ``ops`` counts mutating calls (open with create, write_at, truncate, sync_data,
  sync_all, makedirs, rename, remove, sync_dir). With ``crash_after = N`` the N-th such
  call raises :class:`SimulatedCrash` *without taking effect* and freezes the disk: every
  later mutating call raises too, so the state is exactly "power lost just before call
  N", and a following ``crash()`` models what the platter kept.
Rule 5: handles opened before a ``crash()`` are dead (EBADF): the process that held them
  is gone.
Rule 6: with ``capacity`` set (bytes; None = unlimited) the disk can fill: the current
  bytes of all files count against it, and a ``write_at`` that would grow them past it
  lands the prefix that fits and then raises ENOSPC, as a real ``pwrite`` loop does (a
  short write, then the error). ``free_bytes`` reports what is left. Raising ``capacity``
  (or truncating, removing) is space coming back.
"""

from __future__ import annotations

import errno
import os
import posixpath
import random
import threading
from dataclasses import dataclass, field

from topics._storage.fs import Buffer, DataDirLockedError, DirLock, FileHandle

__all__ = ["FakeDisk", "SimulatedCrash"]


class SimulatedCrash(Exception):
    """The fake disk lost power at this call (see ``FakeDisk.crash_after``)."""


@dataclass(eq=False)
class _Inode:
    data: bytearray = field(default_factory=bytearray)
    durable: bytes = b""
    # Pending changes since the last sync, oldest first: ("w", offset, bytes) or ("t", size).
    pending: list[tuple[str, int, bytes]] = field(default_factory=list)


def _norm(path: str) -> str:
    return posixpath.normpath(os.path.abspath(path))


class _FakeHandle:
    def __init__(self, disk: FakeDisk, inode: _Inode, path: str, writable: bool) -> None:
        self._disk = disk
        self._inode = inode
        self._path = path
        self._writable = writable
        self._epoch = disk._epoch
        self._closed = False

    def _check(self, write: bool) -> None:
        if self._closed or self._epoch != self._disk._epoch:
            raise OSError(errno.EBADF, "bad file handle (closed, or opened before a crash)")
        if write and not self._writable:
            raise OSError(errno.EBADF, f"{self._path} is open read-only")

    def write_at(self, offset: int, data: Buffer) -> None:
        payload = bytes(data)
        with self._disk._lock:
            self._check(write=True)
            self._disk._mutate("write_at", self._path)
            buf = self._inode.data
            fits = self._disk._room_for(len(buf), offset, len(payload))
            if fits < len(payload):
                payload = payload[:fits]
            if payload:
                if offset > len(buf):
                    buf.extend(bytes(offset - len(buf)))
                buf[offset : offset + len(payload)] = payload
                self._inode.pending.append(("w", offset, payload))
            if fits < len(data):
                raise OSError(errno.ENOSPC, f"No space left on device (fake, {self._path})")

    def read_at(self, offset: int, size: int) -> bytes:
        with self._disk._lock:
            self._check(write=False)
            return bytes(self._inode.data[offset : offset + size])

    def size(self) -> int:
        with self._disk._lock:
            self._check(write=False)
            return len(self._inode.data)

    def truncate(self, size: int) -> None:
        with self._disk._lock:
            self._check(write=True)
            self._disk._mutate("truncate", self._path)
            buf = self._inode.data
            if size < len(buf):
                del buf[size:]
            else:
                buf.extend(bytes(size - len(buf)))
            self._inode.pending.append(("t", size, b""))

    def _sync(self, op: str) -> None:
        with self._disk._lock:
            self._check(write=False)
            self._disk._mutate(op, self._path)
            self._inode.durable = bytes(self._inode.data)
            self._inode.pending.clear()

    def sync_data(self) -> None:
        self._sync("sync_data")

    def sync_all(self) -> None:
        self._sync("sync_all")

    def close(self) -> None:
        self._closed = True


class _FakeLock:
    def __init__(self, disk: FakeDisk, path: str) -> None:
        self._disk = disk
        self._path = path
        self._epoch = disk._epoch

    def release(self) -> None:
        with self._disk._lock:
            if self._epoch == self._disk._epoch:
                self._disk._locks.discard(self._path)


class FakeDisk:
    """An in-memory :class:`~topics._storage.fs.Fs` with pending vs durable state.

    Args:
        crash_after: raise :class:`SimulatedCrash` at this (1-based) mutating call.
    """

    def __init__(self, *, crash_after: int | None = None, capacity: int | None = None) -> None:
        self._lock = threading.RLock()
        self.capacity = capacity
        self._files: dict[str, _Inode] = {}
        self._durable_files: dict[str, _Inode] = {}
        self._dirs: set[str] = {"/"}
        self._locks: set[str] = set()
        self._epoch = 0
        self.ops = 0
        self.crash_after = crash_after
        self.frozen = False
        self.trace: list[tuple[str, str]] = []

    # -- the crash model --------------------------------------------------------------

    def _mutate(self, op: str, path: str) -> None:
        if self.frozen:
            raise SimulatedCrash(f"disk is frozen (power already lost); {op} {path}")
        self.ops += 1
        self.trace.append((op, path))
        if self.crash_after is not None and self.ops >= self.crash_after:
            self.frozen = True
            raise SimulatedCrash(f"simulated power loss at op {self.ops}: {op} {path}")

    def crash(self, seed: int | None = None, *, torn: bool = True) -> None:
        """Lose power: keep only what was durable (plus, when ``torn``, seeded partial
        landings of each file's last pending write). Unfreezes the disk."""
        with self._lock:
            rng = random.Random(seed)
            rebuilt: dict[int, _Inode] = {}
            files: dict[str, _Inode] = {}
            for path in sorted(self._durable_files):
                inode = self._durable_files[path]
                new = rebuilt.get(id(inode))
                if new is None:
                    content = bytearray(inode.durable)
                    if torn and inode.pending and inode.pending[-1][0] == "w":
                        _, offset, data = inode.pending[-1]
                        _land_torn(rng, content, offset, data)
                    new = _Inode(data=content, durable=bytes(content))
                    rebuilt[id(inode)] = new
                files[path] = new
            self._files = files
            self._durable_files = dict(files)
            self._locks.clear()
            self._epoch += 1
            self.frozen = False
            self.crash_after = None

    def snapshot(self) -> dict[str, bytes]:
        """The durable image: {path: durable bytes} of every durably named file."""
        with self._lock:
            return {p: inode.durable for p, inode in sorted(self._durable_files.items())}

    def clone(self) -> FakeDisk:
        """A new disk holding this one's durable image (as after an untorn crash)."""
        with self._lock:
            other = FakeDisk()
            other._dirs = set(self._dirs)
            for path, data in self.snapshot().items():
                inode = _Inode(data=bytearray(data), durable=data)
                other._files[path] = inode
                other._durable_files[path] = inode
            return other

    # -- test helpers (not part of Fs; never counted as ops) --------------------------

    def read_bytes(self, path: str) -> bytes:
        """Current bytes of ``path`` (what a read would see now)."""
        with self._lock:
            return bytes(self._files[_norm(path)].data)

    def durable_bytes(self, path: str) -> bytes | None:
        """Durable bytes of ``path``, or None when its name is not durable."""
        with self._lock:
            inode = self._durable_files.get(_norm(path))
            return None if inode is None else inode.durable

    def poke(self, path: str, offset: int, data: bytes) -> None:
        """Overwrite bytes both currently and durably (bit rot, a bad sector)."""
        with self._lock:
            inode = self._files[_norm(path)]
            end = offset + len(data)
            if end > len(inode.data):
                inode.data.extend(bytes(end - len(inode.data)))
            inode.data[offset:end] = data
            durable = bytearray(inode.durable)
            if end > len(durable):
                durable.extend(bytes(end - len(durable)))
            durable[offset:end] = data
            inode.durable = bytes(durable)

    def pending_paths(self) -> list[str]:
        """Files with unsynced bytes, and names whose directory entry is not durable."""
        with self._lock:
            out = {p for p, i in self._files.items() if i.pending}
            names = set(self._files) | set(self._durable_files)
            out |= {p for p in names if self._files.get(p) is not self._durable_files.get(p)}
            return sorted(out)

    # -- Fs ---------------------------------------------------------------------------

    def open(self, path: str, *, write: bool = False, create: bool = False) -> FileHandle:
        p = _norm(path)
        with self._lock:
            if create:
                self._mutate("open", p)
            if p in self._dirs:
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            inode = self._files.get(p)
            if inode is None:
                if not create or posixpath.dirname(p) not in self._dirs:
                    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
                inode = _Inode()
                self._files[p] = inode
            return _FakeHandle(self, inode, p, writable=write or create)

    def exists(self, path: str) -> bool:
        p = _norm(path)
        with self._lock:
            return p in self._files or p in self._dirs

    def listdir(self, path: str) -> list[str]:
        p = _norm(path)
        with self._lock:
            if p not in self._dirs:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
            names = {posixpath.basename(f) for f in self._files if posixpath.dirname(f) == p}
            names |= {
                posixpath.basename(d) for d in self._dirs if d != p and posixpath.dirname(d) == p
            }
            return sorted(names)

    def makedirs(self, path: str) -> None:
        p = _norm(path)
        with self._lock:
            self._mutate("makedirs", p)
            while p not in self._dirs:
                if p in self._files:
                    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path)
                self._dirs.add(p)
                p = posixpath.dirname(p)

    def rename(self, src: str, dst: str) -> None:
        s, d = _norm(src), _norm(dst)
        with self._lock:
            self._mutate("rename", f"{s} -> {d}")
            if s not in self._files:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), src)
            if posixpath.dirname(d) not in self._dirs:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), dst)
            self._files[d] = self._files.pop(s)

    def remove(self, path: str) -> None:
        p = _norm(path)
        with self._lock:
            self._mutate("remove", p)
            if p not in self._files:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
            del self._files[p]

    def sync_dir(self, path: str) -> None:
        p = _norm(path)
        with self._lock:
            self._mutate("sync_dir", p)
            if p not in self._dirs:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
            for name in set(self._files) | set(self._durable_files):
                if posixpath.dirname(name) != p:
                    continue
                inode = self._files.get(name)
                if inode is None:
                    self._durable_files.pop(name, None)
                else:
                    self._durable_files[name] = inode

    # -- space (Rule 6) -----------------------------------------------------------------

    def used_bytes(self) -> int:
        with self._lock:
            return sum(
                len(inode.data) for inode in {id(i): i for i in self._files.values()}.values()
            )

    def free_bytes(self, path: str) -> int:
        if self.capacity is None:
            return 1 << 50
        return max(0, self.capacity - self.used_bytes())

    def _room_for(self, size: int, offset: int, length: int) -> int:
        """How many of ``length`` bytes at ``offset`` fit in a file of ``size`` bytes."""
        if self.capacity is None:
            return length
        free = self.capacity - self.used_bytes()
        # Overwriting bytes the file already has costs nothing; only growth counts.
        return max(0, min(length, size + free - offset))

    def lock(self, path: str) -> DirLock:
        p = _norm(path)
        with self._lock:
            if p in self._locks:
                raise DataDirLockedError(path)
            self._locks.add(p)
            return _FakeLock(self, p)


def _land_torn(rng: random.Random, content: bytearray, offset: int, data: bytes) -> None:
    """Apply a partial landing of one write onto ``content`` (Rule 3)."""
    mode = rng.randrange(4)
    if mode == 0 or not data:
        return  # the write never reached the platter
    keep = rng.randrange(0, len(data) + 1)
    old_size = len(content)
    # Mode 3: the size grew to cover the whole write but only a prefix of the data landed;
    # the rest reads as zeros where it extends the file (bytes that existed keep their
    # old value: an overwrite never turns old data into zeros).
    end = offset + (len(data) if mode == 3 else keep)
    if end > old_size:
        content.extend(bytes(end - old_size))
    content[offset : offset + keep] = data[:keep]
    if mode == 2 and keep:
        i = offset + rng.randrange(keep)
        content[i] ^= rng.randrange(1, 256)
