"""One router (its definition and forwarding state), its forwarding worker and the meta
stamp its copies carry (contract §6).

Role: move records from a router's source to its dest, off every write path, in batches,
from the router's cursor (docs/ROUTERS.md has the user-facing rules).

Rules:
1. Register, read, wait: the worker checks ``source.head > cursor`` and, if not, parks on
   the source's ParkingLot with nothing awaited in between, so no publish is missed and
   nothing polls.
2. A pass is synchronous: it reads frames after the cursor straight from the source's
   segments, appends the copies to dest with the appender's ``append_batch`` and advances
   the cursor in the same step, so the cursor and dest never disagree (the checkpoint
   snapshots both at once). Copies are not WAL-logged (derived, see ``_routers`` rule 1).
3. Before a copy takes a dest seq above dest's durable watermark, the worker reserves like
   a write does (a synced WATERMARK entry), then starts the pass over: after a crash the
   dest head jumps past every seq it may have handed out, and re-derived copies get fresh
   seqs above.
4. Dest refuses (``discard: "reject"`` full, ``max_total_bytes``): the pass retries with
   half the batch, down to one record, then the worker backs off (capped exponential) with
   the cursor unchanged: backpressure up the route. A single record that can never fit
   dest's caps is dropped (counted), or the route would stall forever.
5. The source lost records the router had not forwarded (``cursor + 1 < evict_floor``):
   dest gets a gap marker (one seq, no record) that readers see as a ``source_trim``
   tombstone, and the cursor moves to the floor. Never a silent gap.
6. Stamping routers (on a cycle, or ``exactly_once``) put ``_topics_router`` first in the
   copy's meta: ``{"router", "inc", "src_seq", "hops", "origin"}``; every other meta key
   stays byte-verbatim (spliced, not re-encoded), and data is always verbatim. On a cycle
   ``hops`` counts stamping hops and ``origin`` names the topic where the record entered
   the cycle; a copy that would go back into its origin, or past ``HOP_CAP`` hops, is not
   forwarded (``dropped_total``).
7. ``exactly_once``: at worker start, the newest copy this router incarnation left in dest
   (found scanning back from the tail, at most ``EVIDENCE_SCAN_MAX`` records) moves the
   cursor past its ``src_seq``, so a copy still in dest is never appended twice.
"""

from __future__ import annotations

import bisect
import json
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import trio
import ujson

from .._core import FRAME_HEADER_SIZE, json_check
from .._persistence.appender import WATERMARK_RESERVE
from .._storage.wal import WalError, WalFullError
from ..errors import RecordTooLargeError, ThrottledError, TopicFullError
from .config import compile_filter

if TYPE_CHECKING:
    from .._persistence.appender import Appender
    from ..log.topic_log import TopicLog
    from ..router_types import RouterConfig

__all__ = ["BATCH_MAX", "HOP_CAP", "Router", "join_stamp", "run_router", "split_stamp"]

#: Copies per forwarding pass at most (halved while dest refuses, doubled back on success).
BATCH_MAX = 1000
#: Stamping hops a copy may take; one more is not forwarded (loop breaking, §6 allow_cycle).
HOP_CAP = 8
#: Source frames one pass examines at most (a filter that matches little stays fair).
SCAN_MAX = 8192
#: Payload bytes one pass copies at most (past the first record): big records, short pass.
BATCH_MAX_BYTES = 4 << 20
#: Dest records the exactly-once evidence scan looks at, newest first.
EVIDENCE_SCAN_MAX = 10_000
BACKOFF_MIN_S = 0.01
BACKOFF_MAX_S = 1.0

STAMP_KEY = "_topics_router"
_STAMP_NEEDLE = b'"_topics_router"'
# The stamp as this module writes it: first key of the meta object, no whitespace.
_STAMP_PREFIX = b'{"_topics_router":'

_FIELD_LENGTHS = struct.Struct("<HHHI")  # node_len, tag_len, reserved, meta_len at +10

_PROGRESS = 0
_FULL = -1
_STOP = -2


@dataclass(slots=True)
class _Batch:
    records: list[dict[str, Any]] = field(default_factory=list)
    upto: int = 0  # the cursor once every record of the batch is appended
    dropped: int = 0  # records up to ``upto`` not forwarded (loop prevention)


