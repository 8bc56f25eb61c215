"""Watch routes: POST /v0/watch (create a session) and GET /v0/watch/:wid (the SSE stream).

Both are served by the raw-ASGI dispatcher. The GET handler checks everything that can
fail (406, 400, 404, 401, 429) and then returns a :class:`StreamReply`, whose ``run``
streams until the client goes away or the server ends the stream; the dispatcher gives
the request's in-flight slot back first (a stream is bounded by the §11 connection caps
instead). :class:`Outbound` (the bounded outbound queue and its writer) is shared with
the WebSocket frontend.

Rules:
1. Each connection has a bounded outbound queue (``WatchSettings.queue_frames``) drained
   by one writer task; the pump only reads the engine when the queue takes a frame, so
   while a client cannot drain, later reads simply cover more records (larger, fewer
   batches) instead of piling frames up. A frame waiting on a full queue for
   ``buffer_grace_ms`` turns the connection's lossy topics into a
   ``tombstone(from_seq_too_old)`` and a jump to the head; for
   ``slow_consumer_timeout_ms`` it ends the stream with ``error`` 408 (the session stays).
2. One ASGI body message per frame, each flushed by hypercorn as it is sent (TCP_NODELAY is
   set on the listening socket by hypercorn and on every accepted socket by trio).
3. The stream opens with ``retry: 2000`` and a ``connection-established`` event carrying
   the request id and the resolved per-topic cursors (CONTRACT-NOTES 5, 6). Every data
   frame carries the composite cursor as ``id:``; the session cursor advances only after
   a frame's bytes were handed to the transport.
4. Every stream the server ends on purpose gets a final frame saying why
   (CONTRACT-NOTES 7): ``connection-closing`` (``server_shutdown``, ``superseded``) when the
   client should just reconnect, ``error`` when it should act (410 session gone: POST
   again; 408 slow consumer). The frames queued behind it are dropped (their cursors were
   never committed, so nothing is lost). A client that disconnects gets nothing.
5. Heartbeats (``: hb``) go out after ``heartbeat_ms`` without any frame, so they are
   suppressed while data flows. Under CPU pressure the stream sends one advisory
   ``error`` 429 and paces its reads (batches coalesce) until the pressure passes.
6. Last-Event-ID may only rewind the session's cursors; a malformed one is ignored (a 400
   would stop a browser's EventSource for good).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import trio

from topics.errors import (
    ForbiddenError,
    InvalidRequestError,
    NotAcceptableError,
    ThrottledError,
    TopicsError,
)
from topics.watch_types import SlowConsumerError, TopicDeletedEvent, WatchSettings
from topics.wire import cursor, sse

from .requests import decode_json_object
from .respond import finish
from .routing import Route
from .state import HttpState, Reply, RequestContext

if TYPE_CHECKING:
    from topics._watch import WatchStream

__all__ = ["ROUTES", "Outbound", "StreamReply", "register"]

log = logging.getLogger("topics.watch")

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]
Receive = Callable[[], Awaitable[Message]]
P = TypeVar("P")

EVENT_STREAM = b"text/event-stream; charset=utf-8"
STREAM_HEADERS = [
    (b"cache-control", b"no-store"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),
]
WATCH_FIELDS = frozenset(
    {
        "node",
        "topics",
        "limit",
        "max_batch_bytes",
        "heartbeat_ms",
        "include_meta",
        "include_tags",
        "include_data",
        "consistency",
    }
)
#: Longest pause between paced reads under CPU pressure.
MAX_PACE_MS = 1000


@dataclass(slots=True)
class StreamReply(Reply):
    """A reply that streams: the dispatcher calls ``run(send, receive)`` instead of
    sending ``body``, after giving the in-flight slot back (rule 1 of the module)."""

    run: Callable[[Send, Receive], Awaitable[None]] | None = None


# -- the bounded outbound queue (shared with frontends/ws.py) --------------------------------


class Outbound(Generic[P]):
    """One connection's bounded outbound queue and the writer that drains it (rules 1, 4, 5).

    The pump calls :meth:`put`; :meth:`run_writer` runs beside it in the connection's
    nursery, whose cancel scope is given to :meth:`bind` and is cancelled when the writer
    is done. ``on_sent(commit)`` runs after each frame that carried a ``commit`` value left.
    """

    def __init__(
        self,
        state: HttpState,
        settings: WatchSettings,
        write: Callable[[P], Awaitable[None]],
        *,
        shutdown_frame: Callable[[], P],
        slow_frame: Callable[[TopicsError], P],
        heartbeat: P | None = None,
        heartbeat_s: float = math.inf,
        on_sent: Callable[[Any], None] | None = None,
        on_grace: Callable[[], object] | None = None,
        on_abandon: Callable[[], object] | None = None,
    ) -> None:
        self._state = state
        self._settings = settings
        self._write = write
        self._shutdown_frame = shutdown_frame
        self._slow_frame = slow_frame
        self._heartbeat = heartbeat
        self._heartbeat_s = heartbeat_s if heartbeat is not None else math.inf
        self._on_sent = on_sent
        self.on_grace = on_grace
        self.on_abandon = on_abandon
        self._send, self._recv = trio.open_memory_channel[tuple[P, Any]](settings.queue_frames)
        self._final: P | None = None
        self._scope: trio.CancelScope | None = None
        self.finished = trio.Event()
        self.final_sent = False

    def bind(self, scope: trio.CancelScope) -> None:
        """The connection's scope: cancelled once the writer is done (or must give up)."""
        self._scope = scope

    @property
    def ending(self) -> bool:
        return self._final is not None

    def stop(self, final: P) -> None:
        """End the connection with ``final`` after the frame being written (rule 4)."""
        if self._final is not None:
            return
        self._final = final
        self._discard()
        with contextlib.suppress(trio.WouldBlock, trio.ClosedResourceError):
            self._send.send_nowait(_WAKE)  # an idle writer wakes up and sees _final

    async def put(self, payload: P, commit: Any = None) -> None:
        """Queue a frame; on a full queue apply the slow-consumer rules (rule 1)."""
        item = (payload, commit)
        try:
            self._send.send_nowait(item)
            return
        except trio.WouldBlock:
            pass
        settings = self._settings
        start = trio.current_time()
        with trio.move_on_at(start + settings.buffer_grace_ms / 1000):
            await self._send.send(item)
            return
        if self.on_grace is not None:
            self.on_grace()
        with trio.move_on_at(start + settings.slow_consumer_timeout_ms / 1000):
            await self._send.send(item)
            return
        waited_s = round(trio.current_time() - start, 1)
        self.stop(
            self._slow_frame(
                SlowConsumerError(
                    f"the client read nothing for {waited_s} s; reconnect with Last-Event-ID",
                    detail={"slow_consumer_timeout_ms": settings.slow_consumer_timeout_ms},
                )
            )
        )
        # The writer is stuck in a send: give the final frame its chance, then give up.
        with trio.move_on_after(settings.final_frame_timeout_ms / 1000):
            await self.finished.wait()
        if not self.finished.is_set() and self.on_abandon is not None:
            # hypercorn shields its socket writes, so a send to a client that reads nothing
            # cannot be cancelled: free the session and the connection slot now; the stuck
            # task goes when the kernel gives the connection up.
            self.on_abandon()
        if self._scope is not None:
            self._scope.cancel()
        await trio.lowlevel.checkpoint()

    def shutdown(self) -> None:
        """The server is shutting down: end with the shutdown frame (rule 4)."""
        self.stop(self._shutdown_frame())

    async def run_writer(self) -> None:
        """Drain the queue into the connection until it ends (rules 4, 5)."""
        try:
            await self._drain()
            final = self._final
            if final is not None:
                with trio.move_on_after(self._settings.final_frame_timeout_ms / 1000):
                    await self._write(final)
                    self.final_sent = True
        finally:
            self.finished.set()
            if self._scope is not None:
                self._scope.cancel()

    async def _drain(self) -> None:
        # One cancel scope serves as the heartbeat timer for many frames: its deadline is
        # pushed back after each write and lifted (inf) while writing, so a slow write is
        # never cut by it; a new scope is needed only after a heartbeat actually fired.
        # (Creating scopes per frame cost more than the rest of the delivery path.)
        recv, write, on_sent, hb_s = self._recv, self._write, self._on_sent, self._heartbeat_s
        while self._final is None:
            with trio.CancelScope() as timer:
                while self._final is None:
                    timer.deadline = trio.current_time() + hb_s
                    item = await recv.receive()
                    timer.deadline = math.inf
                    if item is _WAKE or self._final is not None:
                        break
                    await write(item[0])
                    if item[1] is not None and on_sent is not None:
                        on_sent(item[1])
            if timer.cancelled_caught and self._final is None:
                assert self._heartbeat is not None
                await write(self._heartbeat)

    def _discard(self) -> None:
        """Drop queued frames (never sent, so their cursors were never committed)."""
        while True:
            try:
                self._recv.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return


