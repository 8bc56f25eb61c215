"""The fast lane on the real server: hot POSTs in the lane, everything else handed to
hypercorn on the same connection (frontends/http/lane.py rule 3), raw sockets throughout.

Every answer says who served it (``X-Topics-Path: lane`` or ``hypercorn``), and the tests
check it: with ``TOPICS_HTTP_LANE=0`` in the environment they fail.
"""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable

import pytest
import ujson

from tests.support.http1 import take_response
from tests.support.server import MODE_CHECK_TOPIC, SERVER_MODES, assert_serves_as

from .conftest import ServerProcess

pytestmark = pytest.mark.slow

LANE = b"lane"
HYPERCORN = b"hypercorn"


class Raw:
    """One keep-alive connection speaking bytes, reading Content-Length/chunked answers."""

    def __init__(self, server: ServerProcess) -> None:
        host, port = server.base_url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=20)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        self.buf += chunk

    def response(self) -> tuple[int, dict[bytes, bytes], bytes]:
        while (response := take_response(self.buf)) is None:
            self._fill()
        status, headers, body, self.buf = response
        return int(status.split(b" ")[1]), headers, body

    def at_eof(self) -> bool:
        self.sock.settimeout(10)
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Raw:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def post(path: str, body: object, extra: str = "", version: str = "1.1") -> bytes:
    data = ujson.dumps(body).encode()
    return (
        f"POST {path} HTTP/{version}\r\nHost: t\r\nContent-Type: application/json\r\n{extra}"
        f"Content-Length: {len(data)}\r\n\r\n"
    ).encode() + data


def get(path: str, extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: t\r\n{extra}\r\n".encode()


def test_lane_and_hypercorn_take_turns_on_one_connection(server: ServerProcess) -> None:
    with Raw(server) as conn:
        conn.send(post("/v0/topics/lane-a", {"records": [{"data": {"i": 1}}]}))
        status, headers, body = conn.response()
        assert status == 201
        assert headers[b"x-topics-path"] == LANE
        assert ujson.loads(body)["seqs"] == [1]
        assert len(headers[b"x-request-id"]) == 36
        assert b"date" in headers
        # Pipelined: a lane write, a GET (hypercorn's from here on), then another write.
        conn.send(
            post("/v0/topics/lane-a", {"records": [{"data": {"i": 2}}]})
            + get("/v0/topics/lane-a")
            + post("/v0/topics/lane-a/diff", {"from_seq": 0})
        )
        status, headers, body = conn.response()
        assert ujson.loads(body)["seqs"] == [2]
        assert headers[b"x-topics-path"] == LANE
        status, headers, body = conn.response()
        assert status == 200
        assert headers[b"x-topics-path"] == HYPERCORN
        assert ujson.loads(body)["head_seq"] == 2
        status, headers, body = conn.response()
        assert [r["data"]["i"] for r in ujson.loads(body)["records"]] == [1, 2]
        assert headers[b"x-topics-path"] == HYPERCORN  # handed over for good (rule 3)


def test_lane_answers_carry_the_contract_errors(server: ServerProcess) -> None:
    with Raw(server) as conn:
        conn.send(post("/v0/topics/lane-b", {"records": "nope"}))
        status, headers, body = conn.response()
        error = ujson.loads(body)["error"]
        assert status == 400
        assert headers[b"x-topics-path"] == LANE
        assert error["code"] == "invalid_request"
        assert error["request_id"]
        raw = b"{not json"
        conn.send(
            b"POST /v0/topics/lane-b HTTP/1.1\r\nHost: t\r\nContent-Type: text/plain\r\n"
            b"Content-Length: %d\r\n\r\n%b" % (len(raw), raw)
        )
        status, headers, _ = conn.response()
        assert status == 415
        assert headers[b"x-topics-path"] == LANE
        conn.send(post("/v0/topics/lane-b", {"records": [{"data": 1}]}, "X-Request-ID: mine-1\r\n"))
        status, headers, _ = conn.response()
        assert status == 201
        assert headers[b"x-request-id"] == b"mine-1"
        assert headers[b"x-topics-path"] == LANE


_ONE = b'{"records":[{"data":{"i":1}}]}'
_JSON = b"Host: t\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize(
    "request_bytes",
    [
        # a chunked request body: hypercorn's h11 reads it
        b"POST /v0/topics/lane-c HTTP/1.1\r\n"
        + _JSON
        + b"Transfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n%b\r\n%x\r\n%b\r\n0\r\n\r\n" % (10, _ONE[:10], len(_ONE) - 10, _ONE[10:]),
        b"POST /v0/topics/lane-c HTTP/1.0\r\n"
        + _JSON
        + b"Content-Length: %d\r\n\r\n%b" % (len(_ONE), _ONE),
        b"POST /v0/topics/lane%2Dc HTTP/1.1\r\n"
        + _JSON
        + b"Content-Length: %d\r\n\r\n%b" % (len(_ONE), _ONE),
    ],
    ids=["chunked", "http10", "percent"],
)
def test_what_the_lane_refuses_hypercorn_serves(
    server: ServerProcess, request_bytes: bytes
) -> None:
    with Raw(server) as conn:
        conn.send(request_bytes)
        status, headers, body = conn.response()
        assert status in (200, 201), body
        assert ujson.loads(body)["topic"] == "lane-c"
        assert headers[b"x-topics-path"] == HYPERCORN


