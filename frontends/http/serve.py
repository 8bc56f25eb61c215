"""Serving the app: hypercorn's trio worker, with the fast lane (``lane.py``) in front.

``serve(app, config, lane=True)`` does what ``hypercorn.trio.serve`` does for
topics-server's configuration (plain TCP listeners, the ASGI lifespan, graceful shutdown
on ``shutdown_trigger`` within ``config.graceful_timeout``), except that:

1. every accepted connection runs under the guard of ``connection.py``: an exception in
   one connection (hypercorn's own included) closes that connection, never the server;
2. with the lane, each connection starts in it and moves to hypercorn's own ``TCPServer``
   at its first request the lane does not take, with the bytes already read; without it
   (``lane=False``, ``TOPICS_HTTP_LANE=0``) each connection is hypercorn's from the start;
3. hypercorn's connection server is ``hypercorn_server.TopicsTCPServer``: it takes the
   lane's read-ahead, ignores bytes after a request that ends the connection, and its
   answers say ``X-Topics-Path: hypercorn`` (the lane's say ``lane``).

The hand-over needs one thing of hypercorn beyond its documented API: ``TCPServer`` and
its ``_read_data`` loop (to feed it the bytes the lane read); :func:`lane_supported`
checks for it at start, and pyproject.toml pins hypercorn to the releases it was tested
with. When a release moves it, the server logs why and serves without the lane (and with
hypercorn's own ``TCPServer``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import repr_socket_addr, wrap_app

from .accepting import AcceptWatch
from .app import TopicsHttpApp
from .connection import (
    CLOSE_HANDSHAKE_TIMEOUT_S,
    CONNECTION_KEY,
    ConnectionInfo,
    GuardedStream,
    run_guarded,
)
from .hypercorn_server import TopicsTCPServer, hypercorn_internals_present, served_by_hypercorn
from .lane import HEAD_TIMEOUT_S, MAX_BODY, AsgiApp, Lane, LaneConnection
from .routing import Route

__all__ = ["lane_supported", "serve"]

log = logging.getLogger("topics.server")


def lane_supported() -> bool:
    """True when this hypercorn has the internals the hand-over relies on."""
    return hypercorn_internals_present()


def lane_routes(app: TopicsHttpApp) -> Callable[[str, str], tuple[Route, str] | None]:
    """``(method, path) -> (route, param) | None`` (lane rule 2): the match of a POST the
    dispatcher serves itself with a body, or of a GET it serves itself (the watch and
    ``/work`` streams; a WebSocket GET carries ``Upgrade``, which the lane leaves to
    hypercorn). The lane hands the match to the dispatcher (``requests.ROUTED``), which
    then does not match again.

    The verdict is a property of the route, so it is kept per route (a bounded set), never
    per path: paths carry unbounded topic names, and a cache keyed on them let
    unauthenticated requests with long paths grow the server's memory."""
    verdicts = {
        id(route): route.fast and route.body == (route.method == "POST")
        for route in app.table.routes
    }
    find = app.table.find

    def accepts(method: str, path: str) -> tuple[Route, str] | None:
        found = find(method, path)
        return found if found is not None and verdicts[id(found[0])] else None

    return accepts


def _lane(
    app: AsgiApp,
    accepts: Callable[[str, str], object],
    config: Config,
    head_timeout: float,
    max_body: int,
    lifespan_state: dict[str, Any],
) -> Lane:
    """The fast lane, with hypercorn's timeouts and limits from ``config``."""
    return Lane(
        app,
        accepts,
        keep_alive_timeout=config.keep_alive_timeout,
        head_timeout=head_timeout,
        read_timeout=config.read_timeout,
        max_requests=config.keep_alive_max_requests,
        max_body=max_body,
        root_path=config.root_path,
        lifespan_state=lifespan_state,
    )


def _listen(config: Config) -> tuple[list[trio.SocketListener], list[str]]:
    """The configured plain-TCP sockets, listening, and their ``http://`` addresses."""
    sockets = config.create_sockets()
    if sockets.secure_sockets or sockets.quic_sockets:
        raise ValueError("topics-server serves plain TCP only; TLS is not configured here")
    listeners = []
    binds = []
    for sock in sockets.insecure_sockets:
        sock.listen(config.backlog)
        listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
        binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")
    return listeners, binds


