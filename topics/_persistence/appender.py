"""The appender: what every subsystem of the engine needs from it, in one object.

Role: the Engine creates one and hands it to durability, routers, queues and jobs,
cursors and the watch hub; none of them sees the Engine itself. It owns the topic
registry, the live byte total, retention and eviction, the batch append (validate,
encode, apply), record deletes, the serving checks (ready, storage able to take a
change), the topic cap and namespace quotas, the WAL ticket wait and the yield point.

Rules:
1. Everything here but :meth:`Appender.wait` and :meth:`Appender.yield_point` is
   synchronous: a caller's check and the change it guards are one step between awaits.
2. ``store`` is None for a memory-only engine and until recovery has finished; the
   registry is replaced once, by recovery, before the engine serves.
3. Retention is applied lazily at the start of every operation on a topic
   (:meth:`Appender.live_topic`, :meth:`Appender.topic_for_write`), so each answer is
   exact for the clock at that moment; the byte total follows every change of a topic's
   bytes (appends, deletes, expiry, eviction, topic deletes).
4. An append is applied -> logged -> published (``log.wake()``): the append here applies
   only; the caller logs it and then wakes the topic's listeners.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import trio
import ujson

from .. import _args
from .._clock import Clock
from .._core import FrameError, encode_batch
from .._meta_keys import reserved_meta_error
from .._storage.damage import DamageRegistry
from .._storage.wal import WalError, WalFullError
from ..config import TopicConfig, parse_config
from ..errors import (
    BatchTooLargeError,
    InsufficientStorageError,
    InternalError,
    InvalidRequestError,
    NotReadyError,
    RecordTooLargeError,
    ThrottledError,
    TopicFullError,
    TopicNotFoundError,
)
from ..log.registry import TopicRegistry
from ..log.topic_log import DedupeEntry, TopicLog
from ..record_fields import first_unknown_field, unknown_field_error
from ..settings import Limits

if TYPE_CHECKING:
    from .._storage.space import DiskSpace
    from .._storage.wal import WalTicket
    from ..log.quotas import NamespaceQuotas
    from .store import Store

__all__ = ["WATERMARK_RESERVE", "YIELD_AFTER_S", "Appender"]

#: Seqs reserved ahead per WATERMARK entry: a crash can leave at most this many (plus the
#: batch) seqs skipped. A topic logs one synced WATERMARK entry per half this many seqs
#: (the next is started when half of the current one is used; ``_durability`` rule 2).
WATERMARK_RESERVE = 4096
YIELD_AFTER_S = 0.001

#: Called with an appended queue batch: (log, records, first seq, now).
QueueAppended = Callable[[TopicLog, Sequence[Mapping[str, Any]], int, int], None]


class Appender:
    """The engine's shared state and the operations every subsystem uses (module doc)."""

    def __init__(self, clock: Clock, limits: Limits) -> None:
        self.clock = clock
        self.limits = limits
        self._encode_limits = limits.encode_limits  # Limits is frozen
        self.registry = TopicRegistry()
        self.total_bytes = 0
        self.store: Store | None = None
        self.space: DiskSpace | None = None  # the free-space reading, with a data directory
        # Files found damaged (recovery, cold reads, the scrub): /v0/health and /v0/metrics.
        self.damage = DamageRegistry()
        self.recovery_progress = 1.0
        self.closed = False
        # The engine's own nursery (set by open_engine): background services start here.
        self.nursery: trio.Nursery | None = None
        # Per-key namespace quotas (topics/log/quotas.py); None: none configured.
        self.quotas: NamespaceQuotas | None = None
        # The router names, for the router quotas (set by the router set).
        self.router_names: Callable[[], list[str]] = list
        # The queue subsystem's hook for an appended batch of a queue topic (set by it).
        self.queue_appended: QueueAppended | None = None
        # Topics holding seqs reserved above their head -> their head at the last release
        # pass (None: not looked at yet); ``_durability`` rule 2a.
        self.unreleased: dict[TopicLog, int | None] = {}
        self._last_yield = time.perf_counter()

    # -- serving checks ------------------------------------------------------------------

    def check_ready(self) -> None:
        if self.recovery_progress < 1.0:
            raise NotReadyError(
                "recovery in progress; retry shortly",
                detail={"replay_progress": round(self.recovery_progress, 3)},
                retry_after=1.0,
            )

    def check_serving(self) -> None:
        """Ready, and able to make changes durable: the WAL turns read-only after an I/O
        error (internal), and a full disk refuses changes until space returns
        (insufficient_storage; ``_durability`` rule 4)."""
        self.check_ready()
        self.check_storage()

    def check_freeing(self) -> None:
        """:meth:`check_serving` for a change that gives space back (a topic or record
        delete): allowed below the reserve, which is kept for it (``_durability`` rule 4)."""
        self.check_ready()
        self.check_storage(freeing=True)

    def check_storage(self, *, freeing: bool = False) -> None:
        """Refuse a change before it is applied when storage cannot take it
        (``_durability`` rule 4); ``freeing``: a delete, refused only on a full WAL."""
        store = self.store
        if store is None:
            return
        wal = store.wal
        if wal.read_only:
            raise InternalError(
                "storage failed (a WAL write or fsync error); writes are refused until restart",
                detail={"storage": "read_only"},
            )
        space = self.space
        if space is not None:
            space.maybe_refresh(wal.bytes_written_total)
        if wal.full or (not freeing and space is not None and space.low):
            raise self._storage_refusal()

    def _storage_refusal(self) -> InsufficientStorageError:
        space = self.space
        detail: dict[str, Any] = {
            "storage": "disk_full"
            if self.store is not None and self.store.wal.full
            else ("below_reserve"),
            "outcome": "not_stored",
        }
        if space is not None and space.free_bytes is not None:
            detail["free_bytes"] = space.free_bytes
            detail["min_free_bytes"] = space.min_free_bytes
        what = (
            "the disk is full"
            if detail["storage"] == "disk_full"
            else ("free disk space is below the reserve (TOPICS_MIN_FREE_BYTES)")
        )
        return InsufficientStorageError(
            f"{what}; nothing was stored. Free disk space: writes resume by themselves",
            detail=detail,
        )

    def storage_state(self) -> str:
        """``"ok"``, ``"below_reserve"``, ``"disk_full"`` or ``"wal_failed"``."""
        store = self.store
        if store is None:
            return "ok"
        if store.wal.read_only:
            return "wal_failed"
        if store.wal.full:
            return "disk_full"
        if self.space is not None and self.space.low:
            return "below_reserve"
        return "ok"

    def check_topic_cap(self, name: str, pending: Sequence[str] = ()) -> None:
        """429 before topic ``name`` is created: the instance cap, then the namespace quotas.
        ``pending``: topics the same call creates first (a router's source and dest)."""
        cap = self.limits.max_topics
        if cap and len(self.registry) + len(pending) >= cap:
            raise ThrottledError.for_limit("max_topics", cap)
        if self.quotas is not None:
            names = sorted([*self.registry.names, *pending]) if pending else self.registry.names
            self.quotas.check_topic(name, names)

    def check_router_quota(self, name: str) -> None:
        """429 before router ``name`` is created when its namespace is full."""
        if self.quotas is not None:
            self.quotas.check_router(name, self.router_names())

    # -- topics --------------------------------------------------------------------------

    def live_topic(self, name: str) -> TopicLog:
        log = self.registry.get(name)
        if log is None:
            raise TopicNotFoundError.for_topic(name)
        self.apply_retention(log)
        return log

    def topic_for_write(
        self,
        name: str,
        create: object,
        config: Mapping[str, Any] | None,
        now: int | None = None,
    ) -> tuple[TopicLog, bool]:
        """The topic a write appends to, and whether it is a new one (not registered
        until its batch is applied: :meth:`append_batch`)."""
        if create is not None:
            create = _args.bool_arg("create", create)
        inline = parse_config(config, None, name) if config is not None else None
        log = self.registry.get(name)
        if log is not None:
            self.apply_retention(log, now)
            return log, False
        cfg = inline if inline is not None else TopicConfig()
        if not (create if create is not None else cfg.auto_create):
            raise TopicNotFoundError.for_topic(name)
        return self.registry.prepare(name, cfg), True

    def apply_retention(self, log: TopicLog, now: int | None = None) -> None:
        before = log.bytes
        now = self.clock.now_ms() if now is None else now
        log.expire_keys(now)
        bound = log.expire(now)
        if bound and self.store is not None:
            self.store.log_expire(log, bound)
        if log.config.discard == "old":
            log.evict_to_caps()
        self.total_bytes -= before - log.bytes

    def evict(self, log: TopicLog) -> None:
        before = log.bytes
        log.evict_to_caps()
        self.total_bytes -= before - log.bytes

    # -- appends and deletes -------------------------------------------------------------

    def append_batch(
        self,
        log: TopicLog,
        records: Sequence[Mapping[str, Any]],
        node: str | None,
        created: bool,
        now: int,
        server_meta: type | None = None,
    ) -> tuple[DedupeEntry, int, bytes]:
        """Validate, encode and apply one batch (synchronous: atomic between awaits).

        Registers ``log`` first when ``created``. Returns the seq range, the segment salt
        and the frames (what the WAL entry carries). Shared by client writes, router
        forwarding and dead-lettering; the caller decides what to log, and wakes the
        topic's listeners (``log.wake()``) once that is queued: apply -> WAL -> fan-out,
        so no reader is handed a batch before its WAL entry exists. ``server_meta``: a
        client's batch, whose meta may not hold a top-level ``$`` key unless it is of that
        type (``encode_batch``; topics/_meta_keys.py).
        """
        n = self.batch_size(records)
        seg = log.writable_segment()
        ts = log.next_ts(now)
        frames, tags = self._encode(records, log.head + 1, ts, node, seg.salt, server_meta)
        self._check_room(log, n, len(frames))
        if created:
            self.check_topic_cap(log.name)
            self.registry.add(log)
        size = log.append(frames, n, tags, ts)
        self.total_bytes += size
        log.last_write_ts = now
        if log.config.discard == "old":
            self.evict(log)
        if log.config.type == "queue" and self.queue_appended is not None:
            self.queue_appended(log, records, log.head - n + 1, now)
        return DedupeEntry(now, log.head - n + 1, log.head), seg.salt, frames

    def batch_size(self, records: object) -> int:
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
        server_meta: type | None,
    ) -> tuple[bytes, list[bytes | None] | None]:
        bad = first_unknown_field(records)
        limits, dumps = self._encode_limits, ujson.dumps
        try:
            if bad is None:
                return encode_batch(records, first_seq, ts, node, salt, limits, dumps, server_meta)
            # An earlier record's own error wins (SEMANTICS rule 18): check those first.
            if bad[0]:
                encode_batch(records[: bad[0]], first_seq, ts, node, salt, limits, dumps, server_meta)  # fmt: skip
        except FrameError as exc:
            raise _record_error(exc, self.limits, records) from None
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
        if quota and self.total_bytes + size > quota:
            # A self-trimming topic frees what its caps evict (§11: the *live* total counts).
            freed = log.evictable_bytes(n, size) if cfg.discard == "old" else 0
            if self.total_bytes + size - freed > quota:
                raise ThrottledError.for_limit("max_total_bytes", quota)

    def delete_seqs(self, log: TopicLog, seqs: list[int]) -> tuple[int, WalTicket | None]:
        """Delete the given seqs (those live) and log it; the ticket is the WAL entry's.

        Synchronous, so atomic between awaits; shared by tag deletes and queue acks.
        """
        store = self.store
        if store is not None:
            store.note_deleted(log, seqs)  # before: a wholly dead segment is dropped
        bytes_before = log.bytes
        deleted = log.delete_seqs(seqs)
        self.total_bytes -= bytes_before - log.bytes
        ticket = store.log_delete_seqs(log, seqs) if store is not None else None
        return deleted, ticket

    # -- waits ---------------------------------------------------------------------------

    def raise_watermark(self, log: TopicLog, target: int, ticket: WalTicket) -> None:
        """Apply a synced watermark entry, unless a HEAD entry logged after it released
        the topic's reservation meanwhile (``_durability`` rule 2a): replay would end
        below it too."""
        if ticket.lsn < log.released_lsn:
            return
        log.watermark = max(log.watermark, target)
        if log.watermark > log.head and log not in self.unreleased:
            self.unreleased[log] = None

    async def wait(self, ticket: WalTicket) -> tuple[float, float]:
        """Await a WAL ticket; a storage failure becomes the contract's ``internal`` error,
        a full disk ``insufficient_storage`` with an unknown outcome (``_durability``
        rule 4)."""
        try:
            return await ticket.wait()
        except WalFullError as exc:
            raise InsufficientStorageError(
                "the disk filled up while this change was being logged; it is applied and "
                "queued, and becomes durable if space returns before the server restarts. "
                "Free disk space, then retry with the same idempotency key to learn the outcome",
                detail={"storage": "disk_full", "outcome": "unknown"},
            ) from exc
        except WalError as exc:
            raise InternalError(
                f"the change could not be made durable ({exc}); its outcome is unknown "
                "and writes are refused until restart",
                detail={"storage": "wal_failed"},
            ) from exc

    async def yield_point(self) -> None:
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


def _record_error(exc: FrameError, limits: Limits, records: Sequence[Any]) -> Exception:
    if exc.reason == "meta_reserved":  # the check's own 400, naming the key as it does
        named = reserved_meta_error(exc.index, records[exc.index].get("meta"))
        if named is not None:
            return named
    field = f"records[{exc.index}].{exc.field}" if exc.index >= 0 else "records"
    detail: dict[str, Any] = {"field": field, "index": exc.index}
    if exc.field == "record" and exc.reason == "too_large":
        detail["max"] = limits.max_record_bytes
        return RecordTooLargeError(f"{field}: {exc}", detail=detail)
    return InvalidRequestError(f"{field}: {exc}", detail=detail)
