"""The least a Python server can do for bench/watch.py: a write->deliver floor.

``python bench/_floor_server.py trio|epoll`` listens on a free loopback port and prints
it. A connection whose first request is a GET becomes a watcher: it gets a chunked
``200`` head and a ``caught-up`` event, then nothing until a write. Any other request is
a write: its body goes out as one SSE ``data:`` frame (chunk-framed) to every watcher,
then the writer gets ``200 {}``. No routing, no JSON, no storage, no auth, no ids: only
the reads, the writes and the wake-ups every server pays.

``trio`` does it in one trio task per connection (trio's ``SocketStream``, as the real
server's lane does); ``epoll`` in a plain ``select.epoll`` loop. bench/watch.py measures
both with the same writer and reader process as topics and Redis: what is left between
topics and ``trio`` is topics' own work, and ``trio`` against ``epoll`` is the price of
the event loop the server is built on.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import sys


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    + _chunk(b"event: caught-up\n\n")
)
REPLY = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


def _requests(buf: bytes) -> tuple[list[tuple[bool, bytes]], bytes]:
    """Whole requests at the front of ``buf`` as (is_get, body), and the rest."""
    out = []
    while True:
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return out, buf
        head = buf[:end].lower()
        at = head.find(b"content-length:")
        length = int(head[at + 15 :].split(b"\r\n", 1)[0]) if at >= 0 else 0
        if len(buf) < end + 4 + length:
            return out, buf
        out.append((head.startswith(b"get "), buf[end + 4 : end + 4 + length]))
        buf = buf[end + 4 + length :]


def _frame(body: bytes) -> bytes:
    return _chunk(b"data: %s\n\n" % body)


def serve_trio() -> None:
    import trio

    watchers: list[int] = []

    async def connection(stream: trio.SocketStream) -> None:
        buf = b""
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return
            requests, buf = _requests(buf + data)
            for is_get, body in requests:
                if is_get:
                    await stream.send_all(HEAD)
                    watchers.append(stream.socket.fileno())
                    await trio.sleep_forever()
                frame = _frame(body)
                for fd in watchers:
                    # A full socket loses the frame: the run then reports it incomplete.
                    with contextlib.suppress(BlockingIOError):
                        os.write(fd, frame)
                await stream.send_all(REPLY)

    async def main() -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        print(listeners[0].socket.getsockname()[1], flush=True)
        await trio.serve_listeners(connection, listeners)

    trio.run(main)


def serve_epoll() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4096)
    print(listener.getsockname()[1], flush=True)
    ep = select.epoll()
    ep.register(listener.fileno(), select.EPOLLIN)
    conns: dict[int, socket.socket] = {}
    bufs: dict[int, bytes] = {}
    watchers: list[int] = []
    while True:
        for fd, _ in ep.poll():
            if fd == listener.fileno():
                conn, _ = listener.accept()
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conns[conn.fileno()] = conn
                bufs[conn.fileno()] = b""
                ep.register(conn.fileno(), select.EPOLLIN)
                continue
            conn = conns[fd]
            data = conn.recv(65536)
            if not data:
                ep.unregister(fd)
                conns.pop(fd).close()
                continue
            requests, bufs[fd] = _requests(bufs[fd] + data)
            for is_get, body in requests:
                if is_get:
                    conn.sendall(HEAD)
                    watchers.append(fd)
                    continue
                frame = _frame(body)
                for w in watchers:
                    os.write(w, frame)
                conn.sendall(REPLY)


if __name__ == "__main__":
    {"trio": serve_trio, "epoll": serve_epoll}[sys.argv[1]]()
