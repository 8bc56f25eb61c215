"""The fast lane (frontends/http/lane.py) over a socketpair, with toy ASGI apps.

What the lane serves and how: rule 2's refusals, keep-alive limits, pipelining, bodies
split across reads, streamed bodies, a failing app, the long-poll disconnect, shutdown and
the bytes it hands over to hypercorn. The real server with hypercorn behind the lane is
tests/integration/test_http_lane.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing
import ujson

from tests.support.http1 import take_response
from topics.frontends.http.lane import MAX_BODY, MAX_HEAD, Lane, LaneConnection, parse_head
from topics.frontends.http.requests import BODY_BUFFERED, ROUTED

Message = dict[str, Any]

GOOD = b"POST /v0/topics/t HTTP/1.1\r\nHost: x\r\nContent-Length: 2"


def request(body: bytes = b"{}", extra: bytes = b"", path: bytes = b"/v0/topics/t") -> bytes:
    return (
        b"POST %b HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%b"
        b"Content-Length: %d\r\n\r\n%b" % (path, extra, len(body), body)
    )


class Echo:
    """Answers every request with its body (and records the scopes it saw)."""

    def __init__(self) -> None:
        self.scopes: list[dict[str, Any]] = []

    async def __call__(
        self,
        scope: dict[str, Any],
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        self.scopes.append(scope)
        message = await receive()
        body = message["body"]
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"1")]})
        await send({"type": "http.response.body", "body": body})


def make_lane(app: Any, **kwargs: Any) -> Lane:
    settings: dict[str, Any] = {
        "keep_alive_timeout": 5.0,
        "read_timeout": None,
        "max_requests": 1000,
    }
    settings.update(kwargs)
    return Lane(
        app,
        lambda method, path: (
            path.startswith("/v0/topics/") and (method == "POST" or path.endswith("/s"))
        ),
        **settings,
    )


class Peer:
    """The client end of the socketpair, reading whole responses."""

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self.stream = trio.SocketStream(sock)
        self.buf = b""

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def response(self) -> tuple[bytes, dict[bytes, bytes], bytes]:
        """One response with a Content-Length or chunked body: (status line, headers, body)."""
        while (response := take_response(self.buf)) is None:
            await self._more()
        status, headers, body, self.buf = response
        return status, headers, body

    async def closed(self) -> bool:
        """True when the server closed its end (after any unread bytes)."""
        with trio.fail_after(5):
            while True:
                data = await self.stream.receive_some(65536)
                if not data:
                    return True
                self.buf += data

    async def _more(self) -> None:
        with trio.fail_after(5):
            data = await self.stream.receive_some(65536)
        assert data, "the lane closed the connection mid-response"
        self.buf += data


async def serve_pair(lane: Lane) -> tuple[LaneConnection, Peer]:
    a, b = trio.socket.socketpair()
    return LaneConnection(lane, trio.SocketStream(a)), Peer(b)


async def serve(conn: LaneConnection) -> None:
    """What serve.py does with a connection the lane is done with (and keeps none of)."""
    if await conn.run() is None:
        await conn.stream.aclose()


# -- parse_head (rule 2) ---------------------------------------------------------------------


def test_a_plain_post_is_accepted_with_lowercased_headers() -> None:
    parsed = parse_head(GOOD + b"\r\nX-Request-ID: abc\r\nConnection: keep-alive")
    assert parsed is not None
    method, path, raw_path, query, headers, length, close = parsed
    assert (method, path, raw_path, query, length, close) == (
        "POST",
        "/v0/topics/t",
        b"/v0/topics/t",
        b"",
        2,
        False,
    )
    assert (b"x-request-id", b"abc") in headers
    assert (b"host", b"x") in headers


def test_the_query_string_is_split_off() -> None:
    parsed = parse_head(b"POST /v0/topics/t?return_seqs=false HTTP/1.1\r\nHost: x")
    assert parsed is not None
    assert parsed[1] == "/v0/topics/t"
    assert parsed[3] == b"return_seqs=false"
    assert parsed[5] == 0


def test_connection_close_is_seen_among_tokens() -> None:
    parsed = parse_head(GOOD + b"\r\nConnection: TE, Close")
    assert parsed is not None
    assert parsed[6] is True


def test_a_get_without_a_body_is_accepted() -> None:
    parsed = parse_head(b"GET /v0/watch/w1 HTTP/1.1\r\nHost: x\r\nContent-Length: 0")
    assert parsed is not None
    assert parsed[:2] == ("GET", "/v0/watch/w1")


@pytest.mark.parametrize(
    "head",
    [
        b"PUT /v0/topics/t HTTP/1.1\r\nHost: x",  # neither POST nor GET
        b"HEAD /v0/topics/t HTTP/1.1\r\nHost: x",
        b"GET /v0/topics/t HTTP/1.1\r\nHost: x\r\nContent-Length: 1",  # a GET with a body
        b"POST /v0/topics/t HTTP/1.0\r\nHost: x\r\nContent-Length: 2",  # HTTP/1.0
        b"POST /v0/topics/t HTTP/1.1 extra\r\nHost: x",  # a malformed request line
        b"POST /v0/topics/%74 HTTP/1.1\r\nHost: x",  # percent-encoding
        b"POST http://x/v0/topics/t HTTP/1.1\r\nHost: x",  # absolute form
        b"POST /v0/topics/t\x80 HTTP/1.1\r\nHost: x",  # a non-ASCII target
        b"POST /v0/topics/t HTTP/1.1\r\nContent-Length: 2",  # no Host
        GOOD + b"\r\nHost: y",  # two Hosts
        b"POST /v0/topics/t HTTP/1.1\r\nHost: x\r\nContent-Length: +2",
        b"POST /v0/topics/t HTTP/1.1\r\nHost: x\r\nContent-Length: 0x2",
        b"POST /v0/topics/t HTTP/1.1\r\nHost: x\r\nContent-Length: %d" % (MAX_BODY + 1),
        b"POST /v0/topics/t HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked",
        GOOD + b"\r\nExpect: 100-continue",
        GOOD + b"\r\nUpgrade: websocket",
        GOOD + b"\r\nConnection: Upgrade",
        GOOD + b"\r\nBad Name: x",  # not a token
        GOOD + b"\r\nX-A: a\x00b",  # a control byte
        GOOD + b"\r\nX-A: a\rb",  # a bare CR
        GOOD + b"\r\nX-A: a\nb",  # a bare LF
        GOOD + b"\r\nno-colon",
    ],
)
def test_anything_unusual_goes_to_hypercorn(head: bytes) -> None:
    assert parse_head(head) is None


@pytest.mark.parametrize(
    "head",
    [
        GOOD + b"\r\nContent-Length: 2",  # two lengths
        GOOD + b"\r\nContent-Length: 5",  # two different lengths
        GOOD + b"\r\nTransfer-Encoding: chunked",  # a length beside chunked
    ],
)
def test_conflicting_framing_is_marked_for_the_app_to_refuse(head: bytes) -> None:
    """Not handed to h11 (which would pick one reading): length -1, no body, close."""
    parsed = parse_head(head)
    assert parsed is not None
    assert parsed[5] == -1
    assert parsed[6] is True


def test_an_obs_folded_head_is_marked_for_the_app_to_refuse() -> None:
    """h11 would unfold it; the lane hands it to the dispatcher instead (length -2)."""
    parsed = parse_head(GOOD + b"\r\nX-A: a\r\n folded")
    assert parsed is not None
    assert parsed[5] == -2
    assert parsed[6] is True
    assert parse_head(b"POST /v0/topics/t HTTP/1.1\r\n Host: x") is None  # nothing to fold


async def test_conflicting_framing_reaches_the_app_with_no_body_read() -> None:
    echo = Echo()
    conn, peer = await serve_pair(make_lane(echo))
    smuggled = request(b"{}", b"Transfer-Encoding: chunked\r\n") + b"garbage"
    await peer.send(smuggled)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve, conn)
        _, headers, body = await peer.response()
        assert body == b""  # Echo got an empty body: nothing was read as one
        assert headers[b"connection"] == b"close"
        assert await peer.closed()
    assert len(echo.scopes) == 1


# -- serving -----------------------------------------------------------------------------------


async def test_keep_alive_requests_are_answered_in_order_with_one_write_each() -> None:
    app = Echo()
    conn, peer = await serve_pair(make_lane(app))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve, conn)
        for i in range(3):
            await peer.send(request(b'{"i":%d}' % i))
            status, headers, body = await peer.response()
            assert status == b"HTTP/1.1 200 OK"
            assert body == b'{"i":%d}' % i
            assert headers[b"x-a"] == b"1"
            assert headers[b"content-length"] == b"7"
            assert b"date" in headers
            assert b"connection" not in headers
        await peer.stream.aclose()
    scope = app.scopes[0]
    assert scope["type"] == "http"
    assert scope["method"] == "POST"
    assert scope["http_version"] == "1.1"
    assert scope["path"] == "/v0/topics/t"
    assert scope["query_string"] == b""
    assert (b"content-type", b"application/json") in scope["headers"]


async def test_pipelined_and_byte_by_byte_requests_are_both_served() -> None:
    conn, peer = await serve_pair(make_lane(Echo()))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve, conn)
        await peer.send(request(b"[1]") + request(b"[2]"))
        assert (await peer.response())[2] == b"[1]"
        assert (await peer.response())[2] == b"[2]"
        for byte in request(b'{"slow":true}'):
            await peer.send(bytes([byte]))
        assert (await peer.response())[2] == b'{"slow":true}'
        await peer.stream.aclose()


async def test_the_scope_says_whether_the_body_is_buffered_and_carries_the_verdict() -> None:
    """Rule 6: a body that came with its head is marked ``BODY_BUFFERED`` (the dispatcher
    then sets no body deadline); one still on its way is not; ``accepts``' verdict rides
    along as ``ROUTED`` so the app does not match the route again."""
    app = Echo()
    verdict = ("the route", "t")
    lane = Lane(
        app,
        lambda method, path: verdict if path.startswith("/v0/topics/") else None,
        keep_alive_timeout=5.0,
        read_timeout=None,
        max_requests=1000,
    )
    conn, peer = await serve_pair(lane)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve, conn)
        await peer.send(request(b"[1]"))
        assert (await peer.response())[2] == b"[1]"
        whole = request(b"[2]")
        await peer.send(whole[:-2])
        await trio.testing.wait_all_tasks_blocked()
        await peer.send(whole[-2:])
        assert (await peer.response())[2] == b"[2]"
        await peer.send(request(b""))
        assert (await peer.response())[2] == b""
        await peer.stream.aclose()
    first, split, empty = (scope["extensions"] for scope in app.scopes)
    assert first == {ROUTED: verdict, BODY_BUFFERED: True}
    assert split == {ROUTED: verdict}
    assert empty == {ROUTED: verdict}


async def test_connection_close_is_answered_then_closed() -> None:
    conn, peer = await serve_pair(make_lane(Echo()))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve, conn)
        await peer.send(request(extra=b"Connection: close\r\n"))
        _, headers, _ = await peer.response()
        assert headers[b"connection"] == b"close"
        assert await peer.closed()


async def test_the_last_of_max_requests_says_close() -> None:
    conn, peer = await serve_pair(make_lane(Echo(), max_requests=2))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve, conn)
        await peer.send(request() + request())
        assert b"connection" not in (await peer.response())[1]
        assert (await peer.response())[1][b"connection"] == b"close"
        assert await peer.closed()


async def test_the_first_unaccepted_request_is_handed_over_with_what_follows() -> None:
    conn, peer = await serve_pair(make_lane(Echo()))
    get = b"GET /v0/topics/t HTTP/1.1\r\nHost: x\r\n\r\n"
    result: list[bytes | None] = []

    async def run() -> None:
        result.append(await conn.run())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await peer.send(request(b"[1]") + get + request(b"[2]"))
        assert (await peer.response())[2] == b"[1]"
    assert result == [get + request(b"[2]")]


async def test_unknown_paths_and_oversized_heads_are_handed_over() -> None:
    conn, peer = await serve_pair(make_lane(Echo()))
    other = request(path=b"/v0/watch/abc")
    await peer.send(other)
    assert await conn.run() == other
    conn, peer = await serve_pair(make_lane(Echo()))
    huge = b"POST /v0/topics/t HTTP/1.1\r\nX-Big: " + b"a" * MAX_HEAD
    await peer.send(huge)
    assert await conn.run() == huge


async def test_a_streamed_body_is_sent_chunked() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"ab", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": True})
        await send({"type": "http.response.body", "body": b"cd", "more_body": False})

    conn, peer = await serve_pair(make_lane(app))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve, conn)
        await peer.send(request())
        status, _headers, body = await peer.response()
        assert status == b"HTTP/1.1 201 Created"
        assert body == b"abcd"
        await peer.send(request())  # the connection is still usable
        assert (await peer.response())[2] == b"abcd"
        await peer.stream.aclose()


@pytest.mark.parametrize("failure", ["raises", "silent", "unfinished"])
async def test_an_app_that_fails_gets_a_500_or_a_cut_and_a_closed_connection(failure: str) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        if failure == "raises":
            raise RuntimeError("boom")
        if failure == "unfinished":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"x", "more_body": True})

    conn, peer = await serve_pair(make_lane(app))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve, conn)
        await peer.send(request())
        if failure == "unfinished":
            assert await peer.closed()
            assert peer.buf.endswith(b"1\r\nx\r\n")  # no last chunk: the client sees a cut
        else:
            status, headers, _ = await peer.response()
            assert status.startswith(b"HTTP/1.1 500")
            assert headers[b"connection"] == b"close"
            assert await peer.closed()


async def test_a_second_receive_reports_the_disconnect_and_keeps_pipelined_bytes() -> None:
    seen: list[Message] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        seen.append(await receive())

    conn, peer = await serve_pair(make_lane(app))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve, conn)
        await peer.send(request() + b"POST /v0/topics/t HTTP/1.1\r\n")
        await peer.stream.send_eof()
    assert seen == [{"type": "http.disconnect"}]
    assert conn.buf == b"POST /v0/topics/t HTTP/1.1\r\n"


async def test_idle_connections_time_out_and_close_on_terminate() -> None:
    lane = make_lane(Echo(), keep_alive_timeout=0.05)
    conn, peer = await serve_pair(lane)
    with trio.fail_after(5):
        assert await conn.run() is None  # nothing sent: the keep-alive timeout ended it
    lane = make_lane(Echo())
    conn, peer = await serve_pair(lane)
    async with trio.open_nursery() as nursery:
        result: list[bytes | None] = []

        async def run() -> None:
            result.append(await conn.run())

        nursery.start_soon(run)
        await peer.send(request())
        await peer.response()
        await trio.testing.wait_all_tasks_blocked()
        lane.terminate()
    assert result == [None]


async def test_a_request_in_flight_at_terminate_finishes_with_connection_close() -> None:
    lane: Lane | None = None
    release = trio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        assert lane is not None
        lane.terminate()
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})

    lane = make_lane(app)
    conn, peer = await serve_pair(lane)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve, conn)
        await peer.send(request())
        await trio.testing.wait_all_tasks_blocked()
        release.set()
        _, headers, body = await peer.response()
        assert body == b"done"
        assert headers[b"connection"] == b"close"
        assert await peer.closed()


async def test_a_vanished_client_does_not_fail_the_app() -> None:
    finished = trio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await peer.stream.aclose()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x" * 1_000_000})
        finished.set()

    conn, peer = await serve_pair(make_lane(app))
    await peer.send(request())
    with trio.fail_after(5):
        assert await conn.run() is None
    assert finished.is_set()
    assert conn.dead


async def test_a_stream_writes_whole_chunks_itself_under_the_lanes_lock() -> None:
    got: list[trio.Lock | None] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert scope["method"] == "GET"
        conn_ = send.__self__
        await send({"type": "http.response.start", "status": 200, "headers": []})
        got.append(conn_.stream_lock())  # None: the head is not out yet
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        lock = conn_.stream_lock()
        got.append(lock)
        async with lock:  # what watch rule 7 does: a whole chunk, straight to the socket
            await conn_.stream.send_all(b"1\r\nb\r\n")
        assert (await receive())["type"] == "http.request"
        await send({"type": "http.response.body", "body": b"c", "more_body": False})
        got.append(conn_.stream_lock())  # None again: the response is complete

    conn, peer = await serve_pair(make_lane(app))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve, conn)
        await peer.send(b"GET /v0/topics/s HTTP/1.1\r\nHost: x\r\n\r\n")
        status, headers, body = await peer.response()
        assert status == b"HTTP/1.1 200 OK"
        assert headers[b"transfer-encoding"] == b"chunked"
        assert body == b"abc"
        await peer.stream.aclose()
    assert got[0] is None
    assert isinstance(got[1], trio.Lock)
    assert got[2] is None


# -- hostile clients (issue: deadlines, bodies after auth, shutdown mid-head) ----------------


async def test_a_head_that_stops_arriving_is_closed_at_the_head_deadline() -> None:
    lane = make_lane(Echo(), head_timeout=0.05)
    conn, peer = await serve_pair(lane)
    await peer.send(b"POST /v0/topics/t HTTP/1.1\r\nHo")
    with trio.fail_after(5):
        assert await conn.run() is None
    assert conn.eof


async def test_a_head_trickled_byte_by_byte_still_meets_one_deadline() -> None:
    """The deadline runs from the head's first byte; each byte does not restart it."""
    lane = make_lane(Echo(), head_timeout=0.2, keep_alive_timeout=5.0)
    conn, peer = await serve_pair(lane)
    result: list[bytes | None] = []
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            result.append(await conn.run())

        nursery.start_soon(run)
        with trio.fail_after(1):  # well before the 5 s keep-alive timeout
            sent = 0
            for byte in request():
                if result:
                    break
                await peer.send(bytes([byte]))
                sent += 1
                await trio.sleep(0.02)
    assert result == [None]
    assert 2 <= sent < len(request())


