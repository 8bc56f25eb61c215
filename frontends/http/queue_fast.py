"""``GET /v0/topics/:q/work`` (§10.8) served by the raw-ASGI dispatcher.

The stream used to be a Quart streaming view. Quart's per-chunk machinery (a body
generator, its task and the response wrapper) cost about as much server CPU as the jobs
it carried, and the push stream is how a worker avoids a claim round trip per batch, so
it has to be cheap. The handler checks everything that can fail before answering, then
returns a :class:`~.watch_routes.StreamReply` whose ``run`` writes straight to ASGI
``send``; the dispatcher gives the request's in-flight slot back first.

Rules:
1. Establishment errors (406, 400, 404, 409, and 429 when the §11 long-lived connection
   caps are full) are plain HTTP errors: the session is opened once, and the stream slot
   taken, before any byte is streamed. The slot is shared with watch streams and
   WebSockets (``engine.acquire_stream_slot``) and given back however the stream ends.
2. The stream opens with ``retry: 2000`` and a heartbeat; then one ``event: job`` per
   delivered job (``id:`` = its seq), the jobs of one claim in one ASGI message (one
   socket write); a heartbeat after each ``HEARTBEAT_S`` without a job.
3. It ends with an ``event: error`` when the topic is deleted or stops being a queue,
   with ``connection-closing`` when the server drains, and silently when the client goes.
4. The work session is a context manager around the pump: however the stream ends, its
   leases are released at once (release-on-disconnect).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

import trio

from topics.errors import InvalidRequestError, NotAcceptableError, TopicsError
from topics.wire.sse import (
    HEARTBEAT,
    RETRY_MS,
    connection_closing_frame,
    encode_event,
    encode_retry,
    error_frame,
)

from .respond import finish
from .state import Reply, RequestContext
from .watch_routes import StreamReply

if TYPE_CHECKING:
    from topics._queue_ops import WorkSession
    from topics.queue_types import ClaimResult

__all__ = ["HEARTBEAT_S", "open_work"]

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]
Receive = Callable[[], Awaitable[Message]]

#: Heartbeat cadence of a /work stream without jobs (§7.6: 15 s).
HEARTBEAT_S = 15.0

_CONTENT_TYPE = b"text/event-stream"
_HEADERS = [(b"cache-control", b"no-store"), (b"x-accel-buffering", b"no")]


async def open_work(ctx: RequestContext) -> Reply:
    """GET /v0/topics/:q/work — PUSH-mode delivery over SSE (rule 1)."""
    accept = ctx.headers.get(b"accept", b"")
    if b"text/event-stream" not in accept:
        raise NotAcceptableError(
            "the /work stream is text/event-stream; send Accept: text/event-stream",
            detail={"accept": accept.decode("latin-1")},
        )
    node = ctx.query_str("node")
    if node is None:
        raise InvalidRequestError.for_field("node", "is required (the worker's identity)")
    want = ctx.query_int("max", 1)
    lease_ms = ctx.query_int("lease_ms", 0) if ctx.query_str("lease_ms") else None
    engine = ctx.engine
    async with engine.open_work_session(ctx.name, node=node, max=want, lease_ms=lease_ms):
        pass  # establishment errors surface here, before any byte is streamed
    slot = engine.acquire_stream_slot(ctx.principal.key_index)
    stream = _WorkStream(ctx, node, want, lease_ms, slot.release)
    return StreamReply(200, b"", _CONTENT_TYPE, list(_HEADERS), run=stream.run)


class _WorkStream:
    """One open /work connection: the pump and the disconnect watcher in one nursery."""

    def __init__(
        self,
        ctx: RequestContext,
        node: str,
        want: int,
        lease_ms: int | None,
        release_slot: Callable[[], None],
    ) -> None:
        self.ctx = ctx
        self.node = node
        self.want = want
        self.lease_ms = lease_ms
        self.release_slot = release_slot
        self.gone = False

    async def run(self, send: Send, receive: Receive) -> None:
        try:
            ctx = self.ctx
            status, headers, _ = finish(ctx, Reply(200, b"", _CONTENT_TYPE, list(_HEADERS)))
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await _write(send, encode_retry() + HEARTBEAT)
            # The pump is the child task and the request task watches for the disconnect
            # (Quart's arrangement). The other way round measured 10-25% fewer jobs/s with
            # 16 streams at the same CPU per job; the cause was not found (BENCHMARKS_QUEUES).
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump_then_stop, send, nursery.cancel_scope)
                await self._watch_disconnect(receive, nursery.cancel_scope)
            if not self.gone:
                with trio.move_on_after(1.0):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.release_slot()

    async def _watch_disconnect(self, receive: Receive, scope: trio.CancelScope) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.gone = True
        scope.cancel()

    async def _pump_then_stop(self, send: Send, scope: trio.CancelScope) -> None:
        await self._pump(send)
        scope.cancel()

    async def _pump(self, send: Send) -> None:
        ctx = self.ctx
        try:
            async with ctx.engine.open_work_session(
                ctx.name, node=self.node, max=self.want, lease_ms=self.lease_ms
            ) as session:
                while True:
                    frame, last = await _next_frame(ctx, session)
                    # Written outside any cancel scope: jobs already leased to this session
                    # must reach the socket, or sit unseen until the client disconnects.
                    await _write(send, frame)
                    if last:
                        return
        except TopicsError as exc:
            with trio.move_on_after(1.0):
                await _write(send, error_frame(exc, request_id=ctx.request_id))


async def _next_frame(ctx: RequestContext, session: WorkSession) -> tuple[bytes, bool]:
    """The next chunk to send: jobs, a heartbeat, or (draining) the closing frame."""
    with ctx.state.long_poll():  # cancelled when the server starts draining
        with trio.move_on_after(HEARTBEAT_S):
            return _job_frames(await session.next_jobs()), False
        return HEARTBEAT, False
    return connection_closing_frame("server_shutdown", ctx.request_id, RETRY_MS), True


def _job_frames(res: ClaimResult) -> bytes:
    """One ``event: job`` per job, as ``encode_event`` writes it. A job object is compact
    JSON (a line break inside a string is escaped), so it is one ``data:`` line; the
    general encoder is kept for anything else. Each frame's payload is the claim object
    with ``"topic"`` first, spliced without re-encoding."""
    head = b'{"topic":"' + res.topic.encode() + b'",'
    frames = []
    for seq, frag in zip(res.seqs, res.fragments, strict=True):
        payload = head + frag[1:]
        if b"\n" in payload or b"\r" in payload:
            frames.append(encode_event(str(seq), "job", payload))
        else:
            frames.append(b"id: %d\nevent: job\ndata: %b\n\n" % (seq, payload))
    return b"".join(frames)


async def _write(send: Send, frame: bytes) -> None:
    await send({"type": "http.response.body", "body": frame, "more_body": True})
