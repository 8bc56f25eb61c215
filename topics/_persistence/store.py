"""The engine's persistence: logging every change to the WAL and checkpointing.

Role: the engine calls the ``log_*`` methods synchronously, right after it applies a
change in memory; they queue one WAL entry each and return its ticket (the engine awaits
it where the durability class says so). ``checkpoint`` writes the in-memory segments'
new bytes and delete flags to segment files, then an atomic manifest of metadata only,
then trims the WAL behind it. The worker-thread code that writes, seals and removes
segment files, and the space check before it, is ``segment_work.py``.

Rules:
1. Durability classes (§0.10): ``ephemeral`` logs only topic config, deletes of the
   topic and head watermarks — never records; ``memory`` and ``disk`` log records without
   an fsync (the WAL's periodic sync bounds their loss window); ``fsync`` entries are
   synced before the engine acks.
2. A checkpoint snapshots everything synchronously (the covered LSN, the bytes to write,
   the manifest body) and only then awaits the disk, so it is consistent even though the
   engine keeps changing while it runs: entries after the covered LSN stay in the WAL.
3. Segment bytes and flag flips are synced before the manifest that lists them. Two
   manifest generations are kept (the older is the fallback if the newer fails to
   validate), so a segment file is removed, and the WAL trimmed, only behind the OLDER of
   the two kept manifests.
4. Payloads are never copied into the manifest: checkpoint cost grows with the metadata
   and the bytes written since the last checkpoint, not with the data size.
5. A checkpoint never makes durable what the WAL did not: every entry it covers is
   synced in the WAL before its segment bytes are written (so a checkpoint never carries
   a write whose fsync failed, and was reported failed, into the manifest), and after a
   WAL failure checkpoints are refused. A failed checkpoint keeps its pending delete flags for the
   next one and drops the segment writers it used, which reopen at their durable length.
6. A segment that holds no frame yet gets no file and no manifest entry (an unsynced
   empty file would not survive a crash, and the manifest must only name what does).
7. Segment files are opened through one bounded handle cache (``handles.py``), so open
   descriptors do not grow with the topic count. Running out of descriptors
   (EMFILE/ENFILE) is a passing shortage, not a disk fault: the checkpoint task logs it,
   backs off and tries again (rule 5 makes a failed checkpoint safe to retry), instead of
   ending the engine. Every other checkpoint error still stops the engine loudly.
8. A full disk is a passing shortage too (rule 7's backoff): a checkpoint whose segment
   write, seal or manifest meets ENOSPC/EDQUOT, or that finds the WAL stalled on a full
   disk (``WalFullError``: nothing can be covered until the WAL catches up), is retried.
   The engine keeps serving reads meanwhile and refuses writes (``_durability`` rule 4).
   With a free-space reserve a checkpoint does not even start when what it would write
   (segment bytes, seal indexes, the manifest) leaves less than half the reserve free
   (space.py rule 5; :class:`NoRoomError`, retried the same way), and one that fails
   removes the segment files it created, so a backlog too large for the disk waits
   without filling the volume.
9. A periodic checkpoint that would write the same manifest as the last one (no WAL entry,
   delete, segment byte or read time since, and no superseded segment file left to drop:
   that takes one more manifest, as the last one is the fallback) writes nothing: an idle
   server leaves the directory as it is, so an offline reader (``topics.Reader``, the
   Spark source) keeps its planning view instead of reloading the whole directory every
   30 s.
10. While the free space is below the reserve, checkpoints run every second instead of
   every 30 s, and one more manifest is written while the WAL still holds entries behind
   the newest one (rule 3 trims only behind the older): a topic deleted to get space back
   frees its segment files and WAL bytes within seconds, with no other write to drive it.
11. History bigger than memory (issue 31; ``cold.py``): once a checkpoint's manifest is
   durable, every sealed in-memory segment of a ``disk``/``fsync`` topic whose file that
   checkpoint left sealed and whole is swapped for a ``ColdSegment``, read back through
   ``self.cold``'s byte-bounded cache on demand. The manifest records its counters
   (cold.py rule 2), so recovery does not read it. Delete flags a cold segment takes in
   memory stay in its ``pending`` set until a checkpoint has written them to the file.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import trio

from .._core import SegmentBuffer
from .._storage import entries
from .._storage.fs import Fs, is_no_space
from .._storage.handles import DEFAULT_MAX_OPEN_FILES, HandleCache, out_of_descriptors
from .._storage.heads import HeadTable
from .._storage.manifest import write_manifest
from .._storage.segment_cache import SegmentCache
from .._storage.wal import Wal, WalError, WalFullError, WalTicket
from ..log.cold_log import swap_in_cold
from ..log.cold_segment import ColdSegment, ColdSource
from ..log.gap_markers import GapMarker
from ..log.producer_state import (
    ProducerClaim,
    encode_append_producer,
    encode_producer,
    snapshot_producers,
)
from ..log.registry import TopicRegistry
from ..log.topic_log import TopicLog
from .cold import COLD_CLASSES, cold_from_buffer, has_tag, segment_entry
from .segment_work import (
    NoRoomError,
    SegmentFileState,
    SegmentWork,
    check_room,
    remove_all,
    segment_work,
    write_segments,
)

if TYPE_CHECKING:
    from .._storage.space import DiskSpace

__all__ = ["CHECKPOINT_INTERVAL_S", "NoRoomError", "SegmentFileState", "Store", "StorePaths"]

#: Checkpoint at least this often while anything changed, and whenever the WAL grew by
#: CHECKPOINT_WAL_BYTES since the last one (this bounds replay time after a crash).
CHECKPOINT_INTERVAL_S = 30.0
CHECKPOINT_WAL_BYTES = 256 << 20
#: The checkpoint interval while the free space is below the reserve (rule 10).
LOW_SPACE_INTERVAL_S = 1.0
#: After a checkpoint ran out of file descriptors, retry after this long, doubling up to
#: the max (rule 7).
CHECKPOINT_RETRY_MIN_S = 1.0
CHECKPOINT_RETRY_MAX_S = 30.0

log = logging.getLogger("topics.storage")


class StoreExtension(Protocol):
    """A subsystem (routers, queues) that keeps its own state through the store.

    Its manifest section is ``snapshot()`` (taken on the trio thread at checkpoint time,
    so it is consistent with the topics in the same manifest); its changes between
    checkpoints are WAL entries of the types it declares (>= FIRST_EXTENSION_ENTRY),
    handed back by ``restore`` after recovery in log order.
    """

    key: str
    entry_types: frozenset[int]

    def snapshot(self) -> Any: ...

    def restore(self, section: Any, logged: list[tuple[int, bytes]]) -> None: ...


@dataclass(frozen=True, slots=True)
class StorePaths:
    root: str

    @classmethod
    def for_dir(cls, data_dir: str) -> StorePaths:
        return cls(os.path.abspath(data_dir))

    @property
    def wal(self) -> str:
        return os.path.join(self.root, "wal")

    @property
    def segments(self) -> str:
        return os.path.join(self.root, "segments")

    @property
    def manifest(self) -> str:
        return os.path.join(self.root, "manifest")

    @property
    def lock(self) -> str:
        return os.path.join(self.root, "LOCK")


@dataclass(slots=True)
class _Pending:
    deleted: dict[tuple[int, int], set[int]] = field(default_factory=dict)


class Store:
    """WAL logging and checkpoints for one data directory (owned by one engine)."""

    def __init__(
        self,
        fs: Fs,
        paths: StorePaths,
        wal: Wal,
        generation: int,
        *,
        max_open_files: int = DEFAULT_MAX_OPEN_FILES,
        cold: ColdSource | None = None,
    ) -> None:
        self.fs = fs
        # Where sealed segments are read back from (rule 11); shared with recovery.
        self.cold = cold if cold is not None else ColdSource(fs, paths.segments, SegmentCache())
        self.handles = HandleCache(fs, max_open_files)  # rule 7
        self.paths = paths
        self.wal = wal
        self.generation = generation
        self.files: dict[tuple[int, int], SegmentFileState] = {}
        self._pending = _Pending()
        self._checkpoint_lock = trio.Lock()
        self._wal_bytes_at_checkpoint = 0
        self._changed = trio.Event()
        # The previous manifest is kept as a fallback (manifest.py keeps two generations), so
        # the WAL it needs and the segment files it lists stay until a newer one supersedes it.
        self.extensions: list[StoreExtension] = []
        self._prev_covered = 0
        self._prev_keep: set[tuple[int, int]] = set()
        # The body of the last manifest written here (None: none yet this boot).
        self._written_body: dict[str, Any] | None = None
        # Every topic's head as handed out, for a recovery on this boot (heads.py); set
        # by the engine once recovery is done, None where the system cannot use one.
        self.heads: HeadTable | None = None
        # The free-space reading and its reserve (rules 8 and 10); None: no check.
        self.space: DiskSpace | None = None
        # The WAL was last trimmed below this LSN (rule 10 writes one more manifest while
        # the space is low and entries up to the newest manifest's covered LSN remain).
        self._trimmed_below = 0
        # The sealed in-memory segments of ``disk``/``fsync`` topics the running checkpoint
        # snapshotted, with whether they hold tags (rule 11).
        self._sealed_hot: list[tuple[TopicLog, SegmentBuffer, bool]] = []
        # The cold segments whose delete flags the running checkpoint writes.
        self._flushing: list[tuple[ColdSegment, set[int]]] = []
        # Online backups streaming this directory (backup.py): while any runs, checkpoints
        # neither trim the WAL nor remove superseded segment files; the next checkpoint
        # with something to write does both (what was skipped is still behind the older
        # manifest).
        self.pins = 0

    def after_recovery(self, covered: int, files: dict[tuple[int, int], SegmentFileState]) -> None:
        """Adopt what recovery found: the loaded manifest is the fallback for the next one."""
        self.files = dict(files)
        self._prev_covered = covered
        self._prev_keep = set(files)

    # -- logging (synchronous; called right after the in-memory change) ----------------

    def _submit(self, kind: int, payload: bytes, sync: bool) -> WalTicket:
        ticket = self.wal.submit(kind, payload, sync=sync)
        self._changed.set()
        return ticket

    def log_topic(self, log: TopicLog, watermark: int) -> WalTicket:
        """Topic created or reconfigured (always synced: the control plane is durable)."""
        payload = entries.encode_topic_put(log.topic_id, log.name, log.config.to_dict(), watermark)
        if self.heads is not None:
            self.heads.track(log)  # before its first append can be seen (heads.py rule 1)
        return self._submit(entries.TOPIC_PUT, payload, True)

    def log_topic_delete(self, log: TopicLog) -> WalTicket:
        if self.heads is not None:
            self.heads.untrack(log)
        self._freeing()
        return self._submit(entries.TOPIC_DELETE, entries.encode_u64s(log.topic_id), True)

    def _freeing(self) -> None:
        """Rule 10: a delete while the space is low; its entry starts a new WAL file, so
        the current one (holding the deleted bytes) can be trimmed (wal.py Rule 10)."""
        if self.space is not None and self.space.low:
            self.wal.rotate_soon()

    def log_watermark(self, log: TopicLog, watermark: int) -> WalTicket:
        return self._submit(entries.WATERMARK, entries.encode_u64s(log.topic_id, watermark), True)

    def log_head(self, log: TopicLog, *, sync: bool = False) -> WalTicket:
        """The topic's exact head, releasing what it reserved above (entries.py rule 5).

        A release needs no sync: it survives a crash only together with every append
        before it, so it is true whenever it is replayed. A recovery's silent head jump
        is synced (it must hold before anything is appended after it).
        """
        payload = entries.encode_u64s(log.topic_id, log.head)
        return self._submit(entries.HEAD, payload, sync)

    def log_append(
        self,
        log: TopicLog,
        salt: int,
        frames: bytes,
        producer: ProducerClaim | None = None,
        key: str | None = None,
        *,
        fence: bool = False,
    ) -> WalTicket | None:
        """An applied batch; with ``producer``, that producer's new state in the same entry
        (entries.py rule 6). ``fence`` (the write raised the producer's epoch) syncs it
        whatever the class, so an acknowledged fence survives any crash."""
        durability = log.config.durability
        if durability == "ephemeral":
            if producer is not None and fence:
                return self.log_producer(log, producer.producer_id, sync=True)
            return None
        if producer is None:
            payload = entries.encode_append(log.topic_id, salt, frames)
            return self._submit(entries.APPEND, payload, durability == "fsync")
        payload = encode_append_producer(log.topic_id, salt, producer, key, frames)
        return self._submit(entries.APPEND_PRODUCER, payload, fence or durability == "fsync")

    def log_producer(self, log: TopicLog, producer_id: str, *, sync: bool) -> WalTicket:
        """A producer's state changed without an append (entries.py rule 6)."""
        payload = encode_producer(log.topic_id, producer_id, log.producers[producer_id])
        return self._submit(entries.PRODUCER, payload, sync)

    def log_delete_before(self, log: TopicLog, bound: int) -> WalTicket | None:
        if log.config.durability == "ephemeral":
            return None
        payload = entries.encode_u64s(log.topic_id, bound)
        self._freeing()
        return self._submit(entries.DELETE_BEFORE, payload, log.config.durability == "fsync")

    def log_delete_seqs(self, log: TopicLog, seqs: list[int]) -> WalTicket | None:
        if log.config.durability == "ephemeral" or not seqs:
            return None
        payload = entries.encode_u64s(log.topic_id, *seqs)
        self._freeing()
        return self._submit(entries.DELETE_SEQS, payload, log.config.durability == "fsync")

    def log_gap(self, log: TopicLog, marker: GapMarker) -> WalTicket:
        """A gap marker recovery made for a crash or WAL damage (synced: it must survive the
        next crash)."""
        values = [log.topic_id, marker.seq, marker.source_from, marker.source_to]
        if marker.reason == "corrupt":
            values.append(entries.GAP_CORRUPT)
        return self._submit(entries.GAP, entries.encode_u64s(*values), True)

    def log_extension(self, kind: int, payload: bytes, *, sync: bool) -> WalTicket:
        """Log a store extension's entry (routers, queues)."""
        if kind < entries.FIRST_EXTENSION_ENTRY:
            raise ValueError(f"entry type {kind} is reserved for topics")
        return self._submit(kind, payload, sync)

    def log_expire(self, log: TopicLog, bound: int) -> None:
        if log.config.durability == "ephemeral":
            return
        payload = entries.encode_u64s(log.topic_id, bound, log.ttl_floor)
        self._submit(entries.EXPIRE, payload, False)

    def pending_deleted(self, key: tuple[int, int]) -> set[int]:
        """Frame indexes of segment ``key`` whose flags the next checkpoint must flip."""
        return self._pending.deleted.setdefault(key, set())

    def note_deleted(self, log: TopicLog, seqs: Iterable[int]) -> None:
        """Remember flags flipped in memory that the next checkpoint must flip on disk."""
        pending = self._pending.deleted
        for seq in seqs:
            loc = log.locate(seq)
            if loc is not None:
                seg = log.segments[loc[0]]
                pending.setdefault((log.topic_id, seg.base_seq), set()).add(loc[1])

    # -- checkpoints ------------------------------------------------------------------

    async def run(
        self,
        registry: TopicRegistry,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Checkpoint periodically, and early when the WAL has grown a lot."""
        task_status.started()
        while True:
            low = self.space is not None and self.space.low
            with trio.move_on_after(LOW_SPACE_INTERVAL_S if low else CHECKPOINT_INTERVAL_S):
                while True:
                    await self._changed.wait()
                    self._changed = trio.Event()
                    if not low and self.space is not None and self.space.low:
                        break  # rule 10: space ran low during a 30 s wait; start now
                    grown = (
                        self.wal.statistics().bytes_written_total - self._wal_bytes_at_checkpoint
                    )
                    if grown >= CHECKPOINT_WAL_BYTES:
                        break
                    await trio.sleep(1.0)
            await self._checkpoint_retrying(registry)

    async def _checkpoint_retrying(self, registry: TopicRegistry) -> None:
        """One checkpoint, retried with backoff while descriptors or disk space run out
        (rules 7 and 8)."""
        delay = CHECKPOINT_RETRY_MIN_S
        while True:
            try:
                await self.checkpoint(registry)
                return
            except WalFullError as exc:
                log.warning("checkpoint deferred: %s; retrying in %.0f s", exc, delay)
            except OSError as exc:
                if is_no_space(exc):
                    hint = "free disk space in the data directory"
                elif out_of_descriptors(exc):
                    hint = "raise the open-file limit, or lower TOPICS_MAX_OPEN_FILES"
                else:
                    raise
                log.warning(
                    "checkpoint failed: %s; the WAL keeps every change, retrying in %.0f s (%s)",
                    exc,
                    delay,
                    hint,
                )
            await trio.sleep(delay)
            delay = min(delay * 2, CHECKPOINT_RETRY_MAX_S)

    async def checkpoint(self, registry: TopicRegistry, *, final: bool = False) -> None:
        """Write a checkpoint (rule 2: snapshot synchronously, then await the disk)."""
        async with self._checkpoint_lock:
            if self.wal.statistics().read_only:
                raise WalError("the WAL failed; no checkpoint until the engine is reopened")
            covered = self.wal.next_lsn - 1
            pending = self._pending.deleted
            idle = not pending and not final
            self._sealed_hot, self._flushing = [], []
            work, body = self._snapshot(registry, covered, final)
            keep = {w.key for w in work}
            if idle and self._unchanged(work, body, keep):
                # Nothing changed since the last one: the manifest (and its generation)
                # stays, so an offline reader's view of the directory stays valid too.
                return
            try:
                await self.wal.flush()  # rule 5: nothing here is ahead of the WAL
                await trio.to_thread.run_sync(check_room, self.space, work, body)
                await trio.to_thread.run_sync(
                    write_segments, self.fs, self.handles, work, abandon_on_cancel=False
                )
            except BaseException:
                for key, idxs in pending.items():
                    self.pending_deleted(key).update(idxs)
                raise
            for w in work:
                assert w.state is not None
                self.files[w.key] = w.state
            generation = self.generation + 1
            await trio.to_thread.run_sync(
                write_manifest,
                self.fs,
                self.paths.manifest,
                generation,
                body,
                abandon_on_cancel=False,
            )
            self.generation = generation
            self._written_body = body
            self._go_cold()
            prev_covered, prev_keep = self._prev_covered, self._prev_keep
            self._prev_covered, self._prev_keep = covered, keep
            self._wal_bytes_at_checkpoint = self.wal.statistics().bytes_written_total
            if self.pins:
                return  # a backup is reading these files (backup.py)
            await trio.to_thread.run_sync(self.wal.trim, prev_covered + 1, abandon_on_cancel=False)
            self._trimmed_below = prev_covered + 1
            # One union, not one per file: with 20,000 segment files the per-key union
            # held the event loop for over 30 s on the first checkpoint after a restart.
            listed = keep | prev_keep
            dropped = [(key, self.files.pop(key)) for key in list(self.files) if key not in listed]
            try:
                await trio.to_thread.run_sync(
                    remove_all, self.fs, self.handles, dropped, abandon_on_cancel=False
                )
            finally:
                # What a failure left (a removal that ran out of descriptors) stays listed,
                # so the next checkpoint removes it instead of leaving it until a restart.
                for key, state in dropped:
                    self.files.setdefault(key, state)

    def _go_cold(self) -> None:
        """Rule 11, once the manifest that lists their counters is durable: cold segments
        forget the delete flags this checkpoint wrote, and sealed in-memory segments whose
        files are sealed and whole leave memory."""
        for cold, idxs in self._flushing:
            cold.flushed(idxs)
        self._flushing = []
        for log, seg, tagged in self._sealed_hot:
            state = self.files.get((log.topic_id, seg.base_seq))
            if log.deleted or state is None or not state.sealed or state.written != seg.nbytes:
                continue
            pending = set(self._pending.deleted.get((log.topic_id, seg.base_seq), ()))
            swap_in_cold(log, seg, cold_from_buffer(self.cold, log, seg, pending, tagged=tagged))
        self._sealed_hot = []

    def _unchanged(
        self, work: list[SegmentWork], body: dict[str, Any], keep: set[tuple[int, int]]
    ) -> bool:
        """Rule 9: this checkpoint would write the last manifest again, with no segment
        work, no superseded file to drop and (rule 10) no WAL to trim while space is low."""
        return (
            body == self._written_body
            and not any(w.data or w.flag_offsets or w.seal for w in work)
            and keep.issuperset(self.files)
            and not self._trim_pending()
        )

    def _trim_pending(self) -> bool:
        """Rule 10: the space is low and one more manifest would let the WAL be trimmed
        up to the newest manifest's covered LSN."""
        low = self.space is not None and self.space.low
        return low and self._trimmed_below <= self._prev_covered

    def _snapshot(
        self, registry: TopicRegistry, covered: int, final: bool
    ) -> tuple[list[SegmentWork], dict[str, Any]]:
        pending, self._pending = dict(self._pending.deleted), _Pending()
        work: list[SegmentWork] = []
        topics: list[dict[str, Any]] = []
        for name in registry.names:
            log = registry.topics[name]
            segments = self._segments_of(log, pending, work)
            topics.append(
                {
                    "id": log.topic_id,
                    "name": log.name,
                    "config": log.config.to_dict(),
                    "head": log.head,
                    # A final (clean) checkpoint knows no seq above head was handed out.
                    # Otherwise a reservation logged at or below ``covered`` but not yet
                    # synced counts too: replay starts after it, and it may be settled
                    # (its seqs handed out) once this snapshot is taken.
                    "watermark": log.head
                    if final
                    else max(log.watermark, log.reserved_to, log.head),
                    "earliest": log.earliest,
                    "cap_floor": log.cap_floor,
                    "ttl_floor": log.ttl_floor,
                    "last_ts": log.last_ts,
                    "last_write_ts": log.last_write_ts,
                    "last_read_ts": log.last_read_ts,
                    "segments": segments,
                    "gaps": [
                        [g.seq, g.reason, g.missed_estimate, g.source_from, g.source_to]
                        for g in log.gaps
                    ],
                }
            )
            if log.restart_floor:  # absent, not 0: other topics' entries are unchanged
                topics[-1]["restart_floor"] = log.restart_floor
            if log.producers:  # absent, not empty: a manifest without producers is unchanged
                topics[-1]["producers"] = snapshot_producers(log.producers)
        body = {
            "format": 1,
            "covered_lsn": covered,
            "next_topic_id": registry.next_id,
            "topics": topics,
            "extensions": {ext.key: ext.snapshot() for ext in self.extensions},
        }
        return work, body

    def _segments_of(
        self, log: TopicLog, pending: dict[tuple[int, int], set[int]], work: list[SegmentWork]
    ) -> list[dict[str, Any]]:
        """``log``'s manifest entries, adding its segments' work to ``work`` (rules 6, 11)."""
        segments: list[dict[str, Any]] = []
        if log.config.durability == "ephemeral":
            return segments
        goes_cold = log.config.durability in COLD_CLASSES
        for seg in log.segments:
            key = (log.topic_id, seg.base_seq)
            if seg.nbytes == 0 and key not in self.files:
                continue  # rule 6
            tagged: bool | None = None
            if isinstance(seg, ColdSegment):
                tagged = seg.tagged
                if pending.get(key):
                    self._flushing.append((seg, set(pending[key])))
            elif seg.sealed and goes_cold:
                tagged = has_tag(seg)
                self._sealed_hot.append((log, seg, tagged))
            work.append(segment_work(self.files, self.paths.segments, log, seg, pending))
            segments.append(segment_entry(seg, tagged))
        return segments

    async def aclose(self, registry: TopicRegistry) -> None:
        """Final checkpoint (clean shutdown: exact heads, no watermark gaps), close the WAL."""
        try:
            with trio.move_on_after(30, shield=True):
                await self._final_checkpoint(registry)
        finally:
            self.handles.close()
            if self.heads is not None:
                self.heads.close()

    async def _final_checkpoint(self, registry: TopicRegistry) -> None:
        try:
            await self.wal.flush()
        except WalError:
            # Every write it failed was told so; a checkpoint now could make those
            # writes durable behind the callers' backs (rule 5). Recovery replays the
            # WAL up to its last good frame instead.
            await self.wal.aclose()
            return
        try:
            await self.checkpoint(registry, final=True)
        except OSError as exc:
            if not (out_of_descriptors(exc) or is_no_space(exc)):
                raise
            # Nothing is lost: the WAL holds every change and recovery replays it (rules 7, 8).
            log.warning("final checkpoint failed: %s; the next start replays the WAL", exc)
        await self.wal.aclose()
