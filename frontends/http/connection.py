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
4. A connection may be given a deadline (:meth:`ConnectionInfo.close_within`) for a wait
   the server beneath has none for. hypercorn, having sent a WebSocket close frame (the
   session ended, or it refused an oversized message with 1009 and kept the up to 16 MiB
   it had buffered), waits for the client's close frame for as long as the client likes;
   :class:`GuardedStream`, the stream hypercorn is given, sees the close frame go out and
   gives the client :data:`CLOSE_HANDSHAKE_TIMEOUT_S` to answer (RFC 6455 §7.1.1 lets
   the server then drop the TCP connection).
5. The head deadline holds on connections hypercorn owns too: :class:`GuardedStream`
   arms it when bytes arrive while no request is in flight, and the dispatcher disarms
   it when a request reaches the app (:meth:`ConnectionInfo.request_started`, and
   ``request_ended`` once it is answered). A head that is not whole by then closes the
   connection, as in the lane; hypercorn alone would hold it until its keep-alive timer.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable

import trio

__all__ = [
    "CLOSE_HANDSHAKE_TIMEOUT_S",
    "CONNECTION_KEY",
    "ConnectionInfo",
    "GuardedStream",
    "run_guarded",
]

log = logging.getLogger("topics.http.connection")

#: Where a connection's :class:`ConnectionInfo` sits in the ASGI scope's ``state``.
CONNECTION_KEY = "topics.connection"
#: Rule 4: how long a client may take to answer the server's WebSocket close frame.
CLOSE_HANDSHAKE_TIMEOUT_S = 5.0
_SWITCHING = b"HTTP/1.1 101 "


class ConnectionInfo:
    """What the guard knows of a connection: who, its last request, its deadlines."""

    __slots__ = ("_head_armed", "busy", "peer", "request_id", "scope")

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.request_id: str | None = None
        self.scope = trio.CancelScope()
        #: Requests of this connection the app is serving now (rule 5).
        self.busy = 0
        self._head_armed = False

    def request_started(self, request_id: str) -> None:
        """A request reached the app: its head is whole (rule 5)."""
        self.request_id = request_id
        self.busy += 1
        if self._head_armed:
            self._head_armed = False
            self.scope.deadline = math.inf

    def request_ended(self) -> None:
        self.busy -= 1

    def head_begins(self, head_timeout: float) -> None:
        """Bytes arrived: when no request is in flight, they begin a head (rule 5)."""
        if not self.busy and not self._head_armed:
            self._head_armed = True
            self.close_within(head_timeout)

    def close_within(self, seconds: float) -> None:
        """Rule 4: end the connection ``seconds`` from now unless it ends sooner."""
        self.scope.deadline = min(self.scope.deadline, trio.current_time() + seconds)


class GuardedStream(trio.abc.HalfCloseableStream):
    """The connection's socket stream as hypercorn gets it: the same calls, plus rule 4.

    hypercorn writes one WebSocket frame per ``send_all``, so after its ``101`` answer a
    write that starts with a close frame's first byte is the close frame.
    """

    __slots__ = ("_head_timeout", "_info", "_stream", "_upgraded", "socket")

    def __init__(
        self, stream: trio.SocketStream, info: ConnectionInfo, head_timeout: float = math.inf
    ) -> None:
        self._stream = stream
        self._info = info
        self._upgraded = False
        self._head_timeout = head_timeout
        self.socket = stream.socket

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._upgraded:
            if data[:1] == b"\x88":  # FIN + opcode 8 (close); a server never masks
                self._info.close_within(CLOSE_HANDSHAKE_TIMEOUT_S)
        elif bytes(data[: len(_SWITCHING)]) == _SWITCHING:
            self._upgraded = True
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        data = await self._stream.receive_some(max_bytes)
        if data and not self._upgraded:
            self._info.head_begins(self._head_timeout)
        return data

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()


async def run_guarded(
    serve_one: Callable[[trio.SocketStream, ConnectionInfo], Awaitable[None]],
    stream: trio.SocketStream,
) -> None:
    """Serve ``stream`` with ``serve_one`` under rules 1 and 2."""
    info = ConnectionInfo(_peer(stream))
    try:
        with info.scope:
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
