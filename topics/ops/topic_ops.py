"""The topic set, record deletes and the gauges behind the Engine facade (§1, §5, §8.3).

The public ``Engine.put_topic``, ``get_topic``, ``list_topics``, ``delete_topic``,
``delete_records`` and ``statistics`` are these methods (topics/_facade.py): their
signatures and docstrings are the API reference.

Rules:
1. A topic's deletion tells every subsystem that keeps state per topic (routers, queues,
   cursors) in the same synchronous step that removes it from the registry, then wakes
   its waiters; only then is the WAL entry awaited.
2. Auto-priority (docs/SEMANTICS.md rule 22): an explicit ``priority`` wins; otherwise a
   topic read within ``AUTO_PRIORITY_IDLE_MS`` gets ``AUTO_PRIORITY_MAX`` halved every
   ``AUTO_PRIORITY_HALF_LIFE_MS`` of idleness, and 0 after.
3. Retention is lazy (engine rule 3); :meth:`TopicOps.sweep_retention` expires TTL'd
   records in the background as well, so an idle topic releases its memory too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import trio

from .. import _args
from .._names import check_topic_name
from ..config import parse_config
from ..errors import InvalidRequestError, TopicExistsIncompatibleError, TopicNotEmptyError
from ..log.cold_log import tagged_seqs
from ..log.registry import decode_list_cursor, encode_list_cursor
from ..types import (
    DeleteRecordsResult,
    DeleteTopicResult,
    EngineStatistics,
    PutTopicResult,
    TopicGauge,
    TopicPage,
    TopicState,
    TopicSummary,
)

if TYPE_CHECKING:
    from .._persistence.appender import Appender
    from .._storage.wal import WalTicket
    from ..cursors.ops import CursorOps
    from ..log.topic_log import TopicLog
    from ..queues.ops import QueueOps
    from ..routers.ops import Routers
    from .durability import Durability

__all__ = ["MAX_PAGE_SIZE", "TopicOps"]

MAX_PAGE_SIZE = 1000
RETENTION_SWEEP_S = 1.0

# Auto-priority (rule 2).
AUTO_PRIORITY_MAX = 500
AUTO_PRIORITY_HALF_LIFE_MS = 30_000
AUTO_PRIORITY_IDLE_MS = 300_000


class TopicOps:
    """The topic set's operations over the appender, told to the per-topic subsystems."""

    def __init__(
        self,
        appender: Appender,
        durability: Durability,
        routers: Routers,
        queue_ops: QueueOps,
        cursor_ops: CursorOps,
    ) -> None:
        self._app = appender
        self.clock = appender.clock
        self._routers = routers
        self._queue_ops = queue_ops
        self._cursor_ops = cursor_ops
        self._started_ms = self.clock.now_ms()
        self._log_topic = durability.log_topic
        self._queue_counters = queue_ops.queue_counters

    async def put_topic(
        self, topic: str, config: Mapping[str, Any] | None = None
    ) -> PutTopicResult:
        """Create a topic or apply a config change (idempotent upsert, §1.1).

        Raises: invalid_request, topic_exists_incompatible (type change), throttled
        (max_topics).
        """
        app = self._app
        name = check_topic_name(topic)
        app.check_serving()
        log = app.registry.get(name)
        if log is None:
            cfg = parse_config(config, None, name)
            app.check_topic_cap(name)
            log = app.registry.create(name, cfg)
            await self._log_topic(log)
            return PutTopicResult(name, True, cfg)
        cfg = parse_config(config, log.config, name)
        app.apply_retention(log)  # what the old config already expired stays expired
        if cfg.type != log.config.type:
            raise TopicExistsIncompatibleError(
                f'topic "{name}" is a {log.config.type}; its type cannot change to {cfg.type}',
                detail={"topic": name, "type": log.config.type, "requested_type": cfg.type},
            )
        changed = cfg != log.config
        log.config = cfg
        app.apply_retention(log)  # a tightened cap/ttl applies to what is stored now
        if changed:
            await self._log_topic(log)
        return PutTopicResult(name, False, cfg)

    async def get_topic(self, topic: str, *, touch: bool = True) -> TopicState:
        """Topic state (§1.2). ``touch`` bumps the auto-priority recency clock."""
        touch = _args.bool_arg("touch", touch)
        self._app.check_ready()
        log = self._app.live_topic(check_topic_name(topic))
        now = self.clock.now_ms()
        if touch:
            log.last_read_ts = now
        await self._app.yield_point()
        return TopicState(
            topic=log.name,
            type=log.config.type,
            head_seq=log.head,
            earliest_seq=log.earliest,
            next_seq=log.head + 1,
            count=log.count,
            bytes=log.bytes,
            config=log.config,
            effective_priority=priority(log, now),
            last_write_ts=log.last_write_ts,
            last_read_ts=log.last_read_ts,
            queue=self._queue_counters(log),
        )

    async def list_topics(
        self,
        *,
        prefix: str | None = None,
        page_size: int = 100,
        cursor: str | None = None,
        touch: bool = False,
    ) -> TopicPage:
        """One page of topics in name order (§1.3)."""
        if prefix is not None and not isinstance(prefix, str):
            raise InvalidRequestError.for_field("prefix", "must be a string")
        size = _args.u64("page_size", page_size)
        if size == 0:
            raise InvalidRequestError.for_field("page_size", "must be at least 1")
        after = decode_list_cursor(cursor) if cursor is not None else None
        touch = _args.bool_arg("touch", touch)
        self._app.check_ready()
        logs, last = self._app.registry.page(prefix or "", after, min(size, MAX_PAGE_SIZE))
        now = self.clock.now_ms()
        summaries = []
        for log in logs:
            self._app.apply_retention(log, now)
            if touch:
                log.last_read_ts = now
            summaries.append(summary(log, now))
        await self._app.yield_point()
        return TopicPage(summaries, encode_list_cursor(last) if last is not None else None)

    async def delete_topic(self, topic: str, *, if_empty: bool = False) -> DeleteTopicResult:
        """Delete a topic and everything it holds (§1.4, rule 1). Absent: ``deleted=False``."""
        app = self._app
        name = check_topic_name(topic)
        if_empty = _args.bool_arg("if_empty", if_empty)
        app.check_freeing()  # allowed below the reserve: it is how space comes back
        log = app.registry.get(name)
        if log is None:
            return DeleteTopicResult(name, False, [])
        app.apply_retention(log)
        if if_empty and log.count > 0:
            raise TopicNotEmptyError(
                f'topic "{name}" holds {log.count} records',
                detail={"topic": name, "count": log.count},
            )
        app.registry.remove(name)
        app.total_bytes -= log.bytes
        log.deleted = True
        routers = self._routers.on_topic_deleted(log)
        self._queue_ops.on_topic_deleted(log)
        self._cursor_ops.on_topic_deleted(log)
        log.wake()
        if app.store is not None:
            await app.wait(app.store.log_topic_delete(log))
        return DeleteTopicResult(name, True, routers)

    async def delete_records(
        self, topic: str, *, before_seq: int | None = None, match: object = None
    ) -> DeleteRecordsResult:
        """Permanently delete records by seq bound and/or tag match (§5). Silent: no tombstone.

        Raises: invalid_request (neither given, bad match), topic_not_found.
        """
        app = self._app
        name = check_topic_name(topic)
        if before_seq is None and match is None:
            raise InvalidRequestError(
                "give before_seq, match, or both", detail={"field": "before_seq"}
            )
        before = _args.u64("before_seq", before_seq) if before_seq is not None else None
        spec = _args.match_arg(match) if match is not None else None
        app.check_freeing()
        log = app.live_topic(name)
        bound = log.head + 1 if before is None else min(before, log.head + 1)
        ticket: WalTicket | None = None
        if spec is None:
            bytes_before = log.bytes
            deleted = log.delete_before(bound)
            app.total_bytes -= bytes_before - log.bytes
            if deleted and app.store is not None:
                ticket = app.store.log_delete_before(log, bound)
        else:
            op, operand = spec
            seqs = tagged_seqs(log, op, operand, bound)
            deleted, ticket = app.delete_seqs(log, seqs)
        fsync_ms = 0.0
        if ticket is not None and log.config.durability == "fsync":
            fsync_ms = (await app.wait(ticket))[1]
        else:
            await app.yield_point()
        return DeleteRecordsResult(
            name, deleted, log.earliest, log.head, log.count, log.bytes, fsync_ms
        )

    def statistics(
        self, *, max_topic_gauges: int = 1000, include: Callable[[str], bool] | None = None
    ) -> EngineStatistics:
        """A frozen snapshot of the gauges /v0/metrics reports (§8.3).

        ``include`` limits the per-topic gauges (and what ``topic_gauges_truncated`` counts)
        to the names it accepts, e.g. a prefix-limited key's allowlist; the aggregates
        always cover every topic.
        """
        app = self._app
        by_class = dict.fromkeys(("ephemeral", "memory", "disk", "fsync"), 0)
        records = queues = leases = visible = 0
        gauges: list[TopicGauge] = []
        for name in app.registry.names:
            log = app.registry.topics[name]
            by_class[log.config.durability] += 1
            records += log.count
            counters = self._queue_counters(log)
            if counters is not None:
                queues += 1
                leases += counters["in_flight"]
            if include is not None and not include(name):
                continue
            visible += 1
            if len(gauges) < max_topic_gauges:
                gauges.append(gauge(log, counters))
        return EngineStatistics(
            ready=app.recovery_progress >= 1.0,
            recovery_progress=app.recovery_progress,
            uptime_ms=max(0, self.clock.now_ms() - self._started_ms),
            topics=len(app.registry),
            topics_by_class=by_class,
            queue_topics=queues,
            records_live=records,
            bytes_live=app.total_bytes,
            topic_gauges=gauges,
            topic_gauges_truncated=visible > len(gauges),
            routers=len(self._routers),
            queue_leases_in_flight=leases,
        )

    async def sweep_retention(self) -> None:
        """Expire TTL'd records in the background so idle topics release memory too."""
        while True:
            await trio.sleep(RETENTION_SWEEP_S)
            for log in list(self._app.registry.topics.values()):
                if log.config.ttl_ms:
                    self._app.apply_retention(log)


