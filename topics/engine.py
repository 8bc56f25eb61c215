"""The Engine facade: the one object every frontend calls (contract §1-§5).

Each public method checks its arguments, resolves the topic, calls one subsystem
(``_log`` for records, ``_registry`` for the topic set) and returns a result from
``topics.types``; errors are ``topics.errors`` classes carrying the wire code.

Rules:
1. State changes happen in synchronous code between awaits (trio never interleaves
   there), so a method is atomic up to its first await and needs no lock.
2. Bad input raises before the first mutation: nothing stored changes on an error.
3. Time comes from the injected clock; retention is applied lazily at the start of
   every operation on a topic, so each answer is exact for the clock at that moment.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from dataclasses import replace as replace_fields
from typing import Any

import trio
import ujson

from . import _args
from ._clock import Clock, SystemClock
from ._cloudevents import check_format, to_cloudevents
from ._core import RENDER_DATA, RENDER_META, RENDER_TAGS, FrameError, encode_batch
from ._cursor_ops import CursorOps
from ._durability import DurabilityOps, open_data_dir
from ._job_ops import JobOps
from ._limits import DIFF_BYTE_BUDGET
from ._log import DedupeEntry, TopicLog
from ._names import check_topic_name
from ._persistence.store import Store
from ._producer_state import ProducerClaim, ProducerState
from ._producers import check_expected_head, check_producer, producer_arg
from ._queue_ops import QueueOps
from ._quotas import NamespaceQuotas
from ._reads import read_bounds, read_diff
from ._registry import TopicRegistry, decode_list_cursor, encode_list_cursor
from ._router_ops import RouterOps
from ._storage.fs import Fs, RealFs
from ._storage.wal import WalTicket
from ._watch_ops import WatchOps
from .config import TopicConfig, parse_config
from .errors import (
    BatchTooLargeError,
    InvalidRequestError,
    NotReadyError,
    RecordTooLargeError,
    ThrottledError,
    TopicExistsIncompatibleError,
    TopicFullError,
    TopicNotEmptyError,
    TopicNotFoundError,
)
from .record_fields import first_unknown_field, unknown_field_error
from .settings import Limits
from .types import (
    DeleteRecordsResult,
    DeleteTopicResult,
    DiffResult,
    EngineStatistics,
    PutTopicResult,
    TopicGauge,
    TopicPage,
    TopicState,
    TopicSummary,
    WriteResult,
)

__all__ = ["DIFF_BYTE_BUDGET", "Engine", "open_engine"]

DEFAULT_LIMIT = 256
MAX_WAIT_MS = 30_000
MAX_PAGE_SIZE = 1000
IDEMPOTENCY_KEY_MAX_CHARS = 256
RETENTION_SWEEP_S = 1.0
YIELD_AFTER_S = 0.001

# Auto-priority (docs/SEMANTICS.md rule 22).
AUTO_PRIORITY_MAX = 500
AUTO_PRIORITY_HALF_LIFE_MS = 30_000
AUTO_PRIORITY_IDLE_MS = 300_000


class Engine(DurabilityOps, RouterOps, QueueOps, JobOps, WatchOps, CursorOps):
    """The topics engine. Open it with :func:`open_engine` (or ``topics.open`` for the
    synchronous facade); every method must be called from the engine's trio thread."""

    def __init__(self, *, clock: Clock | None = None, limits: Limits | None = None) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.limits = limits if limits is not None else Limits()
        self._encode_limits = self.limits.encode_limits  # Limits is frozen
        self._registry = TopicRegistry()
        self._total_bytes = 0
        self._closed = False
        self._recovery_progress = 1.0
        self._started_ms = self.clock.now_ms()
        self._store: Store | None = None
        # The engine's own nursery (set by open_engine): background services start here.
        self._nursery: trio.Nursery | None = None
        self._last_yield = time.perf_counter()
        # Per-key namespace quotas (topics/_quotas.py); None: none configured.
        self._quotas: NamespaceQuotas | None = None
        self._init_durability()
        self._init_routers()
        self._init_queues()
        self._init_cursors()

    # -- topics (§1) ------------------------------------------------------------------

    async def put_topic(
        self, topic: str, config: Mapping[str, Any] | None = None
    ) -> PutTopicResult:
        """Create a topic or apply a config change (idempotent upsert, §1.1).

        Raises: invalid_request, topic_exists_incompatible (type change), throttled
        (max_topics).
        """
        name = check_topic_name(topic)
        self._check_serving()
        log = self._registry.get(name)
        if log is None:
            cfg = parse_config(config, None, name)
            self._check_topic_cap(name)
            log = self._registry.create(name, cfg)
            await self._log_topic(log)
            return PutTopicResult(name, True, cfg)
        cfg = parse_config(config, log.config, name)
        self._apply_retention(log)  # what the old config already expired stays expired
        if cfg.type != log.config.type:
            raise TopicExistsIncompatibleError(
                f'topic "{name}" is a {log.config.type}; its type cannot change to {cfg.type}',
                detail={"topic": name, "type": log.config.type, "requested_type": cfg.type},
            )
        changed = cfg != log.config
        log.config = cfg
        self._apply_retention(log)  # a tightened cap/ttl applies to what is stored now
        if changed:
            await self._log_topic(log)
        return PutTopicResult(name, False, cfg)

    async def get_topic(self, topic: str, *, touch: bool = True) -> TopicState:
        """Topic state (§1.2). ``touch`` bumps the auto-priority recency clock."""
        touch = _args.bool_arg("touch", touch)
        self._check_ready()
        log = self._live_topic(check_topic_name(topic))
        now = self.clock.now_ms()
        if touch:
            log.last_read_ts = now
        await self._yield_point()
        return TopicState(
            topic=log.name,
            type=log.config.type,
            head_seq=log.head,
            earliest_seq=log.earliest,
            next_seq=log.head + 1,
            count=log.count,
            bytes=log.bytes,
            config=log.config,
            effective_priority=self._priority(log, now),
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
        self._check_ready()
        logs, last = self._registry.page(prefix or "", after, min(size, MAX_PAGE_SIZE))
        now = self.clock.now_ms()
        summaries = []
        for log in logs:
            self._apply_retention(log, now)
            if touch:
                log.last_read_ts = now
            summaries.append(self._summary(log, now))
        await self._yield_point()
        return TopicPage(summaries, encode_list_cursor(last) if last is not None else None)

    async def delete_topic(self, topic: str, *, if_empty: bool = False) -> DeleteTopicResult:
        """Delete a topic and everything it holds (§1.4). Absent: ``deleted=False``."""
        name = check_topic_name(topic)
        if_empty = _args.bool_arg("if_empty", if_empty)
        self._check_serving()
        log = self._registry.get(name)
        if log is None:
            return DeleteTopicResult(name, False, [])
        self._apply_retention(log)
        if if_empty and log.count > 0:
            raise TopicNotEmptyError(
                f'topic "{name}" holds {log.count} records',
                detail={"topic": name, "count": log.count},
            )
        self._registry.remove(name)
        self._total_bytes -= log.bytes
        log.deleted = True
        routers = self._routers_on_topic_deleted(log)
        self._queues_on_topic_deleted(log)
        self._cursors_on_topic_deleted(log)
        log.wake()
        if self._store is not None:
            await self._wait(self._store.log_topic_delete(log))
        return DeleteTopicResult(name, True, routers)

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
        # A registered name was validated when its topic was created.
        name = (
            topic
            if type(topic) is str and topic in self._registry.topics
            else check_topic_name(topic)
        )
        node = _args.opt_str("node", node, self.limits.max_node_bytes)
        key = self._idempotency_key(idempotency_key)
        return_seqs = _args.bool_arg("return_seqs", return_seqs)
        claim = None
        if producer_id is not None or epoch is not None:
            claim = producer_arg(producer_id, epoch)
        if expected_head_seq is not None:
            expected_head_seq = _args.u64("expected_head_seq", expected_head_seq)
        jobs = self._job_write_args(dedupe, dedupe_ms, replace)
        self._check_serving()
        # One clock reading serves retention and the batch's ts, unless a wait comes between.
        now = self.clock.now_ms()
        log, created = self._topic_for_write(name, create, config, now)
        if self._store is not None and not created and not self._reserved(log, records):
            log, created = await self._reserve(name, log, records, create, config)
            now = self.clock.now_ms()
        # From here to the append no await: the conditions hold for the append they guard.
        state: ProducerState | None = None
        fence = False
        if claim is not None:
            state = check_producer(log, claim)
            fence = state is None or claim.epoch > state.epoch
        if key is not None and not created:
            hit = self._dedupe_hit(log, key, now, state)
            if hit is not None:
                if claim is not None and fence:
                    await self._raise_epoch(log, claim)
                return self._write_result(log, hit, return_seqs, created=False, deduped=True)
        if expected_head_seq is not None:
            check_expected_head(log, expected_head_seq)
        plan = None
        if jobs is not None or log.config.type == "queue":
            records, plan = self._plan_jobs(log, records, jobs, now)
            if plan is not None and not records:  # every job was a duplicate
                if claim is not None and fence:  # it still fences, as a deduped write does
                    await self._raise_epoch(log, claim)
                nothing = DedupeEntry(now, log.head + 1, log.head)
                result = self._write_result(log, nothing, return_seqs, created=False, deduped=False)
                return replace_fields(result, dedupe=plan.outcomes(log.head + 1))
        entry, salt, frames = self._append_batch(log, records, node, created, now)
        if plan is not None:
            self._settle_jobs(log, plan)
        if key is not None:
            log.remember_key(key, entry)
        if claim is not None:
            log.producers[claim.producer_id] = ProducerState(
                claim.epoch, key, entry.first_seq, entry.last_seq
            )
        n = entry.last_seq - entry.first_seq + 1
        if claim is None:  # the plain write pays nothing for the producer arguments
            timings = await self._log_append(log, salt, frames, created, n)
        else:
            timings = await self._log_append(log, salt, frames, created, n, claim, key, fence=fence)
        result = self._write_result(
            log, entry, return_seqs, created=created, deduped=False, timings=timings
        )
        if plan is not None and plan.keyed:
            return replace_fields(result, dedupe=plan.outcomes(entry.first_seq))
        return result

    def _append_batch(
        self,
        log: TopicLog,
        records: Sequence[Mapping[str, Any]],
        node: str | None,
        created: bool,
        now: int,
    ) -> tuple[DedupeEntry, int, bytes]:
        """Validate, encode and apply one batch (synchronous: atomic between awaits).

        Registers ``log`` first when ``created``. Returns the seq range, the segment salt
        and the frames (what the WAL entry carries). Shared by client writes, router
        forwarding and dead-lettering; the caller decides what to log, and wakes the
        topic's listeners (``log.wake()``) once that is queued: apply -> WAL -> fan-out,
        so no reader is handed a batch before its WAL entry exists.
        """
        n = self._batch_size(records)
        seg = log.writable_segment()
        ts = log.next_ts(now)
        frames, tags = self._encode(records, log.head + 1, ts, node, seg.salt)
        self._check_room(log, n, len(frames))
        if created:
            self._check_topic_cap(log.name)
            self._registry.add(log)
        size = log.append(frames, n, tags, ts)
        self._total_bytes += size
        log.last_write_ts = now
        if log.config.discard == "old":
            self._evict(log)
        if log.config.type == "queue":
            self._queue_appended(log, records, log.head - n + 1, now)
        return DedupeEntry(now, log.head - n + 1, log.head), seg.salt, frames

    def _topic_for_write(
        self,
        name: str,
        create: object,
        config: Mapping[str, Any] | None,
        now: int | None = None,
    ) -> tuple[TopicLog, bool]:
        if create is not None:
            create = _args.bool_arg("create", create)
        inline = parse_config(config, None, name) if config is not None else None
        log = self._registry.get(name)
        if log is not None:
            self._apply_retention(log, now)
            return log, False
        cfg = inline if inline is not None else TopicConfig()
        if not (create if create is not None else cfg.auto_create):
            raise TopicNotFoundError.for_topic(name)
        return self._registry.prepare(name, cfg), True

    def _idempotency_key(self, key: object) -> str | None:
        if key is None:
            return None
        if not isinstance(key, str) or not key or len(key) > IDEMPOTENCY_KEY_MAX_CHARS:
            raise InvalidRequestError.for_field(
                "idempotency_key",
                f"must be a non-empty string of at most {IDEMPOTENCY_KEY_MAX_CHARS} characters",
            )
        return key

    def _dedupe_hit(
        self, log: TopicLog, key: str, now: int, producer: ProducerState | None = None
    ) -> DedupeEntry | None:
        if producer is not None and producer.key == key:  # no window (_producers rule 2)
            return DedupeEntry(now, producer.first_seq, producer.last_seq)
        log.expire_keys(now)
        entry = log.dedupe.get(key)
        if entry is not None and now - entry.written_at_ms > log.config.idempotency_window_ms:
            del log.dedupe[key]  # expired is gone for good, whatever the clock does next
            return None
        return entry

    async def _raise_epoch(self, log: TopicLog, claim: ProducerClaim) -> None:
        """A deduped write from a newer epoch still fences the older ones (it appends
        nothing, so its state change is a PRODUCER entry of its own, synced)."""
        state = log.producers.get(claim.producer_id)
        if state is None:
            log.producers[claim.producer_id] = ProducerState(claim.epoch)
        else:
            state.epoch = claim.epoch
        if self._store is not None:
            await self._wait(self._store.log_producer(log, claim.producer_id, sync=True))

    def _batch_size(self, records: object) -> int:
        if not isinstance(records, list | tuple):
            raise InvalidRequestError.for_field("records", "must be an array of records")
        n = len(records)
        if n == 0:
            raise InvalidRequestError.for_field("records", "must hold at least one record")
        if n > self.limits.max_batch_records:
            raise BatchTooLargeError(
                f"{n} records in one write; the limit is {self.limits.max_batch_records}",
                detail={"records": n, "max": self.limits.max_batch_records},
            )
        return n

    def _encode(
        self,
        records: Sequence[Mapping[str, Any]],
        first_seq: int,
        ts: int,
        node: str | None,
        salt: int,
    ) -> tuple[bytes, list[bytes | None] | None]:
        bad = first_unknown_field(records)
        try:
            if bad is None:
                return encode_batch(
                    records, first_seq, ts, node, salt, self._encode_limits, ujson.dumps
                )
            # An earlier record's own error wins (SEMANTICS rule 18): check those first.
            if bad[0]:
                encode_batch(records[: bad[0]], first_seq, ts, node, salt, self._encode_limits, ujson.dumps)  # fmt: skip
        except FrameError as exc:
            raise _record_error(exc, self.limits) from None
        raise unknown_field_error(*bad)

    def _check_room(self, log: TopicLog, n: int, size: int) -> None:
        cfg = log.config
        if cfg.discard == "reject":
            if (cfg.cap_records and n > cfg.cap_records) or (
                cfg.cap_bytes and size > cfg.cap_bytes
            ):
                raise RecordTooLargeError(
                    f"this write ({n} records, {size} bytes) can never fit topic caps",
                    detail={"cap_records": cfg.cap_records, "cap_bytes": cfg.cap_bytes},
                )
            if (cfg.cap_records and log.count + n > cfg.cap_records) or (
                cfg.cap_bytes and log.bytes + size > cfg.cap_bytes
            ):
                raise TopicFullError(
                    f'topic "{log.name}" is full (discard: reject); nothing was appended',
                    detail={
                        "topic": log.name,
                        "cap_records": cfg.cap_records,
                        "cap_bytes": cfg.cap_bytes,
                        "count": log.count,
                        "bytes": log.bytes,
                        "head_seq": log.head,
                        "earliest_seq": log.earliest,
                    },
                )
        quota = self.limits.max_total_bytes
        if quota and self._total_bytes + size > quota:
            # A self-trimming topic frees what its caps evict (§11: the *live* total counts).
            freed = log.evictable_bytes(n, size) if cfg.discard == "old" else 0
            if self._total_bytes + size - freed > quota:
                raise ThrottledError.for_limit("max_total_bytes", quota)

    def _write_result(
        self,
        log: TopicLog,
        entry: DedupeEntry,
        return_seqs: bool,
        *,
        created: bool,
        deduped: bool,
        timings: tuple[float, float] = (0.0, 0.0),
    ) -> WriteResult:
        n = entry.last_seq - entry.first_seq + 1
        return WriteResult(
            topic=log.name,
            first_seq=entry.first_seq,
            last_seq=entry.last_seq,
            seqs=list(range(entry.first_seq, entry.last_seq + 1)) if return_seqs else None,
            head_seq=log.head,
            count=n,
            created=created,
            deduped=deduped,
            wal_append_ms=timings[0],
            fsync_ms=timings[1],
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
        name = check_topic_name(topic)
        from_seq = _args.u64("from_seq", from_seq)
        limit = _args.u64("limit", limit) or DEFAULT_LIMIT
        limit = min(limit, self.limits.max_limit)
        wait_ms = min(_args.u64("wait_ms", wait_ms), MAX_WAIT_MS)
        skip = _args.node_set(node, self.limits.max_node_bytes)
        flags = (
            (RENDER_TAGS if _args.bool_arg("include_tags", include_tags) else 0)
            | (RENDER_META if _args.bool_arg("include_meta", include_meta) else 0)
            | (RENDER_DATA if _args.bool_arg("include_data", include_data) else 0)
        )
        budget = max(1, _args.u64("max_bytes", max_bytes))
        bounds = None  # issue 18's options cost a plain diff nothing but these tests
        if from_ts is not None or to_ts is not None or to_seq is not None or where is not None:
            bounds = read_bounds(
                from_seq=from_seq, from_ts=from_ts, to_ts=to_ts, to_seq=to_seq, where=where
            )
        fmt = type_field = ""
        if format != "records" or ce_type_field is not None:
            fmt, type_field = check_format(format, ce_type_field)
            if fmt == "cloudevents":
                flags |= RENDER_DATA | RENDER_META | RENDER_TAGS
        if cursor is not None and from_ts is not None:
            raise InvalidRequestError.for_field("from_ts", "give cursor or from_ts, not both")
        cname = self._cursor_read_args(from_seq, cursor, commit)
        if commit:
            self._check_serving()
        else:
            self._check_ready()
        log = self._live_topic(name)
        if cname is not None:
            from_seq = self._cursor_start(log, cname)
        now = self.clock.now_ms() if bounds is not None else 0
        result = read_diff(log, from_seq, limit, skip, flags, budget, None, bounds, now)
        if (
            wait_ms
            and result.caught_up
            and not result.record_count
            and result.tombstone is None
            and not result.end_reached
        ):
            if bounds is not None and result.from_seq is not None:  # from where from_ts was
                from_seq, bounds = result.from_seq, replace(bounds, from_ts=None)
            with trio.move_on_after(wait_ms / 1000):
                await log.waiters.park()
            if self._registry.get(name) is not log:  # deleted (maybe recreated) meanwhile
                raise TopicNotFoundError.for_topic(name)
            self._apply_retention(log)
            now = self.clock.now_ms()
            echo = result.from_seq
            result = read_diff(log, from_seq, limit, skip, flags, budget, None, bounds, now)
            if echo is not None:
                result = replace(result, from_seq=echo)
        else:
            await self._yield_point()
        if fmt == "cloudevents":
            result = replace(
                result,
                records_json=to_cloudevents(name, result.records_json, type_field),
                format=fmt,
            )
        log.last_read_ts = self.clock.now_ms()
        if commit and cname is not None:
            await self._commit_read(log, cname, result.next_from_seq)
        return result

    # -- deletes (§5) -----------------------------------------------------------------

    async def delete_records(
        self, topic: str, *, before_seq: int | None = None, match: object = None
    ) -> DeleteRecordsResult:
        """Permanently delete records by seq bound and/or tag match (§5). Silent: no tombstone.

        Raises: invalid_request (neither given, bad match), topic_not_found.
        """
        name = check_topic_name(topic)
        if before_seq is None and match is None:
            raise InvalidRequestError(
                "give before_seq, match, or both", detail={"field": "before_seq"}
            )
        before = _args.u64("before_seq", before_seq) if before_seq is not None else None
        spec = _args.match_arg(match) if match is not None else None
        self._check_serving()
        log = self._live_topic(name)
        bound = log.head + 1 if before is None else min(before, log.head + 1)
        ticket: WalTicket | None = None
        if spec is None:
            bytes_before = log.bytes
            deleted = log.delete_before(bound)
            self._total_bytes -= bytes_before - log.bytes
            if deleted and self._store is not None:
                ticket = self._store.log_delete_before(log, bound)
        else:
            op, operand = spec
            trie = log.trie
            seqs = trie.pop_exact(operand, bound) if op == "Eq" else trie.pop_prefix(operand, bound)
            deleted, ticket = self._delete_seqs(log, seqs)
        fsync_ms = 0.0
        if ticket is not None and log.config.durability == "fsync":
            fsync_ms = (await self._wait(ticket))[1]
        else:
            await self._yield_point()
        return DeleteRecordsResult(
            name, deleted, log.earliest, log.head, log.count, log.bytes, fsync_ms
        )

    def _delete_seqs(self, log: TopicLog, seqs: list[int]) -> tuple[int, WalTicket | None]:
        """Delete the given seqs (those live) and log it; the ticket is the WAL entry's.

        Synchronous, so atomic between awaits; shared by tag deletes and queue acks.
        """
        if self._store is not None:
            self._store.note_deleted(log, seqs)  # before: a wholly dead segment is dropped
        bytes_before = log.bytes
        deleted = log.delete_seqs(seqs)
        self._total_bytes -= bytes_before - log.bytes
        ticket = self._store.log_delete_seqs(log, seqs) if self._store is not None else None
        return deleted, ticket

    # -- operations -------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """True once recovery is complete and the engine serves requests (§8.2)."""
        return self._recovery_progress >= 1.0

    @property
    def recovery_progress(self) -> float:
        """0.0-1.0 while recovering; 1.0 when ready."""
        return self._recovery_progress

    @property
    def topic_count(self) -> int:
        """Number of live topics (O(1); for /v0/ready)."""
        return len(self._registry)

    def statistics(
        self, *, max_topic_gauges: int = 1000, include: Callable[[str], bool] | None = None
    ) -> EngineStatistics:
        """A frozen snapshot of the gauges /v0/metrics reports (§8.3).

        ``include`` limits the per-topic gauges (and what ``topic_gauges_truncated`` counts)
        to the names it accepts, e.g. a prefix-limited key's allowlist; the aggregates
        always cover every topic.
        """
        by_class = dict.fromkeys(("ephemeral", "memory", "disk", "fsync"), 0)
        records = queues = leases = visible = 0
        gauges: list[TopicGauge] = []
        for name in self._registry.names:
            log = self._registry.topics[name]
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
                ready, in_flight, scheduled = (
                    (counters["ready"], counters["in_flight"], counters["scheduled"])
                    if counters
                    else (None, None, None)
                )
                gauges.append(
                    TopicGauge(
                        name,
                        log.head,
                        log.earliest,
                        log.count,
                        log.bytes,
                        queue_ready=ready,
                        queue_in_flight=in_flight,
                        queue_scheduled=scheduled,
                    )
                )
        return EngineStatistics(
            ready=self.ready,
            recovery_progress=self._recovery_progress,
            uptime_ms=max(0, self.clock.now_ms() - self._started_ms),
            topics=len(self._registry),
            topics_by_class=by_class,
            queue_topics=queues,
            records_live=records,
            bytes_live=self._total_bytes,
            topic_gauges=gauges,
            topic_gauges_truncated=visible > len(gauges),
            routers=self.router_count,
            queue_leases_in_flight=leases,
        )

    # -- helpers ----------------------------------------------------------------------

    async def _yield_point(self) -> None:
        """End of an engine call that did not otherwise wait.

        Always a cancellation point; a scheduling point only once the engine's callers
        have held the thread for YIELD_AFTER_S since the last one. A full trio checkpoint
        on every call costs ~10-20 us (more than a 100-record append), yet a tight loop of
        calls must not starve the WAL writer or the readers: this bounds the wait to ~1 ms.
        """
        now = time.perf_counter()
        if now - self._last_yield >= YIELD_AFTER_S:
            self._last_yield = now
            await trio.lowlevel.checkpoint()
        else:
            await trio.lowlevel.checkpoint_if_cancelled()

    def _check_ready(self) -> None:
        if self._recovery_progress < 1.0:
            raise NotReadyError(
                "recovery in progress; retry shortly",
                detail={"replay_progress": round(self._recovery_progress, 3)},
                retry_after=1.0,
            )

    def _check_serving(self) -> None:
        """Ready, and able to make changes durable: the WAL turns read-only after an I/O
        error (internal), and a full disk refuses changes until space returns
        (insufficient_storage; ``_durability`` rule 4)."""
        self._check_ready()
        self._check_storage()

    def _live_topic(self, name: str) -> TopicLog:
        log = self._registry.get(name)
        if log is None:
            raise TopicNotFoundError.for_topic(name)
        self._apply_retention(log)
        return log

    def _apply_retention(self, log: TopicLog, now: int | None = None) -> None:
        before = log.bytes
        now = self.clock.now_ms() if now is None else now
        log.expire_keys(now)
        bound = log.expire(now)
        if bound and self._store is not None:
            self._store.log_expire(log, bound)
        if log.config.discard == "old":
            log.evict_to_caps()
        self._total_bytes -= before - log.bytes

    def _evict(self, log: TopicLog) -> None:
        before = log.bytes
        log.evict_to_caps()
        self._total_bytes -= before - log.bytes

    def set_quota_namespaces(self, namespaces: Iterable[Sequence[str]]) -> None:
        """Bound the topics and routers under each prefix set (the prefix-limited API keys'
        allowlists) by ``max_topics_per_key``/``max_routers_per_key`` (topics/_quotas.py).

        Every creation path checks them, the engine's own (dead letters, router dests)
        included. The HTTP app calls this with its keys; without it no quota applies.
        """
        limits = self.limits
        quotas = NamespaceQuotas(
            namespaces,
            max_topics=limits.max_topics_per_key,
            max_routers=limits.max_routers_per_key,
        )
        self._quotas = quotas if quotas.active else None

    def _check_topic_cap(self, name: str, pending: Sequence[str] = ()) -> None:
        """429 before topic ``name`` is created: the instance cap, then the namespace quotas.
        ``pending``: topics the same call creates first (a router's source and dest)."""
        cap = self.limits.max_topics
        if cap and len(self._registry) + len(pending) >= cap:
            raise ThrottledError.for_limit("max_topics", cap)
        if self._quotas is not None:
            names = sorted([*self._registry.names, *pending]) if pending else self._registry.names
            self._quotas.check_topic(name, names)

    def _check_router_quota(self, name: str) -> None:
        """429 before router ``name`` is created when its namespace is full."""
        if self._quotas is not None:
            self._quotas.check_router(name, self._router_set.names)

    def _priority(self, log: TopicLog, now: int) -> int:
        cfg = log.config
        if cfg.priority is not None:
            return cfg.priority
        if not cfg.auto_priority or log.last_read_ts is None:
            return 0
        idle = now - log.last_read_ts
        if idle >= AUTO_PRIORITY_IDLE_MS:
            return 0
        return round(AUTO_PRIORITY_MAX * 2 ** (-max(idle, 0) / AUTO_PRIORITY_HALF_LIFE_MS))

    def _summary(self, log: TopicLog, now: int) -> TopicSummary:
        return TopicSummary(
            topic=log.name,
            type=log.config.type,
            head_seq=log.head,
            earliest_seq=log.earliest,
            count=log.count,
            bytes=log.bytes,
            durable=log.config.durable,
            durability=log.config.durability,
            effective_priority=self._priority(log, now),
        )

    async def _sweep_retention(self) -> None:
        """Expire TTL'd records in the background so idle topics release memory too."""
        while True:
            await trio.sleep(RETENTION_SWEEP_S)
            for log in list(self._registry.topics.values()):
                if log.config.ttl_ms:
                    self._apply_retention(log)


def _record_error(exc: FrameError, limits: Limits) -> Exception:
    field = f"records[{exc.index}].{exc.field}" if exc.index >= 0 else "records"
    detail: dict[str, Any] = {"field": field, "index": exc.index}
    if exc.field == "record" and exc.reason == "too_large":
        detail["max"] = limits.max_record_bytes
        return RecordTooLargeError(f"{field}: {exc}", detail=detail)
    return InvalidRequestError(f"{field}: {exc}", detail=detail)


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
            engine._nursery = nursery
            if storage is not None:
                engine._recovery_progress = 0.0
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
                engine._closed = True
                if engine._store is not None:
                    await engine._store.aclose(engine._registry)
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
