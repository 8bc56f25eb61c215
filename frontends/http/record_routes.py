"""Record routes: write (§2), diff (§3), delete records (§5).

Write and diff are hot routes: the fast lane serves them on its connections (``fast=True``);
delete reaches the dispatcher through hypercorn. Each handler parses, calls one Engine
method and encodes.

Rules:
1. Records stay bytes. A write body is split by ``topics._core.scan.split_write_body``,
   which hands back each record's ``data``/``meta`` as the exact bytes the client sent;
   the engine stores those bytes. A diff answer splices ``DiffResult.records_json`` (the
   engine's stored fragments) into the response without decoding it.
2. Unknown body members are ``400 invalid_request`` (a typo such as ``idempotencyKey``
   must not silently turn off deduplication).
3. A write is shed under CPU pressure after its body is parsed, unless it says
   ``"disable_backpressure": true`` (the trusted-loader opt-out, §0.6).
4. ``Idempotency-Key`` (header) is used when the body has no ``idempotency_key``.
5. A long-poll diff (``wait_ms``) ends early with the current answer when the server
   starts shutting down, so it never holds up the drain, and ends silently when the client
   disconnects.
6. A diff whose ``Accept`` names ``application/vnd.apache.arrow.stream`` is answered as
   an Arrow IPC stream (``topics.wire.arrow``: the same window, the other members as
   schema metadata), built from the same ``records_json`` by ``topics._core.columns``.
   JSON stays the default, and a server without pyarrow answers JSON.
7. An Arrow answer to a plain read (no ``wait_ms``, ``cursor``, ``commit`` or
   ``from_ts``) whose ``limit`` is above ``TOPICS_MAX_LIMIT`` joins up to
   ``ARROW_MAX_WINDOWS`` consecutive windows, within ``limit`` and ``max_batch_bytes``:
   a bulk reader (Spark's url mode) gets large answers from a server with the default
   limit, and its cursors are the last window's, exactly as if it had asked for each.
"""

from __future__ import annotations

from typing import Any

import trio

from topics._core.scan import BodyError, split_write_body
from topics._limits import DIFF_BYTE_BUDGET, DIFF_BYTE_CEILING
from topics.errors import InvalidRequestError, TopicsError
from topics.types import DiffResult
from topics.wire.envelope import json_bytes
from topics.wire.requests import DELETE_RECORDS, DIFF, WRITE

from .query_params import RETURN_SEQS
from .requests import ClientDisconnected, decode_json_object
from .routing import Route
from .state import Reply, RequestContext

__all__ = ["ROUTES"]

# The members each body accepts: declared once, in topics/wire/requests.py.
WRITE_FIELDS = WRITE.names
DIFF_FIELDS = DIFF.names
DELETE_FIELDS = DELETE_RECORDS.names

_TRUE_FALSE = (b"false", b"true")


def _body_error(exc: BodyError) -> InvalidRequestError:
    return InvalidRequestError(
        f"malformed write body: {exc}", detail={"path": exc.path, "offset": exc.offset}
    )


async def write_records(ctx: RequestContext) -> Reply:
    """POST /v0/topics/:topic — append a batch (§2)."""
    try:
        records, fields = split_write_body(ctx.body)
    except BodyError as exc:
        raise _body_error(exc) from None
    for name in fields:
        if name not in WRITE_FIELDS:
            raise InvalidRequestError.for_field(name, "is not a field of a write")
    ctx.principal.check_body("write", fields)  # config.dead_letter (§0.2)
    backpressure_off = fields.get("disable_backpressure", False)
    if backpressure_off is not True:
        if backpressure_off is not False:
            raise InvalidRequestError.for_field("disable_backpressure", "must be true or false")
        ctx.state.check_pressure()
    if records is None:
        raise InvalidRequestError.for_field("records", "is required (an array of records)")
    key: object = fields.get("idempotency_key")
    if key is None:
        header = ctx.headers.get(b"idempotency-key")
        if header is not None:
            key = header.decode("utf-8", "replace")
    return_seqs: object = fields.get("return_seqs")
    if return_seqs is None:
        return_seqs = ctx.query_bool(RETURN_SEQS, True)
    result = await ctx.engine.write(
        ctx.name,
        records,
        node=fields.get("node"),  # type: ignore[arg-type]  # the engine type-checks
        idempotency_key=key,  # type: ignore[arg-type]
        create=fields.get("create"),  # type: ignore[arg-type]
        config=fields.get("config"),  # type: ignore[arg-type]
        return_seqs=return_seqs,  # type: ignore[arg-type]
        dedupe=fields.get("dedupe"),  # type: ignore[arg-type]
        dedupe_ms=fields.get("dedupe_ms"),  # type: ignore[arg-type]
        replace=fields.get("replace"),  # type: ignore[arg-type]
        expected_head_seq=fields.get("expected_head_seq"),  # type: ignore[arg-type]
        producer_id=fields.get("producer_id"),  # type: ignore[arg-type]
        epoch=fields.get("epoch"),  # type: ignore[arg-type]
    )
    return ctx.json(
        result.to_dict(),
        201 if result.created else 200,
        wal_append_ms=result.wal_append_ms,
        fsync_ms=result.fsync_ms,
        throttle_wait_ms=0.0,
    )


