"""Clients that hold a connection without finishing a request (issue 14, cases 2, 4, 7).

The server reads a request head within ``TOPICS_HTTP_HEAD_TIMEOUT_MS`` and its body within
``TOPICS_HTTP_BODY_TIMEOUT_MS`` (the conftest's server sets both to 1 s), refuses an
unauthorized write at its head instead of reading a body it will throw away, and keeps
serving its real clients while hundreds of idle connections sit on it.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import time

import pytest

from .conftest import (
    BODY_TIMEOUT_MS,
    HEAD_TIMEOUT_MS,
    KEEP_ALIVE_MS,
    KEY,
    SLACK_S,
    Target,
    connect,
    read_head,
    read_until_closed,
)

pytestmark = pytest.mark.slow

HEAD = (
    "POST /v0/topics/hostile-slow HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
    f"Authorization: Bearer {KEY}\r\nContent-Length: 100\r\n\r\n"
).encode()


def _closed_within(sock: socket.socket, deadline_s: float) -> tuple[float, bytes, bool]:
    """Wait for the server to close; ``(seconds waited, bytes sent meanwhile, closed)``."""
    t0 = time.monotonic()
    data, closed = read_until_closed(sock, deadline_s + SLACK_S)
    return time.monotonic() - t0, data, closed


def _assert_timed_out(data: bytes, closed: bool, waited: float, deadline_s: float) -> None:
    assert closed, f"still open {waited:.1f} s after a {deadline_s:.1f} s deadline"
    assert data == b"" or data.startswith(b"HTTP/1.1 408 "), data[:200]


@pytest.mark.parametrize("sent", [b"P", HEAD[:40]], ids=["one-byte", "half-head"])
def test_a_head_that_never_ends_is_closed_at_the_head_deadline(target: Target, sent: bytes) -> None:
    assert target.server is not None
    with connect(target.server) as sock:
        sock.sendall(sent)
        waited, data, closed = _closed_within(sock, HEAD_TIMEOUT_MS / 1000)
    _assert_timed_out(data, closed, waited, HEAD_TIMEOUT_MS / 1000)
    target.assert_unharmed()


def test_a_body_that_never_ends_is_closed_at_the_body_deadline(target: Target) -> None:
    assert target.server is not None
    with connect(target.server) as sock:
        sock.sendall(HEAD + b'{"records":[')
        waited, data, closed = _closed_within(sock, BODY_TIMEOUT_MS / 1000)
    _assert_timed_out(data, closed, waited, BODY_TIMEOUT_MS / 1000)
    target.assert_unharmed()


def test_a_head_trickled_a_byte_at_a_time_still_meets_the_head_deadline(
    target: Target,
) -> None:
    """The deadline is for the whole head, not per read: a byte every 200 ms must not keep
    the connection open past it."""
    assert target.server is not None
    deadline_s = HEAD_TIMEOUT_MS / 1000
    with connect(target.server) as sock:
        t0 = time.monotonic()
        closed = False
        for byte in HEAD[:-4]:
            if time.monotonic() - t0 > deadline_s + SLACK_S:
                break
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            _, closed = read_until_closed(sock, 0.2)
            if closed:
                break
        waited = time.monotonic() - t0
    assert closed, f"a trickled head kept its connection {waited:.1f} s"
    target.assert_unharmed()


@pytest.mark.parametrize(
    "auth", ["", "Authorization: Bearer wrong-key\r\n"], ids=["no-key", "wrong-key"]
)
def test_unauthorized_write_is_refused_at_its_head_before_the_body(
    target: Target, auth: str
) -> None:
    assert target.server is not None
    head = (
        "POST /v0/topics/hostile-preauth HTTP/1.1\r\nHost: t\r\n"
        f"Content-Type: application/json\r\n{auth}Content-Length: 1048575\r\n\r\n"
    ).encode()
    with connect(target.server) as sock:
        sock.sendall(head + b'{"records":[')
        status, data = read_head(sock, 3.0)
        assert status == 401, f"no 401 while the body is unsent: {data[:200]!r}"
        # What follows may be the connection closing (it cannot be reused: the body was
        # never read) or kept open for the body; either way the server must not wait long.
        with contextlib.suppress(OSError):
            sock.sendall(b"x" * 65536)
    target.assert_unharmed()


def _idle_sockets(target: Target, count: int) -> list[socket.socket]:
    assert target.server is not None
    return [connect(target.server) for _ in range(count)]


def _wait_all_closed(socks: list[socket.socket], timeout: float) -> int:
    """How many of ``socks`` are still open after ``timeout`` s."""
    open_ = set(socks)
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        for sock in socks:
            sock.setblocking(False)
            sel.register(sock, selectors.EVENT_READ)
        while open_ and (left := deadline - time.monotonic()) > 0:
            for key, _ in sel.select(left):
                ready = key.fileobj
                assert isinstance(ready, socket.socket)
                try:
                    data = ready.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(ready)
                    open_.discard(ready)
    return len(open_)


def test_idle_connection_flood_neither_starves_writers_nor_stays_forever(
    target: Target,
) -> None:
    assert target.server is not None
    topic = "hostile-flood"
    socks = _idle_sockets(target, 300)
    try:
        t0 = time.monotonic()
        with target.client() as http:
            for i in range(20):
                r = http.post(f"/v0/topics/{topic}", json={"records": [{"data": i}]})
                assert r.status_code in (200, 201), r.text
        assert time.monotonic() - t0 < 5.0, "writes stalled behind the idle flood"
        deadline = max(HEAD_TIMEOUT_MS, KEEP_ALIVE_MS) / 1000 + SLACK_S
        still_open = _wait_all_closed(socks, deadline - (time.monotonic() - t0))
        assert still_open == 0, f"{still_open} of 300 idle connections open after {deadline} s"
    finally:
        for s in socks:
            s.close()
    target.assert_unharmed(own_topics=(topic,))
