"""hypercorn's per-connection server as topics-server runs it: the ``TCPServer`` of
hypercorn's trio worker, changed in four ways ``serve.py`` needs.

Rules:
1. Read-ahead: a connection the fast lane hands over (lane rule 3) starts with the bytes
   the lane already read; they are fed to the protocol before the socket is read again.
2. Who served: every HTTP answer hypercorn writes for the app carries
   ``X-Topics-Path: hypercorn``, as the lane's carry ``X-Topics-Path: lane`` (docs/HTTP.md,
   "Who served a request"), so a client or a test can tell the two paths apart on the
   wire. WebSocket scopes are left alone: only hypercorn serves them, and wrapping their
   ``send`` would cost every outbound frame a call.
3. Bytes after a request that ends the connection are ignored, not a protocol error.
   h11 raises on any byte that follows a request it must close after (HTTP/1.0 without
   keep-alive, or ``Connection: close``), and hypercorn then answers ``400`` with no
   request id and drops the request, whole as it was, before the app answers it. RFC 9112
   §9.6 says the server serves that request and reads no further one, so the h11
   connection here (:class:`TopicsHttp11`) reports nothing more to parse once the
   client's request is whole. The bytes it ignores are bounded (:data:`MAX_IGNORED`):
   past that the client is treated as h11 would treat it, and the connection closes.
4. Bytes behind a WebSocket upgrade request wait for the server's answer. hypercorn
   hands whatever followed the upgrade head to the WebSocket at once, and a WebSocket
   that gets data before it is accepted answers a bare ``400`` (no request id, before
   the app has authenticated anything) while the app goes on to accept it: the client got
   a 400 followed by a close frame, and hypercorn an h11 error. Here those bytes are
   given to the stream (``connection.GuardedStream.hold``), which returns them as the
   next read once the ``101`` is out, so the app answers first (``101``, or ``401`` with
   the contract's envelope) and the bytes are then read as WebSocket frames.

What this takes from hypercorn beyond its documented API: ``TCPServer._read_data`` (rule
1, and the place rule 3 swaps the h11 connection in), ``ProtocolWrapper.protocol`` and
``H11Protocol.connection`` (rules 3-4). :func:`hypercorn_internals_present` checks the first at
start; where the other two are missing, rules 3-4 are skipped and hypercorn's own handling
stands (``tests/hostile/test_stray_bytes.py`` then fails, which is how a hypercorn upgrade
that moved them is noticed). pyproject.toml pins hypercorn to the releases tested.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import h11
from hypercorn.events import RawData
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.tcp_server import TCPServer

from .asgi import Message, Receive, Scope, Send
from .lane import AsgiApp

__all__ = [
    "MAX_IGNORED",
    "SERVED_BY_HYPERCORN",
    "TopicsHttp11",
    "TopicsTCPServer",
    "hypercorn_internals_present",
    "served_by_hypercorn",
]

#: Rule 3: how many bytes after a must-close request are read and dropped before the
#: client is taken for one that is not speaking HTTP and its connection is closed.
MAX_IGNORED = 64 * 1024
#: Rule 2: the header hypercorn's answers carry.
SERVED_BY_HYPERCORN = (b"x-topics-path", b"hypercorn")


def hypercorn_internals_present() -> bool:
    """True when this hypercorn has the ``TCPServer`` internals rule 1 relies on."""
    return callable(getattr(TCPServer, "_read_data", None)) and callable(
        getattr(TCPServer, "run", None)
    )


class TopicsHttp11(h11.Connection):
    """h11's server connection with rules 3 and 4: once the client's request is whole and
    the connection must close after the answer it parses nothing more; the bytes that
    came behind a WebSocket upgrade request are held by ``hold`` until the server answers
    the upgrade."""

    def __init__(self, *args: Any, hold: Callable[[bytes], None] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.ignored = 0
        self._hold = hold
        self._upgrade = False

    def receive_data(self, data: bytes) -> None:
        if data and self.their_state is h11.MUST_CLOSE:
            self.ignored += len(data)
            if self.ignored <= MAX_IGNORED:
                return  # dropped: no further request is read on this connection
        super().receive_data(data)  # EOF included: hypercorn learns the client left

    def next_event(self) -> Any:
        if self.their_state is h11.MUST_CLOSE and self.ignored <= MAX_IGNORED:
            # What followed the request in its own packet stays in h11's buffer (at most
            # one read) and is never parsed; EOF reaches hypercorn as its Closed event.
            return h11.NEED_DATA
        event = super().next_event()
        if type(event) is h11.Request:
            self._upgrade = any(
                name == b"upgrade" and value.lower() == b"websocket"
                for name, value in event.headers
            )
        return event

    @property
    def trailing_data(self) -> tuple[bytes, bool]:
        """What hypercorn takes over when it switches a connection to WebSocket (or h2):
        behind a WebSocket upgrade, nothing; the bytes go to ``hold`` (rule 4)."""
        data, closed = super().trailing_data
        if data and self._upgrade and self._hold is not None:
            self._hold(data)
            self._hold = None  # once: hypercorn asks when it switches, and only then
            return b"", closed
        return data, closed


class TopicsTCPServer(TCPServer):
    """hypercorn's connection server with rules 1, 3 and 4."""

    def __init__(self, *args: Any, read_ahead: bytes = b"") -> None:
        super().__init__(*args)
        self._read_ahead = read_ahead

    async def _read_data(self) -> None:
        protocol = getattr(getattr(self, "protocol", None), "protocol", None)
        if isinstance(protocol, H11Protocol) and type(protocol.connection) is h11.Connection:
            protocol.connection = TopicsHttp11(
                h11.SERVER,
                max_incomplete_event_size=self.config.h11_max_incomplete_size,
                hold=getattr(self.stream, "hold", None),
            )
        if self._read_ahead:
            data, self._read_ahead = self._read_ahead, b""
            await self.protocol.handle(RawData(data))
        await super()._read_data()


def served_by_hypercorn(app: AsgiApp) -> AsgiApp:
    """``app`` with rule 2's header added to every answer it starts."""

    async def tagged(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        async def send_tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", ()), SERVED_BY_HYPERCORN]
                message = {**message, "headers": headers}
            await send(message)

        await app(scope, receive, send_tagged)

    return tagged
