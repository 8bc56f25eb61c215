"""The write-ahead log writer: one trio task that group-commits every caller's frames.

Role: callers ``submit()`` frames (a plain call that never blocks) and wait on the
returned ticket; the single writer task ``run()`` takes everything queued, writes it
with one ``pwrite`` and, when any taken frame asked for it (or the periodic tick is due),
one ``fdatasync``, both in one worker-thread call (a write alone: Rule 8); then it
resolves the tickets.
The reader is ``wal_reader``, tickets and statistics ``wal_tickets`` (both re-exported
here), the disk calls ``wal_io`` (docs/STORAGE_FORMATS.md, "Writer (group commit)"; STYLE
§5: request tasks never own a durability step).

Rule 1: LSNs are assigned in ``submit()`` order, consecutively, and frames reach the file
  in LSN order: only the writer task writes, one batch at a time.
Rule 2: a ticket resolves only after its batch is written (``sync=False``) and, when the
  batch was synced, after the fdatasync. A ``sync=True`` frame's batch is always synced.
Rule 3: ``sync=False`` frames are covered by the periodic tick: every written byte is
  synced within ``sync_interval_ms`` of the first unsynced write, plus at most one batch's
  write and the fsync itself (the bound on their loss window).
Rule 4 (fsyncgate): any fsync error, and any write error other than a full disk (Rule 9),
  fails every ticket of that batch, and of everything queued behind it, with
  :class:`WalError`, and the Wal becomes read-only for good (a failed fsync may have
  dropped dirty pages marked clean); the way on is recovery and a new Wal.
Rule 5: rotation happens between batches: the old file is synced before the new one is
  created, and the new file's header is synced (file and directory) before any frame
  goes in. So every file but the newest is whole on disk.
Rule 6: state is changed only on the trio thread, between awaits; the worker thread gets
  what it needs as arguments and returns what changed (no shared mutation, no locks).
Rule 7: a cancelled writer never abandons a disk call midway (``abandon_on_cancel=False``);
  a batch it took but could not finish fails with WalError, so no ticket ever hangs.
Rule 8: only batches that fsync, rotate or are large go to a worker thread; one that just
  writes (the disk class under load) is one ``pwrite`` into the page cache on the trio
  thread (in the worker it held the GIL anyway: hand-off cost, no parallelism).
Rule 9 (a disk that fills): a frame *write* (or the creation of a rotated file) that fails
  with ENOSPC/EDQUOT is cut back first: the file is truncated to its length before the
  write (a rotated file that failed is removed), so no partial frame stays behind. If the
  cut succeeds, the batch is *stalled*, not failed: its frames keep their LSNs and stay
  first in line, and the writer retries them with a growing backoff (RETRY_MIN_S to
  RETRY_MAX_S) until one attempt gets through; then everything queued behind follows. While
  stalled, ``submit()`` still queues (the owner applied the change already, so dropping it
  would tear memory from the log) but every ticket of a stalled batch answers ``wait()``
  with :class:`WalFullError` at once: its outcome is unknown until space returns. The
  owner refuses new changes meanwhile (``full``). A cut that fails, or a full disk seen by
  an fsync, is Rule 4. Closing while stalled makes one last attempt, then fails the rest.
  A rotation short of descriptors (EMFILE/ENFILE) stalls the same way.
Rule 10: :meth:`Wal.rotate_soon` makes the next batch start a new file. Only closed files
  can be trimmed, so a store short of space asks for it when a topic is deleted (its bytes
  go with the next two checkpoints, not when the file fills; store.py rule 10).
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import math

import trio

from .fs import Buffer, Fs
from .wal_io import IoResult, NoSpace, WalFile, create_file, do_io
from .wal_reader import (
    FRAME_HEADER_SIZE,
    HEADER_SIZE,
    MAX_PAYLOAD_BYTES,
    WalCorruptionError,
    WalEntry,
    last_lsn,
    read_wal_header,
    scan_wal,
    wal_files,
    wal_path,
)
from .wal_tickets import (
    LatencyHistogram,
    WalBatch,
    WalError,
    WalFullError,
    WalStatistics,
    WalTicket,
)

__all__ = [
    "FSYNC_BUCKETS_US",
    "LatencyHistogram",
    "Wal",
    "WalCorruptionError",
    "WalEntry",
    "WalError",
    "WalFullError",
    "WalStatistics",
    "WalTicket",
    "last_lsn",
    "scan_wal",
    "wal_files",
]

CLOSE_TIMEOUT_S = 10.0
DEFAULT_MAX_QUEUE_BYTES = 64 << 20
# Upper bounds (microseconds) of the fsync latency buckets; one more bucket holds the rest.
FSYNC_BUCKETS_US: tuple[float, ...] = (
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
    500_000, 1_000_000,
)  # fmt: skip


# Rule 8's bound: a small copy into the page cache is cheaper than a thread hand-off, but a
# large one (or one the kernel throttles) would hold the event loop; those keep the thread,
# where pwrite runs without the GIL.
_INLINE_WRITE_MAX_BYTES = 256 * 1024
# Rule 9's retry schedule for a batch stalled on a full disk: short first (space often
# returns as soon as a checkpoint trims the WAL or an operator deletes a file), then at
# most every few seconds, which costs one failed pwrite per attempt.
RETRY_MIN_S = 0.05
RETRY_MAX_S = 2.0


class Wal:
    """The write-ahead log of one data directory (see the module docstring for the rules).

    Create with :meth:`create`, start :meth:`run` in the engine's nursery
    (``await nursery.start(wal.run)``), then :meth:`submit` and wait on tickets::

        wal = Wal.create(fs, wal_dir, next_lsn=last + 1, file_no=last_file + 1)
        async with trio.open_nursery() as nursery:
            await nursery.start(wal.run)
            ticket = wal.submit(ENTRY_WRITE, payload, sync=True)
            append_ms, fsync_ms = await ticket.wait()
            await wal.aclose()
    """

    def __init__(
        self,
        fs: Fs,
        dir: str,
        current: WalFile,
        closed_files: list[tuple[int, int | None]],
        *,
        max_file_bytes: int,
        sync_interval_ms: int,
        max_queue_bytes: int,
        limiter: trio.CapacityLimiter | None,
    ) -> None:
        self._fs = fs
        self._dir = dir
        self._file = current
        self._closed_files = closed_files  # (file_no, first_lsn or None), oldest first
        self._max_file_bytes = max_file_bytes
        self._sync_interval_s = sync_interval_ms / 1000
        self._max_queue_bytes = max_queue_bytes
        self._limiter = limiter
        self._next_lsn = current.first_lsn
        self._written_lsn = current.first_lsn - 1
        self._synced_lsn = current.first_lsn - 1
        self._unsynced_since: float | None = None
        self._open = WalBatch()
        self._inflight: WalBatch | None = None
        self._queued_bytes = 0
        self._wakeup = trio.Event()
        self._progress = trio.Event()
        self._sync_requested = False
        self._rotate_requested = False  # Rule 10
        self._failure: BaseException | None = None
        # Rule 9: the stalled batch (retried first), its backoff, and what cuts it short.
        self._stalled: WalBatch | None = None
        self._retry_delay_s = RETRY_MIN_S
        self._close_requested = trio.Event()
        self._closing = False
        self._closed = False
        self._running = False
        self._stopped = trio.Event()
        self._stats = dict.fromkeys(
            ("frames", "batches", "fsyncs", "bytes", "rotations", "peak", "full", "stalls"), 0
        )
        self._fsync_counts = [0] * (len(FSYNC_BUCKETS_US) + 1)
        self._fsync_sum_us = 0.0

    @classmethod
    def create(
        cls,
        fs: Fs,
        dir: str,
        *,
        next_lsn: int,
        file_no: int,
        max_file_bytes: int = 64 << 20,
        sync_interval_ms: int = 50,
        max_queue_bytes: int = DEFAULT_MAX_QUEUE_BYTES,
        limiter: trio.CapacityLimiter | None = None,
    ) -> Wal:
        """Start a new WAL file ``file_no`` whose first frame will carry ``next_lsn``.

        Recovery always writes into a fresh file, after ``scan_wal(repair=True)`` has
        made the old newest file end cleanly; this call blocks (it creates and syncs).

        Args:
            fs: the file system seam.
            dir: the WAL directory (must exist).
            next_lsn: the LSN of the next frame (last LSN in the log + 1; >= 1).
            file_no: must be one past the highest existing file (any, if there is none).
            max_file_bytes: rotate to a new file once the current one reaches this size.
            sync_interval_ms: the periodic tick for ``sync=False`` frames (0: every batch).
            max_queue_bytes: the backpressure budget (see :meth:`over_budget`).
            limiter: thread limiter for the writer's disk calls (default: its own, of 1).

        Raises:
            ValueError: bad numbers, or ``file_no`` not following the existing files.
            OSError: creating or syncing the file failed.
        """
        if next_lsn < 1 or file_no < 0 or max_file_bytes < 1 or sync_interval_ms < 0:
            raise ValueError("next_lsn must be >= 1; file_no, sizes and intervals >= 0")
        existing = wal_files(fs, dir)
        if existing and file_no != existing[-1] + 1:
            raise ValueError(
                f"file_no {file_no:016x} must follow the newest WAL file {existing[-1]:016x}"
            )
        closed: list[tuple[int, int | None]] = []
        for no in existing:
            try:
                closed.append((no, read_wal_header(fs, wal_path(dir, no)).first_lsn))
            except WalCorruptionError:
                closed.append((no, None))  # never trimmed past: its bounds are unknown
        current = create_file(fs, dir, file_no, next_lsn)
        return cls(
            fs,
            dir,
            current,
            closed,
            max_file_bytes=max_file_bytes,
            sync_interval_ms=sync_interval_ms,
            max_queue_bytes=max_queue_bytes,
            limiter=limiter,
        )

    # -- submitting -------------------------------------------------------------------

    @property
    def next_lsn(self) -> int:
        """The LSN the next ``submit()`` will get."""
        return self._next_lsn

    @property
    def read_only(self) -> bool:
        """True after a write or fsync failed: every later submit raises (fsyncgate)."""
        return self._failure is not None

    @property
    def bytes_written_total(self) -> int:
        """Bytes written so far (cheap: no statistics snapshot)."""
        return self._stats["bytes"]

    @property
    def full(self) -> bool:
        """True while a batch waits for disk space (Rule 9): submits still queue, but the
        owner should refuse new changes until this turns False again."""
        return self._stalled is not None

    @property
    def synced_lsn(self) -> int:
        """Every frame up to this LSN is durable."""
        return self._synced_lsn

    @property
    def written_lsn(self) -> int:
        """Every frame up to this LSN has been written (maybe not yet synced)."""
        return self._written_lsn

    @property
    def file_no(self) -> int:
        """The file being written now."""
        return self._file.file_no

    def submit(self, entry_type: int, payload: Buffer, *, sync: bool) -> WalTicket:
        """Queue one frame; never blocks and never awaits.

        Args:
            entry_type: a u8 the engine uses to tell its entries apart.
            payload: the entry bytes (copied when not ``bytes``).
            sync: ``True`` for fsync-class frames: the ticket resolves after the fdatasync.

        Returns:
            The ticket; its ``lsn`` is assigned now.

        Raises:
            WalError: the Wal is read-only after a failure, or closed.
            ValueError: ``entry_type`` is not a u8 or the payload is over MAX_PAYLOAD_BYTES.
        """
        if self._failure is not None:
            raise WalError(f"WAL is read-only after a failed write or fsync: {self._failure}")
        if self._closing:
            raise WalError("WAL is closed")
        if not 0 <= entry_type <= 0xFF:
            raise ValueError(f"entry_type {entry_type} is not a u8")
        data = payload if isinstance(payload, bytes) else bytes(payload)
        if len(data) > MAX_PAYLOAD_BYTES:
            raise ValueError(f"WAL payload of {len(data)} bytes is over {MAX_PAYLOAD_BYTES}")
        lsn = self._next_lsn
        self._next_lsn += 1
        nbytes = FRAME_HEADER_SIZE + len(data)
        if self._queued_bytes + nbytes > self._max_queue_bytes:
            # Still queued: submit never blocks and a frame that got an LSN must be
            # written. The engine reads over_budget() and throttles new requests.
            self._stats["full"] += 1
        self._queued_bytes += nbytes
        batch = self._open
        batch.frames.append((lsn, entry_type, data))
        batch.nbytes += nbytes
        batch.sync = batch.sync or sync
        self._stats["peak"] = max(self._stats["peak"], len(batch.frames))
        self._wakeup.set()
        return WalTicket(lsn, batch)

    def over_budget(self) -> bool:
        """True when queued plus in-flight frame bytes exceed ``max_queue_bytes``."""
        return self._queued_bytes > self._max_queue_bytes

    async def wait_progress(self) -> None:
        """Return after the next applied batch (``written_lsn``/``synced_lsn`` may have
        moved) or a failure. Does not ask for a sync; a watcher re-checks the LSNs itself.
        """
        await self._progress.wait()

    def rotate_soon(self) -> None:
        """Rule 10: the next batch starts a new file (the current one can then be trimmed)."""
        self._rotate_requested = True

    async def flush(self) -> None:
        """Wait until every frame submitted so far is written and synced.

        Raises:
            WalError: the Wal failed (read-only) or stopped before getting there.
        """
        await trio.lowlevel.checkpoint()
        target = self._next_lsn - 1
        while self._synced_lsn < target:
            if self._failure is not None:
                raise WalError(f"WAL is read-only after a failed write or fsync: {self._failure}")
            if self._stalled is not None:
                # Waiting would last as long as the disk stays full: say so instead.
                raise WalFullError(f"the WAL is waiting for disk space: {self._stalled.stall}")
            if not self._running:
                # Never wait for a writer that is not there: that wait would never end.
                raise WalError("the WAL writer is not running; nothing more can be synced")
            self._sync_requested = True
            self._wakeup.set()
            await self._progress.wait()

    # -- the writer task --------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The single writer task; returns after :meth:`aclose` or a failure.

        Raises:
            RuntimeError: a second writer was started.
        """
        if self._running or self._stopped.is_set():
            raise RuntimeError("the WAL writer runs once")
        if self._limiter is None:
            self._limiter = trio.CapacityLimiter(1)
        self._running = True
        task_status.started()
        try:
            while self._failure is None:
                if self._stalled is not None:
                    batch: WalBatch | None = await self._wait_for_space()
                else:
                    batch = await self._wait_for_work()
                if batch is None:
                    break
                await self._commit(batch)
        finally:
            self._running = False
            # Whatever is still unresolved can no longer be written by anyone (Rule 7).
            stop = self._failure or WalError("WAL writer stopped")
            if self._inflight is not None:
                self._inflight.fail(stop)
                self._inflight = None
            if self._stalled is not None:
                self._stalled.fail(stop)
                self._stalled = None
            self._open.fail(stop)
            self._closing = True
            self._stopped.set()
            self._progress.set()

    def _sync_due(self) -> bool:
        return (
            self._unsynced_since is not None
            and trio.current_time() >= self._unsynced_since + self._sync_interval_s
        )

    async def _wait_for_work(self) -> WalBatch | None:
        while True:
            unsynced = self._written_lsn > self._synced_lsn
            # Closing syncs what is left (after a stall, aclose's own flush could not).
            due = self._sync_requested or self._closing or self._sync_due()
            if self._open.frames or (unsynced and due):
                batch, self._open = self._open, WalBatch()
                return batch
            self._sync_requested = False  # nothing unsynced: a flush is already satisfied
            if self._closing:
                return None
            deadline = math.inf
            if self._unsynced_since is not None:
                deadline = self._unsynced_since + self._sync_interval_s
            with trio.move_on_at(deadline):
                await self._wakeup.wait()
            self._wakeup = trio.Event()

    async def _wait_for_space(self) -> WalBatch:
        """Rule 9: back off, then hand back the stalled batch for another attempt. A close
        cuts the wait short: the last attempt happens at once."""
        assert self._stalled is not None
        with trio.move_on_after(self._retry_delay_s):
            await self._close_requested.wait()
        self._retry_delay_s = min(self._retry_delay_s * 2, RETRY_MAX_S)
        return self._stalled

    async def _commit(self, batch: WalBatch) -> None:
        sync = batch.sync or self._sync_requested or self._sync_interval_s == 0 or self._sync_due()
        self._sync_requested = False
        big = self._file.size >= self._max_file_bytes or self._rotate_requested
        rotate = bool(batch.frames) and big and self._file.size > HEADER_SIZE
        self._inflight = batch
        assert self._limiter is not None
        args = (self._fs, self._dir, self._file, batch.frames, sync, rotate)
        old_unsynced = self._written_lsn > self._synced_lsn
        try:
            if sync or rotate or batch.nbytes > _INLINE_WRITE_MAX_BYTES:
                result = await trio.to_thread.run_sync(
                    do_io,
                    *args,
                    old_unsynced,
                    limiter=self._limiter,
                    abandon_on_cancel=False,  # a write or fsync under way is always waited for
                )
            else:
                # Rule 8: a batch with nothing to sync only copies into the page cache,
                # which costs less than the thread round trip (a wake-up each way, GIL
                # hand-offs, context switches) that it would take to run it elsewhere.
                result = do_io(*args, old_unsynced)
        except NoSpace as exc:
            self._inflight = None
            self._stall(batch, exc.error)
            return
        except OSError as exc:
            self._fail(exc)
            return
        # From here to the end, no await: the new state and the resolved tickets appear
        # together, so no task ever sees a ticket done before the LSNs that cover it.
        self._inflight = None
        self._apply(batch, result, sync)

    def _apply(self, batch: WalBatch, result: IoResult, sync: bool) -> None:
        if batch is self._stalled:  # Rule 9: space came back; the queue moves again
            self._stalled = None
            self._retry_delay_s = RETRY_MIN_S
            self._open.set_stall(None)
        if result.new_file is not None:
            self._rotate_requested = False
            old = self._file
            self._closed_files.append((old.file_no, old.first_lsn))
            self._file = result.new_file
            self._synced_lsn = self._written_lsn  # the old file was synced first
            self._unsynced_since = None
            self._stats["rotations"] += 1
        self._file.size += result.bytes_written
        self._queued_bytes -= batch.nbytes
        if batch.frames:
            self._written_lsn = batch.frames[-1][0]
            self._stats["frames"] += len(batch.frames)
            self._stats["batches"] += 1
            self._stats["bytes"] += result.bytes_written
        self._stats["fsyncs"] += result.fsyncs
        if sync:
            self._synced_lsn = self._written_lsn
            self._unsynced_since = None
            self._record_fsync(result.fsync_ms * 1000)
        elif self._written_lsn > self._synced_lsn and self._unsynced_since is None:
            self._unsynced_since = trio.current_time()
        batch.append_ms, batch.fsync_ms = result.append_ms, result.fsync_ms
        batch.resolve()
        self._progress.set()
        self._progress = trio.Event()

    def _stall(self, batch: WalBatch, exc: OSError) -> None:
        """Rule 9: the batch was cut back cleanly; keep it first in line and tell waiters."""
        if self._closing:
            # The last attempt of a closing Wal: nothing will retry, so this is final.
            self._fail(exc)
            return
        if self._stalled is None:
            self._stats["stalls"] += 1
        self._stalled = batch
        batch.set_stall(exc)
        self._open.set_stall(exc)
        self._progress.set()
        self._progress = trio.Event()

    def _fail(self, exc: OSError) -> None:
        """Rule 4: this batch, everything behind it, and every later submit fail."""
        self._failure = exc
        error = WalError(f"WAL write or fsync failed; the WAL is now read-only: {exc}")
        error.__cause__ = exc
        if self._inflight is not None:
            self._inflight.fail(error)
            self._inflight = None
        if self._stalled is not None:
            self._stalled.fail(error)
            self._stalled = None
        self._open.fail(error)
        self._open = WalBatch()
        self._queued_bytes = 0
        self._progress.set()

    def _record_fsync(self, us: float) -> None:
        self._fsync_counts[bisect.bisect_left(FSYNC_BUCKETS_US, us)] += 1
        self._fsync_sum_us += us

    # -- housekeeping -----------------------------------------------------------------

    def trim(self, upto_lsn: int) -> int:
        """Remove whole closed files whose every frame has ``lsn < upto_lsn``.

        Oldest first, each removal made durable (directory fsync) before the next, so a
        crash leaves a suffix of the files and never a hole (wal_reader Rule 4). Blocks
        for one unlink and one directory fsync per removed file.

        Returns:
            The number of files removed.
        """
        removed = 0
        try:
            bounds = [*self._closed_files, (self._file.file_no, self._file.first_lsn)]
            for (file_no, _), (_, next_first) in itertools.pairwise(bounds):
                # Frames of a closed file all sit below the first LSN of the file after it.
                if next_first is None or next_first > upto_lsn:
                    break
                self._fs.remove(wal_path(self._dir, file_no))
                self._fs.sync_dir(self._dir)
                removed += 1
        finally:
            del self._closed_files[:removed]
        return removed

    def backup_files(self) -> tuple[list[tuple[int, int | None, int | None]], int]:
        """For an online backup (``_persistence/backup.py``): ``(file_no, first_lsn,
        length)`` of every file, oldest first (length None: closed, whole; the current
        file's: the end of its last applied batch), and the last LSN they hold."""
        files = [(no, first, None) for no, first in self._closed_files]
        return [*files, (self._file.file_no, self._file.first_lsn, self._file.size)], (
            self._written_lsn
        )

    def statistics(self) -> WalStatistics:
        """A frozen snapshot of the counters (read by ``/v0/metrics``)."""
        s = self._stats
        return WalStatistics(
            frames_total=s["frames"],
            batches_total=s["batches"],
            fsyncs_total=s["fsyncs"],
            bytes_written_total=s["bytes"],
            rotations_total=s["rotations"],
            queue_depth=len(self._open.frames),
            queue_depth_peak=s["peak"],
            submit_full_total=s["full"],
            read_only=self._failure is not None,
            fsync_latency_us=LatencyHistogram(
                bounds_us=FSYNC_BUCKETS_US,
                counts=tuple(self._fsync_counts),
                sum_us=self._fsync_sum_us,
                count=sum(self._fsync_counts),
            ),
            full=self._stalled is not None,
            stalls_total=s["stalls"],
        )

    async def aclose(self) -> None:
        """Flush, stop the writer and close the file.

        Shielded with a timeout, so an engine being cancelled still gets its last frames
        synced; a Wal that already failed just closes (nothing more can be made durable).
        """
        if self._closed:
            return
        with trio.move_on_after(CLOSE_TIMEOUT_S, shield=True):
            if self._running:
                with contextlib.suppress(WalError):
                    await self.flush()
            self._closing = True
            self._wakeup.set()
            self._close_requested.set()  # a stalled writer makes its last attempt now
            if self._running:
                await self._stopped.wait()
        self._closing = True
        self._open.fail(WalError("WAL closed before the frame was written"))
        if not self._running:
            # Only when no worker thread can still be using the handle.
            self._closed = True
            self._file.handle.close()
