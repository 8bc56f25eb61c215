"""Online backups of the engine's data directory, for embedded users and ``GET /v0/backup``.

Rules:
1. One backup at a time per engine: another is refused with 429 ``throttled`` (a resource
   cap of one, ``detail.limit = "concurrent_backups"``) before any work.
2. A memory-only engine has nothing to back up: 400 ``invalid_request`` with
   ``detail.reason = "memory_only"``; an engine still recovering answers 503 ``not_ready``.
3. :meth:`BackupOps.open_backup` does all the work that can fail before a byte is sent
   (the WAL flush and the plan, ``_persistence/backup.py``), so a frontend can
   still answer an error status; streaming and releasing the pins are the returned
   :class:`Backup`'s, which is an async context manager (the pins are released however the
   stream ends).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from .._persistence.appender import Appender
from .._persistence.backup import MAX_BYTES_PER_S, BackupPlan, Sink, take_plan
from ..errors import InvalidRequestError, NotReadyError, ThrottledError

__all__ = ["Backup", "BackupOps"]


class Backup:
    """One planned backup: ``size`` bytes of tar, sent by :meth:`stream` (once)."""

    def __init__(self, plan: BackupPlan, done: BackupOps) -> None:
        self._plan = plan
        self._ops = done
        self._closed = False
        #: The BACKUP member's fields (format, generation, LSNs, created_ms, files).
        self.info: dict[str, Any] = plan.info
        #: The archive's exact length in bytes.
        self.size = plan.size

    async def stream(self, sink: Sink, *, max_bytes_per_s: float | None = MAX_BYTES_PER_S) -> int:
        """Send the archive to ``sink`` (``async (bytes) -> None``); returns its length.
        The file reads are paced to ``max_bytes_per_s`` (default 256 MiB/s, so the writes
        keep their rate; None: as fast as the sink takes them)."""
        try:
            return await self._plan.stream(sink, max_bytes_per_s=max_bytes_per_s)
        finally:
            self.close()

    def close(self) -> None:
        """Release the pinned files (idempotent; :meth:`stream` does it when it ends)."""
        if self._closed:
            return  # a later backup may be running by now: its slot is not ours
        self._closed = True
        self._plan.release()
        self._ops.running = False

    async def __aenter__(self) -> Backup:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class BackupOps:
    """The engine's backup calls (see the module doc)."""

    def __init__(self, app: Appender) -> None:
        self._app = app
        self.running = False

    async def open_backup(self) -> Backup:
        """Take a consistent snapshot of the data directory, ready to stream as a tar.

        The engine keeps serving meanwhile. The snapshot holds every write acknowledged
        before this call, and for each topic a prefix of its writes (docs/OPERATIONS.md,
        "Backups and restores without downtime"). Use it as an async context manager, or
        call ``stream`` (which releases it when done) or ``close``::

            async with await engine.open_backup() as backup:
                await backup.stream(out.send_all)

        Raises:
            InvalidRequestError: a memory-only engine (``detail.reason = "memory_only"``).
            NotReadyError: recovery has not finished.
            ThrottledError: another backup is running (``detail.limit``).
        """
        app = self._app
        if app.store is None:
            if app.recovery_progress < 1.0:
                raise NotReadyError("recovery in progress; retry shortly", retry_after=1.0)
            raise InvalidRequestError(
                "this engine keeps no data directory (memory-only): there is nothing to back up",
                detail={"reason": "memory_only"},
            )
        if self.running:
            raise ThrottledError.for_limit("concurrent_backups", 1, retry_after=5.0)
        self.running = True
        try:
            plan = await take_plan(app.store, app.clock.now_ms())
        except BaseException:
            self.running = False
            raise
        return Backup(plan, self)

    async def backup(
        self, sink: Sink, *, max_bytes_per_s: float | None = MAX_BYTES_PER_S
    ) -> dict[str, Any]:
        """Stream a snapshot of the data directory to ``sink`` as a tar (see
        :meth:`open_backup`; ``max_bytes_per_s``: :meth:`Backup.stream`); returns the
        BACKUP member's fields."""
        async with await self.open_backup() as backup:
            await backup.stream(sink, max_bytes_per_s=max_bytes_per_s)
            return backup.info
