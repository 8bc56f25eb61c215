"""The Engine facade: the one object every frontend calls (contract §1-§5).

The class is a table: each public method is the method of the same concern's plain class
(``Via``, topics/_facade.py; a built engine binds each name to its part's method), where
its signature and docstring (the API reference) are written once beside the code that
does the work: ``_topic_ops`` (the topic set, record deletes, gauges), ``_writes``,
``_read_ops`` (the diff), ``_router_set``, ``_queue_ops``, ``_job_ops``, ``_cursor_ops``,
``_watch_ops``, ``_durability`` and ``_backup_ops``, all over one ``_appender``. Results are
``topics.types`` classes; errors are ``topics.errors`` classes carrying the wire code.

Rules:
1. State changes happen in synchronous code between awaits (trio never interleaves
   there), so a method is atomic up to its first await and needs no lock.
2. Bad input raises before the first mutation: nothing stored changes on an error.
3. Time comes from the injected clock; retention is applied lazily at the start of
   every operation on a topic, so each answer is exact for the clock at that moment.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

from ._clock import Clock, SystemClock
from ._facade import Via, bind_parts
from ._limits import DIFF_BYTE_BUDGET
from ._persistence.appender import Appender
from ._storage.fs import Fs, RealFs
from .cursors.ops import CursorOps
from .log.quotas import quotas_for
from .ops.backups import BackupOps
from .ops.durability import Durability, open_data_dir
from .ops.read_ops import ReadOps

# MAX_PAGE_SIZE: frontends/http answers list pages with the engine's cap.
from .ops.topic_ops import MAX_PAGE_SIZE as MAX_PAGE_SIZE
from .ops.topic_ops import TopicOps
from .ops.writes import Writes
from .queues.job_ops import JobOps
from .queues.ops import QueueOps
from .routers.ops import Routers
from .settings import Limits, with_cache_bytes
from .watch.ops import WatchOps

if TYPE_CHECKING:
    from ._persistence.store import Store, StorePaths
    from ._storage.space import DiskSpace
    from .cursors.store import Cursors
    from .log.quotas import NamespaceQuotas
    from .log.registry import TopicRegistry
    from .log.topic_log import TopicLog
    from .queues.store import Queues
    from .watch.hub import WatchHub

__all__ = ["DIFF_BYTE_BUDGET", "Engine", "open_engine"]


class Engine:
    """The topics engine. Open it with :func:`open_engine` (or ``topics.open`` for the
    synchronous facade); every method must be called from the engine's trio thread."""

    def __init__(self, *, clock: Clock | None = None, limits: Limits | None = None) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.limits = limits if limits is not None else Limits()
        # One appender for every subsystem: the registry, byte totals, retention, the
        # batch append, deletes, serving checks and waits (topics/_persistence/appender.py).
        app = self._app = Appender(self.clock, self.limits)
        durability = self._durability = Durability(app)
        self._router_set = Routers(app)
        self._queue_ops = QueueOps(app, self.write)
        self._job_ops = JobOps(app, durability, self._queue_ops)
        self._cursor_ops = CursorOps(app)
        self._watch_ops = WatchOps(app, self._cursor_ops)
        # The write and diff machinery (the hot paths), each a plain class of its own.
        self._writes = Writes(app, durability, self._job_ops)
        self._read_ops = ReadOps(app, self._cursor_ops)
        # The topic set, record deletes and the gauges (topics/ops/topic_ops.py).
        self._topic_ops = TopicOps(
            app, durability, self._router_set, self._queue_ops, self._cursor_ops
        )
        self._sweep_retention = self._topic_ops.sweep_retention
        self._backup_ops = BackupOps(app)
        bind_parts(self)  # engine.write is self._writes.write from here on (_facade rule 2)

    # -- topics (§1), writes (§2), reads (§3), deletes (§5) ----------------------------

    put_topic = Via("_topic_ops", TopicOps.put_topic)
    get_topic = Via("_topic_ops", TopicOps.get_topic)
    list_topics = Via("_topic_ops", TopicOps.list_topics)
    delete_topic = Via("_topic_ops", TopicOps.delete_topic)
    write = Via("_writes", Writes.write)
    diff = Via("_read_ops", ReadOps.diff)
    delete_records = Via("_topic_ops", TopicOps.delete_records)

    # -- routers (§6) -----------------------------------------------------------------

    put_router = Via("_router_set", Routers.put_router)
    get_router = Via("_router_set", Routers.get_router)
    list_routers = Via("_router_set", Routers.list_routers)
    delete_router = Via("_router_set", Routers.delete_router)

    @property
    def router_count(self) -> int:
        """Routers configured (the ``topics_routers`` gauge, §8.3)."""
        return len(self._router_set)

    # -- queues (§10) and dead-letter jobs (§10.9) ---------------------------------------

    claim = Via("_queue_ops", QueueOps.claim)
    ack = Via("_queue_ops", QueueOps.ack)
    nack = Via("_queue_ops", QueueOps.nack)
    extend = Via("_queue_ops", QueueOps.extend)
    open_work_session = Via("_queue_ops", QueueOps.open_work_session)
    wait_claimable = Via("_queue_ops", QueueOps.wait_claimable)
    redrive = Via("_job_ops", JobOps.redrive)

    # -- named cursors ----------------------------------------------------------------

    put_cursor = Via("_cursor_ops", CursorOps.put_cursor)
    get_cursor = Via("_cursor_ops", CursorOps.get_cursor)
    list_cursors = Via("_cursor_ops", CursorOps.list_cursors)
    delete_cursor = Via("_cursor_ops", CursorOps.delete_cursor)
    cursor_lags = Via("_cursor_ops", CursorOps.cursor_lags)

    # -- live delivery (§7, §11) ------------------------------------------------------

    create_watch = Via("_watch_ops", WatchOps.create_watch)
    open_watch = Via("_watch_ops", WatchOps.open_watch)
    close_watch = Via("_watch_ops", WatchOps.close_watch)
    open_watch_feed = Via("_watch_ops", WatchOps.open_watch_feed)
    watch_subscribe = Via("_watch_ops", WatchOps.watch_subscribe)
    watch_prefixes = Via("_watch_ops", WatchOps.watch_prefixes)
    watch_unsubscribe_prefix = Via("_watch_ops", WatchOps.watch_unsubscribe_prefix)
    acquire_stream_slot = Via("_watch_ops", WatchOps.acquire_stream_slot)
    watch_statistics = Via("_watch_ops", WatchOps.watch_statistics)

    @property
    def watch_hub(self) -> WatchHub:
        """The engine's watch hub (created on first use); tests tune ``.settings`` here."""
        return self._watch_ops.watch_hub

    # -- operations and storage (§8) --------------------------------------------------

    statistics = Via("_topic_ops", TopicOps.statistics)
    storage_gauges = Via("_durability", Durability.storage_gauges)
    wal_statistics = Via("_durability", Durability.wal_statistics)
    open_backup = Via("_backup_ops", BackupOps.open_backup)
    backup = Via("_backup_ops", BackupOps.backup)

    @property
    def ready(self) -> bool:
        """True once recovery is complete and the engine serves requests (§8.2)."""
        return self._app.recovery_progress >= 1.0

    @property
    def recovery_progress(self) -> float:
        """0.0-1.0 while recovering; 1.0 when ready."""
        return self._app.recovery_progress

    @property
    def topic_count(self) -> int:
        """Number of live topics (O(1); for /v0/ready)."""
        return len(self._app.registry)

    def storage_state(self) -> str:
        """``"ok"``, ``"below_reserve"``, ``"disk_full"`` (both clear by themselves when
        space returns) or ``"wal_failed"`` (refused until restart); for probes and metrics."""
        return self._app.storage_state()

    def set_quota_namespaces(self, namespaces: Iterable[Sequence[str]]) -> None:
        """Bound the topics and routers under each prefix set (the prefix-limited API keys'
        allowlists) by ``max_topics_per_key``/``max_routers_per_key`` (topics/log/quotas.py).

        Every creation path checks them, the engine's own (dead letters, router dests)
        included. The HTTP app calls this with its keys; without it no quota applies.
        """
        self._app.quotas = quotas_for(namespaces, self.limits)

    # -- the parts, for the engine's own background work and for tests ----------------
    # The subsystems use the appender; these names keep the engine's state readable (and a
    # crash simulable: ``_store = None``) for the tests and benchmarks that look inside.

    @property
    def _registry(self) -> TopicRegistry:
        return self._app.registry

    @property
    def _store(self) -> Store | None:
        return self._app.store

    @_store.setter
    def _store(self, store: Store | None) -> None:
        self._app.store = store  # a test's crash: no final checkpoint

    @property
    def _space(self) -> DiskSpace | None:
        return self._app.space

    @property
    def _recovery_progress(self) -> float:
        return self._app.recovery_progress

    @_recovery_progress.setter
    def _recovery_progress(self, value: float) -> None:
        self._app.recovery_progress = value

    @property
    def _quotas(self) -> NamespaceQuotas | None:
        return self._app.quotas

    @property
    def _queues(self) -> Queues:
        return self._queue_ops.queues

    @property
    def _cursors(self) -> Cursors:
        return self._cursor_ops.cursors

    def _commit_delivered(self, log: TopicLog, cursor: str, seq: int) -> None:
        self._cursor_ops.commit_delivered(log, cursor, seq)

    def _release_pass(self) -> None:
        self._durability.release_pass()

    async def _recover(self, nursery: trio.Nursery, fs: Fs, paths: StorePaths) -> None:
        """Rebuild state from disk, then start the WAL, checkpoints and the subsystems."""
        extensions = (self._router_set, self._queue_ops.queues, self._cursor_ops.cursors)
        await self._durability.recover(nursery, fs, paths, extensions, self._start_services)

    def _start_services(self, nursery: trio.Nursery) -> None:
        """Start the subsystems' background work once state is final (after recovery)."""
        self._router_set.start(nursery)
        self._queue_ops.start()
        self._cursor_ops.start()


