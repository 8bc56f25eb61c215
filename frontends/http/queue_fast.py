"""``GET /v0/topics/:q/work`` (§10.8) served by the raw-ASGI dispatcher.

The stream used to be a Quart streaming view. Quart's per-chunk machinery (a body
generator, its task and the response wrapper) cost about as much server CPU as the jobs
it carried, and the push stream is how a worker avoids a claim round trip per batch, so
it has to be cheap. The handler checks everything that can fail before answering, then
returns a :class:`~.streams.StreamReply` whose ``run`` writes straight to ASGI
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
5. Direct delivery (as watch streams do it, ``watch_routes`` rule 7; the shared state
   machine is ``direct_stream.DirectStream``). Where ``RawSocket.find`` gives the socket
   (a connection the fast lane owns) the stream
   writes its chunks to it itself, and a stream with nothing to write has no task at
   work: the stream leaves itself with the engine as the session's listener
   (``WorkSession.poll``; topics/listener_types.py), told synchronously when a lease of
   the stream's node ends (so an ack refills the stream before the ack's own answer is
   written) or jobs arrive; ``changed`` then leases, frames and writes them with one
   non-blocking ``os.write``.
   The request task only waits for the disconnect, sends heartbeats, and polls again when
   a lease expiry or nack delay is due. Anything else (a partial write, a coalescing
   window, dead-lettering, durable leases to sync, the topic gone, shutdown) hands over
   to the pump of rule 4 for good. Elsewhere (a connection hypercorn owns, the in-process
   transport of the tests, ``TOPICS_SSE_DIRECT=0``) every frame goes through ASGI
   ``send``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

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

from .asgi import Receive, Send
from .direct import chunk
from .direct_stream import DirectStream
from .query_params import WORK_LEASE_MS, WORK_MAX, WORK_NODE
from .respond import finish
from .state import Reply, RequestContext
from .streams import StreamReply, accepts_event_stream

if TYPE_CHECKING:
    from topics.queue_types import ClaimResult
    from topics.queues.ops import WorkSession

__all__ = ["HEARTBEAT_S", "open_work"]

log = logging.getLogger("topics.queue")

Write = Callable[[bytes], Awaitable[None]]  # one body chunk of the stream

#: Heartbeat cadence of a /work stream without jobs (§7.6: 15 s).
HEARTBEAT_S = 15.0

_CONTENT_TYPE = b"text/event-stream"
_HEADERS = [(b"cache-control", b"no-store"), (b"x-accel-buffering", b"no")]


async def open_work(ctx: RequestContext) -> Reply:
    """GET /v0/topics/:q/work — PUSH-mode delivery over SSE (rule 1)."""
    accept = ctx.headers.get(b"accept", b"")
    if not accepts_event_stream(ctx.headers, explicit=True):
        raise NotAcceptableError(
            "the /work stream is text/event-stream; send Accept: text/event-stream",
            detail={"accept": accept.decode("latin-1")},
        )
    node = ctx.query_str(WORK_NODE)
    if node is None:
        raise InvalidRequestError.for_field("node", "is required (the worker's identity)")
    want = ctx.query_int(WORK_MAX, 1)
    lease_ms = ctx.query_int(WORK_LEASE_MS, 0) if ctx.query_str(WORK_LEASE_MS) else None
    engine = ctx.engine
    async with engine.open_work_session(ctx.name, node=node, max=want, lease_ms=lease_ms):
        pass  # establishment errors surface here, before any byte is streamed
    slot = engine.acquire_stream_slot(ctx.principal.key_index)
    stream = _WorkStream(ctx, node, want, lease_ms, slot.release)
    return StreamReply(200, b"", _CONTENT_TYPE, list(_HEADERS), run=stream.run)


class _WorkStream(DirectStream):
    """One open /work connection (rules 2-5).

    Through ASGI: the pump and the disconnect watcher in one nursery. On the raw socket:
    the engine's listener (:meth:`changed`) while it can, then the same pump, writing to the
    socket, once a delivery needs a task (``need_task``; ``direct_stream`` rule 1).
    """

    __slots__ = (
        "ctx",
        "lease_ms",
        "need_task",
        "node",
        "pending",
        "release_slot",
        "session",
        "want",
    )

    def __init__(
        self,
        ctx: RequestContext,
        node: str,
        want: int,
        lease_ms: int | None,
        release_slot: Callable[[], None],
    ) -> None:
        super().__init__(ctx.state)
        self.ctx = ctx
        self.node = node
        self.want = want
        self.lease_ms = lease_ms
        self.release_slot = release_slot
        self.session: WorkSession | None = None
        self.need_task = False
        self.pending = b""  # chunk bytes a direct write left for the pump to finish

    async def run(self, send: Send, receive: Receive) -> None:
        try:
            ctx = self.ctx
            status, headers, _ = finish(ctx, Reply(200, b"", _CONTENT_TYPE, list(_HEADERS)))
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await _send_body(send, encode_retry() + HEARTBEAT)
            self.sent()
            self.find_socket(send)
            write = self.send_raw if self.raw is not None else _asgi_writer(send)
            try:
                async with ctx.engine.open_work_session(
                    ctx.name, node=self.node, max=self.want, lease_ms=self.lease_ms
                ) as session:
                    self.session = session
                    if self.raw is not None:
                        self.changed()
                        idle = await self.idle(receive)
                        session.detach()
                        if not idle:
                            return  # the client went away
                    # The pump is the child task and the request task watches for the
                    # disconnect (Quart's arrangement). The other way round measured 10-25%
                    # fewer jobs/s with 16 streams at the same CPU per job; the cause was not
                    # found (BENCHMARKS_QUEUES).
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._pump_then_stop, write, nursery.cancel_scope)
                        await self.watch_disconnect(receive, nursery.cancel_scope)
            except TopicsError as exc:  # the topic went away between the checks and here
                if not self.gone:
                    with trio.move_on_after(1.0):
                        await write(error_frame(exc, request_id=ctx.request_id))
            if not self.gone:
                with trio.move_on_after(1.0):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            if self.session is not None:
                self.session.detach()
            self.release_slot()
            self.forget_socket()

    # -- direct delivery (rule 5) --------------------------------------------------------------

    def handed_over(self) -> bool:
        return self.need_task

    def deadline(self) -> float:
        """When the idle request task has to look again: the next heartbeat, or the next
        lease expiry / nack delay (the only changes that call no hook)."""
        assert self.session is not None
        deadline = self.last_sent + HEARTBEAT_S
        due = self.session.next_change_ms()
        if due is not None:
            wait_s = max(due - self.ctx.engine.clock.now_ms(), 0) / 1000
            deadline = min(deadline, trio.current_time() + wait_s)
        return deadline

    def tick(self) -> None:
        if self.heartbeat_due(HEARTBEAT_S):
            self._try_write(chunk(HEARTBEAT))
        if not self.need_task:
            self.changed()  # a lease expiry or nack delay may have come due

    def changed(self) -> bool:
        """The engine tells the session's listener (``ChangeListener``) that its queue
        changed; the idle task calls it too, to poll. Lease what this stream may take now
        and write it without blocking; hand over to the pump when that cannot be done
        (False: the pump delivers from here on). Never raises: it runs inside whatever
        engine call changed the queue."""
        session, raw = self.session, self.raw
        if session is None or raw is None or self.need_task or self.gone:
            return False
        try:
            if raw.broken:
                return False  # the disconnect ends the stream; closing the session releases
            res = session.poll(self)
            if res is None:
                self._hand_over()
                return False
            if res.count:
                self._try_write(chunk(_job_frames(res)))
            if not self.need_task and self._wake is not None:
                # Only ever brought forward (a nack delay shorter than every lease): a
                # deadline left too early just costs the idle task one look, while moving
                # it on every delivery cost a deadline-heap entry per batch.
                self.bring_forward(self.deadline())
        except Exception:  # never let one stream break an ack or the append relay
            log.exception("direct /work delivery failed; the pump takes over")
            self._hand_over()
        return not self.need_task

    def _try_write(self, data: bytes) -> None:
        n = self.try_write(data)
        if n == len(data):
            return
        if n >= 0:
            # Leased jobs must reach the socket: the rest goes first, from the pump.
            self.pending = data[n:]
        self._hand_over()

    def _hand_over(self) -> None:
        self.need_task = True
        if self.session is not None:
            self.session.detach()
        self.hand_over()

    # -- the pump (rule 4) ---------------------------------------------------------------------

    async def _pump_then_stop(self, write: Write, scope: trio.CancelScope) -> None:
        await self._pump(write)
        scope.cancel()

    async def _pump(self, write: Write) -> None:
        ctx, session = self.ctx, self.session
        assert session is not None
        try:
            if self.pending:
                pending, self.pending = self.pending, b""
                await self.send_raw(pending, framed=True)
            while True:
                frame, last = await _next_frame(ctx, session)
                # Written outside any cancel scope: jobs already leased to this session
                # must reach the socket, or sit unseen until the client disconnects.
                await write(frame)
                if last:
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            await trio.sleep_forever()  # the disconnect ends the connection
        except TopicsError as exc:
            with trio.move_on_after(1.0):
                await write(error_frame(exc, request_id=ctx.request_id))


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
    topic = res.topic.encode()
    fragments = res.fragments
    # One scan of the whole batch for the rare raw line break (the topic name has none).
    joined = b"".join(fragments)
    if b"\n" not in joined and b"\r" not in joined:
        return b"".join(
            [
                b'id: %d\nevent: job\ndata: {"topic":"%b",%b\n\n' % (seq, topic, frag[1:])
                for seq, frag in zip(res.seqs, fragments, strict=True)
            ]
        )
    return b"".join(
        encode_event(str(seq), "job", b'{"topic":"%b",%b' % (topic, frag[1:]))
        for seq, frag in zip(res.seqs, fragments, strict=True)
    )


async def _send_body(send: Send, frame: bytes) -> None:
    await send({"type": "http.response.body", "body": frame, "more_body": True})


def _asgi_writer(send: Send) -> Write:
    async def write(frame: bytes) -> None:
        await _send_body(send, frame)

    return write
