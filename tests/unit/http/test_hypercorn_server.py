"""The h11 connection hypercorn is given (``frontends/http/hypercorn_server.py`` rules
3-4), driven the way hypercorn drives it: bytes in, events out, no server."""

from __future__ import annotations

import h11
import pytest

from topics.frontends.http.hypercorn_server import MAX_IGNORED, TopicsHttp11

BODY = b'{"records":[{"data":1}]}'
HTTP10_POST = b"POST /v0/topics/t HTTP/1.0\r\nHost: t\r\nContent-Length: %d\r\n\r\n%b" % (
    len(BODY),
    BODY,
)
UPGRADE = (
    b"GET /v0/ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def _events(conn: h11.Connection) -> list[object]:
    """``next_event`` until it needs data, as hypercorn's loop calls it."""
    out: list[object] = []
    while (event := conn.next_event()) is not h11.NEED_DATA and event is not h11.PAUSED:
        out.append(event)
        if type(event) is h11.Request and b"websocket" in dict(event.headers).get(b"upgrade", b""):
            break  # hypercorn switches the connection to WebSocket here
    return out


def test_a_stray_byte_after_a_closing_request_is_never_parsed() -> None:
    conn = TopicsHttp11(h11.SERVER)
    conn.receive_data(HTTP10_POST + b"Z")
    kinds = [type(e) for e in _events(conn)]
    assert kinds == [h11.Request, h11.Data, h11.EndOfMessage]
    conn.receive_data(b"more after it")  # a later packet: dropped
    assert conn.next_event() is h11.NEED_DATA
    assert conn.their_state is h11.MUST_CLOSE
    # The answer goes out as usual.
    conn.send(h11.Response(status_code=201, headers=[(b"content-length", b"0")]))
    conn.send(h11.EndOfMessage())


def test_past_the_bound_the_client_is_treated_as_h11_treats_it() -> None:
    conn = TopicsHttp11(h11.SERVER)
    conn.receive_data(HTTP10_POST)
    _events(conn)
    conn.receive_data(b"Z" * MAX_IGNORED)
    assert conn.next_event() is h11.NEED_DATA
    conn.receive_data(b"Z")
    with pytest.raises(h11.RemoteProtocolError):
        conn.next_event()


def test_the_bytes_behind_an_upgrade_go_to_hold_not_to_the_websocket() -> None:
    held: list[bytes] = []
    conn = TopicsHttp11(h11.SERVER, hold=held.append)
    conn.receive_data(UPGRADE + b"X")
    assert [type(e) for e in _events(conn)] == [h11.Request]
    assert conn.trailing_data == (b"", False)  # what hypercorn's WebSocket starts with
    assert held == [b"X"]
    assert conn.trailing_data == (b"X", False)  # asked again: given once only


def test_the_bytes_behind_any_other_request_stay_h11s() -> None:
    held: list[bytes] = []
    conn = TopicsHttp11(h11.SERVER, hold=held.append)
    conn.receive_data(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")  # h2 prior knowledge
    assert type(conn.next_event()) is h11.Request  # hypercorn switches to h2 here
    assert conn.trailing_data[0] == b"SM\r\n\r\n"
    assert held == []
