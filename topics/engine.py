"""The Engine facade: the one object every frontend calls (contract §1-§5).

Each public method carries the contract (its signature and docstring) and hands its
arguments in one call to the plain class that does the work: ``_topic_ops`` (the topic
set, record deletes, gauges), ``_writes``, ``_read_ops`` (the diff), ``_routers``,
``_queue_ops``, ``_job_ops``, ``_cursor_ops``, ``_watch_ops``, ``_durability``, all over
one ``_appender``. Results are ``topics.types`` classes; errors are ``topics.errors``
classes carrying the wire code. The module is over the size rule's 600 lines on purpose:
the public methods' docstrings are the API reference (tests/unit/test_sizes.py).

Rules:
1. State changes happen in synchronous code between awaits (trio never interleaves
   there), so a method is atomic up to its first await and needs no lock.
2. Bad input raises before the first mutation: nothing stored changes on an error.
3. Time comes from the injected clock; retention is applied lazily at the start of
   every operation on a topic, so each answer is exact for the clock at that moment.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

import trio

from ._appender import Appender
from ._clock import Clock, SystemClock
from ._cursor_ops import CursorOps
from ._durability import Durability, open_data_dir
from ._job_ops import JobOps
from ._limits import DIFF_BYTE_BUDGET
from ._log import TopicLog
from ._queue_ops import QueueOps
from ._quotas import NamespaceQuotas, quotas_for
from ._read_ops import ReadOps
from ._routers import Routers
from ._storage.fs import Fs, RealFs

# MAX_PAGE_SIZE: frontends/http answers list pages with the engine's cap.
from ._topic_ops import MAX_PAGE_SIZE as MAX_PAGE_SIZE
from ._topic_ops import TopicOps
from ._watch_ops import DEFAULT_BATCH_BYTES, DEFAULT_HEARTBEAT_MS, WatchOps
from ._writes import Writes
from .settings import Limits
from .types import (
    DeleteRecordsResult,
    DeleteTopicResult,
    DiffResult,
    EngineStatistics,
    PutTopicResult,
    TopicPage,
    TopicState,
    WriteResult,
)

if TYPE_CHECKING:
    from ._cursors import Cursors
    from ._persistence.store import Store, StorePaths
    from ._queue_ops import WorkSession
    from ._queue_store import Queues
    from ._registry import TopicRegistry
    from ._storage.space import DiskSpace
    from ._storage.wal import WalStatistics
    from ._watch import StreamSlot, WatchHub, WatchStream
    from ._watch_feed import WatchFeed
    from .auth import Principal
    from .cursor_types import CursorInfo, DeleteCursorResult
    from .queue_types import AckResult, ClaimResult, ExtendResult, NackResult, RedriveResult
    from .router_types import DeleteRouterResult, PutRouterResult, RouterInfo, RouterPage
    from .watch_types import TopicWatermarks, WatchCreated, WatchStatistics

__all__ = ["DIFF_BYTE_BUDGET", "Engine", "open_engine"]


class Engine:
    """The topics engine. Open it with :func:`open_engine` (or ``topics.open`` for the
    synchronous facade); every method must be called from the engine's trio thread."""

    def __init__(self, *, clock: Clock | None = None, limits: Limits | None = None) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.limits = limits if limits is not None else Limits()
        # One appender for every subsystem: the registry, byte totals, retention, the
        # batch append, deletes, serving checks and waits (topics/_appender.py).
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
        # The topic set, record deletes and the gauges (topics/_topic_ops.py).
        self._topic_ops = TopicOps(
            app, durability, self._router_set, self._queue_ops, self._cursor_ops
        )
        self._sweep_retention = self._topic_ops.sweep_retention

    # -- topics (§1) ------------------------------------------------------------------

    async def put_topic(
        self, topic: str, config: Mapping[str, Any] | None = None
    ) -> PutTopicResult:
        """Create a topic or apply a config change (idempotent upsert, §1.1).

        Raises: invalid_request, topic_exists_incompatible (type change), throttled
        (max_topics).
        """
        return await self._topic_ops.put_topic(topic, config)

    async def get_topic(self, topic: str, *, touch: bool = True) -> TopicState:
        """Topic state (§1.2). ``touch`` bumps the auto-priority recency clock."""
        return await self._topic_ops.get_topic(topic, touch)

    async def list_topics(
        self,
        *,
        prefix: str | None = None,
        page_size: int = 100,
        cursor: str | None = None,
        touch: bool = False,
    ) -> TopicPage:
        """One page of topics in name order (§1.3)."""
        return await self._topic_ops.list_topics(prefix, page_size, cursor, touch)

    async def delete_topic(self, topic: str, *, if_empty: bool = False) -> DeleteTopicResult:
        """Delete a topic and everything it holds (§1.4). Absent: ``deleted=False``."""
        return await self._topic_ops.delete_topic(topic, if_empty)

    # -- writes (§2) ------------------------------------------------------------------

    async def write(
        self,
        topic: str,
        records: Sequence[Mapping[str, Any]],
        *,
        node: str | None = None,
        idempotency_key: str | None = None,
        create: bool | None = None,
        config: Mapping[str, Any] | None = None,
        return_seqs: bool = True,
        expected_head_seq: int | None = None,
        producer_id: str | None = None,
        epoch: int | None = None,
        dedupe: str | None = None,
        dedupe_ms: int | None = None,
        replace: bool | None = None,
    ) -> WriteResult:
        """Append a batch atomically (§2); checks in the order of docs/SEMANTICS.md rule 18.

        Args:
            records: mappings with "data" (any JSON value, or bytes of JSON text) and
                optional "tag", "node", "meta".
            expected_head_seq: append only if the topic's ``head_seq`` is exactly this
                (0 for an absent topic this write creates); compare-and-append.
            producer_id, epoch: fence older instances of this producer (both or neither):
                a write with an epoch below the highest one the topic has seen for
                ``producer_id`` is refused; its last batch's ``idempotency_key`` is
                deduplicated without a time window (topics/_producers.py).
            dedupe, dedupe_ms, replace: how the records' ``dedupe_key``s act on a queue
                (``"until_ack"`` or ``"window"`` for ``dedupe_ms``; ``replace`` swaps a
                held job never handed out for the new one: topics/_job_ops.py rule 3).
                Records of a queue may also carry ``deliver_at`` or ``delay_ms``.

        Raises: invalid_request, batch_too_large, record_too_large, topic_not_found,
        topic_full, throttled, head_mismatch (``detail.head_seq``: the actual head),
        producer_fenced (``detail.current_epoch``).

        Example::

            res = await engine.write("orders", [{"data": {"sku": "A1"}, "tag": "o-1"}])
            res.seqs  # [1]
        """
        return await self._writes.write(
            topic,
            records,
            node,
            idempotency_key,
            create,
            config,
            return_seqs,
            expected_head_seq,
            producer_id,
            epoch,
            dedupe,
            dedupe_ms,
            replace,
        )

    # -- reads (§3) -------------------------------------------------------------------

    async def diff(
        self,
        topic: str,
        *,
        from_seq: int = 0,
        limit: int = 0,
        node: str | list[str] | None = None,
        include_tags: bool = False,
        include_meta: bool = True,
        include_data: bool = True,
        wait_ms: int = 0,
        max_bytes: int = DIFF_BYTE_BUDGET,
        cursor: str | None = None,
        commit: bool = False,
        from_ts: int | None = None,
        to_ts: int | None = None,
        to_seq: int | None = None,
        where: object = None,
        format: str = "records",
        ce_type_field: str | None = None,
    ) -> DiffResult:
        """Records after ``from_seq`` (exclusive), windowed, with any tombstone (§3).

        Issue 18: ``from_ts`` starts at the first record with ``$ts >= from_ts`` (instead
        of ``from_seq``; echoed as ``result.from_seq``), ``to_ts``/``to_seq`` end the read
        inclusively (``result.end_reached``), ``where`` filters (topics/_where.py), and
        ``format="cloudevents"`` answers CloudEvents (``result.events``; the type from
        meta's ``ce_type_field``, default "type"). docs/SEMANTICS.md rules 29-32.

        ``wait_ms`` long-polls: a caught-up read with nothing to return waits for the next
        write (at most 30 s). ``cursor`` starts after a named cursor's committed seq
        instead of ``from_seq`` (_cursor_ops rule 1); ``commit`` then commits the answer's
        ``next_from_seq`` to it before answering (at most once: an answer lost on the way
        is not read again). Raises: invalid_request, topic_not_found (never creates).

        Example::

            res = await engine.diff("orders", from_seq=0, limit=100)
            for rec in res.records: ...
            cursor = res.next_from_seq
        """
        return await self._read_ops.diff(
            topic,
            from_seq,
            limit,
            node,
            include_tags,
            include_meta,
            include_data,
            wait_ms,
            max_bytes,
            cursor,
            commit,
            from_ts,
            to_ts,
            to_seq,
            where,
            format,
            ce_type_field,
        )

    # -- deletes (§5) -----------------------------------------------------------------

    async def delete_records(
        self, topic: str, *, before_seq: int | None = None, match: object = None
    ) -> DeleteRecordsResult:
        """Permanently delete records by seq bound and/or tag match (§5). Silent: no tombstone.

        Raises: invalid_request (neither given, bad match), topic_not_found.
        """
        return await self._topic_ops.delete_records(topic, before_seq, match)

    # -- operations -------------------------------------------------------------------

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

    def statistics(
        self, *, max_topic_gauges: int = 1000, include: Callable[[str], bool] | None = None
    ) -> EngineStatistics:
        """A frozen snapshot of the gauges /v0/metrics reports (§8.3).

        ``include`` limits the per-topic gauges (and what ``topic_gauges_truncated`` counts)
        to the names it accepts, e.g. a prefix-limited key's allowlist; the aggregates
        always cover every topic.
        """
        return self._topic_ops.statistics(max_topic_gauges, include)

    def storage_state(self) -> str:
        """``"ok"``, ``"below_reserve"``, ``"disk_full"`` (both clear by themselves when
        space returns) or ``"wal_failed"`` (refused until restart); for probes and metrics."""
        return self._app.storage_state()

    # -- routers (§6) -----------------------------------------------------------------

    async def put_router(
        self, router: str, body: Mapping[str, Any] | None = None
    ) -> PutRouterResult:
        """Create a router or apply a changed definition (idempotent upsert, §6).

        Forwarding is asynchronous and derived: a background worker copies every record
        appended to ``source`` after the router's creation into ``dest``; a write to
        ``source`` never waits for it. A PUT that changes ``source`` restarts at the new
        source's head; any other change keeps the router's cursor. An absent ``source``
        is auto-created on the router's behalf (default topic config), and so is an absent
        ``dest`` unless ``create_dest`` is false; only once every check passed, so a
        refused router leaves no topic behind.

        Args:
            router: the router name (topic charset plus ``>``, e.g. ``"orders->audit"``).
            body: ``source`` and ``dest`` (required), ``preserve_node``, ``preserve_tag``,
                ``create_dest``, ``filter``, ``allow_cycle``, ``guarantee``.

        Returns: ``created`` True only when this call made the router.

        Raises: invalid_request (bad field, missing source/dest, source == dest, bad
        filter), topic_not_found (dest absent with ``create_dest`` false),
        router_cycle (``detail.cycle``), topic_exists_incompatible (``detail.reason``
        ``router_dest_fan_in``), throttled (``max_routers``, or ``max_topics`` and the
        namespace quotas for the topics it would create).

        Example::

            await engine.put_router("orders->audit", {"source": "orders", "dest": "audit"})
        """
        return await self._router_set.put(router, body)

    async def get_router(self, router: str) -> RouterInfo:
        """A router's definition and forwarding state (§6). Raises: router_not_found."""
        return await self._router_set.get(router)

    async def list_routers(
        self,
        *,
        prefix: str | None = None,
        source: str | None = None,
        dest: str | None = None,
        page_size: int = 100,
        cursor: str | None = None,
    ) -> RouterPage:
        """One page of routers in name order, optionally only those with this ``source``
        or ``dest`` (§6). ``next_cursor`` is set only when more follow.

        Raises: invalid_request (bad page_size, malformed cursor).
        """
        return await self._router_set.page(prefix, source, dest, page_size, cursor)

    async def delete_router(self, router: str) -> DeleteRouterResult:
        """Delete a router: its worker stops at once; copies already in dest stay (§6).
        Absent: ``deleted=False``."""
        return await self._router_set.delete(router)

    @property
    def router_count(self) -> int:
        """Routers configured (the ``topics_routers`` gauge, §8.3)."""
        return len(self._router_set)

    # -- queues (§10) -----------------------------------------------------------------

    async def claim(
        self, topic: str, *, node: str, max: int = 1, lease_ms: int | None = None
    ) -> ClaimResult:
        """Lease up to ``max`` claimable jobs to ``node`` (§10.2).

        Args:
            node: the worker's identity (required; at most ``max_node_bytes``).
            max: jobs wanted, clamped to ``limits.max_claim`` (fewer, even none, is normal).
            lease_ms: lease duration (default the topic's ``lease_ms``), clamped
                [100, 86400000].

        Returns: the jobs ascending by seq, each with its ``lease_id``, absolute
        ``deadline`` and ``deliveries``; and ``ready``, what is claimable afterwards.

        Raises: invalid_request, topic_not_found, not_a_queue.

        Example::

            res = await engine.claim("jobs", node="w1", max=16)
            for job in res.claimed: ...
            await engine.ack("jobs", node="w1", seqs=res.seqs, lease_ids=res.lease_ids)
        """
        return await self._queue_ops.claim(topic, node=node, max=max, lease_ms=lease_ms)

    async def ack(
        self,
        topic: str,
        *,
        node: str,
        seqs: Sequence[int],
        lease_ids: Sequence[str] | None = None,
    ) -> AckResult:
        """Complete jobs held by ``node``: each is permanently deleted (§10.4).

        Seqs not currently leased to ``node`` (or whose lease id does not match, when
        ``lease_ids`` is given: one per seq) are skipped and reported; acking is idempotent.
        On an fsync-class queue the delete is synced before this returns.

        Raises: invalid_request, batch_too_large, topic_not_found, not_a_queue.
        """
        return await self._queue_ops.ack(topic, node=node, seqs=seqs, lease_ids=lease_ids)

    async def nack(
        self,
        topic: str,
        *,
        node: str,
        seqs: Sequence[int],
        delay_ms: int = 0,
        lease_ids: Sequence[str] | None = None,
    ) -> NackResult:
        """Release leases held by ``node``; each job is claimable again after ``delay_ms``
        (clamped [0, 86400000]; until then it counts as neither ready nor in flight) (§10.5).

        Raises: invalid_request, batch_too_large, topic_not_found, not_a_queue.
        """
        return await self._queue_ops.nack(
            topic, node=node, seqs=seqs, delay_ms=delay_ms, lease_ids=lease_ids
        )

    async def extend(
        self,
        topic: str,
        *,
        node: str,
        seqs: Sequence[int],
        lease_ms: int,
        lease_ids: Sequence[str] | None = None,
    ) -> ExtendResult:
        """Set the deadline of leases held by ``node`` to now + ``lease_ms`` (§10.6).

        Expired (reclaimed) or foreign leases are skipped; deliveries do not change.

        Raises: invalid_request (also for a missing lease_ms), batch_too_large,
        topic_not_found, not_a_queue.
        """
        return await self._queue_ops.extend(
            topic, node=node, seqs=seqs, lease_ms=lease_ms, lease_ids=lease_ids
        )

    def open_work_session(
        self, topic: str, *, node: str, max: int = 1, lease_ms: int | None = None
    ) -> AbstractAsyncContextManager[WorkSession]:
        """A PUSH-mode delivery session: keeps up to ``max`` jobs leased to this session.

        ``await session.next_jobs()`` waits until it can lease at least one more job
        without exceeding ``max`` in flight on this session, and returns them (a claim that
        joins the coalescing window like any other). Jobs are acked, nacked and extended
        through the ordinary methods. When the block exits (the connection closed, however),
        every lease delivered on this session and still held is released at once.

        Raises (at open): invalid_request, topic_not_found, not_a_queue. ``next_jobs``
        raises topic_not_found / not_a_queue if the topic is deleted or stops being a queue.
        """
        return self._queue_ops.open_work_session(topic, node=node, max=max, lease_ms=lease_ms)

    async def wait_claimable(self, topic: str, *, timeout_s: float = math.inf) -> bool:
        """Wait until the queue may have claimable jobs (or timeout); True if it has now.

        Wakes on appends, nacks, releases and acks, and when a lease or nack delay is due.
        Used by the worker helper for its idle wait.
        """
        return await self._queue_ops.wait_claimable(topic, timeout_s=timeout_s)

    # -- jobs (§10.9) -----------------------------------------------------------------

    async def redrive(
        self,
        topic: str,
        *,
        to: str | None = None,
        max: int | None = None,
        where: Mapping[str, Any] | None = None,
        may_touch: Callable[[str], bool] | None = None,
    ) -> RedriveResult:
        """Move dead-lettered jobs from ``topic`` back to their queue (or ``to``).

        Each job goes to ``to`` if given, else to the queue its ``$dead_letter_from``
        stamp names. The copy keeps ``data``, ``$tag`` and ``meta`` and gets provenance
        stamps (``$redrive_from``, ``$redrive_src_seq``, ``$redrive_origin``,
        ``$redrive_origin_seq``, ``$redrive_at``); it is a fresh job (deliveries start
        again). Jobs move in seq order, one atomic batch per target (module rule 4).

        Args:
            max: jobs to move at most (default 1000, at most 100000).
            where: ``{"origin": queue}`` only jobs dead-lettered from that queue;
                ``{"match": <tag match as in a delete>}`` only jobs whose tag matches.
            may_touch: the caller's name allowlist; a target outside it is ``forbidden``
                before anything moves.

        Raises: invalid_request, topic_not_found (``topic``, or ``to``), not_a_queue
        (``to`` is a log topic), forbidden.
        """
        return await self._job_ops.redrive(topic, to=to, max=max, where=where, may_touch=may_touch)

    # -- named cursors ----------------------------------------------------------------

    async def put_cursor(
        self, topic: str, cursor: str, seq: int, *, expect_seq: int | None = None
    ) -> CursorInfo:
        """Commit ``seq`` to the named cursor of ``topic`` (rules 1-3), creating it.

        Raises: invalid_request (bad name, seq above the head), topic_not_found,
        cursor_conflict (``expect_seq`` differs from the committed seq), throttled
        (``MAX_CURSORS_PER_TOPIC``).

        Example::

            await engine.put_cursor("orders", "billing", 41, expect_seq=40)
        """
        return await self._cursor_ops.put_cursor(topic, cursor, seq, expect_seq=expect_seq)

    async def get_cursor(self, topic: str, cursor: str) -> CursorInfo:
        """The named cursor with its lag. Raises: topic_not_found, cursor_not_found."""
        return await self._cursor_ops.get_cursor(topic, cursor)

    async def list_cursors(self, topic: str) -> list[CursorInfo]:
        """Every cursor of ``topic`` in name order, with its lag. Raises: topic_not_found."""
        return await self._cursor_ops.list_cursors(topic)

    async def delete_cursor(self, topic: str, cursor: str) -> DeleteCursorResult:
        """Forget the named cursor (absent: ``deleted=False``). Raises: topic_not_found."""
        return await self._cursor_ops.delete_cursor(topic, cursor)

    def cursor_lags(self, include: Callable[[str], bool] | None = None) -> list[CursorInfo]:
        """Every cursor of every topic ``include`` accepts (for /v0/metrics)."""
        return self._cursor_ops.cursor_lags(include)

    # -- live delivery (§7, §11) ------------------------------------------------------

    @property
    def watch_hub(self) -> WatchHub:
        """The engine's watch hub (created on first use); tests tune ``.settings`` here."""
        return self._watch_ops.watch_hub

    async def create_watch(
        self,
        topics: Mapping[str, Any],
        *,
        node: str | list[str] | None = None,
        limit: int = 0,
        max_batch_bytes: int = DEFAULT_BATCH_BYTES,
        heartbeat_ms: int = DEFAULT_HEARTBEAT_MS,
        include_meta: bool = True,
        include_tags: bool = False,
        include_data: bool = True,
        consistency: str = "eventual",
        lenient: bool = False,
        owner: Principal | None = None,
        topic_prefix: Mapping[str, Any] | list[str] | None = None,
        max_backlog: int = 0,
        on_backlog: str = "jump",
        where: object = None,
        format: str = "records",
        ce_type_field: str | None = None,
    ) -> WatchCreated:
        """Create a watch session (POST /v0/watch, §7.1).

        Kept whole: the signature and this docstring are the public contract, and the body
        is one call handing every argument to ``WatchOps.create_watch``.

        Args:
            topics: topic -> ``{"from_seq": n}`` or ``{"tail": true}`` (or ``{}``/None).
            lenient: drop unknown topics instead of failing (at least one must exist).
            owner: the key that creates it; only the same key opens its stream (None:
                auth disabled, the wid alone opens it).
            topic_prefix: prefix -> ``{"tail", "max_backlog"}``: every topic under it,
                now and created later (``topics`` may then be empty; _watch_prefix).
            max_backlog: the default per-topic backlog limit (0: none; _watch_guard).
            on_backlog: ``"jump"`` (a ``backlog-exceeded`` frame) or ``"error"`` (409 here).
            where, format, ce_type_field: filter every topic's records and/or deliver them
                as CloudEvents, as on a diff; a topic's options may also hold ``from_ts``,
                ``to_ts`` and ``to_seq`` (topics/_watch_bounds.py).

        Raises: invalid_request (malformed, no topics, over TOPICS_MAX_WATCH_TOPICS),
        forbidden (a prefix outside the owner's allowlist), topic_not_found,
        backlog_exceeded (409, with ``on_backlog: "error"``), throttled
        (TOPICS_MAX_WATCH_SESSIONS).

        Example::

            res = await engine.create_watch({"orders": {"from_seq": 0}})
            stream = engine.open_watch(res.wid)
        """
        return await self._watch_ops.create_watch(
            topics,
            node=node,
            limit=limit,
            max_batch_bytes=max_batch_bytes,
            heartbeat_ms=heartbeat_ms,
            include_meta=include_meta,
            include_tags=include_tags,
            include_data=include_data,
            consistency=consistency,
            lenient=lenient,
            owner=owner,
            topic_prefix=topic_prefix,
            max_backlog=max_backlog,
            on_backlog=on_backlog,
            where=where,
            format=format,
            ce_type_field=ce_type_field,
        )

    def open_watch(
        self,
        wid: str,
        *,
        owner: Principal | None = None,
        rewind: Mapping[str, int] | int | None = None,
    ) -> WatchStream:
        """Open the stream of session ``wid`` (GET /v0/watch/:wid, §7.3-§7.4).

        ``rewind`` is the decoded Last-Event-ID (a cursor map or a checkpoint frame
        number): it may move the session's cursors back, never forward. The caller owns
        the returned stream and must ``close()`` it.

        Raises: invalid_request (malformed wid), not_found, unauthorized, throttled.
        """
        return self._watch_ops.open_watch(wid, owner=owner, rewind=rewind)

    def close_watch(self, wid: str) -> bool:
        """Remove session ``wid`` now; an open stream ends with ``error`` 410."""
        return self._watch_ops.close_watch(wid)

    def open_watch_feed(self) -> WatchFeed:
        """An empty feed for a WebSocket connection (topics via ``watch_subscribe``)."""
        return self._watch_ops.open_watch_feed()

    def watch_subscribe(
        self,
        feed: WatchFeed,
        topics: Mapping[str, Any],
        *,
        node: str | list[str] | None = None,
        limit: int = 0,
        max_batch_bytes: int = DEFAULT_BATCH_BYTES,
        include_meta: bool = True,
        include_tags: bool = False,
        include_data: bool = True,
        consistency: str = "eventual",
        topic_prefix: Mapping[str, Any] | list[str] | None = None,
        max_backlog: int = 0,
        on_backlog: str = "jump",
        principal: Principal | None = None,
        where: object = None,
        format: str = "records",
        ce_type_field: str | None = None,
    ) -> dict[str, TopicWatermarks]:
        """Add (or restart) topics on ``feed`` (a WebSocket ``subscribe``, §7.x).

        All or nothing: every topic is checked before any is added. Returns each topic's
        start and watermarks. ``topic_prefix``, ``max_backlog`` and ``on_backlog`` as for
        :meth:`create_watch`; ``principal`` narrows the prefixes to its allowlist.
        Raises: invalid_request, forbidden, topic_not_found, backlog_exceeded.
        """
        return self._watch_ops.watch_subscribe(
            feed,
            topics,
            node=node,
            limit=limit,
            max_batch_bytes=max_batch_bytes,
            include_meta=include_meta,
            include_tags=include_tags,
            include_data=include_data,
            consistency=consistency,
            topic_prefix=topic_prefix,
            max_backlog=max_backlog,
            on_backlog=on_backlog,
            principal=principal,
            where=where,
            format=format,
            ce_type_field=ce_type_field,
        )

    def watch_prefixes(self, feed: WatchFeed) -> dict[str, Any]:
        """The ``topic_prefix`` entries ``feed`` joins new topics under (what each covers)."""
        return self._watch_ops.watch_prefixes(feed)

    def watch_unsubscribe_prefix(self, feed: WatchFeed, prefixes: tuple[str, ...]) -> list[str]:
        """Stop joining under ``prefixes`` on ``feed``; returns the topics they cover there
        (the caller removes them: a WebSocket ``unsubscribe`` of ``topic_prefix``)."""
        return self._watch_ops.watch_unsubscribe_prefix(feed, prefixes)

    def acquire_stream_slot(self, key_index: int) -> StreamSlot:
        """Count one long-lived connection (SSE or WebSocket) against the §11 caps.

        ``key_index`` is the key's position (-1 in dev mode: only the global cap applies).
        Release the slot when the connection ends. Raises: throttled.
        """
        return self._watch_ops.acquire_stream_slot(key_index)

    def watch_statistics(self) -> WatchStatistics:
        """Sessions held and long-lived connections open (for /v0/metrics)."""
        return self._watch_ops.watch_statistics()

    # -- storage ----------------------------------------------------------------------

    def storage_gauges(self) -> dict[str, int]:
        """The ``topics_storage_*`` gauges of /v0/metrics (0s for a memory-only engine)."""
        return self._durability.storage_gauges()

    def wal_statistics(self) -> WalStatistics | None:
        """WAL counters for /v0/metrics, or None for a memory-only engine."""
        return self._durability.wal_statistics()

    # -- the parts, for the engine's own background work and for tests ----------------
    # The subsystems use the appender; these names keep the engine's state readable (and a
    # crash simulable: ``_store = None``) for the tests and benchmarks that look inside.

    _wait_claimable = wait_claimable

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

    # -- helpers ----------------------------------------------------------------------

    def set_quota_namespaces(self, namespaces: Iterable[Sequence[str]]) -> None:
        """Bound the topics and routers under each prefix set (the prefix-limited API keys'
        allowlists) by ``max_topics_per_key``/``max_routers_per_key`` (topics/_quotas.py).

        Every creation path checks them, the engine's own (dead letters, router dests)
        included. The HTTP app calls this with its keys; without it no quota applies.
        """
        self._app.quotas = quotas_for(namespaces, self.limits)


@asynccontextmanager
async def open_engine(
    data_dir: str | None = None,
    *,
    clock: Clock | None = None,
    limits: Limits | None = None,
    fs: Fs | None = None,
    wait_ready: bool = True,
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

    Resource handling: the WAL writer, checkpointing and the retention sweep live in one
    nursery that closes with the block; closing flushes the WAL and writes a final
    checkpoint first.

    Raises:
        DataDirLockedError: another process has the data directory open.
    """
    engine = Engine(clock=clock, limits=limits)
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
