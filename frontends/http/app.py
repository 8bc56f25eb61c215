"""The HTTP frontend as one ASGI app: the dispatcher serves every HTTP route; Quart hosts
the WebSocket endpoint.

``create_app(engine, settings)`` returns :class:`TopicsHttpApp`. Every HTTP request goes
through the dispatcher, whichever connection owner received it (the fast lane, or
hypercorn for what the lane hands over), which in one pass:

1. takes the clock (``server_total_ms`` starts here) and the request id (the client's
   ``X-Request-ID`` if well formed, else a fresh UUID);
2. refuses framing two parsers could read differently (a lower-case method, both
   Content-Length and Transfer-Encoding, two Content-Lengths: 400, connection closed),
   then matches the route table, once: a fast-lane request arrives matched (404
   not_found / 405 method_not_allowed);
3. authenticates the bearer key (401) and checks the route's scopes and the key's name
   prefixes against the path name (403);
4. sheds what cannot be served: 503 not_ready during recovery, 429 throttled under CPU
   pressure, 429 when the key already holds ``TOPICS_MAX_INFLIGHT_PER_KEY`` requests (the
   slot is released in a ``finally``, however the request ends);
5. reads the bounded, decoded body for routes that take one (413/415 before parsing),
   within ``TOPICS_HTTP_BODY_TIMEOUT_MS`` of the head (408); a route that takes none
   drains what it was sent. Nothing of a body is read before steps 3-4, so a client
   without a valid key holds no buffer; any answer given while a body is unread says
   ``Connection: close`` (the lane and h11 then close rather than parse the rest);
6. calls the route's handler (matched once, in step 2) and sends its reply, or runs the
   stream a :class:`streams.StreamReply` carries.

Why not Quart for HTTP: Quart-trio costs a nursery, two tasks and a request object per
request, about a third of the throughput of a bare ASGI handler on the same hypercorn
(docs/HTTP.md has the numbers), and a second route table and error mapper beside ours.
Quart keeps what only it does here: the ``/v0/ws`` WebSocket endpoint, and the ASGI
lifespan.

Extension: a routes module exposes ``ROUTES`` and may define ``register(quart_app,
state)`` (metrics gauges, a WebSocket view); list it in :data:`ROUTE_MODULES`. Each API
route names its OpenAPI operation (``Route.op``; docs/ARCHITECTURE.md, "Where a route and
its documentation go").
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from types import ModuleType
from typing import cast

import trio
from quart_trio import QuartTrio

from topics.auth import bearer_token
from topics.engine import Engine
from topics.errors import (
    ForbiddenError,
    InvalidRequestError,
    NotReadyError,
    PayloadTooLargeError,
    RequestTimeoutError,
    ThrottledError,
    UnauthorizedError,
)

from .. import ws
from . import (
    backup_routes,
    console_routes,
    cursor_routes,
    openapi,
    probe_routes,
    queue_routes,
    record_routes,
    router_routes,
    topic_routes,
    watch_routes,
)
from .asgi import Message, Receive, Scope, Send
from .connection import connection_of
from .errors import reply_for
from .query_params import TOKEN
from .requests import (
    BODY_BUFFERED,
    ROUTED,
    ClientDisconnected,
    drain_body,
    framing_error,
    read_body,
)
from .respond import send_reply
from .routing import Route, RouteTable
from .state import HttpSettings, HttpState, Reply, RequestContext
from .streams import StreamReply

__all__ = ["ROUTE_MODULES", "TopicsHttpApp", "create_app"]

AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The modules whose ``ROUTES`` make up the API (add routers, watch, queues here).
ROUTE_MODULES: tuple[ModuleType, ...] = (
    topic_routes,
    record_routes,
    probe_routes,
    queue_routes,
    router_routes,
    openapi,
    watch_routes,
    ws,
    console_routes,
    cursor_routes,
    backup_routes,
)

_REQUEST_ID = re.compile(rb"[A-Za-z0-9._-]{1,128}")
_CLOSE = (b"connection", b"close")
# Path parameters that name a topic or router, checked against the key's prefixes.
_NAME_PARAMS = frozenset({"topic", "router"})


class TopicsHttpApp:
    """The ASGI callable: the dispatcher (module docstring) plus the Quart app behind it.

    Attributes:
        state: the shared :class:`HttpState` (tests inject pressure or flip shutdown here).
        quart: the Quart app serving every non-fast route.
        table: the route table.
    """

    def __init__(self, state: HttpState, table: RouteTable, quart: QuartTrio) -> None:
        self.state = state
        self.table = table
        self.quart = quart
        self._quart_asgi = cast(AsgiApp, quart)  # Quart's typed ASGI signature, seen plainly

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            connection = connection_of(scope)
            if connection is None or connection.scope is None:
                await self._http(scope, receive, send)  # one frame: an idle stream keeps it
                return
            # hypercorn serves the connection: the head is whole, so its deadline is off
            # until the request is over (connection.py rule 5).
            connection.request_started()
            try:
                await self._http(scope, receive, send)
            finally:
                connection.request_ended()
        elif kind == "lifespan":
            await self._lifespan(scope, receive, send)
        else:  # websocket: its module gates it (no HTTP route table entry to match)
            connection = connection_of(scope)
            if connection is not None:  # the upgrade's head is whole: no head deadline
                connection.request_started()
            await self._quart_asgi(scope, receive, send)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The pressure monitor lives exactly as long as the server does.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.state.pressure.run)
            await self._quart_asgi(scope, receive, send)
            nursery.cancel_scope.cancel()

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one HTTP request: request id, admission, the key, the route, the reply.

        Kept whole: every request passes here; each step is a few lines and a call per
        step would cost every request a frame (docs/ARCHITECTURE.md, "The path a request takes").
        """
        t0 = time.perf_counter()
        headers: dict[bytes, bytes] = dict(scope["headers"])
        given = headers.get(b"x-request-id")
        if given is not None and _REQUEST_ID.fullmatch(given):
            request_id = given.decode()
        else:
            request_id = _new_request_id()
        connection = connection_of(scope)
        if connection is not None:  # the guard logs this id if the connection dies
            connection.request_id = request_id
        raw_headers = scope["headers"]
        state = self.state
        ctx = RequestContext(
            state, scope["method"], scope["path"], headers, scope["query_string"], request_id, t0
        )
        problem = None
        extensions = scope.get("extensions")
        try:
            problem = framing_error(ctx.method, raw_headers, extensions)
            if problem is not None:
                raise InvalidRequestError(f"{problem}; the connection is closed")
            routed = extensions.get(ROUTED) if extensions else None
            if type(routed) is tuple:  # the lane matched it already (lane rule 6)
                route, ctx.name = routed
            else:
                route, ctx.name = self.table.match(ctx.method, ctx.path)
            ctx.route = route
            self._admit(ctx, route)
        except Exception as exc:  # the gate's 4xx/5xx (or a bug in it)
            # Step 5: nothing of the body was read, so the connection cannot be reused.
            reply = reply_for(ctx, exc)
            if problem is not None or _has_body(headers):
                reply = _closing(reply)
            await send_reply(send, ctx, reply)
            return
        streaming = False
        try:
            if route.body or _has_body(headers):
                try:
                    buffered = bool(extensions and extensions.get(BODY_BUFFERED))
                    receive = await self._consume_body(ctx, route, receive, buffered)
                except ClientDisconnected:
                    return
                except Exception as exc:  # 408/413/415/400 before any parsing
                    reply = reply_for(ctx, exc)
                    if isinstance(exc, (PayloadTooLargeError, RequestTimeoutError)):
                        reply = _closing(reply)  # the rest of the body is still unread
                    await send_reply(send, ctx, reply)
                    return
            ctx.receive = receive
            try:
                reply = await route.handler(ctx)
            except ClientDisconnected:
                return
            except Exception as exc:
                reply = reply_for(ctx, exc)
            if isinstance(reply, StreamReply) and reply.run is not None:
                # A long-lived stream counts against the SSE caps, not the in-flight cap (§11).
                state.release_slot(ctx.principal)
                streaming = True
                await reply.run(send, receive)
                return
            await send_reply(send, ctx, reply)
        finally:
            # However the request ends (answered, failed, client gone, cancelled).
            if not streaming:
                state.release_slot(ctx.principal)

    async def _consume_body(
        self, ctx: RequestContext, route: Route, receive: Receive, buffered: bool
    ) -> Receive:
        """Read the body into ``ctx.body`` (a route that takes one) or drain it (step 5);
        the whole body must arrive within ``body_timeout_s`` (408) unless the server says
        it is ``buffered`` already (``requests.BODY_BUFFERED``)."""
        state = self.state
        if route.body and buffered:
            # The server holds the whole body already: reading it cannot wait on the
            # client, so the deadline (a cancel scope per request) has nothing to bound.
            ctx.body = await read_body(ctx.headers, receive, state.max_body_bytes)
            return receive
        with trio.move_on_after(state.settings.body_timeout_s) as deadline:
            if route.body:
                ctx.body = await read_body(ctx.headers, receive, state.max_body_bytes)
                return receive
            # A route that takes no body still has to consume one it was sent: left
            # unread, it can stall the next request on the same keep-alive connection.
            await drain_body(receive, state.max_body_bytes)
            return _body_consumed(receive)
        assert deadline.cancelled_caught
        raise RequestTimeoutError(
            f"the request body did not arrive within {state.settings.body_timeout_s:g} s "
            "(TOPICS_HTTP_BODY_TIMEOUT_MS); the connection is closed",
            detail={"body_timeout_ms": round(state.settings.body_timeout_s * 1000)},
        )

    def _admit(self, ctx: RequestContext, route: Route) -> None:
        """Steps 3-4 of the module docstring; on success the key holds an in-flight slot."""
        state = self.state
        if state.auth_enabled and (
            not route.probe or route.always_auth or state.settings.probe_auth
        ):
            self._authenticate(ctx, route)
        if route.probe:
            return
        if not state.engine.ready:
            progress = state.engine.recovery_progress
            raise NotReadyError(
                f"recovery in progress ({progress:.0%}); retry shortly",
                detail={"replay_progress": round(progress, 3)},
                retry_after=1.0,
            )
        if route.pressure == "gate":
            state.check_pressure()
        if not state.acquire_slot(ctx.principal):
            raise ThrottledError.for_limit("max_inflight_per_key", state.max_inflight_per_key)

    def _authenticate(self, ctx: RequestContext, route: Route) -> None:
        token: bytes | str = bearer_token(ctx.headers.get(b"authorization"))
        if not token and ctx.query_string and TOKEN.name in ctx.query:
            if not route.query_token:
                raise UnauthorizedError(
                    "?token= is accepted only on SSE stream GETs; "
                    "send Authorization: Bearer <key> instead"
                )
            token = ctx.query[TOKEN.name]
        if not token:
            raise UnauthorizedError("missing API key; send Authorization: Bearer <key>")
        principal = self.state.keys.authenticate(token)
        if principal is None:
            raise UnauthorizedError("invalid API key")
        needed = route.needed_scopes
        if needed and not principal.allows_all(needed):
            missing = principal.missing(needed)
            raise ForbiddenError(
                f"api key lacks {' and '.join(missing)} scope for {route.method} {route.pattern}",
                detail={"required_scopes": sorted(needed), "missing_scopes": missing},
            )
        if route.param in _NAME_PARAMS and not principal.may_touch(ctx.name):
            raise ForbiddenError(
                f'api key may not touch "{ctx.name}": outside its name prefix allowlist',
                detail={route.param: ctx.name},
            )
        ctx.principal = principal


