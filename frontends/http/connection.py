"""The guard every accepted connection runs under, whoever serves it.

hypercorn's accept loop runs each connection as a task of the server's nursery, so an
exception that escapes one connection ends the server: h11's ``LocalProtocolError`` ("Can't
send data when our state is ERROR"), raised inside hypercorn after a malformed request is
answered, did exactly that on one unauthenticated packet. ``serve`` therefore runs every
connection (lane, handed-over hypercorn connection, WebSocket) through :func:`run_guarded`.

Rules:
1. An exception raised while serving one connection is logged with the peer address and
   the id of the last request the dispatcher saw on it, and ends that connection only.
   Cancellation (the drain deadline at shutdown) passes through untouched.
2. The socket is closed however the connection ends, at once (shielded: a cancelled
   connection must not leave its descriptor behind).
3. The dispatcher records each request's id on the connection's :class:`ConnectionInfo`,
   which rides in the ASGI ``state`` under :data:`CONNECTION_KEY` (each request's state is
   a shallow copy, so every request of a connection sees the same object).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

__all__ = ["CONNECTION_KEY", "ConnectionInfo", "run_guarded"]

log = logging.getLogger("topics.http.connection")

#: Where a connection's :class:`ConnectionInfo` sits in the ASGI scope's ``state``.
CONNECTION_KEY = "topics.connection"


class ConnectionInfo:
    """What the guard knows of a connection when it has to log its failure."""

    __slots__ = ("peer", "request_id")

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.request_id: str | None = None


async def run_guarded(
    serve_one: Callable[[trio.SocketStream, ConnectionInfo], Awaitable[None]],
    stream: trio.SocketStream,
) -> None:
    """Serve ``stream`` with ``serve_one`` under rules 1 and 2."""
    info = ConnectionInfo(_peer(stream))
    try:
        await serve_one(stream, info)
    except* Exception as group:
        log.error(
            "connection from %s failed (last request_id=%s); closed that connection only",
            info.peer,
            info.request_id,
            exc_info=group,
        )
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port, *_ = stream.socket.getpeername()
    except (OSError, ValueError, TypeError):  # reset before we looked, or not an inet socket
        return "?"
    return f"{host}:{port}"