async def test_a_bare_lf_head_is_handed_over_once_complete() -> None:
    conn, peer = await serve_pair(make_lane(Echo()))
    raw = b"POST /v0/topics/t HTTP/1.1\nHost: x\nContent-Length: 2\n\n{}"
    await peer.send(raw)
    with trio.fail_after(5):
        assert await conn.run() == raw


async def test_the_app_runs_on_the_head_before_any_body_byte_arrives() -> None:
    """An app that refuses on the head (a 401) answers without the body ever being sent;
    the connection then closes instead of reading on."""
    seen: list[str] = []

    async def refuse(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["method"])
        await send({"type": "http.response.start", "status": 401, "headers": []})
        await send({"type": "http.response.body", "body": b"no"})

    conn, peer = await serve_pair(make_lane(refuse))
    await peer.send(
        b"POST /v0/topics/t HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY - 1)
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve, conn)
        status, headers, _ = await peer.response()
        assert status.startswith(b"HTTP/1.1 401")
        assert headers[b"connection"] == b"close"
        assert await peer.closed()
    assert seen == ["POST"]
    assert len(conn.buf) < 1024  # nothing of the (never sent) body was waited for


async def test_the_body_is_read_when_the_app_asks_and_split_reads_join() -> None:
    conn, peer = await serve_pair(make_lane(Echo()))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve, conn)
        await peer.send(request(b'{"a":1}')[:-3])
        await trio.testing.wait_all_tasks_blocked()
        await peer.send(b":1}")
        _, headers, body = await peer.response()
        assert body == b'{"a":1}'
        assert b"connection" not in headers
        await peer.send(request(b"[]"))  # the connection stays usable
        assert (await peer.response())[2] == b"[]"
        await peer.stream.send_eof()


