"""``/v0/ws``: the JSON-over-WebSocket data plane (contract §7.x), on Quart's websocket
support over hypercorn (wsproto).

One connection carries subscriptions (the watch hub's feed, the same reads, cursors,
tombstones and node filter as SSE) and publishes (``Engine.write``, the same path as
``POST /v0/topics/:topic``). The dispatcher hands websocket scopes straight to Quart;
this module gates them itself.

Rules:
1. Opening needs a valid ``Authorization: Bearer`` key when auth is enabled (``?token=``
   is refused: it is for SSE GETs only) but consumes no scope; the connection counts
   against the §11 long-lived connection caps (429 before the upgrade). Refusals are HTTP
   answers with the §0.5 envelope, sent before the upgrade is accepted.
2. Each command is authorized on its own: ``subscribe`` and ``commit`` (a named cursor)
   need read, ``publish`` write (and admin when it carries ``config``), and every topic name must pass the key's prefix
   allowlist. A failed command answers ``{"op": "error", "request_id", "code", "message"}``
   and the connection stays open.
3. Commands are handled in arrival order by one reader task; a publish is acked before the
   next command is read, so one connection's writes keep their order. ``publish`` obeys
   the CPU-pressure throttle unless ``"disable_backpressure": true``.
4. Publish keeps record payloads verbatim: the message is split by
   ``topics._core.scan.split_write_body`` (``wire.ws.decode_op``), exactly like an HTTP
   write body, and the engine stores the raw ``data``/``meta`` bytes.
5. Outbound frames go through the same bounded queue as SSE (``http.streams.Outbound``:
   coalescing, 5 s grace for lossy topics, 30 s slow-consumer cut-off). Server shutdown
   sends ``error`` ``shutting_down`` and closes with 1001; a slow consumer gets ``error``
   ``slow_consumer`` and 1013.
6. Once the server has sent its close frame (the session ended, or hypercorn refused an
   oversized message with 1009), the client has ``TOPICS_WS_CLOSE_TIMEOUT_MS`` (5 s) to
   answer; then the connection is dropped (``http/connection.py`` rule 4).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

import trio
from quart import Quart, websocket
from werkzeug.datastructures import Headers

from topics.auth import DEV_PRINCIPAL, BodyKind, Principal, Scope, bearer_token
from topics.errors import (
    ForbiddenError,
    InternalError,
    InvalidRequestError,
    NotReadyError,
    ShuttingDownError,
    TopicsError,
    UnauthorizedError,
)
from topics.wire import ws as wire
from topics.wire.envelope import performance

from .http.connection import connection_of
from .http.errors import error_reply
from .http.respond import finish
from .http.routing import Route
from .http.state import HttpState, Reply, RequestContext
from .http.streams import Outbound

if TYPE_CHECKING:
    from topics.log.topic_log import TopicLog
    from topics.watch.hub import StreamSlot

__all__ = ["ROUTES", "WsConnection", "register"]

log = logging.getLogger("topics.ws")

PATH = "/v0/ws"
CLOSE_GOING_AWAY = 1001
CLOSE_TRY_AGAIN_LATER = 1013


class WsConnection:
    """One accepted WebSocket: reader (commands), pump (subscriptions), writer."""

    def __init__(
        self, state: HttpState, principal: Principal, request_id: str, slot: StreamSlot
    ) -> None:
        self.state = state
        self.slot = slot
        self.engine = state.engine
        self.principal = principal
        self.request_id = request_id
        self.feed = self.engine.open_watch_feed()
        self.close_code = 1000
        self.out: Outbound[str] = Outbound(
            state,
            self.engine.watch_hub.settings,
            self._write,
            shutdown_frame=self._shutdown_frame,
            slow_frame=self._slow_frame,
            on_grace=self.feed.degrade_lossy,
            on_abandon=self._abandon,
            on_sent=self._delivered,
        )

    def _abandon(self) -> None:
        self.feed.close()
        self.slot.release()

    async def serve(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self.out.bind(nursery.cancel_scope)
                nursery.start_soon(self.out.run_writer)
                nursery.start_soon(self._pump)
                nursery.start_soon(self._reader)
        finally:
            self.feed.close()

    # -- frames out ------------------------------------------------------------------

    async def _write(self, text: str) -> None:
        await websocket.send(text)

    def _shutdown_frame(self) -> str:
        self.close_code = CLOSE_GOING_AWAY
        exc = ShuttingDownError("the server is shutting down; reconnect", retry_after=1.0)
        return wire.error_frame(None, exc)

    def _slow_frame(self, exc: TopicsError) -> str:
        self.close_code = CLOSE_TRY_AGAIN_LATER
        return wire.error_frame(None, exc)

    async def _pump(self) -> None:
        with self.state.long_poll() as shutdown:  # cancelled when the server drains
            await self._pump_frames()
        if shutdown.cancelled_caught:
            self.out.shutdown()

    async def _pump_frames(self) -> None:
        feed, out = self.feed, self.out
        while not out.ending:
            events = feed.poll()
            if not events:
                await feed.wait()
                continue
            for ev in events:
                await out.put(wire.frame_for_event(ev), self._commit_for(ev))

    def _commit_for(self, ev: object) -> tuple[TopicLog, str, int] | None:
        """What sending ``ev`` commits: a ``commit: true`` topic's named cursor."""
        topic = getattr(ev, "topic", "")
        ended = self.feed.ended
        ft = self.feed.topics.get(topic) or (ended.get(topic) if ended else None)
        cursor = getattr(ev, "cursor", None)
        if ft is None or ft.commit_to is None or not isinstance(cursor, int):
            return None
        return (ft.log, ft.commit_to, cursor)

    def _delivered(self, commit: tuple[TopicLog, str, int]) -> None:
        on_delivered = self.engine.watch_hub.on_delivered
        if on_delivered is not None:
            on_delivered(*commit, self.principal)

    # -- commands in (rules 2-4) -------------------------------------------------------

    async def _reader(self) -> None:
        while True:
            message = await websocket.receive()
            t0 = time.perf_counter()
            request_id: str | None = None
            try:
                op = wire.decode_op(message)
                request_id = op.request_id
                frame = await self._handle(op, t0)
            except wire.OpError as exc:
                frame = wire.error_frame(exc.request_id, exc)
            except TopicsError as exc:
                frame = wire.error_frame(request_id, exc)
            except Exception:
                log.exception("unhandled error in a /v0/ws command (request_id=%s)", request_id)
                frame = wire.error_frame(
                    request_id, InternalError("internal error; the server logged the details")
                )
            await self.out.put(frame)

    async def _handle(self, op: wire.Op, t0: float) -> str:
        if isinstance(op, wire.Subscribe):
            return self._subscribe(op)
        if isinstance(op, wire.Unsubscribe):
            names = op.topics
            if op.topic_prefix:
                names = tuple(self.engine.watch_unsubscribe_prefix(self.feed, op.topic_prefix))
            for name in names:
                self.feed.remove(name)
            return wire.unsubscribed_frame(op.request_id, names)
        if isinstance(op, wire.Publish):
            return await self._publish(op, t0)
        if isinstance(op, wire.CursorCommit):
            return await self._commit(op)
        return wire.pong_frame(op.request_id)

    def _authorize(
        self, scopes: tuple[Scope, ...], kind: BodyKind, body: dict[str, Any], what: str
    ) -> None:
        principal = self.principal
        missing = principal.missing(scopes)
        if missing:
            raise ForbiddenError(
                f"api key lacks {' and '.join(missing)} scope for {what}",
                detail={"required_scopes": sorted(scopes), "missing_scopes": missing},
            )
        principal.check_body(kind, body)  # every topic the command names (§0.2)

    def _subscribe(self, op: wire.Subscribe) -> str:
        self._authorize(("read",), "ws_subscribe", {"topics": op.topics}, "subscribe")
        starts = {name: s.to_dict() for name, s in op.topics.items()}
        marks = self.engine.watch_subscribe(
            self.feed,
            starts,
            node=op.node,  # type: ignore[arg-type]  # the engine type-checks
            limit=op.limit,  # type: ignore[arg-type]
            max_batch_bytes=op.max_batch_bytes,  # type: ignore[arg-type]
            include_meta=op.include_meta,  # type: ignore[arg-type]
            include_tags=op.include_tags,  # type: ignore[arg-type]
            include_data=op.include_data,  # type: ignore[arg-type]
            consistency=op.consistency,  # type: ignore[arg-type]
            topic_prefix=op.topic_prefix,  # type: ignore[arg-type]
            max_backlog=op.max_backlog,  # type: ignore[arg-type]
            on_backlog=op.on_backlog,  # type: ignore[arg-type]
            principal=self.principal,
            where=op.where,
            format=op.format,  # type: ignore[arg-type]
            ce_type_field=op.ce_type_field,  # type: ignore[arg-type]
        )
        prefixes = None
        if op.topic_prefix is not None:
            prefixes = self.engine.watch_prefixes(self.feed)
        return wire.subscribed_frame(
            op.request_id, {name: w.to_dict() for name, w in marks.items()}, prefixes
        )

    async def _commit(self, op: wire.CursorCommit) -> str:
        # The scope of PUT /v0/topics/:t/cursors/:name (read); the topic against the prefixes.
        self._authorize(("read",), "ws_subscribe", {"topic": op.topic}, "commit")
        info = await self.engine.put_cursor(
            op.topic,
            op.cursor,  # type: ignore[arg-type]  # the engine type-checks
            op.seq,  # type: ignore[arg-type]
            expect_seq=op.expect_seq,  # type: ignore[arg-type]
            owner=self.principal,
        )
        return wire.committed_frame(op.request_id, info.to_dict())

    async def _publish(self, op: wire.Publish, t0: float) -> str:
        scopes: tuple[Scope, ...] = ("write", "admin") if op.config is not None else ("write",)
        what = "publish with config" if op.config else "publish"
        self._authorize(scopes, "ws_publish", {"topic": op.topic, "config": op.config}, what)
        if op.disable_backpressure is not True:
            if op.disable_backpressure is not False:
                raise InvalidRequestError.for_field("disable_backpressure", "must be true or false")
            self.state.check_pressure()
        result = await self.engine.write(
            op.topic,
            op.records,
            node=op.node,  # type: ignore[arg-type]
            idempotency_key=op.idempotency_key,  # type: ignore[arg-type]
            create=op.create,  # type: ignore[arg-type]
            config=op.config,  # type: ignore[arg-type]
            return_seqs=op.return_seqs,  # type: ignore[arg-type]
            dedupe=op.dedupe,  # type: ignore[arg-type]
            dedupe_ms=op.dedupe_ms,  # type: ignore[arg-type]
            replace=op.replace,  # type: ignore[arg-type]
            expected_head_seq=op.expected_head_seq,  # type: ignore[arg-type]
            producer_id=op.producer_id,  # type: ignore[arg-type]
            epoch=op.epoch,  # type: ignore[arg-type]
        )
        perf = performance(
            (time.perf_counter() - t0) * 1000,
            wal_append_ms=result.wal_append_ms,
            fsync_ms=result.fsync_ms,
        )
        return wire.ack_frame(op.request_id, result.to_dict(), perf)


