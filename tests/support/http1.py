"""Reading raw HTTP/1.1 responses in tests: a head, and chunked bodies a chunk at a time.

Pure functions over the bytes read so far, so blocking-socket and trio clients share them:
each returns None until ``buf`` holds the whole piece, then the piece and what follows it.
"""

from __future__ import annotations

__all__ = ["take_chunk", "take_head", "take_response"]


def take_head(buf: bytes) -> tuple[bytes, dict[bytes, bytes], bytes] | None:
    """``(status line, headers with lowercased names, rest)`` once the head is complete."""
    head, sep, rest = buf.partition(b"\r\n\r\n")
    if not sep:
        return None
    lines = head.split(b"\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return lines[0], headers, rest


def take_chunk(buf: bytes) -> tuple[bytes, bytes] | None:
    """``(payload, rest)`` of the first chunk once it is complete (the last chunk's
    payload is empty); asserts the framing: a hex size line, the payload, CRLF."""
    size_line, sep, rest = buf.partition(b"\r\n")
    if not sep:
        return None
    size = int(size_line, 16)
    if len(rest) < size + 2:
        return None
    assert rest[size : size + 2] == b"\r\n", "a chunk must end in CRLF"
    return rest[:size], rest[size + 2 :]


def take_response(buf: bytes) -> tuple[bytes, dict[bytes, bytes], bytes, bytes] | None:
    """``(status line, headers, body, rest)`` once a whole response with a Content-Length
    or a chunked body is in ``buf``."""
    head = take_head(buf)
    if head is None:
        return None
    status, headers, rest = head
    if b"content-length" in headers:
        size = int(headers[b"content-length"])
        return (status, headers, rest[:size], rest[size:]) if len(rest) >= size else None
    assert headers.get(b"transfer-encoding") == b"chunked", headers
    body = b""
    while (chunk := take_chunk(rest)) is not None:
        payload, rest = chunk
        if not payload:
            return status, headers, body, rest
        body += payload
    return None
