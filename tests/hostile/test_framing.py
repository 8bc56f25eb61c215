"""Request heads that are malformed or ambiguous (issue 14, cases 3, 5, 6).

Whichever parser sees them first (the lane, or hypercorn's h11), a head whose framing two
parsers could read differently is refused with 400 and the connection closed, so no byte
of it can be read as a second request (smuggling). Every request here carries the valid
key: a request that slipped through as a write would show up in the stored snapshot.
"""

from __future__ import annotations

import contextlib

import pytest

from .conftest import KEY, Target, connect, exchange, read_head, status_of

pytestmark = pytest.mark.slow

TOPIC = "hostile-framing"
BODY = b'{"records":[{"data":1}]}'
AUTH = f"Authorization: Bearer {KEY}\r\n"


def _post(headers: str, body: bytes = BODY, method: str = "POST") -> bytes:
    return (
        f"{method} /v0/topics/{TOPIC} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"{AUTH}{headers}\r\n"
    ).encode() + body


def test_bare_lf_head_is_answered_not_left_hanging(target: Target) -> None:
    assert target.server is not None
    head = (
        f"POST /v0/topics/{TOPIC} HTTP/1.1\nHost: a\nContent-Type: application/json\n"
        f"Content-Length: {len(BODY)}\n\n"
    ).encode()
    with connect(target.server) as sock:
        sock.sendall(head + BODY)
        status, data = read_head(sock, 5.0)
    # Without a key: served means 401, refused means 400; silence is the bug.
    assert status in (400, 401), data[:200]
    target.assert_unharmed()


SMUGGLING = {
    "cl-and-te": _post(
        f"Content-Length: {len(BODY)}\r\nTransfer-Encoding: chunked\r\n",
        b"%x\r\n%b\r\n0\r\n\r\n" % (len(BODY), BODY),
    ),
    "te-and-cl": _post(
        f"Transfer-Encoding: chunked\r\nContent-Length: {len(BODY)}\r\n",
        b"%x\r\n%b\r\n0\r\n\r\n" % (len(BODY), BODY),
    ),
    "two-lengths": _post(f"Content-Length: {len(BODY)}\r\nContent-Length: {len(BODY) + 1}\r\n"),
    "length-abc": _post("Content-Length: abc\r\n"),
    "length-negative": _post("Content-Length: -1\r\n"),
    "length-two-numbers": _post(f"Content-Length: {len(BODY)} {len(BODY)}\r\n"),
    "lowercase-method": _post(f"Content-Length: {len(BODY)}\r\n", method="post"),
    "obs-fold": _post(f"X-Folded: a\r\n  b\r\nContent-Length: {len(BODY)}\r\n"),
}


#: What hypercorn alone (``TOPICS_HTTP_LANE=0``) does not refuse, and why: its h11 parser
#: unfolds obs-fold (RFC 9112 §5.2 allows that as well as a 400) and it upper-cases the
#: method before any app sees it, so neither reaches the dispatcher's check. The lane, which
#: owns every connection of a default server, refuses both (docs/HTTP.md,
#: "Connections and hostile clients": framing).
HYPERCORN_ACCEPTS = {
    SMUGGLING["lowercase-method"]: "hypercorn upper-cases the method before the app",
    SMUGGLING["obs-fold"]: "h11 unfolds obs-fold lines (RFC 9112 section 5.2 allows it)",
}


def _known_hypercorn_gap(request: pytest.FixtureRequest, target: Target, payload: bytes) -> float:
    """Marks a known gap as a strict xfail; how long to wait for the server to close.

    A gap's connection stays open until the keep-alive deadline, so waiting the full 3 s
    for a close that will not come only costs time; a fixed gap (a 400 and a close, which
    arrive at once) would still be seen within 1 s, and strict makes it fail loudly."""
    reason = HYPERCORN_ACCEPTS.get(payload)
    if target.lane == "0" and reason is not None:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
        return 1.0
    return 3.0


@pytest.mark.parametrize("payload", SMUGGLING.values(), ids=SMUGGLING.keys())
def test_ambiguous_framing_is_400_and_closes(
    request: pytest.FixtureRequest, target: Target, payload: bytes
) -> None:
    wait_s = _known_hypercorn_gap(request, target, payload)
    assert target.server is not None
    data, closed = exchange(target.server, payload, timeout=wait_s)
    assert status_of(data) == 400, data[:300]
    assert closed, "the connection must close after a framing error"
    target.assert_unharmed()


@pytest.mark.parametrize("payload", SMUGGLING.values(), ids=SMUGGLING.keys())
def test_a_request_pipelined_behind_ambiguous_framing_is_not_run(
    request: pytest.FixtureRequest, target: Target, payload: bytes
) -> None:
    """The smuggling shape: a well-formed write follows in the same packet. A server that
    kept the connection might run it, and a desynchronised parser would run it wrongly.
    The lane's refusal always arrives whole (it shuts its write side and drains the rest
    before closing, so no reset destroys the answer); through h11 the 400 is sometimes
    lost, the connection closing without an answer, so there only the close is asserted."""
    wait_s = _known_hypercorn_gap(request, target, payload)
    assert target.server is not None
    follow = _post(f"Content-Length: {len(BODY)}\r\n")
    data, closed = exchange(target.server, payload + follow, timeout=wait_s)
    wanted = (400,) if target.lane == "1" else (400, None)
    assert status_of(data) in wanted, data[:300]
    assert data.count(b"HTTP/1.1 ") <= 1, f"more than one response: {data[:600]!r}"
    assert closed, "the connection must close after a framing error"
    target.assert_unharmed()


def test_http2_prior_knowledge_preface_is_answered_or_closed(target: Target) -> None:
    assert target.server is not None
    with connect(target.server) as sock:
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        sock.settimeout(3.0)
        try:
            first = sock.recv(65536)  # h2's SETTINGS frame, a 4xx, or b"" (closed)
        except ConnectionResetError:
            first = b""
        except TimeoutError:
            pytest.fail("the HTTP/2 preface got neither an answer nor a close")
    assert first == b"" or first[3:4] == b"\x04" or first.startswith(b"HTTP/1.1 4"), first[:100]
    target.assert_unharmed()


def _long_path_post(i: int, size: int = 60 * 1024) -> bytes:
    path = f"/v0/topics/{TOPIC}-{i:05d}-" + "a" * size
    return (
        f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY


def _long_path_status(target: Target, i: int) -> int | None:
    assert target.server is not None
    with connect(target.server) as sock:
        # The server may refuse before it has read the whole head.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(_long_path_post(i))
        status, _ = read_head(sock, 5.0)
    return status


def test_a_60_kb_path_is_answered_and_never_hangs(target: Target) -> None:
    assert _long_path_status(target, 0) in (400, 401, 404, 414, 431)
    target.assert_unharmed()


def test_many_long_paths_do_not_grow_server_memory(target: Target) -> None:
    """Each path is new (a distinct topic name), so nothing keyed by path may keep them:
    300 x 60 KB is ~18 MB of paths; growth is allowed 24 MB of noise and arenas."""
    assert target.server is not None
    for i in range(30):  # warm up: arenas, caches of a normal size
        _long_path_status(target, i)
    before = target.rss_kib()
    for i in range(30, 330):
        assert _long_path_status(target, i) is not None
    grown_mib = (target.rss_kib() - before) / 1024
    assert grown_mib < 24, f"server RSS grew {grown_mib:.1f} MiB over 300 long-path requests"
    target.assert_unharmed()
