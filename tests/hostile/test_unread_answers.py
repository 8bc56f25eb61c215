"""A client that pipelines requests and never reads an answer (issue 15: every connection
owner must apply back-pressure, not buffer).

The lane serves a connection's requests one at a time and writes each answer before it
reads the next head; hypercorn's h11 pauses at a pipelined request until the answer before
it is sent. Either way, once the client's receive buffer and the kernel's are full, the
server stops reading that connection, so what a client can push is bounded by the kernel's
buffers, the server's memory does not grow with it, and every other client is served.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest

from .conftest import KEY, SEED_TOPIC, Target, health_status

pytestmark = pytest.mark.slow

#: Far more than one loopback connection's kernel buffers hold (~3 MB here).
FLOOD_BYTES = 32 * 1024 * 1024
STOPPED_BY = 12 * 1024 * 1024


def _request() -> bytes:
    body = b'{"include_tags":true}'
    return (
        f"POST /v0/topics/{SEED_TOPIC}/diff HTTP/1.1\r\nHost: t\r\n"
        f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def test_pipelined_requests_whose_answers_are_never_read(target: Target) -> None:
    assert target.server is not None
    host, port = target.server.base_url.removeprefix("http://").rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host.strip("[]"), int(port)))
    try:
        one = _request()
        flood = one * (FLOOD_BYTES // len(one))
        rss_before = target.rss_kib()
        sock.settimeout(1.0)  # a send blocked this long: the server stopped reading
        sent = 0
        deadline = time.monotonic() + 15.0
        try:
            while sent < len(flood) and time.monotonic() < deadline:
                sent += sock.send(flood[sent : sent + 65536])
        except TimeoutError:
            pass
        assert sent < STOPPED_BY, f"the server read {sent} bytes it could not answer"
        t0 = time.monotonic()
        assert health_status(target.server) == 200
        assert time.monotonic() - t0 < 5.0, "another client waited behind the flood"
        grown_kib = target.rss_kib() - rss_before
        assert grown_kib < 6 * 1024, f"server RSS grew {grown_kib} KiB"
    finally:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    target.assert_unharmed()
