"""Request bodies: size limit, Content-Type, Content-Encoding and JSON decoding (§0.3, §2).

Rules:
1. ``413 payload_too_large`` is decided before any parsing: a ``Content-Length`` over
   ``TOPICS_MAX_BODY_BYTES`` is refused before a byte is read, a chunked body is refused
   as soon as the bytes received pass the limit, and a gzip body is refused as soon as its
   *decompressed* size passes it (a small bomb cannot expand into memory).
2. A body that is present must be ``Content-Type: application/json`` (a ``charset``
   parameter, if any, must be utf-8), else ``415 unsupported_media_type``. An empty body
   needs no Content-Type (it means "all defaults" where a route allows that).
3. ``Content-Encoding`` may be absent, ``identity`` or ``gzip``; anything else is 415.
4. Bodies are decoded by ujson here (small control bodies) or by
   ``topics._core.scan.split_write_body`` in the write route (records stay raw bytes);
   a malformed body is ``400 invalid_request`` naming where it broke.
5. Framing that two parsers could read differently is refused before anything else
   (:func:`framing_error`): the dispatcher answers 400 and closes the connection.
"""

from __future__ import annotations

import zlib
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import ujson

from topics.errors import InvalidRequestError, PayloadTooLargeError, UnsupportedMediaTypeError

from .asgi import Receive

__all__ = [
    "ClientDisconnected",
    "check_content_type",
    "decode_json_object",
    "BODY_BUFFERED",
    "FOLDED_HEADERS",
    "ROUTED",
    "framing_error",
    "read_body",
]


class ClientDisconnected(Exception):
    """The client went away before its body arrived; nothing is answered."""


_METHOD = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")


#: The ASGI scope extension by which a server tells the app a head had obs-folded lines
#: (the fast lane does; h11 unfolds them, which RFC 9112 §5.2 also allows).
FOLDED_HEADERS = "topics.obs_fold"
#: The ASGI scope extension by which a server tells the app that the request's whole body
#: is already in its buffer (the fast lane, for a body that came with its head): reading
#: it cannot wait on the client, so the dispatcher needs no body deadline around it.
BODY_BUFFERED = "topics.body_buffered"
#: The ASGI scope extension by which a server hands the app the route it already matched
#: to decide who serves the request (the fast lane asks ``accepts``): ``(route, param)``,
#: so a request is matched against the route table once.
ROUTED = "topics.routed"


def framing_error(
    method: str,
    headers: Iterable[tuple[bytes, bytes]],
    extensions: Mapping[str, object] | None = None,
) -> str | None:
    """Why a request's framing cannot be trusted (rule 5), or None when it can.

    Methods are case-sensitive (RFC 9110 §9.1): ``post`` is not ``POST``, and a server
    that ran it as one would disagree with every proxy in front of it. A request with both
    ``Content-Length`` and ``Transfer-Encoding``, or with two ``Content-Length`` fields,
    has a body whose end two parsers can place differently (request smuggling, RFC 9112
    §6.3); it is refused and its connection closed rather than guessed at. So is a head
    with obs-folded lines (RFC 9112 §5.2 prefers a 400 to unfolding).
    """
    if extensions and extensions.get(FOLDED_HEADERS):
        return "the request has obs-folded header lines (RFC 9112 §5.2)"
    if not method or not _METHOD.issuperset(method.encode("latin-1")):
        return f"the method {method!r} is not an upper-case token (methods are case-sensitive)"
    lengths = 0
    chunked = False
    for name, _ in headers:
        lowered = name.lower()
        if lowered == b"content-length":
            lengths += 1
        elif lowered == b"transfer-encoding":
            chunked = True
    if lengths > 1:
        return "the request has more than one Content-Length"
    if lengths and chunked:
        return "the request has both Content-Length and Transfer-Encoding"
    return None


def _too_large(limit: int, what: str) -> PayloadTooLargeError:
    return PayloadTooLargeError(
        f"{what} exceeds the server limit of {limit} bytes (TOPICS_MAX_BODY_BYTES); "
        "split the batch into smaller writes",
        detail={"max_body_bytes": limit},
    )


