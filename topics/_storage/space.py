"""Free space of the data directory: a cached reading and the reserve writes must leave.

Role: the engine refuses changes (507 ``insufficient_storage``) before the disk is
completely full, so that what must still work when writes stop — checkpoints that trim
the WAL, a segment seal, the manifest, a clean shutdown — has room, and so that the WAL
rarely meets ENOSPC at all (wal.py Rule 9 handles it when it does). (docs/OPERATIONS.md,
"Limits and hostile clients": ``TOPICS_MIN_FREE_BYTES``.)

Rule 1: the reading comes from ``Fs.free_bytes`` (``statvfs`` for a real disk), never
  from a path outside the seam, so crash tests can fill a fake disk.
Rule 2: it is cached. It is refreshed by :meth:`DiskSpace.run` every ``interval_s`` (in a
  worker thread: ``statvfs`` on a network file system can block), and on the write path
  only once the WAL has written ``budget_bytes`` since the last reading. The budget is a
  quarter of the reserve, so the WAL (plus a checkpoint writing the same bytes again into
  segments) cannot eat the reserve between two readings.
Rule 3: a failed reading keeps the previous one and is logged; it never refuses writes
  by itself (the WAL's own ENOSPC handling is the backstop).
Rule 4: a reserve of 0 turns the check off; the reading is still taken for the metrics.
Rule 5: a checkpoint may spend the reserve, not the volume: it starts only when a fresh
  reading leaves ``checkpoint_floor`` (half the reserve) free after the bytes it will
  write (:meth:`DiskSpace.room_for`). A WAL backlog larger than the free space therefore
  waits (store.py rule 8) instead of filling the disk to 100 % and leaving half-written
  segments behind; the other half of the reserve stays for what gets the space back —
  the WAL entries of topic and record deletes (allowed below the reserve: _durability
  rule 4), the manifests that drop the deleted topics' segment files, and the WAL trim.
"""

from __future__ import annotations

import logging

import trio

from .fs import Fs

__all__ = ["DiskSpace"]

log = logging.getLogger("topics.storage")

#: Background reading interval (seconds): also how fast readiness notices space coming back.
INTERVAL_S = 1.0
_MIN_BUDGET_BYTES = 1 << 20


class DiskSpace:
    """The cached free-space reading of one data directory and its reserve.

    Args:
        fs: the file system seam.
        path: any path on the file system to measure (the data directory).
        min_free_bytes: the reserve; writes are refused while ``free_bytes`` is below it.
    """

    def __init__(self, fs: Fs, path: str, min_free_bytes: int) -> None:
        self._fs = fs
        self._path = path
        self.min_free_bytes = min_free_bytes
        self.budget_bytes = max(_MIN_BUDGET_BYTES, min_free_bytes // 4)
        self.checkpoint_floor = min_free_bytes // 2
        self.free_bytes: int | None = None
        self._written_at_reading = 0

    @property
    def low(self) -> bool:
        """True while the last reading is below the reserve."""
        free = self.free_bytes
        return self.min_free_bytes > 0 and free is not None and free < self.min_free_bytes

    def refresh(self, written_total: int | None = None) -> None:
        """Take a reading now (blocking: one ``statvfs``)."""
        try:
            self.free_bytes = self._fs.free_bytes(self._path)
        except OSError as exc:  # Rule 3
            log.warning("cannot read the free space of %s: %s", self._path, exc)
        if written_total is not None:
            self._written_at_reading = written_total

    def room_for(self, needed: int) -> bool:
        """Rule 5 (blocking: takes a fresh reading): True when ``needed`` more bytes still
        leave ``checkpoint_floor`` free, or when the check is off or cannot be read."""
        if self.min_free_bytes == 0:
            return True
        self.refresh()
        free = self.free_bytes
        return free is None or free - needed >= self.checkpoint_floor

    def maybe_refresh(self, written_total: int) -> None:
        """Rule 2: a reading on the write path once ``budget_bytes`` were written."""
        if written_total - self._written_at_reading >= self.budget_bytes:
            self.refresh(written_total)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Refresh every INTERVAL_S until cancelled (the engine's nursery owns it)."""
        await trio.to_thread.run_sync(self.refresh)
        task_status.started()
        while True:
            await trio.sleep(INTERVAL_S)
            await trio.to_thread.run_sync(self.refresh)
