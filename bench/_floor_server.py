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

Two more kinds measure what work costs on top of ``trio`` (``--floor-kinds``):
``trio-engine`` does the least an engine must before the frame leaves (parse the body's
JSON, check its records, give each a seq, keep the last few thousand in a list, render a
``record`` frame with a base64 cursor ``id:``: about ten calls, most in C), and
``trio-calls`` adds ``FLOOR_CALLS`` (80) distinct small Python functions, each reading
an object of a class of its own, which is what a longer path touches once more after
every idle gap.
"""

from __future__ import annotations

import base64
import contextlib
import os
import select
import socket
import sys
from collections.abc import Callable
from typing import Any

import ujson

KINDS = ("trio", "epoll", "trio-engine", "trio-calls")


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


class _Log:
    """The ``trio-engine`` kind's topic: a head and the last records."""

    def __init__(self) -> None:
        self.head = 0
        self.records: list[dict[str, Any]] = []

    def frame(self, body: bytes) -> bytes:
        doc = ujson.loads(body)
        records = doc.get("records") if isinstance(doc, dict) else None
        if not isinstance(records, list) or not records:
            raise ValueError("a write needs a non-empty records array")
        first = self.head + 1
        batch = []
        for record in records:
            if not isinstance(record, dict) or "data" not in record:
                raise ValueError("a record needs data")
            self.head += 1
            batch.append({"$seq": self.head, "data": record["data"]})
        self.records += batch
        if len(self.records) > 10_000:
            del self.records[:5_000]
        cursor = base64.urlsafe_b64encode(ujson.dumps({"floor": self.head}).encode())
        frame = {
            "topic": "floor",
            "records": batch,
            "from_seq": first,
            "to_seq": self.head,
            "head_seq": self.head,
        }
        return _chunk(
            b"id: %s\nevent: record\ndata: %s\n\n"
            % (cursor.rstrip(b"="), ujson.dumps(frame).encode())
        )


def _distinct_calls(n: int) -> list[tuple[Callable[[Any, list[int]], int], object]]:
    """``n`` functions, each with its own code object and an instance of its own class."""
    source = []
    for i in range(n):
        source.append(
            f"class C{i}:\n    def __init__(self):\n        self.a{i} = {i}\n"
            f"        self.b = [{i}]\n"
        )
        source.append(
            f"def f{i}(o, acc):\n    if o.a{i} == {i} and o.b:\n        acc.append(o.b[0])\n"
            "    return len(acc)\n"
        )
    namespace: dict[str, Any] = {}
    exec("\n".join(source), namespace)
    pairs = []
    for i in range(n):
        spacer = [bytearray(64) for _ in range(50)]  # not all on the same few pages
        pairs.append((namespace[f"f{i}"], namespace[f"C{i}"]()))
        spacer.clear()
    return pairs


def serve_trio(kind: str = "trio") -> None:
    import trio

    watchers: list[int] = []
    log = _Log()
    calls = (
        _distinct_calls(int(os.environ.get("FLOOR_CALLS", "80"))) if kind == "trio-calls" else []
    )

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
                frame = _frame(body) if kind == "trio" else log.frame(body)
                acc: list[int] = []
                for call, obj in calls:
                    call(obj, acc)
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
    kind = sys.argv[1]
    if kind not in KINDS:
        raise SystemExit(f"usage: _floor_server.py {'|'.join(KINDS)}")
    if kind == "epoll":
        serve_epoll()
    else:
        serve_trio(kind)
