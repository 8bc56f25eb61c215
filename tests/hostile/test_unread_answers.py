"""A client that pipelines requests, or WebSocket publishes, and never reads an answer
(issue 15: every connection owner must apply back-pressure, not buffer).

The lane serves a connection's requests one at a time and writes each answer before it
reads the next head; hypercorn's h11 pauses at a pipelined request until the answer before
it is sent. Either way, once the client's receive buffer and the kernel's are full, the
server stops reading that connection, so what a client can push is bounded by the kernel's
buffers, the server's memory does not grow with it, and every other client is served.
"""

from __future__ import annotations

import json
import socket
import time

import pytest
import wsproto.events

from .conftest import (
    FLOOD_BYTES,
    KEY,
    SEED_TOPIC,
    STOPPED_BY,
    Target,
    connect,
    health_status,
    open_ws,
    reset,
    send_until_stalled,
)

pytestmark = pytest.mark.slow


def _request() -> bytes:
    body = b'{"include_tags":true}'
    return (
        f"POST /v0/topics/{SEED_TOPIC}/diff HTTP/1.1\r\nHost: t\r\n"
        f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def _assert_flood_is_bounded(target: Target, sock: socket.socket, message: bytes) -> None:
    """Send ``message`` over and over, never reading an answer: the server stops reading
    within the kernel's buffers, serves another client meanwhile and keeps its memory."""
    assert target.server is not None
    try:
        rss_before = target.rss_kib()
        sent = send_until_stalled(sock, message * (FLOOD_BYTES // len(message)))
        assert sent < STOPPED_BY, f"the server read {sent} bytes it could not answer"
        t0 = time.monotonic()
        assert health_status(target.server) == 200
        assert time.monotonic() - t0 < 5.0, "another client waited behind the flood"
        grown_kib = target.rss_kib() - rss_before
        assert grown_kib < 6 * 1024, f"server RSS grew {grown_kib} KiB"
    finally:
        reset(sock)


def test_pipelined_requests_whose_answers_are_never_read(target: Target) -> None:
    assert target.server is not None
    _assert_flood_is_bounded(target, connect(target.server, rcvbuf=4096), _request())
    target.assert_unharmed()


def test_websocket_publishes_whose_acks_are_never_read(target: Target) -> None:
    """The WebSocket twin: publishes sent as fast as the socket takes them, no ack ever
    read. A publish is acked before the next command is read, so the server stops reading
    once the acks back up."""
    assert target.server is not None
    topic = "hostile-ws-flood"
    with target.client() as http:
        http.delete(f"/v0/topics/{topic}")
    sock, client = open_ws(target.server, rcvbuf=4096)
    publish = json.dumps({"op": "publish", "topic": topic, "records": [{"data": 1}]})
    _assert_flood_is_bounded(target, sock, client.send(wsproto.events.TextMessage(publish)))
    target.assert_unharmed(own_topics=(topic,))
