"""Persistence glue of the engine: logging changes, reserving seqs, recovery.

The Engine owns one :class:`Durability` (built on its :class:`~topics._persistence.appender.Appender`)
and hands it to the subsystems that write. It owns how a change reaches the WAL
(``_persistence.store``) and what a caller waits for:

Rule 1: a change is applied in memory first and logged right after, with no await in
between, so WAL order is apply order (recovery replays it exactly).
Rule 2: before a write hands out seqs above a topic's durable watermark, a higher
watermark is logged and synced (``_reserve``): after a crash no seq is ever reused.
Rule 2a: a topic whose head has not moved for a whole ``RELEASE_AFTER_S`` releases what it
reserved above its head (a HEAD entry, unsynced: entries.py rule 5), so a crash keeps a
quiet topic's head exactly. A watermark entry logged before that release no longer counts
when its sync completes (``Appender.raise_watermark``); the next write reserves again.
Rule 3: only ``fsync``-class changes are awaited before the caller is answered; a WAL
failure then surfaces as the contract's ``internal`` error, never as a storage exception.
Rule 4 (a disk that fills): a change is refused with ``insufficient_storage`` *before*
anything is applied while the WAL is stalled on a full disk or the free space is below the
reserve (``Limits.min_free_bytes``), so a 507 with ``outcome: not_stored`` means exactly
that. A change already applied when the disk filled stays queued in the WAL (wal.py Rule
9): its caller gets 507 with ``outcome: unknown`` at once, and it becomes durable when
space returns. Both clear by themselves when space returns; no restart. Deleting topics
and records is the way out, so below the reserve (not on a WAL stalled on a full disk) those
deletes are still accepted (``Appender.check_freeing``): their WAL entries are small, and
the checkpoints that follow drop the deleted data's segment files and WAL bytes (store.py
rules 8 and 10), so writes resume once the space is back above the reserve.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from .._persistence.appender import WATERMARK_RESERVE, Appender
from .._persistence.recovery import recover
from .._persistence.store import Store, StoreExtension, StorePaths
from .._storage.fs import DirLock, Fs, RealFs
from .._storage.heads import HeadTable, read_heads
from .._storage.segment_cache import SegmentCache
from .._storage.space import DiskSpace
from .._storage.wal import Wal, WalStatistics, WalTicket
from ..log.cold_segment import ColdSource
from .scrub import Scrub

if TYPE_CHECKING:
    from ..log.producer_state import ProducerClaim
    from ..log.topic_log import TopicLog

__all__ = ["WATERMARK_RESERVE", "Durability", "open_data_dir"]
#: A topic whose head stayed put for this long (between one and two of these) releases its
#: reservation (Rule 2a). Shorter means more topics keep their head exactly through a power
#: loss (a killed process keeps every head exactly anyway: storage/heads.py); the cost is
#: one synced reservation (an fdatasync, ~4.5 ms here) for the first write after the pause.
#: At 0.1 s that was 78-92 % of the writes of a topic written every 50 ms .. 1.5 s, at 1 s
#: 5-8 % (three runs of bench/crash_heads.py; docs/BENCHMARKS.md).
RELEASE_AFTER_S = 1.0


class Durability:
    """Logging, seq reservations and recovery for one engine (see the module doc)."""

    def __init__(self, appender: Appender) -> None:
        self._app = appender
        self.scrub: Scrub | None = None  # running when Limits.scrub_bytes_per_s > 0

    async def log_append(
        self,
        log: TopicLog,
        salt: int,
        frames: bytes,
        created: bool,
        n: int,
        producer: ProducerClaim | None = None,
        key: str | None = None,
        *,
        fence: bool = False,
    ) -> tuple[float, float]:
        """Log an applied batch, then wake its listeners (watchers, queue streams, long
        polls, routers: apply -> WAL -> fan-out, in this one place for every write); for
        the fsync class wait until it is synced (§2). With ``producer`` the entry carries
        that producer's new state; ``fence`` (a raised epoch) waits for the sync in every
        class (_producers rule 3)."""
        app = self._app
        store = app.store
        if store is None:
            log.wake()
            await app.yield_point()
            return (0.0, 0.0)
        # A created topic's TOPIC_PUT and its first APPEND are queued with no await in
        # between, so another writer's APPEND of this topic can never precede them.
        put = target = None
        if created:
            target = max(log.head + max(WATERMARK_RESERVE, n), log.watermark)
            put = store.log_topic(log, target)
            log.reserved_to = max(log.reserved_to, target)
        ticket = store.log_append(log, salt, frames, producer, key, fence=fence)
        log.wake()  # the WAL entry is queued: the readers may see the batch now
        if put is not None and target is not None:
            await app.wait(put)
            app.raise_watermark(log, target, put)
        if ticket is None or (log.config.durability != "fsync" and not fence):
            await app.yield_point()
            return (0.0, 0.0)
        return await app.wait(ticket)

    def storage_gauges(self) -> dict[str, int]:
        """The ``topics_storage_*`` and ``topics_cache_*`` series of /v0/metrics (0s for a
        memory-only engine)."""
        space = self._app.space
        store = self._app.store
        cache = store.cold.cache.statistics() if store is not None else None
        return {
            "topics_storage_degraded": int(self._app.storage_state() != "ok"),
            "topics_storage_free_bytes": (space.free_bytes or 0) if space is not None else 0,
            "topics_storage_min_free_bytes": space.min_free_bytes if space is not None else 0,
            "topics_storage_damaged_files": len(self._app.damage),
            "topics_scrub_bytes_total": self.scrub.bytes_total if self.scrub else 0,
            "topics_scrub_passes_total": self.scrub.passes_total if self.scrub else 0,
            "topics_cache_bytes": cache.bytes if cache else 0,
            "topics_cache_capacity_bytes": cache.capacity if cache else 0,
            "topics_cache_segments": cache.entries if cache else 0,
            "topics_cache_hits_total": cache.hits if cache else 0,
            "topics_cache_misses_total": cache.misses if cache else 0,
            "topics_cache_evictions_total": cache.evictions if cache else 0,
            "topics_cache_load_errors_total": cache.load_errors if cache else 0,
        }

    def reserved(self, log: TopicLog, records: object) -> bool:
        """The synchronous part of :meth:`reserve`: True when the durable watermark
        already covers this batch (no await needed), after applying a reservation that
        was synced meanwhile and starting the next one once half of the current is used.
        """
        n = len(records) if isinstance(records, list | tuple) else 0
        pending = log.reservation
        if pending is not None and pending[1].done and not pending[1].failed:
            # (A failed one is left alone: the WAL is read-only, so check_serving refuses
            # every write before this point.)
            self._settle(log, pending)
        if log.head + n > log.watermark:
            return False
        if log.watermark - (log.head + n) < WATERMARK_RESERVE // 2 and log.reservation is None:
            store = self._app.store
            assert store is not None
            target = log.head + n + WATERMARK_RESERVE
            log.reservation = (target, store.log_watermark(log, target))
            log.reserved_to = max(log.reserved_to, target)
        return True

    async def reserve(
        self,
        name: str,
        log: TopicLog,
        records: object,
        create: object,
        config: Mapping[str, Any] | None,
    ) -> tuple[TopicLog, bool]:
        """Make the durable watermark cover this batch's seqs before any is handed out.

        Writers share one reservation in flight per topic: with many concurrent writers a
        reservation per writer would cost each of them a synced WAL round trip. The next
        reservation starts (unawaited) once half of the current one is used, so under a
        steady load no writer waits for it: by the time it is needed it is synced.
        """
        n = len(records) if isinstance(records, list | tuple) else 0
        app = self._app
        store = app.store
        assert store is not None
        created = False
        while not created and not self.reserved(log, records):
            # Looked up again on every turn: while this writer waited, others may have
            # used up what it waited for and started the next reservation already.
            pending = log.reservation
            if pending is None or pending[0] < log.head + n:
                target = log.head + n + max(WATERMARK_RESERVE, n)
                pending = (target, store.log_watermark(log, target))
                log.reservation = pending
                log.reserved_to = max(log.reserved_to, target)
            await app.wait(pending[1])
            self._settle(log, pending)
            log, created = app.topic_for_write(name, create, config)  # may be gone meanwhile
        return log, created

    def _settle(self, log: TopicLog, reservation: tuple[int, WalTicket]) -> None:
        """Apply a reservation whose ticket was committed (synced)."""
        self._app.raise_watermark(log, reservation[0], reservation[1])
        if log.reservation is reservation:
            log.reservation = None

    async def log_topic(self, log: TopicLog, reserve: int = 0) -> None:
        """Log a topic's creation or config; with ``reserve``, also reserve that many seqs."""
        app = self._app
        if app.store is None:
            return
        target = log.head + (max(WATERMARK_RESERVE, reserve) if reserve else 0)
        target = max(target, log.watermark)
        ticket = app.store.log_topic(log, target)
        log.reserved_to = max(log.reserved_to, target)
        await app.wait(ticket)
        app.raise_watermark(log, target, ticket)

    async def _release_quiet_topics(self) -> None:
        """Rule 2a, forever (a background task of the engine nursery)."""
        while True:
            await trio.sleep(RELEASE_AFTER_S)
            self.release_pass()

    def release_pass(self) -> None:
        """Release the reservation of every topic whose head stayed put since the last
        pass. Skipped while the WAL cannot take entries (they would only queue)."""
        store = self._app.store
        if store is None or store.wal.read_only or store.wal.full:
            return
        unreleased = self._app.unreleased
        for log, seen in list(unreleased.items()):
            pending = log.reservation
            if pending is not None and pending[1].done and not pending[1].failed:
                # The reservation a write started when half of the last one was used, and
                # no write came to settle it: settled here, or the topic never releases.
                self._settle(log, pending)
            if log.deleted or log.watermark <= log.head:
                del unreleased[log]
            elif seen != log.head or log.reservation is not None or log.reserved_to > log.watermark:
                unreleased[log] = log.head  # moved, or a reservation is in flight
            else:
                log.released_lsn = store.log_head(log).lsn
                log.watermark = log.reserved_to = log.head
                del unreleased[log]

    def wal_statistics(self) -> WalStatistics | None:
        """WAL counters for /v0/metrics, or None for a memory-only engine."""
        store = self._app.store
        return store.wal.statistics() if store is not None else None

    async def recover(
        self,
        nursery: trio.Nursery,
        fs: Fs,
        paths: StorePaths,
        extensions: Iterable[StoreExtension],
        start_services: Callable[[trio.Nursery], None],
    ) -> None:
        """Rebuild state from disk in a worker thread, then start the WAL and checkpoints;
        ``extensions`` (routers, queues, cursors) get their sections and entries back, and
        ``start_services`` starts the subsystems once the state is final."""
        app = self._app

        def progress(value: float) -> None:
            app.recovery_progress = min(value, 0.999)

        # Only a real file system has a page cache that outlives the process (heads.py).
        real = isinstance(fs, RealFs)
        handed_out = read_heads(paths.root) if real else None
        # One cache of sealed segments read back from their files, shared by recovery
        # (which reads the few a WAL replay touches) and the store (issue 31).
        cold = ColdSource(fs, paths.segments, SegmentCache(app.limits.cache_bytes), app.damage)
        run = partial(recover, fs, paths, repair=True, progress=progress, handed_out=handed_out)
        rec = await trio.to_thread.run_sync(lambda: run(cold=cold, damage=app.damage))
        wal = Wal.create(fs, paths.wal, next_lsn=rec.last_lsn + 1, file_no=rec.last_file_no + 1)
        store = Store(
            fs, paths, wal, rec.generation, max_open_files=app.limits.max_open_files, cold=cold
        )
        store.after_recovery(rec.covered_lsn, rec.files)
        for ext in extensions:
            logged = [(k, p) for k, p in rec.extension_entries if k in ext.entry_types]
            ext.restore(rec.extension_sections.get(ext.key), logged)
            store.extensions.append(ext)
        for key, idxs in rec.deleted.items():
            store.pending_deleted(key).update(idxs)
        app.registry = rec.registry
        app.total_bytes = sum(log.bytes for log in rec.registry.topics.values())
        app.store = store
        # The gap markers recovery made for head jumps exist only in memory: log them
        # (synced) before serving, so a second crash replays them at the same seqs.
        tickets = [store.log_gap(log, marker) for log, marker in rec.new_gaps]
        tickets += [store.log_head(log, sync=True) for log in rec.new_heads]
        await nursery.start(wal.run)
        app.space = DiskSpace(fs, paths.root, app.limits.min_free_bytes)
        store.space = app.space
        await nursery.start(app.space.run)
        for ticket in tickets:
            await app.wait(ticket)
        if real:
            store.heads = HeadTable.create(paths.root, rec.registry.topics.values())
        await nursery.start(store.run, rec.registry)
        nursery.start_soon(self._release_quiet_topics)
        if app.limits.scrub_bytes_per_s > 0:  # off by default (ops/scrub.py)
            self.scrub = Scrub(app, fs, paths.root, app.limits.scrub_bytes_per_s)
            nursery.start_soon(self.scrub.run)
        start_services(nursery)
        app.recovery_progress = 1.0


def open_data_dir(fs: Fs, data_dir: str) -> tuple[Fs, StorePaths, DirLock]:
    paths = StorePaths.for_dir(data_dir)
    fs.makedirs(paths.root)
    lock = fs.lock(paths.lock)
    for sub in (paths.wal, paths.segments, paths.manifest):
        fs.makedirs(sub)
    fs.sync_dir(paths.root)
    return fs, paths, lock