# -- the upgrade (rule 1) --------------------------------------------------------------------


def _authenticate(state: HttpState, headers: dict[bytes, bytes]) -> Principal:
    if not state.auth_enabled:
        return DEV_PRINCIPAL
    token = bearer_token(headers.get(b"authorization"))
    if not token:
        raise UnauthorizedError(
            "missing API key; send Authorization: Bearer <key> with the upgrade request "
            "(?token= is accepted only on SSE stream GETs)"
        )
    principal = state.keys.authenticate(token)
    if principal is None:
        raise UnauthorizedError("invalid API key")
    return principal


def register(quart_app: Quart, state: HttpState) -> None:
    """Add the ``/v0/ws`` websocket view."""

    async def ws_view() -> Any:
        scope = websocket.scope
        headers: dict[bytes, bytes] = dict(scope["headers"])
        request_id = str(uuid.uuid4())
        ctx = RequestContext(
            state,
            "GET",
            PATH,
            headers,
            scope.get("query_string", b""),
            request_id,
            time.perf_counter(),
        )
        try:
            state.check_not_shutting_down()
            principal = _authenticate(state, headers)
            if not state.engine.ready:
                raise NotReadyError("recovery in progress; retry shortly", retry_after=1.0)
            slot = state.engine.acquire_stream_slot(principal.key_index)
        except TopicsError as exc:
            return _refusal(quart_app, ctx, error_reply(ctx, exc))
        connection = connection_of(scope)
        if connection is not None:
            connection.request_id = request_id
        try:
            await websocket.accept(headers={"X-Request-ID": request_id})
            conn = WsConnection(state, principal, request_id, slot)
            await conn.serve()
            with trio.move_on_after(1.0):
                await websocket.close(conn.close_code)
        finally:
            slot.release()
        return None

    quart_app.add_websocket(PATH, endpoint="ws /v0/ws", view_func=ws_view)


def _refusal(app: Quart, ctx: RequestContext, reply: Reply) -> Any:
    """A refusal before the upgrade, as the HTTP answer Quart sends in its place (rule 1)."""
    status, headers, body = finish(ctx, reply)
    return app.response_class(
        body,
        status=status,
        headers=Headers([(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers]),
    )


async def _plain_get(ctx: RequestContext) -> Reply:
    raise InvalidRequestError(
        "/v0/ws is a WebSocket endpoint: send a GET with Upgrade: websocket",
        detail={"path": PATH},
    )


ROUTES = (Route("GET", PATH, _plain_get, fast=True, op="openWebSocket"),)