def test_a_malformed_head_gets_hypercorns_400(server: ServerProcess) -> None:
    with Raw(server) as conn:
        conn.send(
            b"POST /v0/topics/x HTTP/1.1\r\nHost: t\r\nBad Header: 1\r\nContent-Length: 0\r\n\r\n"
        )
        assert conn.response()[0] == 400


def test_bodies_over_the_limit_are_refused_before_they_arrive(
    start_server: Callable[..., ServerProcess],
) -> None:
    small = start_server({"TOPICS_MAX_BODY_BYTES": "65536"})
    for size in (65537, 9 << 20):  # under and over the lane's own cap
        with Raw(small) as conn:
            conn.send(
                b"POST /v0/topics/lane-d HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % size
            )
            status, _, body = conn.response()
            assert status == 413
            assert ujson.loads(body)["error"]["code"] == "payload_too_large"


def test_a_watch_created_in_the_lane_streams_on_the_same_connection(server: ServerProcess) -> None:
    with Raw(server) as conn:
        conn.send(post("/v0/topics/lane-w", {"records": [{"data": {"i": 1}}]}))
        assert conn.response()[0] in (200, 201)
        conn.send(post("/v0/watch", {"topics": {"lane-w": {"from_seq": 0}}}))
        status, _, body = conn.response()
        assert status == 200
        wid = ujson.loads(body)["wid"]
        conn.send(get(f"/v0/watch/{wid}", "Accept: text/event-stream\r\n"))
        while b"\r\n\r\n" not in conn.buf:
            conn._fill()
        head, _, conn.buf = conn.buf.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        assert b"text/event-stream" in head
        assert b"\r\nx-topics-path: lane\r\n" in head
        deadline = time.monotonic() + 20
        while b'"i":1' not in conn.buf and time.monotonic() < deadline:
            conn._fill()
        assert b"event: record" in conn.buf
        assert b'"i":1' in conn.buf


def test_a_long_poll_in_the_lane_is_woken_by_a_write(server: ServerProcess) -> None:
    with Raw(server) as waiter, Raw(server) as writer:
        writer.send(post("/v0/topics/lane-p", {"records": [{"data": {"i": 0}}]}))
        assert writer.response()[0] in (200, 201)
        waiter.send(post("/v0/topics/lane-p/diff", {"from_seq": 1, "wait_ms": 10_000}))
        time.sleep(0.2)
        writer.send(post("/v0/topics/lane-p", {"records": [{"data": {"i": 1}}]}))
        assert writer.response()[0] in (200, 201)
        status, headers, body = waiter.response()
        assert status == 200
        assert headers[b"x-topics-path"] == LANE
        assert [r["$seq"] for r in ujson.loads(body)["records"]] == [2]
        # A long poll whose client goes away ends without an answer; the server goes on.
        waiter.send(post("/v0/topics/lane-p/diff", {"from_seq": 2, "wait_ms": 10_000}))
        time.sleep(0.2)
        waiter.close()
        writer.send(post("/v0/topics/lane-p/diff", {"from_seq": 0}))
        assert writer.response()[0] in (200, 201)


