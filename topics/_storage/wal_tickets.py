"""What a WAL caller holds: the ticket of a submitted frame, its batch, the errors and the
writer's statistics (topics/_storage/wal.py's Rules 2, 4 and 9 from the caller's side).

A :class:`WalBatch` is the frames the writer takes together; every :class:`WalTicket` of
a batch resolves at the same moment: done (written, and synced when the batch was), failed
(:class:`WalError`), or stalled on a full disk (:class:`WalFullError` at once, the batch
still queued). ``topics._storage.wal`` re-exports the public names.
"""

from __future__ import annotations

from dataclasses import dataclass

import trio

__all__ = ["LatencyHistogram", "WalBatch", "WalError", "WalFullError", "WalStatistics", "WalTicket"]


class WalError(Exception):
    """A WAL write or fsync failed (the Wal is now read-only), or the Wal is closed."""


class WalFullError(WalError):
    """The frame's batch is stalled on a full disk (Rule 9): not written yet, and written
    later if space returns before the Wal closes. Not a read-only Wal."""


@dataclass(frozen=True, slots=True)
class LatencyHistogram:
    """Per-bucket counts: ``counts[i]`` for values <= ``bounds_us[i]`` (and above
    ``bounds_us[i-1]``); ``counts[-1]`` for values above the last bound."""

    bounds_us: tuple[float, ...]
    counts: tuple[int, ...]
    sum_us: float
    count: int


@dataclass(frozen=True, slots=True)
class WalStatistics:
    frames_total: int
    batches_total: int
    fsyncs_total: int
    bytes_written_total: int
    rotations_total: int
    queue_depth: int
    queue_depth_peak: int
    submit_full_total: int
    read_only: bool
    fsync_latency_us: LatencyHistogram
    full: bool = False
    stalls_total: int = 0


class WalBatch:
    """Frames taken together (by the writer task only); every ticket of a batch resolves at the same moment."""

    __slots__ = (
        "append_ms",
        "changed",
        "done",
        "error",
        "frames",
        "fsync_ms",
        "nbytes",
        "stall",
        "sync",
    )

    def __init__(self) -> None:
        self.frames: list[tuple[int, int, bytes]] = []
        self.nbytes = 0
        self.sync = False
        self.done = trio.Event()
        # Set when done, or when the batch stalls on a full disk (Rule 9); a new Event
        # replaces it when the stall ends, so waiters never spin on a set one.
        self.changed = trio.Event()
        self.stall: OSError | None = None
        self.error: BaseException | None = None
        self.append_ms = 0.0
        self.fsync_ms = 0.0

    def resolve(self) -> None:
        self.done.set()
        self.changed.set()

    def fail(self, error: BaseException) -> None:
        if not self.done.is_set():
            self.error = error
            self.resolve()

    def set_stall(self, error: OSError | None) -> None:
        if error is not None:
            self.stall = error
            self.changed.set()
        elif self.stall is not None:
            self.stall = None
            self.changed = trio.Event()


class WalTicket:
    """The promise for one submitted frame."""

    __slots__ = ("_batch", "lsn")

    def __init__(self, lsn: int, batch: WalBatch) -> None:
        self.lsn = lsn
        self._batch = batch

    @property
    def done(self) -> bool:
        return self._batch.done.is_set()

    @property
    def failed(self) -> bool:
        """Done without being committed (``wait()`` would raise WalError)."""
        return self._batch.done.is_set() and self._batch.error is not None

    @property
    def stalled(self) -> bool:
        """Not done, and waiting for disk space (``wait()`` would raise WalFullError)."""
        return not self._batch.done.is_set() and self._batch.stall is not None

    async def wait(self) -> tuple[float, float]:
        """Wait until the frame is written (and synced, for a synced batch).

        Returns:
            ``(wal_append_ms, fsync_ms)`` measured for the frame's batch (fsync_ms is 0
            when the batch was not synced).

        Raises:
            WalFullError: the frame's batch is stalled on a full disk (Rule 9): it is
                still queued, so its outcome is unknown; raised at once, not after the stall.
            WalError: the batch's write or fsync failed, or the Wal closed first.
        """
        batch = self._batch
        while not batch.done.is_set():
            if batch.stall is not None:
                raise WalFullError(
                    f"WAL frame {self.lsn} is waiting for disk space or a file descriptor "
                    f"({batch.stall}); it is written if one returns before the WAL closes"
                ) from batch.stall
            await batch.changed.wait()
        error = batch.error
        if error is not None:
            raise WalError(f"WAL frame {self.lsn} was not committed: {error}") from error
        return self._batch.append_ms, self._batch.fsync_ms