@asynccontextmanager
async def open_engine(
    data_dir: str | None = None,
    *,
    clock: Clock | None = None,
    limits: Limits | None = None,
    fs: Fs | None = None,
    wait_ready: bool = True,
    cache_bytes: int | None = None,
) -> AsyncIterator[Engine]:
    """Open an engine for the duration of an ``async with`` block.

    Args:
        data_dir: the data directory (created if absent; one writer at a time), or None
            for a memory-only engine (nothing survives the process).
        clock: time source (a ``ManualClock`` in tests).
        limits: hard limits and resource caps (default: the contract's defaults).
        fs: the file-system seam (tests pass a fake disk).
        wait_ready: finish recovery before returning (library use). A server passes False
            to listen at once and answer 503 not_ready while recovery runs.
        cache_bytes: memory for sealed segments read back from their files (default
            ``TOPICS_CACHE_BYTES``, else 256 MiB; ``Limits.cache_bytes``). ``disk`` and
            ``fsync`` topics keep older history in their files, not in memory.

    Resource handling: the WAL writer, checkpointing and the retention sweep live in one
    nursery that closes with the block; closing flushes the WAL and writes a final
    checkpoint first.

    Raises:
        DataDirLockedError: another process has the data directory open.
    """
    engine = Engine(clock=clock, limits=with_cache_bytes(limits, cache_bytes))
    # Taken before the nursery opens, so a held lock is a plain DataDirLockedError.
    storage = open_data_dir(fs if fs is not None else RealFs(), data_dir) if data_dir else None
    try:
        async with trio.open_nursery() as nursery:
            engine._app.nursery = nursery
            if storage is not None:
                engine._app.recovery_progress = 0.0
                if wait_ready:
                    await engine._recover(nursery, storage[0], storage[1])
                else:
                    nursery.start_soon(engine._recover, nursery, storage[0], storage[1])
            else:
                engine._start_services(nursery)
            nursery.start_soon(engine._sweep_retention)
            try:
                yield engine
            finally:
                engine._app.closed = True
                if engine._app.store is not None:
                    await engine._app.store.aclose(engine._app.registry)
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The nursery wraps whatever the caller's block raised; a library user expects
        # that exception itself (TopicNotFoundError, not a group of one).
        leaves = _leaves(group)
        if len(leaves) != 1:
            raise
        raise leaves[0] from None
    finally:
        if storage is not None:
            storage[2].release()


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out
