"""Serving the app: hypercorn's trio worker, with the fast lane (``lane.py``) in front.

``serve(app, config, lane=True)`` does what ``hypercorn.trio.serve`` does for
topics-server's configuration (plain TCP listeners, the ASGI lifespan, graceful shutdown
on ``shutdown_trigger`` within ``config.graceful_timeout``), except that each accepted
connection starts in the lane and moves to hypercorn's own ``TCPServer`` at its first
request the lane does not take, with the bytes already read. With ``lane=False`` it is
``hypercorn.trio.serve`` itself.

The lane needs two things of hypercorn beyond its documented API: ``TCPServer`` and its
``_read_data`` loop (to feed it the bytes the lane read) and the lifespan/worker-context
classes. :func:`lane_supported` checks for them; when a hypercorn release moves them the
server logs why and serves without the lane instead of failing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.events import RawData
from hypercorn.trio import serve as hypercorn_serve
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import repr_socket_addr, wrap_app

from .app import TopicsHttpApp
from .lane import MAX_BODY, AsgiApp, Lane, LaneConnection

__all__ = ["lane_supported", "serve"]

log = logging.getLogger("topics.server")


def lane_supported() -> bool:
    """True when this hypercorn has the internals the hand-over relies on."""
    return callable(getattr(TCPServer, "_read_data", None)) and callable(
        getattr(TCPServer, "run", None)
    )


class _HandedOver(TCPServer):
    """hypercorn's connection server, fed first with what the lane already read."""

    def __init__(self, *args: Any, read_ahead: bytes) -> None:
        super().__init__(*args)
        self._read_ahead = read_ahead

    async def _read_data(self) -> None:
        if self._read_ahead:
            data, self._read_ahead = self._read_ahead, b""
            await self.protocol.handle(RawData(data))
        await super()._read_data()


def lane_routes(app: TopicsHttpApp) -> Callable[[str, str], bool]:
    """``(method, path) -> bool`` (lane rule 2): a POST the dispatcher serves itself with a
    body, or a GET it serves itself (the watch and ``/work`` streams; a WebSocket GET
    carries ``Upgrade``, which the lane leaves to hypercorn)."""
    cache: dict[tuple[str, str], bool] = {}

    def accepts(method: str, path: str) -> bool:
        key = (method, path)
        known = cache.get(key)
        if known is not None:
            return known
        try:
            route, _ = app.table.match(method, path)
            verdict = route.fast and route.handler is not None and route.body == (method == "POST")
        except Exception:  # 404/405: hypercorn carries it to the app's error reply
            verdict = False
        if len(cache) >= 4096:  # topic names are unbounded; the cache is not
            cache.clear()
        cache[key] = verdict
        return verdict

    return accepts


async def serve(
    app: AsgiApp,
    config: Config,
    *,
    lane: bool = True,
    accepts: Callable[[str, str], bool] | None = None,
    max_body: int = MAX_BODY,
    shutdown_trigger: Callable[[], Awaitable[None]],
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` until ``shutdown_trigger`` returns, then drain (module docstring).

    ``accepts`` (``(method, path) -> bool``) and ``max_body`` say what the lane takes; for a
    :class:`TopicsHttpApp` they default to its fast routes and its body limit.
    """
    if isinstance(app, TopicsHttpApp):
        accepts = accepts or lane_routes(app)
        max_body = min(max_body, app.state.max_body_bytes)
    if accepts is None:
        raise ValueError("serve: give `accepts` for an app other than TopicsHttpApp")
    if lane and not lane_supported():
        log.warning("this hypercorn lacks TCPServer._read_data: serving without the fast lane")
        lane = False
    if not lane:
        await hypercorn_serve(
            app,  # type: ignore[arg-type]  # hypercorn's ASGI typing
            config,
            shutdown_trigger=shutdown_trigger,
            task_status=task_status,
        )
        return
    wrapped = wrap_app(app, config.wsgi_max_body_size, None)  # type: ignore[arg-type]
    lifespan_state: dict[str, Any] = {}
    lifespan = Lifespan(wrapped, config, lifespan_state)
    context = WorkerContext(None)
    fast = Lane(
        app,
        accepts,
        keep_alive_timeout=config.keep_alive_timeout,
        read_timeout=config.read_timeout,
        max_requests=config.keep_alive_max_requests,
        max_body=max_body,
        root_path=config.root_path,
        lifespan_state=lifespan_state,
    )

    async def connection(stream: trio.SocketStream) -> None:
        read_ahead: bytes | None = None
        try:
            read_ahead = await LaneConnection(fast, stream).run()
        except Exception:  # a lane bug must cost one connection, not the server
            log.exception("fast lane connection failed")
        finally:  # also when cancelled (the drain deadline): the socket closes now
            if read_ahead is None:
                with trio.CancelScope(shield=True):
                    await stream.aclose()
        if read_ahead is None:
            return
        server = _HandedOver(
            wrapped,
            config,
            context,
            ConnectionState(lifespan_state.copy()),
            stream,
            read_ahead=read_ahead,
        )
        del read_ahead  # a long-lived stream keeps this frame: keep it small
        await server.run()

    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()
        async with trio.open_nursery() as server_nursery:
            sockets = config.create_sockets()
            if sockets.secure_sockets or sockets.quic_sockets:
                raise ValueError("the fast lane serves plain TCP only; TLS is not configured here")
            listeners = []
            binds = []
            for sock in sockets.insecure_sockets:
                sock.listen(config.backlog)
                listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
                binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")
            task_status.started(binds)
            try:
                async with trio.open_nursery() as accepting:
                    accepting.start_soon(
                        partial(trio.serve_listeners, handler_nursery=server_nursery),
                        connection,
                        listeners,
                    )
                    await shutdown_trigger()
                    accepting.cancel_scope.cancel()  # stop accepting; drain below
            finally:
                await context.terminated.set()
                fast.terminate()
                server_nursery.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()
