"""A properly opened ``/v0/ws`` connection that then sends what no client should: frames
that break RFC 6455, and one message past hypercorn's ``websocket_max_message_size``
(16 MiB). The connection closes (a close frame, then EOF, also when the client never
answers the close); the server lives on.
"""

from __future__ import annotations

import contextlib
import socket
import struct

import pytest

from .conftest import SLACK_S, WS_CLOSE_TIMEOUT_MS, Target, open_ws, read_until_closed

pytestmark = pytest.mark.slow

#: hypercorn's default websocket_max_message_size, plus a margin.
OVERSIZED = (16 << 20) + (1 << 20)


def _open_ws(target: Target) -> socket.socket:
    assert target.server is not None
    return open_ws(target.server)[0]


def _frame(opcode: int, payload: bytes, *, masked: bool = True, rsv: int = 0) -> bytes:
    """A single final frame; an all-zero mask key leaves the payload as it is."""
    head = bytes([0x80 | rsv << 4 | opcode])
    mask_bit = 0x80 if masked else 0
    n = len(payload)
    if n < 126:
        head += bytes([mask_bit | n])
    elif n < 1 << 16:
        head += bytes([mask_bit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([mask_bit | 127]) + struct.pack("!Q", n)
    return head + (b"\0\0\0\0" if masked else b"") + payload


GARBAGE = {
    "random-bytes": b"\xff\xfe\xfd" * 40,
    "reserved-opcode": _frame(0x3, b"x"),
    "rsv-bits": _frame(0x1, b"{}", rsv=0b111),
    "unmasked": _frame(0x1, b'{"op":"ping"}', masked=False),
    "bad-utf8-text": _frame(0x1, b"\xc3\x28"),
    "huge-control-frame": _frame(0x9, b"p" * 200),
    "orphan-continuation": _frame(0x0, b"tail"),
    "not-json": _frame(0x1, b"{{{{"),
}


@pytest.mark.parametrize("payload", GARBAGE.values(), ids=GARBAGE.keys())
def test_garbage_frames_close_the_websocket_and_the_server_lives(
    target: Target, payload: bytes
) -> None:
    with _open_ws(target) as sock:
        sock.sendall(payload)
        if payload == GARBAGE["not-json"]:
            # Valid framing, invalid op: an error op and the connection stays (ws rule 2).
            data, closed = read_until_closed(sock, 1.0)
            assert b"error" in data, data[:300]
            assert not closed
        else:
            _, closed = read_until_closed(sock, 5.0)
            assert closed, "the WebSocket stayed open after a protocol violation"
    target.assert_unharmed()


def _send_oversized(sock: socket.socket) -> bytes:
    """Send one message past the limit; the server's close frame (its first 4 bytes)."""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        sock.sendall(_frame(0x2, bytes(OVERSIZED)))
    data = b""
    sock.settimeout(5.0)
    with contextlib.suppress(OSError):
        while len(data) < 4 and (chunk := sock.recv(4 - len(data))):
            data += chunk
    return data


def test_an_oversized_message_gets_close_1009_and_the_server_lives(target: Target) -> None:
    with _open_ws(target) as sock:
        rss_before = target.rss_kib()
        close = _send_oversized(sock)
        assert close == b"\x88\x02" + struct.pack("!H", 1009), close
        # Answering the close is not asserted on: hypercorn drops a close frame that
        # arrives in the same read as the oversized message's tail (the next test covers
        # a close that never comes).
    grown_mib = (target.rss_kib() - rss_before) / 1024
    # The buffer may fill to the limit before the close; it must not be kept.
    assert grown_mib < 48, f"server RSS grew {grown_mib:.0f} MiB"
    target.assert_unharmed()


def test_a_close_handshake_the_client_never_answers_is_dropped(target: Target) -> None:
    """A client that stops reading after provoking a close would otherwise hold its
    socket (and the 16 MiB it made the server buffer) for as long as it likes."""
    with _open_ws(target) as sock:
        assert _send_oversized(sock)[:2] == b"\x88\x02"
        # The suite's servers are given a short deadline (RFC 6455 leaves it open).
        waited = WS_CLOSE_TIMEOUT_MS / 1000 + SLACK_S
        _, closed = read_until_closed(sock, waited)
        assert closed, f"still open {waited} s after the server's close"
    target.assert_unharmed()
