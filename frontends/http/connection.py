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
3. The dispatcher records each request's id on the connection's :class:`ConnectionInfo`
   (:func:`connection_of` finds it): the lane puts it in the ASGI scope under
   :data:`CONNECTION_KEY`, hypercorn's connection state carries it in ``state`` (each
   request's state is a shallow copy, so every request of a connection sees the same
   object).
4. A connection may be given a deadline (:meth:`ConnectionInfo.close_within`) for a wait
   the server beneath has none for. hypercorn, having sent a WebSocket close frame (the
   session ended, or it refused an oversized message with 1009 and kept the up to 16 MiB
   it had buffered), waits for the client's close frame for as long as the client likes;
   :class:`GuardedStream`, the stream hypercorn is given, sees the close frame go out and
   gives the client ``close_timeout`` (``TOPICS_WS_CLOSE_TIMEOUT_MS``, by default
   :data:`CLOSE_HANDSHAKE_TIMEOUT_S`) to answer (RFC 6455 §7.1.1 lets the server then
   drop the TCP connection).
5. The head deadline holds on connections hypercorn owns too: :class:`GuardedStream`
   arms it when bytes arrive while no request is in flight, and the dispatcher disarms
   it when a request reaches the app (:meth:`ConnectionInfo.request_started`, and
   ``request_ended`` once it is answered). A head that is not whole by then closes the
   connection, as in the lane; hypercorn alone would hold it until its keep-alive timer.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

__all__ = [
    "CLOSE_HANDSHAKE_TIMEOUT_S",
    "CONNECTION_KEY",
    "ConnectionInfo",
    "GuardedStream",
    "connection_of",
    "run_guarded",
]

log = logging.getLogger("topics.http.connection")

#: Where a connection's :class:`ConnectionInfo` sits in the ASGI scope's ``state``.
CONNECTION_KEY = "topics.connection"
#: Rule 4: how long a client may take to answer the server's WebSocket close frame, unless
#: the server is told otherwise.
CLOSE_HANDSHAKE_TIMEOUT_S = 5.0
_SWITCHING = b"HTTP/1.1 101 "


class ConnectionInfo:
    """What the guard knows of a connection: who, its last request, its deadlines."""

    # Kept small: an idle watch stream holds one for as long as it is open (the peer is
    # looked up only when a failure is logged; the cancel scope exists only once hypercorn
    # serves the connection, the only case that sets deadlines on it).
    __slots__ = ("_head_armed", "busy", "request_id", "scope", "stream")

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.request_id: str | None = None
        self.scope: trio.CancelScope | None = None
        #: Requests of this connection the app is serving now (rule 5).
        self.busy = 0
        self._head_armed = False

    @property
    def peer(self) -> str:
        return _peer(self.stream)

    def request_started(self) -> None:
        """A request reached the app: its head is whole (rule 5)."""
        self.busy += 1
        if self._head_armed and self.scope is not None:
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
        """Rule 4: end the connection ``seconds`` from now unless it ends sooner (a
        connection with no deadline scope, one the lane serves, has its own deadlines)."""
        if self.scope is not None:
            self.scope.deadline = min(self.scope.deadline, trio.current_time() + seconds)


def connection_of(scope: Mapping[str, Any]) -> ConnectionInfo | None:
    """The :class:`ConnectionInfo` of the connection a scope came on (rule 3), if any."""
    info = scope.get(CONNECTION_KEY)
    if info is None:
        info = scope.get("state", {}).get(CONNECTION_KEY)
    return info if isinstance(info, ConnectionInfo) else None


class GuardedStream(trio.abc.HalfCloseableStream):
    """The connection's socket stream as hypercorn gets it: the same calls, plus rule 4.

    hypercorn writes one WebSocket frame per ``send_all``, so after its ``101`` answer a
    write that starts with a close frame's first byte is the close frame.

    Bytes that came behind a WebSocket upgrade request are given back by :meth:`hold`
    (``hypercorn_server`` rule 4) and are the next read once the ``101`` is out; if the
    upgrade is refused instead, the next read is EOF when the connection closes.
    """

    __slots__ = (
        "_answered",
        "_close_timeout",
        "_head_timeout",
        "_held",
        "_info",
        "_stream",
        "_upgraded",
        "socket",
    )

    def __init__(
        self,
        stream: trio.SocketStream,
        info: ConnectionInfo,
        head_timeout: float = math.inf,
        close_timeout: float = CLOSE_HANDSHAKE_TIMEOUT_S,
    ) -> None:
        self._stream = stream
        self._info = info
        self._upgraded = False
        self._head_timeout = head_timeout
        self._close_timeout = close_timeout
        self._held = b""
        self._answered: trio.Event | None = None
        self.socket = stream.socket

    def hold(self, data: bytes) -> None:
        """``data`` followed an upgrade request: read it back once the upgrade is answered."""
        self._held = data
        self._answered = trio.Event()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._upgraded:
            if data[:1] == b"\x88":  # FIN + opcode 8 (close); a server never masks
                self._info.close_within(self._close_timeout)
        elif bytes(data[: len(_SWITCHING)]) == _SWITCHING:
            self._upgraded = True
            await self._stream.send_all(data)
            if self._answered is not None:  # the held bytes are WebSocket data now
                self._answered.set()
            return
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._answered is not None:
            await self._answered.wait()  # the 101, or the close after a refusal
            held, self._held, self._answered = self._held, b"", None
            return held if self._upgraded else b""
        data = await self._stream.receive_some(max_bytes)
        if data and not self._upgraded:
            self._info.head_begins(self._head_timeout)
        return data

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        if self._answered is not None:
            self._answered.set()
        await self._stream.aclose()


#: Phase one of a connection (the fast lane): None when it is over, else the bytes it
#: read that phase two must start from.
FirstPhase = Callable[[trio.SocketStream, ConnectionInfo], Awaitable[bytes | None]]
#: Phase two (hypercorn), given the stream, the connection's record and those bytes.
SecondPhase = Callable[[trio.SocketStream, ConnectionInfo, bytes], Awaitable[None]]


async def run_guarded(
    stream: trio.SocketStream, first: FirstPhase | None, second: SecondPhase
) -> None:
    """Serve ``stream`` under rules 1 and 2: ``first`` (when given) until it is done or
    hands the connection on, then ``second`` under the connection's deadline scope.

    ``first`` is called, not wrapped in a coroutine of its own: an idle stream's task
    keeps this frame and the lane's, and nothing more (every frame is memory an idle
    watcher holds)."""
    info = ConnectionInfo(stream)
    try:
        read_ahead = b"" if first is None else await first(stream, info)
        if read_ahead is not None:
            info.scope = trio.CancelScope()
            with info.scope:
                serving = second(stream, info, read_ahead)
                del read_ahead  # a long-lived connection keeps this frame: keep it small
                await serving
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
