"""A client that pipelines requests, or WebSocket publishes, and never reads an answer
(issue 15: every connection owner must apply back-pressure, not buffer).

The lane serves a connection's requests one at a time and writes each answer before it
reads the next head; hypercorn's h11 pauses at a pipelined request until the answer before
it is sent. Either way, once the client's receive buffer and the kernel's are full, the
server stops reading that connection, so what a client can push is bounded by the kernel's
buffers, the server's memory does not grow with it, and every other client is served.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import time

import pytest
import wsproto.events

from .conftest import KEY, SEED_TOPIC, Target, connect, health_status, open_ws

pytestmark = pytest.mark.slow

#: Far more than one loopback connection's kernel buffers hold (~3 MB here).
FLOOD_BYTES = 32 * 1024 * 1024
STOPPED_BY = 12 * 1024 * 1024


def _send_until_stalled(sock: socket.socket, data: bytes) -> int:
    """Send until ``data`` is gone, one send waits 1 s (the server stopped reading and the
    kernel's buffers are full) or 15 s pass; the bytes sent."""
    sock.settimeout(1.0)
    sent = 0
    deadline = time.monotonic() + 15.0
    with contextlib.suppress(TimeoutError):
        while sent < len(data) and time.monotonic() < deadline:
            sent += sock.send(data[sent : sent + 65536])
    return sent


def _request() -> bytes:
    body = b'{"include_tags":true}'
    return (
        f"POST /v0/topics/{SEED_TOPIC}/diff HTTP/1.1\r\nHost: t\r\n"
        f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def test_pipelined_requests_whose_answers_are_never_read(target: Target) -> None:
    assert target.server is not None
    sock = connect(target.server, rcvbuf=4096)
    try:
        one = _request()
        flood = one * (FLOOD_BYTES // len(one))
        rss_before = target.rss_kib()
        sent = _send_until_stalled(sock, flood)
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


def test_websocket_publishes_whose_acks_are_never_read(target: Target) -> None:
    """The WebSocket twin: publishes sent as fast as the socket takes them, no ack ever
    read. A publish is acked before the next command is read, so the server stops reading
    once the acks back up; the client's sends stall within the kernel's buffers."""
    assert target.server is not None
    topic = "hostile-ws-flood"
    with target.client() as http:
        http.delete(f"/v0/topics/{topic}")
    sock, client = open_ws(target.server, rcvbuf=4096)
    try:
        publish = json.dumps({"op": "publish", "topic": topic, "records": [{"data": 1}]})
        frame = client.send(wsproto.events.TextMessage(publish))
        flood = frame * (FLOOD_BYTES // len(frame))
        rss_before = target.rss_kib()
        sent = _send_until_stalled(sock, flood)
        assert sent < STOPPED_BY, f"the server read {sent} bytes it could not ack"
        t0 = time.monotonic()
        assert health_status(target.server) == 200
        assert time.monotonic() - t0 < 5.0, "another client waited behind the flood"
        grown_kib = target.rss_kib() - rss_before
        assert grown_kib < 6 * 1024, f"server RSS grew {grown_kib} KiB"
    finally:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    target.assert_unharmed(own_topics=(topic,))