async def test_an_apps_connection_close_header_closes_the_connection() -> None:
    async def closing(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        headers = [(b"connection", b"close")]
        await send({"type": "http.response.start", "status": 400, "headers": headers})
        await send({"type": "http.response.body", "body": b"bad"})

    conn, peer = await serve_pair(make_lane(closing))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve, conn)
        await peer.send(request() + request())
        status, headers, _ = await peer.response()
        assert headers[b"connection"] == b"close"
        assert await peer.closed()
    assert status.startswith(b"HTTP/1.1 400")


async def test_a_lower_case_method_reaches_the_app_as_sent() -> None:
    """hypercorn would upper-case it; the lane passes it on so the dispatcher refuses it."""
    echo = Echo()
    conn, peer = await serve_pair(make_lane(echo))
    await peer.send(request().replace(b"POST", b"post", 1))
    await peer.stream.send_eof()
    with trio.fail_after(5):
        await conn.run()
    assert [scope["method"] for scope in echo.scopes] == ["post"]


async def test_terminate_closes_a_connection_mid_head_at_once() -> None:
    lane = make_lane(Echo(), head_timeout=60.0, keep_alive_timeout=60.0)
    conn, peer = await serve_pair(lane)
    result: list[bytes | None] = []
    with trio.fail_after(2):  # far below the 60 s deadlines: terminate itself closed it
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                result.append(await conn.run())

            nursery.start_soon(run)
            await peer.send(b"POST /v0/topics/t HTTP/1.1\r\n")
            await trio.testing.wait_all_tasks_blocked()
            lane.terminate()
    assert result == [None]