def gauge(log: TopicLog, counters: Mapping[str, int] | None) -> TopicGauge:
    """One topic's gauges for :meth:`TopicOps.statistics` (``counters``: a queue's)."""
    ready, in_flight, scheduled = (
        (counters["ready"], counters["in_flight"], counters["scheduled"])
        if counters
        else (None, None, None)
    )
    return TopicGauge(
        log.name,
        log.head,
        log.earliest,
        log.count,
        log.bytes,
        queue_ready=ready,
        queue_in_flight=in_flight,
        queue_scheduled=scheduled,
    )


def priority(log: TopicLog, now: int) -> int:
    """A topic's effective priority at ``now`` (rule 2)."""
    cfg = log.config
    if cfg.priority is not None:
        return cfg.priority
    if not cfg.auto_priority or log.last_read_ts is None:
        return 0
    idle = now - log.last_read_ts
    if idle >= AUTO_PRIORITY_IDLE_MS:
        return 0
    return round(AUTO_PRIORITY_MAX * 2 ** (-max(idle, 0) / AUTO_PRIORITY_HALF_LIFE_MS))


def summary(log: TopicLog, now: int) -> TopicSummary:
    """A topic's line in a :class:`TopicPage`."""
    return TopicSummary(
        topic=log.name,
        type=log.config.type,
        head_seq=log.head,
        earliest_seq=log.earliest,
        count=log.count,
        bytes=log.bytes,
        durable=log.config.durable,
        durability=log.config.durability,
        effective_priority=priority(log, now),
    )
