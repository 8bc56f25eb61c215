"""Direct socket writes for streaming responses (watch SSE rule 7, /work rule 5).

A stream served by the fast lane or by hypercorn's HTTP/1.1 can write its body chunks to
the connection's socket itself, under the connection's send lock, instead of going through
ASGI for every frame. This module holds what those streams share: the socket handle
(:class:`RawSocket`) and HTTP/1.1 chunk framing (:func:`chunk`).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import h11
import trio

from .lane import LaneConnection

__all__ = ["Chunk", "RawSocket", "chunk", "join_chunks"]

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]


class Chunk(bytes):
    """A frame already in HTTP/1.1 chunked framing (written to the socket as is)."""

    __slots__ = ()


def chunk(frame: bytes) -> Chunk:
    return Chunk(b"%x\r\n%b\r\n" % (len(frame), frame))


def join_chunks(frames: list[bytes]) -> Chunk:
    # Frames queue chunk-framed (records, remainders) or not (advisory, heartbeat); a plain
    # join would come out as bytes and be framed once more as a whole by the writer.
    return Chunk(b"".join(f if type(f) is Chunk else chunk(f) for f in frames))


class RawSocket:
    """The connection's socket under the fast lane or hypercorn's HTTP/1.1.

    The lane hands it over (``LaneConnection.stream_lock``); under hypercorn it is found by
    walking the ``send`` callable hypercorn gave us (HTTPStream -> H11Protocol ->
    TCPServer); None for anything else (HTTP/2, HTTP/1.0 framing, another server, another
    hypercorn layout), and the stream then sends through ASGI. Writes take the
    connection's own send lock, so they never interleave with a write of the server's.
    """

    __slots__ = ("broken", "fd", "lock", "stream")

    def __init__(self, stream: trio.SocketStream, lock: trio.Lock) -> None:
        self.stream = stream
        self.lock = lock
        self.fd = stream.socket.fileno()
        self.broken = False

    @classmethod
    def find(cls, send: Send) -> RawSocket | None:
        http_stream = getattr(send, "__self__", None)
        if isinstance(http_stream, LaneConnection):  # served by the fast lane (its rule 6)
            lane_lock = http_stream.stream_lock()
            return None if lane_lock is None else cls(http_stream.stream, lane_lock)
        proto = getattr(getattr(http_stream, "send", None), "__self__", None)
        server = getattr(getattr(proto, "send", None), "__self__", None)
        conn = getattr(proto, "connection", None)
        stream = getattr(server, "stream", None)
        lock = getattr(server, "send_lock", None)
        if (
            type(http_stream).__name__ != "HTTPStream"
            or not isinstance(conn, h11.Connection)
            or type(getattr(conn, "_writer", None)).__name__ != "ChunkedWriter"
            or not isinstance(stream, trio.SocketStream)
            or not isinstance(lock, trio.Lock)
        ):
            return None
        return cls(stream, lock)

    def try_send(self, data: bytes) -> int:
        """Write what the kernel takes now without blocking: bytes written, -1 if dead."""
        if self.broken or self.lock.locked():
            return 0
        try:
            return os.write(self.fd, data)
        except BlockingIOError:
            return 0
        except OSError:
            self.broken = True
            return -1

    async def send_all(self, data: bytes) -> None:
        async with self.lock:
            await self.stream.send_all(data)