def test_the_lanes_verdicts_are_kept_per_route_not_per_path() -> None:
    """A cache keyed on paths grew with every unauthenticated long path; the verdict is a
    property of the route, so nothing grows with the paths asked for."""
    from topics.frontends.http.routing import Route, RouteTable
    from topics.frontends.http.serve import lane_routes

    async def handler(ctx: Any) -> Any:
        raise AssertionError

    table = RouteTable(
        [
            Route("POST", "/v0/topics/{topic}", handler, fast=True, body=True),
            Route("GET", "/v0/topics/{topic}", handler),
        ]
    )

    class App:
        pass

    app = App()
    app.table = table  # type: ignore[attr-defined]
    accepts = lane_routes(app)  # type: ignore[arg-type]
    assert accepts("POST", "/v0/topics/" + "x" * 60_000)
    assert not accepts("GET", "/v0/topics/a")
    assert not accepts("POST", "/nope/" + "y" * 60_000)
    assert not accepts("DELETE", "/v0/topics/a")
    assert table.find("PUT", "/v0/topics/a") is None
    cells = accepts.__closure__ or ()
    assert all(len(c.cell_contents) <= 2 for c in cells if isinstance(c.cell_contents, dict))


@pytest.mark.parametrize("lane_matches", [True, False])
async def test_the_dispatcher_matches_a_lane_request_once(lane_matches: bool) -> None:
    """Issue 15: the lane's route verdict is the dispatcher's match, so a fast-lane write is
    looked up in the route table once; a server that hands no match over (hypercorn, or
    an ``accepts`` that only says yes) gets the dispatcher's own lookup."""
    from topics.engine import open_engine
    from topics.frontends.http import HttpSettings, create_app
    from topics.frontends.http.serve import lane_routes

    async with open_engine(None) as engine:
        app = create_app(engine, HttpSettings())
        table = app.table
        lookups: list[str] = []
        find, match = table.find, table.match

        def counted_find(method: str, path: str) -> Any:
            lookups.append("find")
            return find(method, path)

        def counted_match(method: str, path: str) -> Any:
            lookups.append("match")
            return match(method, path)

        table.find = counted_find  # type: ignore[method-assign]
        table.match = counted_match  # type: ignore[method-assign]
        accepts = lane_routes(app) if lane_matches else (lambda method, path: True)
        lane = Lane(app, accepts, keep_alive_timeout=5.0, read_timeout=None, max_requests=10)
        conn, peer = await serve_pair(lane)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve, conn)
            await peer.send(request(b'{"records":[{"data":{"n":1}}]}'))
            status, _, body = await peer.response()
            await peer.stream.aclose()
        assert status.startswith(b"HTTP/1.1 201"), body
        assert lookups == (["find"] if lane_matches else ["match"])
        assert ujson.loads(body)["seqs"] == [1]
