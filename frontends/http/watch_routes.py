"""Watch routes: POST /v0/watch (create a session) and GET /v0/watch/:wid (the SSE stream).

Both are served by the raw-ASGI dispatcher. The GET handler checks everything that can
fail (406, 400, 404, 401, 429) and then returns a :class:`StreamReply`, whose ``run``
streams until the client goes away or the server ends the stream; the dispatcher gives
the request's in-flight slot back first (a stream is bounded by the §11 connection caps
instead). ``StreamReply`` and ``Outbound`` (the bounded outbound queue and its writer)
live in ``streams.py``, shared with the ``/work`` stream and the WebSocket frontend.

Rules:
1. Each connection has a bounded outbound queue (``WatchSettings.queue_frames``) drained
   by one writer task; the pump only reads the engine when the queue takes a frame, so
   while a client cannot drain, later reads simply cover more records (larger, fewer
   batches) instead of piling frames up. A frame waiting on a full queue for
   ``buffer_grace_ms`` turns the connection's lossy topics into a
   ``tombstone(from_seq_too_old)`` and a jump to the head; for
   ``slow_consumer_timeout_ms`` it ends the stream with ``error`` 408 (the session stays).
2. One ASGI body message per frame, each flushed by hypercorn as it is sent (TCP_NODELAY is
   set on the listening socket by hypercorn and on every accepted socket by trio). On the
   socket (rule 7) frames that queued up behind a slow write leave in one write.
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
7. Direct delivery (the state machine shared with ``/work``: ``direct_stream``). On a
   connection the fast lane owns, the stream writes its body
   chunks to the socket itself (``direct.RawSocket``), under the lane's send lock,
   instead of one ASGI message per frame. An
   idle stream then has no task of its own: the hub's fan-out pass (inside the write for
   a quiet topic, else the topic's relay) calls it synchronously on every change of a
   watched topic; it reads (the hub's shared read), renders (a
   one-topic record frame with its id and chunk framing is built once per batch and
   shared by every watcher of it) and writes with one non-blocking ``os.write``,
   committing the cursors once the kernel took the bytes (rule 3). Anything that does
   not fit this (a partial write, a backlog, CPU pressure, a final frame) starts the
   queue, the writer and the pump of rule 1; once the queue has drained and the stream
   is caught up (and no CPU pressure paces it) they end and the stream is idle again. The
   heartbeat of an idle stream is sent by the request task between its disconnect
   checks. Elsewhere (a connection hypercorn owns, the in-process ASGI transport of the
   tests) every frame goes through ASGI as in rules 1-2; ``TOPICS_SSE_DIRECT=0`` (the
   ``sse_direct`` setting, read at server start) forces that.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, TypeVar

import trio

from topics.errors import (
    ForbiddenError,
    InvalidRequestError,
    NotAcceptableError,
    ThrottledError,
    TopicsError,
)
from topics.watch_types import (
    EndReachedEvent,
    JoinRefusedEvent,
    RecordBatch,
    TopicDeletedEvent,
    WatchEvent,
)
from topics.wire import cursor, sse
from topics.wire.requests import WATCH

from .asgi import Receive, Send
from .direct import Chunk, RawSocket, chunk, join_chunks, try_send_each
from .direct_stream import DirectStream, pace
from .query_params import LENIENT
from .requests import decode_json_object
from .respond import finish
from .routing import Route
from .state import HttpState, Reply, RequestContext
from .streams import Outbound, StreamReply, accepts_event_stream

if TYPE_CHECKING:
    from topics.watch.hub import WatchStream

__all__ = ["ROUTES", "register"]

log = logging.getLogger("topics.watch")

P = TypeVar("P")
#: What a sent frame commits to its session: (topic, cursor, frame number, terminal).
_Commit = tuple[str, int, int | None, bool]

EVENT_STREAM = b"text/event-stream; charset=utf-8"
#: Shared by every stream's reply (``finish`` copies, never changes it).
STREAM_HEADERS = [
    (b"cache-control", b"no-store"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),
]
#: The members a watch body accepts (declared in topics/wire/requests.py).
WATCH_FIELDS = WATCH.names
_QUERY = (LENIENT,)  # POST /v0/watch's


# -- POST /v0/watch -------------------------------------------------------------------------


async def create_watch(ctx: RequestContext) -> Reply:
    """POST /v0/watch — validate a subscription, create a session (§7.1)."""
    args = decode_json_object(ctx.body, WATCH_FIELDS)
    ctx.principal.check_body("watch", args)  # every watched topic (§0.2)
    topics = args.pop("topics", None)
    auth = ctx.state.auth_enabled
    result = await ctx.engine.create_watch(
        topics,  # the engine type-checks
        lenient=ctx.query_bool(LENIENT, False),
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
    if "topic_prefix" in body:
        payload["topic_prefix"] = body["topic_prefix"]
    return ctx.json(payload)


# -- GET /v0/watch/:wid ---------------------------------------------------------------------


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
    if ctx.principal.prefixes:
        # The owner check already ties the session to this key, whose topics were checked
        # at POST; checked again so the stream never relies on that alone.
        try:
            for name in stream.session.topics:
                ctx.principal.check_name("topic", name)
        except ForbiddenError:
            stream.close()
            raise
    conn = _SseConnection(ctx, stream)
    return StreamReply(200, b"", EVENT_STREAM, STREAM_HEADERS, run=conn.run)


def _solo_frame(batch: RecordBatch) -> bytes:
    # A one-topic session's id is {topic: cursor}: the same for every watcher of the batch.
    return sse.frame_for_event(cursor.encode({batch.topic: batch.cursor}), batch)


def _solo_chunk(batch: RecordBatch) -> Chunk:
    return chunk(batch.encoded("sse-solo", _solo_frame))


class _SseConnection(DirectStream):
    """One open SSE stream, run by the request's own task (rules 1, 7).

    Through ASGI (no raw socket) it is a pump (engine -> frames) and a writer beside the
    request task, which watches for the disconnect. On the raw socket an idle stream has
    no task of its own: the hub's pass calls :meth:`changed`, the request task also
    sends the heartbeats, and the pump, the writer and the queue only start once a write
    does not fit in the socket, the engine has more than one read to give, CPU pressure
    paces reads, or the stream has to end with a final frame; they end again once the
    queue drained with nothing left to read (every stream opens with a backlog read, so
    staying would cost every stream their ~8 KiB for its whole life).
    """

    __slots__ = ("_send", "checkpoints", "ctx", "ids", "out", "parked", "solo", "stream")

    def __init__(self, ctx: RequestContext, stream: WatchStream) -> None:
        super().__init__(ctx.state)
        self.ctx = ctx
        self.stream = stream
        self.out: Outbound[bytes] | None = None
        self.parked = True  # the pump (if any) waits on the feed with nothing in hand
        self.ids: dict[str, int] | None = None
        self.checkpoints = False
        self.solo = False
        # ``last_sent`` (DirectStream) counts until the writer exists; then ``out.last_sent``.
        self._send: Send | None = None

    async def run(self, send: Send, receive: Receive) -> None:
        stream = self.stream
        try:
            await self._open(send)
            self._send = send
            # Through ASGI the engine only tells it of a stop: the pump reads every change.
            stream.attach(self, direct=self.raw is not None)
            if self.raw is None:
                self._writer()  # through ASGI the pump and the writer run from the start
            else:
                self._sink_on()
                if stream.feed.has_dirty:
                    # The backlog at open goes through the writer, which retires once it
                    # has drained: one path for a backlog, whenever it comes.
                    self._writer()
            if stream.end is not None:  # superseded before it started
                self.stopped()
            while await self._idle(receive) and await self._busy(send, receive):
                pass
        finally:
            stream.detach()
            stream.close()
            self.forget_socket()

    async def _busy(self, send: Send, receive: Receive) -> bool:
        """Run the writer and the pump until the stream ends (False) or, on the socket,
        is idle again (True). Its own frame, so nothing of them outlives it."""
        out = self._writer()
        async with trio.open_nursery() as nursery:
            out.bind(nursery.cancel_scope)
            nursery.start_soon(out.run_writer)
            nursery.start_soon(self._pump, out, nursery.cancel_scope)
            await self.watch_disconnect(receive, nursery.cancel_scope)
        if self.out is not out or self.gone:
            return not self.gone  # retired, or the client went away
        if out.final_sent:
            with trio.move_on_after(1.0):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        return False

    async def _open(self, send: Send) -> None:
        """The response head and the opening frames (rule 3); nothing of them is kept."""
        ctx, stream = self.ctx, self.stream
        status, headers, _ = finish(ctx, StreamReply(200, b"", EVENT_STREAM, STREAM_HEADERS))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        marks = {name: w.to_dict() for name, w in stream.watermarks().items()}
        opening = sse.encode_retry() + sse.connection_established_frame(
            ctx.request_id, stream.session.wid, marks
        )
        await send({"type": "http.response.body", "body": opening, "more_body": True})
        self.sent()
        self.find_socket(send)
        ids = stream.session.cursors()
        self.checkpoints = len(ids) > cursor.MAX_INLINE_TOPICS
        # A prefix watch may be joined by more topics: its ids always name them all.
        self.solo = len(ids) == 1 and stream.session.prefixes is None
        # A one-topic stream's id is {topic: cursor} of the event itself: nothing to keep.
        self.ids = None if self.solo else ids

    async def _idle(self, receive: Receive) -> bool:
        """An idle raw stream: no task but this one, which sends the heartbeats and waits
        for the client to go away (``direct_stream`` rule 1). Returns False on a
        disconnect, True once the stream needs its writer and pump (``_writer`` was
        called) or the server drains."""
        if not await self.idle(receive):
            return False
        if self.out is None:  # the server drains
            self._writer().shutdown()
        return True

    def handed_over(self) -> bool:
        return self.out is not None

    def deadline(self) -> float:
        return self.last_sent + self.stream.session.heartbeat_ms / 1000

    def tick(self) -> None:
        if self.raw is None or not self.heartbeat_due(self.stream.session.heartbeat_ms / 1000):
            return
        data = chunk(sse.HEARTBEAT)
        n = self.try_write(data)
        if 0 <= n < len(data):
            self._writer().put_nowait(Chunk(data[n:]))

    def stopped(self) -> None:
        """The engine ended the stream (``StreamListener``): its final frame, through the
        writer, which this starts."""
        self._writer().stop(self._end_frame(self.stream.end))

    def _writer(self) -> Outbound[bytes]:
        """The stream's queue, writer and pump: created on first need, and started by the
        request task, which this wakes from its idle wait."""
        out = self.out
        if out is None:
            assert self._send is not None
            self.stream.group(None)  # the pump reads for it now
            out = self.out = self._outbound(self._send)
            out.last_sent = self.last_sent
            self.parked = False  # until the pump parks: the relay leaves the reads to it
            self.hand_over()
        return out

    def _outbound(self, send: Send) -> Outbound[bytes]:
        ctx, stream = self.ctx, self.stream
        hub = ctx.engine.watch_hub
        raw = self.raw

        async def write(frame: bytes) -> None:
            if raw is None:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
                return
            await self.send_raw(frame, framed=type(frame) is Chunk)

        def commit(items: list[_Commit | None]) -> None:
            for item in items:
                if item is not None:
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
            # Through ASGI each frame stays its own body message (flushed on its own);
            # on the socket, frames that queued up meanwhile leave in one write.
            join=join_chunks if raw is not None else None,
        )

    def _end_frame(self, end: TopicsError | str | None) -> bytes:
        if isinstance(end, TopicsError):
            return sse.error_frame(end, request_id=self.ctx.request_id)
        return sse.connection_closing_frame(end or "superseded", self.ctx.request_id, sse.RETRY_MS)

    async def _pump(self, out: Outbound[bytes], scope: trio.CancelScope) -> None:
        with self.ctx.state.long_poll() as shutdown:  # cancelled when the server drains
            retire = await self._pump_frames(out)
        if shutdown.cancelled_caught:
            out.shutdown()
        elif retire:
            # Drained and caught up: back to the idle stream of rule 7, whose helpers
            # would otherwise stay for the stream's life (~8 KiB: tasks, queue, scopes).
            self.last_sent = out.last_sent
            self.out = None
            self.parked = True
            self._sink_on()
            scope.cancel()  # the writer waits on its empty queue: nothing is cut

    def _frames(self, events: list[WatchEvent]) -> tuple[list[bytes], list[_Commit | None]]:
        """The frames of ``events`` (chunk-framed when writing to the socket directly) and
        the session commit each carries (rule 3; None: a ``join-refused`` moves none)."""
        stream, ids, raw = self.stream, self.ids, self.raw is not None
        frames: list[bytes] = []
        commits: list[_Commit | None] = []
        frame: bytes
        for ev in events:
            if type(ev) is JoinRefusedEvent:  # no cursor moved: no id, nothing to commit
                frame = sse.join_refused_frame(ev)
                frames.append(chunk(frame) if raw else frame)
                commits.append(None)
                continue
            if ids is None:
                ids = {ev.topic: ev.cursor}
            else:
                ids[ev.topic] = ev.cursor
                if not self.checkpoints and len(ids) > cursor.MAX_INLINE_TOPICS:
                    # Joins grew the stream past the inline size: checkpoint ids from
                    # here on, or every frame would carry every topic (issue 30).
                    self.checkpoints = True
            frame_no = stream.next_frame_no() if self.checkpoints else None
            if self.solo and type(ev) is RecordBatch:
                # Built once per batch and shared by every one-topic watcher of it.
                if raw:
                    frame = ev.encoded("sse-solo-chunk", _solo_chunk)
                else:
                    frame = ev.encoded("sse-solo", _solo_frame)
            else:
                cid = (
                    cursor.encode_checkpoint(frame_no)
                    if frame_no is not None
                    else cursor.encode(ids)
                )
                frame = sse.frame_for_event(cid, ev)
                if raw:
                    frame = chunk(frame)
            frames.append(frame)
            ends = type(ev) is TopicDeletedEvent or type(ev) is EndReachedEvent
            commits.append((ev.topic, ev.cursor, frame_no, ends))
        return frames, commits

    def changed(self) -> bool:
        """The hub's pass tells it a topic of this stream changed (``ChangeListener``,
        topics/listener_types.py): inside the write, or from the topic's relay. On an idle
        stream (no pump at work, nothing queued or being written, no CPU pressure) read and
        write the new frames right here, in one non-blocking write, waking no task.
        Otherwise (or when topics are still behind) start the pump and return False: the
        relay then wakes it (rules 1, 7)."""
        out, raw = self.out, self.raw
        if raw is None or self.gone:
            return False
        try:
            if (
                not self.parked
                or (out is not None and not out.idle)
                or raw.broken
                or self.ctx.state.pressure.throttled()
            ):
                self._writer()
                return False
            stream = self.stream
            feed = stream.feed
            events = feed.poll()
            if events:
                ev = events[0]
                commits: list[_Commit | None]
                if self.solo and len(events) == 1 and type(ev) is RecordBatch:
                    # The common case, kept lean: one shared frame, one commit.
                    data: bytes = ev.encoded("sse-solo-chunk", _solo_chunk)
                    commits = [(ev.topic, ev.to_seq, None, False)]
                else:
                    frames, commits = self._frames(events)
                    data = frames[0] if len(frames) == 1 else b"".join(frames)
                n = raw.try_send(data)
                if n == len(data):
                    self._sent()
                    for item in commits:
                        if item is not None:
                            stream.commit(*item)
                elif n >= 0:
                    # The rest goes first, through the queue; its commits wait for it.
                    self._writer().put_nowait(Chunk(data[n:]), commits)
                    if n:
                        self._sent()
            if feed.has_dirty:
                self._writer()
                return False
            return True
        except Exception:  # never let one stream break the hub's relay
            log.exception("direct SSE delivery failed; the pump takes over")
            return False

    def _sink_on(self) -> None:
        """An idle one-topic stream on the socket joins the hub's group delivery (rule 8)."""
        if self.solo and self.out is None and not self.gone:
            self.stream.group(self)

    @staticmethod
    def write_group(batch: RecordBatch, sinks: list[_SseConnection]) -> list[_SseConnection]:
        """The hub's group delivery (``topics.watch.hub`` rule 8): one shared frame to every
        idle one-topic stream of ``sinks``, in one compiled loop of non-blocking writes.
        A partial write (or a socket the lane is writing to) queues the rest, as
        ``changed`` does; a stream going away is declined (the hub serves it one by
        one). Under CPU pressure every stream is declined: their pumps pace the reads."""
        first = sinks[0]
        if first.ctx.state.pressure.throttled():
            return sinks
        data: bytes = batch.encoded("sse-solo-chunk", _solo_chunk)
        ready: list[_SseConnection] = []
        raws: list[RawSocket] = []
        declined: list[_SseConnection] = []
        for conn in sinks:
            raw = conn.raw
            if raw is None or conn.gone:
                declined.append(conn)
            else:
                ready.append(conn)
                raws.append(raw)
        taken = try_send_each(raws, data)
        now = trio.current_time()
        size = len(data)
        topic, to_seq = batch.topic, batch.to_seq
        for conn, n in zip(ready, taken, strict=True):
            if n == size:
                conn.last_sent = now
                conn.stream.commit(topic, to_seq, None, False)
            elif n >= 0:
                # The rest goes first, through the queue; its commit waits for it.
                conn._writer().put_nowait(Chunk(data[n:]), [(topic, to_seq, None, False)])
                if n:
                    conn._sent()
            # else (-1): the socket is broken; the disconnect ends the stream
        return declined

    def _sent(self) -> None:
        if self.out is not None:
            self.out.sent()
        else:
            self.sent()

    async def _pump_frames(self, out: Outbound[bytes]) -> bool:
        """Read and queue until the stream ends (False) or, on the socket, until the
        queue drained with nothing left to read (True: the stream can be idle again)."""
        stream = self.stream
        feed = stream.feed
        pressure = self.ctx.state.pressure
        advised = False
        while not out.ending:
            events = feed.poll()
            if not events:
                raw = self.raw
                # On the socket, once caught up and drained, the stream can be idle again.
                retire = (
                    raw is not None and not raw.broken and not advised and not pressure.throttled()
                )
                if retire and out.idle:
                    return True
                self.parked = True
                try:
                    with trio.CancelScope() as drained:
                        if retire:
                            out.when_idle(drained)
                        await feed.wait()
                finally:
                    self.parked = False
                    out.when_idle(None)
                if drained.cancelled_caught:
                    continue
                if pressure.throttled():
                    advised = await self._pace(out, advised)
                else:
                    advised = False
                continue
            frames, commits = self._frames(events)
            for frame, item in zip(frames, commits, strict=True):
                await out.put(frame, None if item is None else [item])
        return False

    async def _pace(self, out: Outbound[bytes], advised: bool) -> bool:
        """Rule 5: one advisory 429, then read at most once per pacing interval."""

        async def advise(retry_ms: int) -> None:
            exc = ThrottledError("watch throttled under CPU pressure; frames are paced")
            frame = sse.error_frame(
                exc,
                request_id=self.ctx.request_id,
                retry_after_ms=retry_ms,
                topics=self.stream.feed.dirty_topics(),
            )
            await out.put(frame)

        await pace(self.ctx.state, None if advised else advise)
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
            "topics_sse_direct_streams": state.direct_streams,
        }

    state.metrics_sources.append(gauges)


ROUTES = (
    Route("POST", "/v0/watch", create_watch, fast=True, body=True, query=_QUERY, op="createWatch"),
    # Capability-gated (§0.2): the session's key binding decides (401), not a scope.
    Route(
        "GET",
        "/v0/watch/{wid}",
        open_stream,
        fast=True,
        query_token=True,
        scopes=frozenset(),
        op="openWatchStream",
    ),
)