#: Queued by ``Outbound.stop`` so an idle writer wakes up (never written).
_WAKE: Any = object()


# -- POST /v0/watch -------------------------------------------------------------------------


async def create_watch(ctx: RequestContext) -> Reply:
    """POST /v0/watch — validate a subscription, create a session (§7.1)."""
    args = decode_json_object(ctx.body, WATCH_FIELDS)
    topics = args.pop("topics", None)
    if isinstance(topics, dict):
        principal = ctx.principal
        for name in topics:
            if isinstance(name, str) and not principal.may_touch(name):
                raise ForbiddenError(
                    f'api key may not touch "{name}": outside its name prefix allowlist',
                    detail={"topic": name},
                )
    auth = ctx.state.auth_enabled
    result = await ctx.engine.create_watch(
        topics,  # the engine type-checks
        lenient=ctx.query_bool("lenient", False),
        owner=ctx.principal if auth else None,
        **args,
    )
    body = result.to_dict()
    payload = {
        "wid": body["wid"],
        "stream_url": f"/v0/watch/{result.wid}",
        "session_ttl_ms": body["session_ttl_ms"],
        "topics": body["topics"],
    }
    return ctx.json(payload)


# -- GET /v0/watch/:wid ---------------------------------------------------------------------


def accepts_event_stream(headers: Mapping[bytes, bytes]) -> bool:
    """True when ``Accept`` is absent or admits ``text/event-stream`` with q > 0."""
    raw = headers.get(b"accept")
    if raw is None:
        return True
    for part in raw.lower().split(b","):
        media, _, params = part.partition(b";")
        if media.strip() not in (b"text/event-stream", b"text/*", b"*/*"):
            continue
        q = 1.0
        for param in params.split(b";"):
            key, _, value = param.partition(b"=")
            if key.strip() == b"q":
                try:
                    q = float(value.strip() or b"1")
                except ValueError:
                    q = 0.0
        if q > 0:
            return True
    return False


