"""bench/_floor_server.py, the watch benchmark's floor: on both loops a GET becomes a
watcher (a chunked head and ``caught-up``), and a write's body reaches every watcher as
one chunk-framed SSE frame before the writer gets its ``200``."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.support.bench import BENCH


def _read_until(sock: socket.socket, marker: bytes) -> bytes:
    buf = b""
    while marker not in buf:
        chunk = sock.recv(65536)
        assert chunk, f"closed before {marker!r}: {buf!r}"
        buf += chunk
    return buf


@pytest.mark.parametrize("loop", ["trio", "epoll"])
def test_a_write_reaches_every_watcher_then_the_writer(loop: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, str(BENCH / "_floor_server.py"), loop], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        watchers = []
        for _ in range(2):
            w = socket.create_connection(("127.0.0.1", port), timeout=10)
            w.sendall(b"GET /v0/watch/x HTTP/1.1\r\nHost: b\r\n\r\n")
            head = _read_until(w, b"caught-up\n\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 OK\r\n")
            assert b"transfer-encoding: chunked" in head
            watchers.append(w)
        body = b'{"records":[{"data":{"stamp":42}}]}'
        writer = socket.create_connection(("127.0.0.1", port), timeout=10)
        writer.sendall(
            b"POST /v0/topics/t HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        reply = _read_until(writer, b"{}")
        assert reply.startswith(b"HTTP/1.1 200 OK\r\n")
        frame = b"data: %s\n\n" % body
        for w in watchers:
            assert _read_until(w, b"\n\n\r\n") == b"%x\r\n%s\r\n" % (len(frame), frame)
    finally:
        proc.kill()
        proc.wait(10)