class _RandomPool:
    """OS randomness drawn 4 KiB at a time: one ``getrandom`` per 256 request ids instead
    of one per request (the bytes are the same quality; only the syscalls are fewer)."""

    __slots__ = ("buf", "pos")

    def __init__(self) -> None:
        self.buf = b""
        self.pos = 0

    def take16(self) -> bytes:
        pos = self.pos
        if pos + 16 > len(self.buf):
            self.buf = os.urandom(4096)
            pos = 0
        self.pos = pos + 16
        return self.buf[pos : pos + 16]


_random = _RandomPool()
# A forked child must not hand out its parent's remaining ids.
os.register_at_fork(after_in_child=lambda: setattr(_random, "buf", b""))


def _new_request_id() -> str:
    """A random (version 4) UUID string; ``str(uuid.uuid4())`` at a fraction of the cost."""
    raw = bytearray(_random.take16())
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _closing(reply: Reply) -> Reply:
    """``reply`` with ``Connection: close``: sent while the request's body (or its framing)
    is unsettled, so neither the lane nor h11 may read another request after it."""
    return Reply(reply.status, reply.body, reply.content_type, [*reply.headers, _CLOSE])


def _has_body(headers: dict[bytes, bytes]) -> bool:
    length = headers.get(b"content-length")
    return (length is not None and length not in (b"0", b"")) or b"transfer-encoding" in headers


