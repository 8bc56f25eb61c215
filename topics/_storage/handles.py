"""A bounded LRU cache of open segment file handles.

Role: segment writers (``segment_files.SegmentWriter``) do not own a file descriptor.
They ask this cache for one each time they touch the disk, so the number of descriptors
the store holds is bounded by ``capacity`` (``Limits.max_open_files``), never by the
number of topics. Before it, every active segment kept its descriptor open, and a server
with more topics than ``RLIMIT_NOFILE`` died at the next checkpoint with EMFILE.
(STORAGE_FORMATS.md, "Segments", "Open handles"; the setting: OPERATIONS.md, "Limits
and hostile clients".)

Rule 1: every open goes through the ``Fs`` seam; the cache adds no file operation of
  its own besides ``open`` and ``close``.
Rule 2: the cache holds at most ``capacity`` handles plus the ones pinned right now.
  ``acquire`` pins a handle and ``release`` unpins it; only unpinned handles are evicted
  (least recently used first). An acquire makes room before it opens, so the store, which
  pins one segment at a time, never holds more than ``capacity``.
Rule 3: eviction never closes a handle that holds unsynced bytes: a writer keeps its
  handle pinned from its first unsynced write until a sync succeeds (or it is closed).
  So closing an evicted handle loses nothing, and an fsync error is always reported to
  the handle that did the writes (fsyncgate: a later descriptor may never see it).
Rule 4: ``discard`` closes a path's handle at once, pinned or not. It is called before
  a file is removed or recreated (a cached handle must never outlive its inode's name)
  and after a failed write or sync (the next open gets a fresh descriptor).
Rule 5: a handle opened read-only is reopened for writing when a writer asks for it.
Rule 6: thread-safe: the checkpoint runs in a worker thread; a lock guards the table.
"""

from __future__ import annotations

import errno as _errno
import threading
from collections import OrderedDict
from dataclasses import dataclass

from .fs import FileHandle, Fs

__all__ = [
    "DEFAULT_MAX_OPEN_FILES",
    "HandleCache",
    "HandleCacheStatistics",
    "out_of_descriptors",
]

#: Default bound on open segment handles (``TOPICS_MAX_OPEN_FILES``). Far below the usual
#: soft limit of 1024 descriptors, which sockets, the WAL and one-shot opens also share.
DEFAULT_MAX_OPEN_FILES = 256

_OUT_OF_DESCRIPTORS = frozenset({_errno.EMFILE, _errno.ENFILE})


def out_of_descriptors(exc: BaseException) -> bool:
    """True for EMFILE/ENFILE: a passing shortage, not a disk fault; retry later."""
    return isinstance(exc, OSError) and exc.errno in _OUT_OF_DESCRIPTORS


@dataclass(frozen=True, slots=True)
class HandleCacheStatistics:
    capacity: int
    open: int
    pinned: int
    hits_total: int
    misses_total: int
    evictions_total: int


@dataclass(slots=True)
class _Entry:
    handle: FileHandle
    writable: bool
    pins: int = 0


class HandleCache:
    """Open segment files on demand, keeping at most ``capacity`` unpinned ones open.

    Args:
        fs: the file-system seam every open goes through.
        capacity: the most handles kept open while unpinned (>= 1).
    """

    def __init__(self, fs: Fs, capacity: int = DEFAULT_MAX_OPEN_FILES) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.fs = fs
        self.capacity = capacity
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()
        self._hits = self._misses = self._evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, path: object) -> bool:
        return path in self._entries

    def acquire(self, path: str, *, write: bool = False, create: bool = False) -> FileHandle:
        """The open handle of ``path``, pinned until :meth:`release` (Rule 2).

        Raises:
            FileNotFoundError: ``path`` is missing and ``create`` is false.
            OSError: the open failed (EMFILE/ENFILE when descriptors ran out: see
                :func:`out_of_descriptors`); nothing is cached then.
        """
        with self._lock:
            entry = self._entries.get(path)
            if entry is not None and (entry.writable or not (write or create)):
                self._hits += 1
                self._entries.move_to_end(path)
                entry.pins += 1
                return entry.handle
            if entry is not None:  # Rule 5
                if entry.pins:
                    raise RuntimeError(f"{path} is in use read-only; release it first")
                del self._entries[path]
                entry.handle.close()
            self._misses += 1
            # Make room first: when descriptors are short, closing one may let this open work.
            self._evict(self.capacity - 1)
            handle = self.fs.open(path, write=write, create=create)
            self._entries[path] = _Entry(handle, write or create, pins=1)
            return handle

    def release(self, path: str) -> None:
        """Unpin a handle from :meth:`acquire`; it stays open until evicted."""
        with self._lock:
            entry = self._entries.get(path)
            if entry is not None and entry.pins > 0:
                entry.pins -= 1
            self._evict(self.capacity)

    def discard(self, path: str) -> None:
        """Close and forget ``path``'s handle, pinned or not (Rule 4); a no-op if absent."""
        with self._lock:
            entry = self._entries.pop(path, None)
        if entry is not None:
            entry.handle.close()

    def close(self) -> None:
        """Close every handle (the store is closing)."""
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
        for entry in entries:
            entry.handle.close()

    def statistics(self) -> HandleCacheStatistics:
        """A frozen snapshot of the counters."""
        with self._lock:
            return HandleCacheStatistics(
                capacity=self.capacity,
                open=len(self._entries),
                pinned=sum(1 for e in self._entries.values() if e.pins),
                hits_total=self._hits,
                misses_total=self._misses,
                evictions_total=self._evictions,
            )

    def _evict(self, keep: int) -> None:
        """Close least recently used unpinned handles until at most ``keep`` are open."""
        excess = len(self._entries) - keep
        if excess <= 0:
            return
        victims: list[str] = []
        for path, entry in self._entries.items():  # oldest first; stop once enough found
            if not entry.pins:
                victims.append(path)
                if len(victims) == excess:
                    break
        for path in victims:
            self._entries.pop(path).handle.close()
            self._evictions += 1