async def diff_records(ctx: RequestContext) -> Reply:
    """POST /v0/topics/:topic/diff — records after a cursor (§3)."""
    args: dict[str, Any] = decode_json_object(ctx.body, DIFF_FIELDS)
    # The wire's default (§3): no tags unless asked. The Python API's default is the
    # other way (records carry what was written), so it is passed, never left to it.
    args.setdefault("include_tags", False)
    max_bytes = args.pop("max_batch_bytes", DIFF_BYTE_BUDGET)
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes <= 0:
        raise InvalidRequestError.for_field("max_batch_bytes", "must be a positive integer")
    max_bytes = min(max_bytes, DIFF_BYTE_CEILING)
    # A commit to a new cursor counts against its key; a filtered read, against its share.
    args["owner"] = ctx.principal
    if args.get("wait_ms"):
        result = await _long_poll(ctx, args, max_bytes)
    else:
        result = await ctx.engine.diff(ctx.name, max_bytes=max_bytes, **args)
    tombstone = result.tombstone
    accept = ctx.headers.get(b"accept", b"")
    if result.format == "records" and b"application/vnd.apache.arrow.stream" in accept:
        arrow = await _arrow_answer(ctx, result, args, max_bytes)
        if arrow is not None:
            return arrow
    tail = b',"next_from_seq":%d,"head_seq":%d,"earliest_seq":%d,"caught_up":%s,"tombstone":' % (
        result.next_from_seq,
        result.head_seq,
        result.earliest_seq,
        _TRUE_FALSE[result.caught_up],
    )
    tomb = b"null" if tombstone is None else json_bytes(tombstone.to_dict())
    if result.from_seq is not None:  # issue 18: where from_ts resolved to
        tomb += b',"from_seq":%d' % result.from_seq
    if result.end_reached is not None:
        tomb += b',"end_reached":' + _TRUE_FALSE[result.end_reached]
    perf = b',"lag":%d,"performance":{"server_total_ms":%.3f,"records_scanned":%d}}' % (
        result.lag,
        ctx.elapsed_ms(),
        result.records_scanned,
    )
    # The topic name is validated by the engine ([A-Za-z0-9._:-]): no escaping needed.
    head = b'{"topic":"' + result.topic.encode() + b'","records":'
    return Reply(200, b"".join((head, result.records_json, tail, tomb, perf)))


async def _arrow_answer(
    ctx: RequestContext, result: DiffResult, args: dict[str, Any], max_bytes: int
) -> Reply | None:
    """The diff as an Arrow IPC stream (rule 6); None when pyarrow is not installed."""
    try:
        from topics.wire.arrow import ARROW_STREAM, encode_diff, want_flags
    except ImportError:
        return None
    records_json: bytes | list[bytes] = result.records_json
    scanned = result.records_scanned
    if _may_join(args, result):
        result, records_json, scanned = await _joined(ctx, result, args, max_bytes)
    want = want_flags(  # the engine has checked these are booleans
        include_tags=bool(args.get("include_tags", False)),
        include_data=bool(args.get("include_data", True)),
        include_meta=bool(args.get("include_meta", True)),
    )
    fields = {
        "topic": result.topic,
        "next_from_seq": result.next_from_seq,
        "head_seq": result.head_seq,
        "earliest_seq": result.earliest_seq,
        "caught_up": result.caught_up,
        "tombstone": None if result.tombstone is None else result.tombstone.to_dict(),
        "lag": result.lag,
        "performance": {
            "server_total_ms": round(ctx.elapsed_ms(), 3),
            "records_scanned": scanned,
        },
    }
    if result.from_seq is not None:
        fields["from_seq"] = result.from_seq
    if result.end_reached is not None:
        fields["end_reached"] = result.end_reached
    body = encode_diff(records_json, want, fields)
    return Reply(200, body, ARROW_STREAM.encode(), [(b"vary", b"accept")])