async def serve(
    app: AsgiApp,
    config: Config,
    *,
    lane: bool = True,
    accepts: Callable[[str, str], object] | None = None,
    max_body: int = MAX_BODY,
    head_timeout: float = HEAD_TIMEOUT_S,
    close_timeout: float = CLOSE_HANDSHAKE_TIMEOUT_S,
    shutdown_trigger: Callable[[], Awaitable[None]],
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` until ``shutdown_trigger`` returns, then drain (module docstring).

    ``accepts`` (``(method, path) -> verdict``, lane rule 2) and ``max_body`` say what the lane takes; for a
    :class:`TopicsHttpApp` they default to its fast routes and its body limit.
    ``head_timeout`` bounds how long a lane connection may take to send a whole request
    head once its first byte has arrived; ``close_timeout`` how long a WebSocket client
    may take to answer the server's close frame (``connection.py`` rule 4).

    Kept whole: the nesting of its three nurseries (lifespan, connections, accepting) is
    the shutdown order, and follows ``hypercorn.trio.serve`` so the two can be compared.
    """
    if isinstance(app, TopicsHttpApp):
        accepts = accepts or lane_routes(app)
        max_body = min(max_body, app.state.max_body_bytes)
    if accepts is None:
        raise ValueError("serve: give `accepts` for an app other than TopicsHttpApp")
    ours = lane_supported()
    if lane and not ours:
        log.warning("this hypercorn lacks TCPServer._read_data: serving without the fast lane")
        lane = False
    lifespan_state: dict[str, Any] = {}
    lifespan = Lifespan(wrap_app(app, config.wsgi_max_body_size, None), config, lifespan_state)  # type: ignore[arg-type]
    # What hypercorn serves says so (hypercorn_server rule 2); the lane's answers say "lane".
    wrapped = wrap_app(served_by_hypercorn(app), config.wsgi_max_body_size, None)  # type: ignore[arg-type]
    context = WorkerContext(None)
    fast = _lane(app, accepts, config, head_timeout, max_body, lifespan_state)
    watch = app.state.accepting if isinstance(app, TopicsHttpApp) else AcceptWatch()

    def in_lane(stream: trio.SocketStream, info: ConnectionInfo) -> Awaitable[bytes | None]:
        return LaneConnection(fast, stream, info).run()

    async def in_hypercorn(
        stream: trio.SocketStream, info: ConnectionInfo, read_ahead: bytes
    ) -> None:
        state = ConnectionState({**lifespan_state, CONNECTION_KEY: info})
        guarded = GuardedStream(stream, info, head_timeout, close_timeout)
        server: TCPServer
        if ours:  # any trio stream with a ``socket`` serves (hypercorn's hint says SSL)
            server = TopicsTCPServer(
                wrapped, config, context, state, guarded, read_ahead=read_ahead
            )
        else:
            server = TCPServer(wrapped, config, context, state, guarded)  # type: ignore[arg-type]
        del read_ahead  # a long-lived stream keeps this frame: keep it small
        await server.run()

    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()
        async with trio.open_nursery() as server_nursery:
            listeners, binds = _listen(config)
            task_status.started(binds)
            try:
                async with trio.open_nursery() as accepting:
                    # trio.serve_listeners survives EMFILE/ENFILE on accept (it logs and
                    # backs off); each connection's own failures stop at run_guarded.
                    accepting.start_soon(
                        partial(trio.serve_listeners, handler_nursery=server_nursery),
                        lambda stream: run_guarded(stream, in_lane if lane else None, in_hypercorn),
                        watch.wrap(listeners),  # readiness sees a failing accept (accepting.py)
                    )
                    await shutdown_trigger()
                    accepting.cancel_scope.cancel()  # stop accepting; drain below
            finally:
                await context.terminated.set()
                fast.terminate()
                server_nursery.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()
