"""The connection guard (frontends/http/connection.py) and the dispatcher's framing check
(frontends/http/requests.py ``framing_error``): what ends one connection, and why."""

from __future__ import annotations

import logging
import math

import pytest
import trio
import trio.testing

from topics.frontends.http.connection import ConnectionInfo, run_guarded
from topics.frontends.http.requests import framing_error


async def _pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    a, b = trio.socket.socketpair()
    return trio.SocketStream(a), trio.SocketStream(b)


async def test_an_exception_in_one_connection_is_logged_and_closes_only_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, client = await _pair()

    async def first(stream: trio.SocketStream, info: ConnectionInfo) -> bytes | None:
        return b"GET / HTTP/1.0\r\n\r\n"  # handed on

    async def second(stream: trio.SocketStream, info: ConnectionInfo, read_ahead: bytes) -> None:
        info.request_id = "req-7"
        raise RuntimeError("h11 said: Can't send data when our state is ERROR")

    with caplog.at_level(logging.ERROR, logger="topics.http.connection"):
        await run_guarded(server, first, second)  # returns: nothing reaches the accept loop
    assert "req-7" in caplog.text
    assert "RuntimeError" in caplog.text
    with trio.fail_after(1):
        assert await client.receive_some(10) == b""  # the socket was closed


async def test_a_group_of_failures_from_a_connections_tasks_is_contained() -> None:
    server, client = await _pair()

    async def second(stream: trio.SocketStream, info: ConnectionInfo, read_ahead: bytes) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            raise ValueError("from the reader task")

    await run_guarded(server, None, second)
    with trio.fail_after(1):
        assert await client.receive_some(10) == b""


async def test_cancellation_passes_through_and_still_closes_the_socket() -> None:
    server, client = await _pair()
    started = trio.Event()

    async def first(stream: trio.SocketStream, info: ConnectionInfo) -> bytes | None:
        started.set()
        await trio.sleep_forever()

    async def second(stream: trio.SocketStream, info: ConnectionInfo, read_ahead: bytes) -> None:
        raise AssertionError("never handed on")

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_guarded, server, first, second)
            await started.wait()
            scope.cancel()
    assert scope.cancelled_caught
    with trio.fail_after(1):
        assert await client.receive_some(10) == b""


@pytest.mark.parametrize(
    ("method", "headers", "wanted"),
    [
        ("POST", [(b"content-length", b"2")], None),
        ("GET", [], None),
        ("post", [], "upper-case"),
        ("Get", [], "upper-case"),
        ("", [], "upper-case"),
        ("POST", [(b"Content-Length", b"2"), (b"content-length", b"2")], "more than one"),
        (
            "POST",
            [(b"content-length", b"4"), (b"Transfer-Encoding", b"chunked")],
            "both Content-Length and Transfer-Encoding",
        ),
        ("POST", [(b"transfer-encoding", b"chunked")], None),
    ],
)
def test_framing_two_parsers_could_disagree_on_is_refused(
    method: str, headers: list[tuple[bytes, bytes]], wanted: str | None
) -> None:
    problem = framing_error(method, headers)
    if wanted is None:
        assert problem is None
    else:
        assert problem is not None
        assert wanted in problem


async def test_a_websocket_close_frame_sent_gives_the_client_a_deadline() -> None:
    """Rule 4: hypercorn waits forever for the client's close frame; the guarded stream
    sees the server's close go out and ends the connection if no answer comes."""
    from topics.frontends.http.connection import (
        CLOSE_HANDSHAKE_TIMEOUT_S,
        GuardedStream,
    )

    server, client = await _pair()
    info = ConnectionInfo(server)
    info.scope = trio.CancelScope()  # run_guarded's, once hypercorn serves the connection
    guarded = GuardedStream(server, info)
    assert guarded.socket is server.socket
    await guarded.send_all(b"HTTP/1.1 200 \r\n\r\n\x88 not a frame")  # not upgraded yet
    assert info.scope.deadline == math.inf
    await guarded.send_all(b"HTTP/1.1 101 \r\nupgrade: websocket\r\n\r\n")
    await guarded.send_all(b"\x81\x02hi")  # a text frame
    assert info.scope.deadline == math.inf
    before = trio.current_time()
    await guarded.send_all(b"\x88\x02\x03\xf1")  # close 1009
    assert before + CLOSE_HANDSHAKE_TIMEOUT_S <= info.scope.deadline
    assert info.scope.deadline <= trio.current_time() + CLOSE_HANDSHAKE_TIMEOUT_S
    await client.receive_some(1000)


def test_an_obs_folded_head_the_lane_marked_is_refused() -> None:
    from topics.frontends.http.requests import FOLDED_HEADERS

    assert framing_error("POST", [], {FOLDED_HEADERS: True}) is not None
    assert framing_error("POST", [], {}) is None


async def test_bytes_on_an_idle_hypercorn_connection_start_the_head_deadline() -> None:
    """Rule 5: bytes with no request in flight arm the deadline; the request reaching
    the app disarms it; bytes while a request is served (a body, a pipelined head) do
    not arm it."""
    from topics.frontends.http.connection import GuardedStream

    server, client = await _pair()
    info = ConnectionInfo(server)
    info.scope = trio.CancelScope()
    guarded = GuardedStream(server, info, head_timeout=3.0)
    await client.send_all(b"GET /v0/he")
    assert await guarded.receive_some(100) == b"GET /v0/he"
    armed = info.scope.deadline
    assert armed <= trio.current_time() + 3.0
    await client.send_all(b"alth HTTP/1.1\r\n")
    await guarded.receive_some(100)
    assert info.scope.deadline == armed  # one deadline for the whole head
    info.request_started()
    assert info.scope.deadline == math.inf
    await client.send_all(b"body bytes")
    await guarded.receive_some(100)
    assert info.scope.deadline == math.inf  # busy: not a head
    info.request_ended()
    await client.send_all(b"G")
    await guarded.receive_some(100)
    assert info.scope.deadline <= trio.current_time() + 3.0


async def test_a_lane_connection_has_no_deadline_scope_until_it_is_handed_on() -> None:
    """An idle lane stream keeps its ConnectionInfo for as long as it is open: the cancel
    scope (only hypercorn's phase needs one) is made at the hand-over, not before."""
    server, _client = await _pair()
    seen: list[object] = []

    async def first(stream: trio.SocketStream, info: ConnectionInfo) -> bytes | None:
        seen.append(info.scope)
        info.close_within(0)  # no scope: the lane keeps its own deadlines
        return b"x"

    async def second(stream: trio.SocketStream, info: ConnectionInfo, read_ahead: bytes) -> None:
        seen.append(info.scope)
        assert read_ahead == b"x"

    await run_guarded(server, first, second)
    assert seen[0] is None
    assert isinstance(seen[1], trio.CancelScope)