class Router:
    """One router: its definition and forwarding state (touched only on the trio thread).

    ``inc`` (incarnation) changes whenever the cursor restarts (creation, source change):
    exactly-once evidence in dest counts only when it carries this router's ``inc``.
    """

    __slots__ = (
        "batch_limit",
        "config",
        "cursor",
        "dest_id",
        "dropped_total",
        "forwarded_total",
        "inc",
        "match",
        "name",
        "on_cycle",
        "removed",
        "scope",
        "source_id",
    )

    def __init__(self, name: str, config: RouterConfig, inc: int) -> None:
        self.name = name
        self.config = config
        self.match = compile_filter(config.filter)
        self.inc = inc
        self.cursor = 0
        self.forwarded_total = 0
        self.dropped_total = 0
        self.source_id = 0
        self.dest_id = 0
        self.on_cycle = False
        self.removed = False
        self.batch_limit = BATCH_MAX
        self.scope: trio.CancelScope | None = None

    @property
    def stamps(self) -> bool:
        """Whether copies carry ``meta._topics_router`` (exactly-once key, loop state)."""
        return self.on_cycle or self.config.guarantee == "exactly_once"

    def to_record(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "config": self.config.to_dict(),
            "inc": self.inc,
            "source_id": self.source_id,
            "dest_id": self.dest_id,
            "cursor": self.cursor,
            "forwarded_total": self.forwarded_total,
            "dropped_total": self.dropped_total,
        }


class _Routers(Protocol):
    """What a worker uses of ``Routers`` (routers/ops.py), which starts it. A protocol, not
    an import, keeps this module below ops.py, which builds routers and runs workers."""

    @property
    def appender(self) -> Appender: ...
    def same_component(self, a: str, b: str) -> bool: ...


async def run_router(routers: _Routers, router: Router) -> None:
    """Forward until the router is removed or the engine stops (rules 1-5)."""
    app = routers.appender
    _adopt_evidence(app, router)
    backoff = 0.0
    while not router.removed:
        registry = app.registry
        source = registry.get(router.config.source)
        dest = registry.get(router.config.dest)
        if source is None or dest is None or _stopped(app):
            return  # the cascade removes the router in the same step as the topic
        app.apply_retention(source)
        if router.cursor >= source.head:
            await source.waiters.park()  # rule 1: nothing awaited since the check
            continue
        step = _forward_pass(routers, router, source, dest)
        if step == _STOP:
            return
        if step > 0:
            try:
                await _reserve(app, dest, step)
            except WalFullError:
                # The disk is full: the reservation stays queued in the WAL, and forwarding
                # goes on once it is written (space returned), without a restart.
                backoff = min(max(backoff * 2, BACKOFF_MIN_S), BACKOFF_MAX_S)
                await trio.sleep(backoff)
            except WalError:
                return  # the WAL is read-only: forwarding resumes after a restart
            continue
        if step == _FULL:
            backoff = min(max(backoff * 2, BACKOFF_MIN_S), BACKOFF_MAX_S)
            await trio.sleep(backoff)
            continue
        backoff = 0.0
        await trio.lowlevel.checkpoint()  # a long backlog must not starve other tasks


def _stopped(app: Appender) -> bool:
    """The engine is closing, or its storage failed (writes are refused until restart)."""
    store = app.store
    return app.closed or (store is not None and store.wal.read_only)


async def _reserve(app: Appender, dest: TopicLog, n: int) -> None:
    """Rule 3 (``Durability.reserve`` for a router's batch)."""
    store = app.store
    assert store is not None
    target = dest.head + n + max(WATERMARK_RESERVE, n)
    ticket = store.log_watermark(dest, target)
    dest.reserved_to = max(dest.reserved_to, target)
    await ticket.wait()
    app.raise_watermark(dest, target, ticket)