def parse_last_event_id(raw: bytes | None) -> dict[str, int] | int | None:
    """The Last-Event-ID as a cursor map or checkpoint number; None if absent or bad."""
    if not raw:
        return None
    token = raw.decode("latin-1").strip()
    try:
        if cursor.is_checkpoint(token):
            return cursor.decode_checkpoint(token)
        return cursor.decode(token)
    except InvalidRequestError:
        log.debug("ignoring a malformed Last-Event-ID")
        return None


async def open_stream(ctx: RequestContext) -> Reply:
    """GET /v0/watch/:wid — open the SSE stream of a session (§7.3)."""
    if not accepts_event_stream(ctx.headers):
        raise NotAcceptableError(
            "this is an SSE stream: send Accept: text/event-stream",
            detail={"accept": ctx.headers.get(b"accept", b"").decode("latin-1")},
        )
    owner = ctx.principal if ctx.state.auth_enabled else None
    rewind = parse_last_event_id(ctx.headers.get(b"last-event-id"))
    stream = ctx.engine.open_watch(ctx.name, owner=owner, rewind=rewind)
    conn = _SseConnection(ctx, stream)
    return StreamReply(200, b"", EVENT_STREAM, list(STREAM_HEADERS), run=conn.run)


class _SseConnection:
    """One open SSE stream: the pump (engine -> frames), the writer and the disconnect
    watcher, in one nursery owned by the request."""

    def __init__(self, ctx: RequestContext, stream: WatchStream) -> None:
        self.ctx = ctx
        self.stream = stream
        self.disconnected = False

    async def run(self, send: Send, receive: Receive) -> None:
        ctx, stream = self.ctx, self.stream
        try:
            status, headers, _ = finish(
                ctx, StreamReply(200, b"", EVENT_STREAM, list(STREAM_HEADERS))
            )
            await send({"type": "http.response.start", "status": status, "headers": headers})
            marks = {name: w.to_dict() for name, w in stream.watermarks().items()}
            opening = sse.encode_retry() + sse.connection_established_frame(
                ctx.request_id, stream.session.wid, marks
            )
            await send({"type": "http.response.body", "body": opening, "more_body": True})
            out = self._outbound(send)
            async with trio.open_nursery() as nursery:
                out.bind(nursery.cancel_scope)
                stream.on_stop = lambda: out.stop(self._end_frame(stream.end))
                if stream.end is not None:  # superseded before it started
                    stream.on_stop()
                nursery.start_soon(self._watch_disconnect, receive, nursery.cancel_scope)
                nursery.start_soon(out.run_writer)
                nursery.start_soon(self._pump, out)
            if out.final_sent and not self.disconnected:
                with trio.move_on_after(1.0):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            stream.on_stop = None
            stream.close()

    def _outbound(self, send: Send) -> Outbound[bytes]:
        ctx, stream = self.ctx, self.stream
        hub = ctx.engine.watch_hub

        async def write(frame: bytes) -> None:
            await send({"type": "http.response.body", "body": frame, "more_body": True})

        def commit(item: tuple[str, int, int | None, bool]) -> None:
            stream.commit(*item)

        return Outbound(
            ctx.state,
            hub.settings,
            write,
            shutdown_frame=lambda: sse.connection_closing_frame(
                "server_shutdown", ctx.request_id, sse.RETRY_MS
            ),
            slow_frame=lambda exc: sse.error_frame(exc, request_id=ctx.request_id),
            heartbeat=sse.HEARTBEAT,
            heartbeat_s=stream.session.heartbeat_ms / 1000,
            on_sent=commit,
            on_grace=stream.feed.degrade_lossy,
            on_abandon=stream.close,
        )

    def _end_frame(self, end: TopicsError | str | None) -> bytes:
        if isinstance(end, TopicsError):
            return sse.error_frame(end, request_id=self.ctx.request_id)
        return sse.connection_closing_frame(end or "superseded", self.ctx.request_id, sse.RETRY_MS)

    async def _watch_disconnect(self, receive: Receive, scope: trio.CancelScope) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.disconnected = True
        scope.cancel()

    async def _pump(self, out: Outbound[bytes]) -> None:
        with self.ctx.state.long_poll() as shutdown:  # cancelled when the server drains
            await self._pump_frames(out)
        if shutdown.cancelled_caught:
            out.shutdown()

    async def _pump_frames(self, out: Outbound[bytes]) -> None:
        stream = self.stream
        feed = stream.feed
        ids = stream.session.cursors()
        checkpoints = len(ids) > cursor.MAX_INLINE_TOPICS
        pressure = self.ctx.state.pressure
        advised = False
        while not out.ending:
            events = feed.poll()
            if not events:
                await feed.wait()
                if pressure.throttled():
                    advised = await self._pace(out, advised)
                else:
                    advised = False
                continue
            for ev in events:
                ids[ev.topic] = ev.cursor
                frame_no = stream.next_frame_no() if checkpoints else None
                cid = (
                    cursor.encode_checkpoint(frame_no)
                    if frame_no is not None
                    else cursor.encode(ids)
                )
                deleted = isinstance(ev, TopicDeletedEvent)
                await out.put(
                    sse.frame_for_event(cid, ev), (ev.topic, ev.cursor, frame_no, deleted)
                )

    async def _pace(self, out: Outbound[bytes], advised: bool) -> bool:
        """Rule 5: one advisory 429, then read at most once per pacing interval."""
        pressure = self.ctx.state.pressure
        retry_ms = pressure.retry_after_ms()
        if not advised:
            exc = ThrottledError("watch throttled under CPU pressure; frames are paced")
            frame = sse.error_frame(
                exc,
                request_id=self.ctx.request_id,
                retry_after_ms=retry_ms,
                topics=self.stream.feed.dirty_topics(),
            )
            await out.put(frame)
        await trio.sleep(min(retry_ms, MAX_PACE_MS) / 1000)
        return True


# -- wiring ---------------------------------------------------------------------------------


def register(quart_app: object, state: HttpState) -> None:
    """Report the watch gauges to /v0/metrics."""
    engine = state.engine

    def gauges() -> dict[str, int]:
        stats = engine.watch_statistics()
        return {
            "topics_watch_sessions": stats.sessions,
            "topics_sse_connections": stats.connections,
        }

    state.metrics_sources.append(gauges)


ROUTES = (
    Route("POST", "/v0/watch", create_watch, fast=True, body=True),
    # Capability-gated (§0.2): the session's key binding decides (401), not a scope.
    Route(
        "GET",
        "/v0/watch/{wid}",
        open_stream,
        fast=True,
        query_token=True,
        scopes=frozenset(),
    ),
)
