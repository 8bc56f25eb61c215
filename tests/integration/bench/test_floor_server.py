"""bench/_floor_server.py, the watch benchmark's floor: in every kind a GET becomes a
watcher (a chunked head and ``caught-up``), and a write reaches every watcher as one
chunk-framed SSE frame before the writer gets its ``200``: the body itself from the bare
relays, a ``record`` frame with seqs and a cursor id from the kinds that do an engine's
least work."""

from __future__ import annotations

import base64
import json
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


def _expected(kind: str, body: bytes, write: int) -> bytes:
    if kind in ("trio", "epoll"):
        return b"data: %s\n\n" % body
    seq = write + 1
    cursor = base64.urlsafe_b64encode(b'{"floor":%d}' % seq).rstrip(b"=")
    frame = {"topic": "floor", "records": [{"$seq": seq, "data": {"stamp": 42}}]}
    frame.update(from_seq=seq, to_seq=seq, head_seq=seq)
    data = json.dumps(frame, separators=(",", ":")).encode()
    return b"id: %s\nevent: record\ndata: %s\n\n" % (cursor, data)


@pytest.mark.parametrize("kind", ["trio", "epoll", "trio-engine", "trio-calls"])
def test_a_write_reaches_every_watcher_then_the_writer(kind: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, str(BENCH / "_floor_server.py"), kind], stdout=subprocess.PIPE, text=True
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
        for write in range(2):
            writer.sendall(
                b"POST /v0/topics/t HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            reply = _read_until(writer, b"{}")
            assert reply.startswith(b"HTTP/1.1 200 OK\r\n")
            frame = _expected(kind, body, write)
            for w in watchers:
                assert _read_until(w, b"\n\n\r\n") == b"%x\r\n%s\r\n" % (len(frame), frame)
    finally:
        proc.kill()
        proc.wait(10)