def check_content_type(headers: dict[bytes, bytes]) -> None:
    """Rule 2 for a request that carries a body."""
    raw = headers.get(b"content-type")
    if raw is None:
        raise UnsupportedMediaTypeError(
            "a request body needs Content-Type: application/json",
            detail={"content_type": None},
        )
    media, _, params = raw.partition(b";")
    if media.strip().lower() != b"application/json":
        raise UnsupportedMediaTypeError(
            "the request body must be Content-Type: application/json",
            detail={"content_type": raw.decode("latin-1")},
        )
    for param in params.split(b";"):
        key, _, value = param.partition(b"=")
        if key.strip().lower() == b"charset" and value.strip().strip(b'"').lower() not in (
            b"utf-8",
            b"utf8",
        ):
            raise UnsupportedMediaTypeError(
                "JSON bodies must be UTF-8 (charset=utf-8)",
                detail={"content_type": raw.decode("latin-1")},
            )


def _content_encoding(headers: dict[bytes, bytes]) -> bool:
    """True for gzip, False for identity/absent; 415 for anything else (rule 3)."""
    raw = headers.get(b"content-encoding")
    if raw is None:
        return False
    value = raw.strip().lower()
    if value in (b"", b"identity"):
        return False
    if value in (b"gzip", b"x-gzip"):
        return True
    raise UnsupportedMediaTypeError(
        "Content-Encoding must be gzip or identity",
        detail={"content_encoding": raw.decode("latin-1")},
    )


def _gunzip(data: bytes, limit: int) -> bytes:
    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = decoder.decompress(data, limit + 1)
    except zlib.error as exc:
        raise InvalidRequestError(
            f"the gzip request body is corrupt ({exc})", detail={"content_encoding": "gzip"}
        ) from None
    if len(out) > limit or decoder.unconsumed_tail:
        raise _too_large(limit, "the decompressed request body")
    if not decoder.eof:
        raise InvalidRequestError(
            "the gzip request body is truncated", detail={"content_encoding": "gzip"}
        )
    return out


async def drain_body(receive: Receive, limit: int) -> None:
    """Read and discard a body the route does not take (no decoding, no type check).

    Raises: PayloadTooLargeError past ``limit`` bytes, ClientDisconnected.
    """
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        size += len(message.get("body", b""))
        if size > limit:
            raise _too_large(limit, "the request body")
        if not message.get("more_body", False):
            return


async def read_body(headers: dict[bytes, bytes], receive: Receive, limit: int) -> bytes:
    """Read the whole request body within ``limit`` bytes and undo any gzip (rules 1-3).

    Raises:
        PayloadTooLargeError, UnsupportedMediaTypeError, InvalidRequestError,
        ClientDisconnected.
    """
    declared = headers.get(b"content-length")
    if declared is not None:
        if not declared.isdigit():
            raise InvalidRequestError("Content-Length is not a number")
        if int(declared) > limit:
            raise _too_large(limit, "the request body")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise _too_large(limit, "the request body")
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    # Type and encoding are judged once the body is in (still before any parsing), so
    # a 415 leaves the connection ready for the next request.
    if body or (declared is None and b"transfer-encoding" in headers):
        check_content_type(headers)
    gzipped = _content_encoding(headers)
    if gzipped and body:
        body = _gunzip(body, limit)
    return body


def decode_json_object(body: bytes, allowed: Collection[str] | None = None) -> dict[str, Any]:
    """Decode a small JSON control body into a dict; an empty body is ``{}``.

    Args:
        allowed: the member names the route understands; any other is a 400 (a typo must
            not silently do nothing).
    """
    if not body.strip():
        return {}
    try:
        value = ujson.loads(body)
    except (ValueError, OverflowError) as exc:
        raise InvalidRequestError(
            f"the body is not valid JSON: {exc}", detail={"path": "$"}
        ) from None
    if not isinstance(value, dict):
        raise InvalidRequestError("the body must be a JSON object", detail={"path": "$"})
    if allowed is not None:
        for key in value:
            if key not in allowed:
                raise InvalidRequestError.for_field(key, "is not a field of this request")
    return value
