"""``ReaderHandle``: a picklable way to reach a data directory from Spark tasks.

Role: Spark pickles whatever a task needs (a UDF's closure, a data source reader) and runs
it in a Python worker process that is reused for many tasks. A ``topics.Reader`` holds the
whole recovered state in memory, so it must not be pickled and should not be rebuilt per
task; the handle carries only the path and opens the Reader on first use.

Rules:
1. One Reader per (process, path): every handle for the same path in one process shares
   it. The key includes the pid, so a forked child never uses its parent's Reader.
2. ``get()`` returns the cached Reader as it is (a snapshot); ``max_age_s`` makes it
   refresh when the snapshot is older than that; ``fresh()`` always refreshes first
   (subject to rule 4).
3. Pickling keeps the path and ``max_age_s`` only; the cache stays in its process.
4. A refresh (a full read-only recovery: about 0.3 s per million records) is skipped when
   no file of the directory changed since the last one: every durable change appends to
   or creates a file (WAL, segment, manifest), so the (name, inode, size, mtime) of the
   files, taken *before* each refresh, tell an unchanged directory from a changed one.
   This is what keeps planning a batch read cheap on a large, quiet directory.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..reader import Reader

__all__ = ["ReaderHandle", "directory_state"]

# (pid, absolute path) -> (Reader, monotonic time of its last refresh, files then)
_CACHE: dict[tuple[int, str], tuple[Reader, float, object]] = {}
_LOCK = threading.Lock()


def directory_state(path: str) -> tuple[tuple[str, int, int, int], ...]:
    """What rule 4 compares: every file of the directory and of its subdirectories, as
    sorted (path, inode, size, mtime_ns)."""
    out: list[tuple[str, int, int, int]] = []
    dirs = [path]
    while dirs:
        with os.scandir(dirs.pop()) as it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False):
                    dirs.append(entry.path)
                else:
                    st = entry.stat(follow_symlinks=False)
                    out.append((entry.path, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


def _open_reader(path: str) -> Reader:
    # Imported here: the Reader brings in the storage and log modules and trio, which a
    # planner that finds its view file (_sources rule 5) never needs.
    from ..reader import Reader

    return Reader(path)


class ReaderHandle:
    """A picklable, lazily opened ``topics.Reader`` shared by everything in one process.

    Args:
        path: the data directory (read-only; safe beside a live writer or server).
        max_age_s: refresh the shared Reader when its snapshot is older than this
            (None: never on its own; call :meth:`fresh`).

    Example (a lookup join in ``mapPartitions``)::

        handle = topics.spark.ReaderHandle("./data")

        def enrich(rows):
            reader = handle.get()            # opened once per Python worker process
            prices = reader.diff("prices", from_seq=0, limit=1000).records
            ...

        df.rdd.mapPartitions(enrich)
    """

    __slots__ = ("max_age_s", "path")

    def __init__(self, path: str, *, max_age_s: float | None = None) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.max_age_s = max_age_s

    def get(self) -> Reader:
        """The process's Reader for this path, opened (or refreshed, rule 2) on demand."""
        key = (os.getpid(), self.path)
        with _LOCK:
            cached = _CACHE.get(key)
            now = time.monotonic()
            if cached is None:
                files = directory_state(self.path)
                _CACHE[key] = (_open_reader(self.path), now, files)
            elif self.max_age_s is not None and now - cached[1] > self.max_age_s:
                return self._refresh(key, cached)
            return _CACHE[key][0]

    def _refresh(self, key: tuple[int, str], cached: tuple[Reader, float, object]) -> Reader:
        """Refresh the cached Reader unless the directory is unchanged (rule 4)."""
        files = directory_state(self.path)
        if files != cached[2]:
            cached[0].refresh()
        _CACHE[key] = (cached[0], time.monotonic(), files)
        return cached[0]

    def is_open(self) -> bool:
        """Whether this process has the Reader open already."""
        with _LOCK:
            return (os.getpid(), self.path) in _CACHE

    def fresh(self) -> Reader:
        """The shared Reader, refreshed now so it sees every record durable so far
        (without the cost when nothing changed: rule 4)."""
        key = (os.getpid(), self.path)
        with _LOCK:
            cached = _CACHE.get(key)
            if cached is not None:
                return self._refresh(key, cached)
            files = directory_state(self.path)
            reader = _open_reader(self.path)
            _CACHE[key] = (reader, time.monotonic(), files)
            return reader

    def close(self) -> None:
        """Drop this process's Reader for the path (the next ``get`` reopens it)."""
        with _LOCK:
            cached = _CACHE.pop((os.getpid(), self.path), None)
        if cached is not None:
            cached[0].close()

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "max_age_s": self.max_age_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        self.max_age_s = state["max_age_s"]

    def __repr__(self) -> str:
        return f"ReaderHandle({self.path!r}, max_age_s={self.max_age_s!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ReaderHandle)
            and other.path == self.path
            and other.max_age_s == self.max_age_s
        )

    def __hash__(self) -> int:
        return hash((self.path, self.max_age_s))