#: An Arrow answer joins up to this many windows (rule 7).
ARROW_MAX_WINDOWS = 16


def _may_join(args: dict[str, Any], result: DiffResult) -> bool:
    """Rule 7: only a plain read that asked for more than one window holds."""
    if result.caught_up:
        return False
    if any(args.get(name) for name in ("wait_ms", "cursor", "commit", "from_ts")):
        return False
    limit = args.get("limit")
    return isinstance(limit, int) and not isinstance(limit, bool) and limit > result.record_count


async def _joined(
    ctx: RequestContext, first: DiffResult, args: dict[str, Any], max_bytes: int
) -> tuple[DiffResult, list[bytes], int]:
    """Consecutive windows after ``first`` while the answer is under the asked ``limit``
    and ``max_bytes`` (rule 7); a window that starts with a tombstone is left for the
    next request. Returns the last window, each window's records (one Arrow batch each)
    and the records scanned."""
    parts = [first.records_json] if first.record_count else []
    count, size, last = first.record_count, len(first.records_json), first
    scanned = first.records_scanned
    for _ in range(ARROW_MAX_WINDOWS - 1):
        if last.caught_up or count >= args["limit"] or size >= max_bytes:
            break
        nxt = await ctx.engine.diff(
            ctx.name,
            max_bytes=max_bytes - size,
            **{**args, "from_seq": last.next_from_seq, "limit": args["limit"] - count},
        )
        if nxt.tombstone is not None:
            break
        if nxt.record_count:
            parts.append(nxt.records_json)
        count, size, scanned, last = (
            count + nxt.record_count,
            size + len(nxt.records_json),
            scanned + nxt.records_scanned,
            nxt,
        )
    return last, parts, scanned


async def _long_poll(ctx: RequestContext, args: dict[str, Any], max_bytes: int) -> DiffResult:
    """A diff that may wait (rule 5): it ends early, with the current answer, when the
    server starts shutting down, and without an answer when the client goes away (so a
    vanished client does not hold its in-flight slot for up to 30 s)."""
    engine = ctx.engine
    result: DiffResult | None = None
    error: TopicsError | None = None
    gone = False
    with ctx.state.long_poll():
        async with trio.open_nursery() as nursery:

            async def watch_disconnect() -> None:
                nonlocal gone
                receive = ctx.receive
                if receive is None:
                    return
                while (await receive())["type"] != "http.disconnect":
                    pass
                gone = True
                nursery.cancel_scope.cancel()

            async def poll() -> None:
                # A contract error is kept as a value: raised inside the nursery it would
                # reach the error mapper wrapped in an ExceptionGroup (a 500).
                nonlocal result, error
                try:
                    result = await engine.diff(ctx.name, max_bytes=max_bytes, **args)
                except TopicsError as exc:
                    error = exc
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch_disconnect)
            nursery.start_soon(poll)
    if gone:
        raise ClientDisconnected
    if error is not None:
        raise error
    if result is None:  # shutting down: answer with what there is now
        args["wait_ms"] = 0
        result = await engine.diff(ctx.name, max_bytes=max_bytes, **args)
    return result


async def delete_records(ctx: RequestContext) -> Reply:
    """POST /v0/topics/:topic/delete — delete by seq bound and/or tag match (§5)."""
    args = decode_json_object(ctx.body, DELETE_FIELDS)
    result = await ctx.engine.delete_records(
        ctx.name, before_seq=args.get("before_seq"), match=args.get("match")
    )
    return ctx.json(result.to_dict(), fsync_ms=result.fsync_ms)


ROUTES = (
    Route(
        "POST",
        "/v0/topics/{topic}",
        write_records,
        fast=True,
        body=True,
        pressure="handler",
        query=(RETURN_SEQS,),
        op="writeRecords",
    ),
    Route("POST", "/v0/topics/{topic}/diff", diff_records, fast=True, body=True, op="diffRecords"),
    Route("POST", "/v0/topics/{topic}/delete", delete_records, body=True, op="deleteRecords"),
)