def _body_consumed(receive: Receive) -> Receive:
    """A receive that reports the (already drained) body as empty, then passes through."""
    pending = True

    async def receive_after_drain() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": b"", "more_body": False}
        return await receive()

    return receive_after_drain


def create_app(
    engine: Engine,
    settings: HttpSettings | None = None,
    modules: Sequence[ModuleType] = ROUTE_MODULES,
) -> TopicsHttpApp:
    """Build the ASGI app serving ``engine`` over HTTP.

    Args:
        engine: an open engine (the app does not own it; close it after the server).
        settings: auth keys, limits and tuning (default: no keys, contract limits).
        modules: routes modules (each with ``ROUTES`` and optionally ``register``).

    Example::

        async with open_engine(None) as engine:
            app = create_app(engine, HttpSettings())
            await hypercorn.trio.serve(app, config)
    """
    state = HttpState(engine, settings if settings is not None else HttpSettings())
    table = RouteTable(route for module in modules for route in module.ROUTES)
    state.routes = tuple(table.routes)
    quart = QuartTrio("topics.frontends.http")
    quart.config.update(MAX_CONTENT_LENGTH=None, PROVIDE_AUTOMATIC_OPTIONS=False)
    for module in modules:
        register = getattr(module, "register", None)
        if register is not None:
            register(quart, state)
    return TopicsHttpApp(state, table, quart)