def _forward_pass(routers: _Routers, router: Router, source: TopicLog, dest: TopicLog) -> int:
    """One synchronous pass (rule 2). Returns _PROGRESS, _FULL, _STOP, or a positive number
    of dest seqs to reserve before the pass can run."""
    app = routers.appender
    if _stopped(app):
        return _STOP
    store = app.store
    floor = source.evict_floor
    if router.cursor + 1 < floor:  # rule 5
        if store is not None and dest.head + 1 > dest.watermark:
            return 1
        dest.add_gap("source_trim", floor - 1 - router.cursor, router.cursor + 1, floor - 1)
        router.cursor = floor - 1
        dest.wake()  # readers wake after this pass, which goes on with the copies
    limit = min(router.batch_limit, app.limits.max_batch_records)
    batch = _collect(routers, router, source, limit)
    n = len(batch.records)
    if n and store is not None and dest.head + n > dest.watermark:
        return n
    if n:
        app.apply_retention(dest)
        try:
            app.append_batch(dest, batch.records, None, False, app.clock.now_ms())
            dest.wake()  # copies are not WAL-logged (rule 2): applied is published
        except (TopicFullError, ThrottledError, RecordTooLargeError) as exc:  # rule 4
            if n > 1:
                router.batch_limit = max(1, n // 2)
                return _PROGRESS
            if not isinstance(exc, RecordTooLargeError):
                return _FULL
            batch.dropped += 1  # one record that can never fit dest's caps
            n = 0
        router.batch_limit = min(router.batch_limit * 2, BATCH_MAX)
    router.cursor = batch.upto
    router.forwarded_total += n
    router.dropped_total += batch.dropped
    return _PROGRESS


def _collect(routers: _Routers, router: Router, source: TopicLog, limit: int) -> _Batch:
    """The copies of the live source records after the cursor (at most ``limit`` copies,
    SCAN_MAX frames examined, BATCH_MAX_BYTES copied); ``upto`` is where the cursor lands
    if all of them go in. This loop runs once per forwarded record: keep it lean."""
    batch = _Batch(upto=router.cursor)
    records = batch.records
    config = router.config
    match, stamps = router.match, router.stamps
    keep_node, keep_tag = config.preserve_node, config.preserve_tag
    segments = source.segments
    seq = router.cursor + 1
    i = max(bisect.bisect_right(source.bases, seq) - 1, 0)
    examined = size = 0
    while i < len(segments):
        seg = segments[i]
        base, count, first_live, decode = seg.base_seq, seg.count, seg.first_live, seg.decode
        idx = first_live(max(seq - base, 0))
        while idx < count:
            if examined >= SCAN_MAX or len(records) >= limit or size >= BATCH_MAX_BYTES:
                batch.upto = base + idx - 1
                return batch
            examined += 1
            if match is not None and not _matches(seg.tag_at(idx), match):
                idx = first_live(idx + 1)
                continue
            _, _, node, tag, meta, data, _ = decode(idx)
            if stamps:
                forward, meta = _stamped_meta(routers, router, base + idx, meta, len(data))
                if not forward:  # loop prevention
                    batch.dropped += 1
                    idx = first_live(idx + 1)
                    continue
            records.append(
                {
                    "data": data,
                    "meta": meta,
                    "tag": tag.decode() if keep_tag and tag is not None else None,
                    "node": node.decode() if keep_node and node is not None else None,
                }
            )
            size += len(data)
            idx = first_live(idx + 1)
        i += 1
    batch.upto = source.head  # seqs past the last segment hold no record
    return batch


def _matches(tag: bytes | None, match: tuple[bool, bytes]) -> bool:
    """The forward-time filter: records without a tag never match (as in a delete, §5)."""
    if tag is None:
        return False
    prefix, operand = match
    return tag.startswith(operand) if prefix else tag == operand


def _stamped_meta(
    routers: _Routers, router: Router, src_seq: int, meta: bytes | None, data_len: int
) -> tuple[bool, bytes | None]:
    """Rule 6: (forward the copy?, its meta: with this router's stamp when it fits)."""
    config = router.config
    prior, rest = split_stamp(meta) if meta is not None else (None, None)
    hops = _int_field(prior, "hops")
    origin = prior.get("origin") if prior is not None else None
    if not isinstance(origin, str) or not routers.same_component(origin, config.source):
        origin = config.source  # the record enters this router's cycle here
    if router.on_cycle:
        hops += 1
        if origin == config.dest or hops > HOP_CAP:
            return False, None
    stamp = (
        f'{{"router":"{router.name}","inc":{router.inc},"src_seq":{src_seq},'
        f'"hops":{hops},"origin":"{origin}"}}'
    ).encode()
    stamped = join_stamp(stamp, rest)
    limits = routers.appender.limits
    if (
        len(stamped) <= limits.max_meta_bytes
        and len(stamped) + data_len <= limits.max_record_bytes
        and json_check(stamped) <= limits.max_meta_keys
    ):
        return True, stamped
    # No room for the stamp: on a loop the copy would circulate unbounded, so it is dropped;
    # elsewhere it goes without the key (at-least-once for this one record).
    return (False, None) if router.on_cycle else (True, meta)


def _int_field(stamp: dict[str, Any] | None, key: str) -> int:
    value = stamp.get(key) if stamp is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def split_stamp(meta: bytes) -> tuple[dict[str, Any] | None, bytes | None]:
    """(the ``_topics_router`` stamp, the meta object without it) of a stored meta.

    The stamp this module writes is found and cut textually (the other keys keep their
    bytes); a stamp anywhere else means parsing and re-encoding the object. The rest is
    None when nothing but the stamp was there.
    """
    if _STAMP_NEEDLE not in meta:
        return None, meta
    if meta.startswith(_STAMP_PREFIX + b"{"):
        end = meta.find(b"}", len(_STAMP_PREFIX))
        tail = meta[end + 1 : end + 2]
        if end > 0 and tail in (b",", b"}"):
            try:
                stamp = ujson.loads(meta[len(_STAMP_PREFIX) : end + 1])
            except ValueError:
                stamp = None
            if isinstance(stamp, dict):
                return stamp, (b"{" + meta[end + 2 :] if tail == b"," else None)
    obj = _loads(meta)
    if not isinstance(obj, dict) or STAMP_KEY not in obj:
        return None, meta
    stamp = obj.pop(STAMP_KEY)
    return (stamp if isinstance(stamp, dict) else None), (_dumps(obj) if obj else None)


def join_stamp(stamp: bytes, rest: bytes | None) -> bytes:
    """``{"_topics_router": stamp, ...rest}`` with rest's members spliced verbatim."""
    if rest is not None:
        body = rest.strip()
        if body[1:-1].strip():
            return _STAMP_PREFIX + stamp + b"," + body[1:]
    return _STAMP_PREFIX + stamp + b"}"


def _loads(meta: bytes) -> Any:
    try:
        return ujson.loads(meta)
    except (ValueError, OverflowError):
        return json.loads(meta)  # ujson refuses some valid JSON (integers past 64 bits)


def _dumps(obj: Any) -> bytes:
    try:
        return ujson.dumps(obj, ensure_ascii=False, escape_forward_slashes=False).encode()
    except (ValueError, OverflowError, TypeError):
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def _adopt_evidence(app: Appender, router: Router) -> None:
    """Rule 7."""
    if router.config.guarantee != "exactly_once":
        return
    source = app.registry.get(router.config.source)
    dest = app.registry.get(router.config.dest)
    if source is None or dest is None:
        return
    needle = f'"router":"{router.name}","inc":{router.inc},'.encode()
    budget = EVIDENCE_SCAN_MAX
    for seg in reversed(dest.segments):
        view = seg.view()  # meta is sliced out of the frames: data is never copied
        for idx in range(seg.count - 1, seg.retired - 1, -1):
            budget -= 1
            if budget < 0:
                return
            if not seg.is_live(idx):
                continue
            meta = _meta_of(view, seg.offset_of(idx))
            if meta is None or needle not in meta:
                continue
            stamp, _ = split_stamp(meta)
            if stamp is not None and stamp.get("router") == router.name:
                src_seq = _int_field(stamp, "src_seq")
                if router.cursor < src_seq <= source.head:
                    router.cursor = src_seq
                return


def _meta_of(view: memoryview, offset: int) -> bytes | None:
    """The meta bytes of the frame at ``offset`` (layout in ``_core/_ext.pyi``)."""
    node_len, tag_len, _, meta_len = _FIELD_LENGTHS.unpack_from(view, offset + 10)
    if not meta_len:
        return None
    start = offset + FRAME_HEADER_SIZE + node_len + tag_len
    return bytes(view[start : start + meta_len])
