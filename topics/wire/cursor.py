"""The composite watch cursor (contract §0.7, §7.4): a topic -> seq map as one token.

Pure. The token is unpadded base64url of the compact JSON object, e.g.
``{"orders":5210}`` -> ``eyJvcmRlcnMiOjUyMTB9``; it is the SSE ``id:`` of every
data-bearing frame and comes back as ``Last-Event-ID``.

Rules:
1. One alphabet (base64url, RFC 4648 §5) and no padding on output; input may carry
   padding. Nothing else in topics encodes or decodes these tokens.
2. :func:`decode` accepts exactly what :func:`encode` can produce: a JSON object of
   topic names (strings) to seqs (integers 0..2^64-1, not booleans). Anything else is
   ``InvalidRequestError`` naming the problem, never a silently partial map.
3. Past :data:`MAX_INLINE_TOPICS` topics a stream sends an opaque *checkpoint token*
   (``ck.<n>``, the number of the frame in its session) instead of the whole map, so an
   id stays short however many topics are watched; the session maps it back. ``.`` is not
   in the base64url alphabet, so the two forms can never be confused.
4. Tokens are bounded (:data:`MAX_TOKEN_CHARS`), so a hostile header cannot make the
   server decode megabytes.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

import ujson

from topics.errors import InvalidRequestError

__all__ = [
    "CHECKPOINT_PREFIX",
    "MAX_INLINE_TOPICS",
    "MAX_TOKEN_CHARS",
    "decode",
    "decode_checkpoint",
    "encode",
    "encode_checkpoint",
    "is_checkpoint",
]

#: Above this many topics a stream's ids are checkpoint tokens (rule 3).
MAX_INLINE_TOPICS = 64
CHECKPOINT_PREFIX = "ck."
#: 256 topics of 255-byte names with 20-digit seqs fit in well under this.
MAX_TOKEN_CHARS = 131_072
_U64_MAX = (1 << 64) - 1


def encode(cursors: Mapping[str, int]) -> str:
    """The token of ``cursors`` (insertion order kept; the map round-trips exactly).

    Example::

        encode({"orders": 5210})  # 'eyJvcmRlcnMiOjUyMTB9'
    """
    raw = ujson.dumps(cursors, ensure_ascii=False, escape_forward_slashes=False).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode(token: str) -> dict[str, int]:
    """The cursor map of ``token`` (rule 2).

    Raises:
        InvalidRequestError: not a cursor token (malformed base64, not a JSON object of
            name -> seq, too long, or a checkpoint token, which only a session resolves).
    """
    if not isinstance(token, str) or not token:
        raise _bad("empty cursor")
    if len(token) > MAX_TOKEN_CHARS:
        raise _bad(f"cursor is longer than {MAX_TOKEN_CHARS} characters")
    if is_checkpoint(token):
        raise _bad("a checkpoint cursor is only valid on its own watch session")
    try:
        raw = base64.urlsafe_b64decode(token.encode("ascii") + b"=" * (-len(token) % 4))
        value = ujson.loads(raw)
    except (ValueError, binascii.Error, UnicodeError):
        raise _bad("not base64url-encoded JSON") from None
    if not isinstance(value, dict):
        raise _bad("not a JSON object of topic -> seq")
    for name, seq in value.items():
        if not isinstance(seq, int) or isinstance(seq, bool) or not 0 <= seq <= _U64_MAX:
            raise _bad(f"the seq of {name!r} is not a non-negative integer")
    return value


def encode_checkpoint(frame_no: int) -> str:
    """The opaque token of frame ``frame_no`` of a session (rule 3)."""
    if frame_no < 0:
        raise ValueError(f"a frame number is non-negative, got {frame_no}")
    return f"{CHECKPOINT_PREFIX}{frame_no}"


def is_checkpoint(token: str) -> bool:
    """True for a checkpoint token (well formed or not)."""
    return token.startswith(CHECKPOINT_PREFIX)


def decode_checkpoint(token: str) -> int:
    """The frame number of a checkpoint token.

    Raises:
        InvalidRequestError: not a well-formed checkpoint token.
    """
    digits = token[len(CHECKPOINT_PREFIX) :] if is_checkpoint(token) else ""
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 20:
        raise _bad("not a checkpoint cursor")
    return int(digits)


def _bad(problem: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"malformed watch cursor: {problem}", detail={"field": "cursor", "problem": problem}
    )
