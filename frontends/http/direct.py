"""Direct socket writes for streaming responses (watch SSE rule 7, /work rule 5).

A stream served on a connection the fast lane owns can write its body chunks to the
socket itself, under the lane's send lock, instead of going through ASGI for every frame.
This module holds what those streams share: the socket handle (:class:`RawSocket`) and
HTTP/1.1 chunk framing (:func:`chunk`). Only the lane's own connections qualify: the
lane hands its socket and lock over through its public ``stream_lock``; a connection
hypercorn owns keeps every byte in hypercorn's hands (nothing here reaches into it).
"""

from __future__ import annotations

import os

import trio

from topics._core.fanout import write_each

from .asgi import Send
from .lane import LaneConnection

__all__ = ["Chunk", "RawSocket", "chunk", "join_chunks", "try_send_each"]


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
    """The socket of a connection the fast lane owns.

    The lane hands it over (``LaneConnection.stream_lock``); None for anything else, and
    the stream then sends through ASGI. Writes take the lane's send lock, so they never
    interleave with a write of the lane's own.
    """

    __slots__ = ("broken", "fd", "lock", "stream")

    def __init__(self, stream: trio.SocketStream, lock: trio.Lock) -> None:
        self.stream = stream
        self.lock = lock
        self.fd = stream.socket.fileno()
        self.broken = False

    @classmethod
    def find(cls, send: Send) -> RawSocket | None:
        """The socket behind ``send`` when it is a lane connection's (its rule 6)."""
        connection = getattr(send, "__self__", None)
        if not isinstance(connection, LaneConnection):
            return None
        lock = connection.stream_lock()
        return None if lock is None else cls(connection.stream, lock)

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


def try_send_each(sockets: list[RawSocket], data: bytes) -> list[int]:
    """``try_send`` of one frame to many sockets, the writes in one compiled loop (the
    watch hub's group delivery): per socket, bytes written or -1 if it is dead. A socket
    that is broken, or whose lock the lane holds, is not written to (0, or -1 if broken)."""
    fds = []
    index = []
    out = [0] * len(sockets)
    for i, raw in enumerate(sockets):
        if raw.broken:
            out[i] = -1
        elif not raw.lock.locked():
            fds.append(raw.fd)
            index.append(i)
    for i, n in zip(index, write_each(fds, data), strict=True):
        if n < 0:
            sockets[i].broken = True
        out[i] = n
    return out