def test_without_the_lane_the_same_requests_get_the_same_answers(
    start_server: Callable[..., ServerProcess],
) -> None:
    plain = start_server({"TOPICS_HTTP_LANE": "0"})
    with Raw(plain) as conn:
        conn.send(post("/v0/topics/lane-e", {"records": [{"data": {"i": 1}}]}))
        status, headers, body = conn.response()
        assert status == 201
        assert ujson.loads(body)["seqs"] == [1]
        assert headers[b"x-topics-path"] == HYPERCORN
        conn.send(post("/v0/topics/lane-e", {"records": "nope"}))
        assert conn.response()[0] == 400


def _direct_streams(server: ServerProcess) -> int:
    with server.client() as http:
        metrics = http.get("/v0/metrics", headers={"Accept": "application/json"})
        return int(metrics.json()["topics_sse_direct_streams"])


def _open_watch(conn: Raw) -> bytes:
    """Create a watch of :data:`MODE_CHECK_TOPIC` from its start on ``conn``, open its
    stream there and read up to the first record frame; the stream's response head."""
    conn.send(post("/v0/watch", {"topics": {MODE_CHECK_TOPIC: {"from_seq": 0}}}))
    status, _, body = conn.response()
    assert status == 200, body
    conn.send(get(f"/v0/watch/{ujson.loads(body)['wid']}", "Accept: text/event-stream\r\n"))
    while b"event: record" not in conn.buf:
        conn._fill()
    return conn.buf.partition(b"\r\n\r\n")[0]


def test_direct_stream_writes_happen_only_on_connections_the_lane_owns(
    start_server: Callable[..., ServerProcess],
) -> None:
    """``TOPICS_SSE_DIRECT`` acts on lane connections only: a stream on a connection
    handed over to hypercorn goes through ASGI with the switch on, as every stream does
    with the lane off (which the "hypercorn" server mode checks, ``assert_serves_as``)."""
    own = start_server({"TOPICS_SSE_DIRECT": "1"})
    assert_serves_as(own, SERVER_MODES["lane"])  # one direct stream, opened and closed
    deadline = time.monotonic() + 10
    while _direct_streams(own) and time.monotonic() < deadline:
        time.sleep(0.05)  # the server notices the client went away
    with Raw(own) as handed_over:
        handed_over.send(get("/v0/health"))  # a GET the lane hands over
        assert handed_over.response()[1][b"x-topics-path"] == HYPERCORN
        assert b"\r\nx-topics-path: hypercorn\r\n" in _open_watch(handed_over)
        assert _direct_streams(own) == 0
        with Raw(own) as in_lane:
            assert b"\r\nx-topics-path: lane\r\n" in _open_watch(in_lane)
            assert _direct_streams(own) == 1


def test_shutdown_closes_idle_lane_connections_and_exits_zero(
    start_server: Callable[..., ServerProcess],
) -> None:
    own = start_server()
    with Raw(own) as conn:
        conn.send(post("/v0/topics/lane-f", {"records": [{"data": {"i": 1}}]}))
        status, headers, _ = conn.response()
        assert status in (200, 201)
        assert headers[b"x-topics-path"] == LANE  # the idle connection is the lane's
        started = time.monotonic()
        own.proc.send_signal(signal.SIGTERM)
        assert conn.at_eof()
        assert own.proc.wait(30) == 0
        assert time.monotonic() - started < 20
