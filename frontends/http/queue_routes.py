"""Queue routes: claim, ack, nack, extend (contract §10.2-§10.6).

All four are hot (a worker calls claim and ack once per batch), so the raw-ASGI
dispatcher serves them (``fast=True``). Each handler decodes the small JSON body, calls
one Engine method and encodes the result.

Rules:
1. Unknown body members are ``400 invalid_request`` (a typo such as ``leaseIds`` must not
   silently turn off fencing); types and ranges are checked by the engine.
2. A claim answer splices ``ClaimResult.claimed_json`` (each job's stored record with its
   lease fields, rendered once by the engine) between a hand-built head and tail.
3. Claims are shed under CPU pressure (429, like any request); acks, nacks and extends are
   not: refusing them would only turn finished work into redeliveries.
4. ``GET /v0/topics/:q/work`` (§10.8) is a Quart-native streaming view (``register``):
   establishment errors (400/404/406/409) are plain HTTP errors, checked by opening a
   session once before the stream starts; then ``retry: 2000`` and a heartbeat, one
   ``event: job`` per delivered job (``id:`` = its seq), a heartbeat after each
   ``HEARTBEAT_S`` without a job, an in-stream ``event: error`` if the topic is deleted or
   stops being a queue, and ``connection-closing`` when the server drains. The session is
   a context manager inside the body generator: however the stream ends (client gone,
   cancelled, error), its leases are released at once (release-on-disconnect).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import trio
from quart import Response, request

from topics.errors import InvalidRequestError, NotAcceptableError, TopicsError
from topics.wire.sse import (
    HEARTBEAT,
    RETRY_MS,
    connection_closing_frame,
    encode_event,
    encode_retry,
    error_frame,
)

from .requests import decode_json_object
from .respond import context_of
from .routing import Route
from .state import HttpState, Reply, RequestContext

if TYPE_CHECKING:
    from quart_trio import QuartTrio

    from topics._queue_ops import WorkSession

__all__ = ["HEARTBEAT_S", "ROUTES", "register"]

#: Heartbeat cadence of a /work stream without jobs (§7.6: 15 s).
HEARTBEAT_S = 15.0
WORK_PATTERN = "/v0/topics/{topic}/work"

CLAIM_FIELDS = frozenset({"node", "max", "lease_ms"})
ACK_FIELDS = frozenset({"node", "seqs", "lease_ids"})
NACK_FIELDS = frozenset({"node", "seqs", "delay_ms", "lease_ids"})
EXTEND_FIELDS = frozenset({"node", "seqs", "lease_ms", "lease_ids"})


async def claim(ctx: RequestContext) -> Reply:
    """POST /v0/topics/:q/claim — lease up to ``max`` jobs to ``node`` (§10.2)."""
    args: dict[str, Any] = decode_json_object(ctx.body, CLAIM_FIELDS)
    result = await ctx.engine.claim(
        ctx.name,
        node=args.get("node"),  # type: ignore[arg-type]  # the engine type-checks
        max=args.get("max", 1),
        lease_ms=args.get("lease_ms"),
    )
    # The topic name is validated by the engine ([A-Za-z0-9._:-]): no escaping needed.
    head = b'{"topic":"' + result.topic.encode() + b'","claimed":'
    tail = (
        b',"count":%d,"ready":%d,"performance":{"server_total_ms":%.3f,"fsync_ms":%.3f,'
        b'"throttle_wait_ms":0.0}}'
        % (result.count, result.ready, ctx.elapsed_ms(), result.fsync_ms)
    )
    return Reply(200, b"".join((head, result.claimed_json, tail)))


async def ack(ctx: RequestContext) -> Reply:
    """POST /v0/topics/:q/ack — complete (delete) jobs held by ``node`` (§10.4)."""
    args: dict[str, Any] = decode_json_object(ctx.body, ACK_FIELDS)
    result = await ctx.engine.ack(
        ctx.name,
        node=args.get("node"),  # type: ignore[arg-type]
        seqs=args.get("seqs"),  # type: ignore[arg-type]
        lease_ids=args.get("lease_ids"),
    )
    return ctx.json(result.to_dict(), fsync_ms=result.fsync_ms)


async def nack(ctx: RequestContext) -> Reply:
    """POST /v0/topics/:q/nack — release leases for (delayed) reclaim (§10.5)."""
    args: dict[str, Any] = decode_json_object(ctx.body, NACK_FIELDS)
    result = await ctx.engine.nack(
        ctx.name,
        node=args.get("node"),  # type: ignore[arg-type]
        seqs=args.get("seqs"),  # type: ignore[arg-type]
        delay_ms=args.get("delay_ms", 0),
        lease_ids=args.get("lease_ids"),
    )
    return ctx.json(result.to_dict(), fsync_ms=result.fsync_ms)


async def extend(ctx: RequestContext) -> Reply:
    """POST /v0/topics/:q/extend — push lease deadlines out (heartbeat, §10.6)."""
    args: dict[str, Any] = decode_json_object(ctx.body, EXTEND_FIELDS)
    result = await ctx.engine.extend(
        ctx.name,
        node=args.get("node"),  # type: ignore[arg-type]
        seqs=args.get("seqs"),  # type: ignore[arg-type]
        lease_ms=args.get("lease_ms"),  # type: ignore[arg-type]
        lease_ids=args.get("lease_ids"),
    )
    return ctx.json(result.to_dict(), fsync_ms=result.fsync_ms)


async def work_stream(topic: str) -> Any:
    """GET /v0/topics/:q/work — PUSH-mode delivery over SSE (§10.8, rule 4)."""
    ctx = context_of(request.scope)
    if b"text/event-stream" not in ctx.headers.get(b"accept", b""):
        raise NotAcceptableError(
            "the /work stream is text/event-stream; send Accept: text/event-stream",
            detail={"accept": ctx.headers.get(b"accept", b"").decode("latin-1")},
        )
    node = ctx.query_str("node")
    if node is None:
        raise InvalidRequestError.for_field("node", "is required (the worker's identity)")
    want = ctx.query_int("max", 1)
    raw_lease = ctx.query_str("lease_ms")
    lease_ms = ctx.query_int("lease_ms", 0) if raw_lease else None
    engine = ctx.engine
    async with engine.open_work_session(ctx.name, node=node, max=want, lease_ms=lease_ms):
        pass  # establishment errors surface here, before any byte is streamed
    response = Response(
        _work_frames(ctx, node, want, lease_ms),
        200,
        {
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
            "X-Request-ID": ctx.request_id,
        },
    )
    response.timeout = None  # a stream, not a request: no response timeout
    return response


async def _work_frames(
    ctx: RequestContext, node: str, want: int, lease_ms: int | None
) -> AsyncIterator[bytes]:
    # No yield inside a cancel scope (trio forbids it in generators): the scopes live in
    # _next_frame. The session's own exit is synchronous, run by Quart's aclose().
    yield encode_retry() + HEARTBEAT
    try:
        async with ctx.engine.open_work_session(
            ctx.name, node=node, max=want, lease_ms=lease_ms
        ) as session:
            while True:
                frame, last = await _next_frame(ctx, session)
                yield frame
                if last:
                    return
    except TopicsError as exc:
        yield error_frame(exc, request_id=ctx.request_id)


async def _next_frame(ctx: RequestContext, session: WorkSession) -> tuple[bytes, bool]:
    """The next chunk to send: jobs, a heartbeat, or (draining) the closing frame."""
    with ctx.state.long_poll():  # cancelled when the server starts draining
        with trio.move_on_after(HEARTBEAT_S):
            res = await session.next_jobs()
            frames = [
                encode_event(str(seq), "job", frag)
                for seq, frag in zip(res.seqs, res.stream_fragments(), strict=True)
            ]
            return b"".join(frames), False
        return HEARTBEAT, False
    return connection_closing_frame("server_shutdown", ctx.request_id, RETRY_MS), True


def register(app: QuartTrio, state: HttpState) -> None:
    """Add the /work streaming view (the route table entry has no plain handler)."""
    app.add_url_rule(
        WORK_PATTERN.replace("{", "<").replace("}", ">"),
        endpoint=f"GET {WORK_PATTERN}",
        view_func=work_stream,
        methods=["GET"],
    )


ROUTES = (
    Route("GET", WORK_PATTERN, None, query_token=True),
    Route("POST", "/v0/topics/{topic}/claim", claim, fast=True, body=True),
    Route("POST", "/v0/topics/{topic}/ack", ack, fast=True, body=True, pressure="never"),
    Route("POST", "/v0/topics/{topic}/nack", nack, fast=True, body=True, pressure="never"),
    Route("POST", "/v0/topics/{topic}/extend", extend, fast=True, body=True, pressure="never"),
)
