"""The JSON syntax check (``json_check``) and the split of a batch dumps() text per value."""

from __future__ import annotations

import json
import re

from ._pure_format import Buffer, FrameError, as_bytes

_MAX_DEPTH = 512


_WS = re.compile(rb"[ \t\n\r]*")
_DIGITS = re.compile(rb"[0-9]*")
_STR_BODY = re.compile(rb'(?:[^"\\\x00-\x1f]+|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*')
_HEX = frozenset(b"0123456789abcdefABCDEF")
# One escape of a string body: a surrogate pair, a lone surrogate (group 1), or any other.
_ESCAPE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
    rb"|(\\u[dD][89a-fA-F][0-9a-fA-F]{2})|\\."
)
# A number whose integer part has more digits is refused (the C scanner's rule, I-JSON).
_MAX_INT_DIGITS = 308


def _json_fail(pos: int) -> FrameError:
    return FrameError(f"invalid JSON at byte {pos}", -1, "data", "json")


def _ws(buf: bytes, pos: int) -> int:
    m = _WS.match(buf, pos)
    assert m is not None  # the pattern matches the empty string
    return m.end()


def _string(buf: bytes, pos: int) -> int:
    """Scan the string opening at ``pos``; return the offset after its closing quote."""
    body = _STR_BODY.match(buf, pos + 1)
    assert body is not None
    stop = body.end()
    lone = _lone_surrogate(buf, pos + 1, stop)
    try:
        buf[pos + 1 : stop if lone is None else lone].decode()
    except UnicodeDecodeError as exc:
        raise _json_fail(pos + 1 + exc.start) from None
    if lone is not None:
        raise _json_fail(lone)
    if stop < len(buf) and buf[stop] == 0x22:
        return stop + 1
    if stop < len(buf) and buf[stop] == 0x5C:  # a bad escape: blame its first bad byte
        bad = stop + 1
        if bad < len(buf) and buf[bad] == 0x75:
            bad += 1
            while bad < len(buf) and buf[bad] in _HEX:
                bad += 1
        stop = bad
    raise _json_fail(min(stop, len(buf)))


def _lone_surrogate(buf: bytes, start: int, stop: int) -> int | None:
    """The offset of the "u" of the first lone surrogate escape in a string body, or None (the C
    scanner's _surrogates: I-JSON refuses them, no reader can decode one to text)."""
    if buf.find(b"\\u", start, stop) < 0:
        return None
    for m in _ESCAPE.finditer(buf, start, stop):
        if m.group(1) is not None:
            return m.start() + 1  # at its "u", as the C scanner reports it
    return None


def _number(buf: bytes, pos: int) -> int:
    """Scan a number; refused at its first integer digit past _MAX_INT_DIGITS when its
    integer part is longer (the C scanner's rule)."""
    end = len(buf)
    if buf[pos] == 0x2D:
        pos += 1
    if pos < end and buf[pos] == 0x30:
        pos += 1
    elif pos < end and 0x31 <= buf[pos] <= 0x39:
        stop = _DIGITS.match(buf, pos + 1).end()  # type: ignore[union-attr]
        if stop - pos > _MAX_INT_DIGITS:
            raise _json_fail(pos + _MAX_INT_DIGITS)
        pos = stop
    else:
        raise _json_fail(pos)
    if pos < end and buf[pos] == 0x2E:
        pos += 1
        stop = _DIGITS.match(buf, pos).end()  # type: ignore[union-attr]
        if stop == pos:
            raise _json_fail(pos)
        pos = stop
    if pos < end and buf[pos] in b"eE":
        pos += 1
        if pos < end and buf[pos] in b"+-":
            pos += 1
        stop = _DIGITS.match(buf, pos).end()  # type: ignore[union-attr]
        if stop == pos:
            raise _json_fail(pos)
        pos = stop
    return pos


def _literal(buf: bytes, pos: int) -> int:
    for word in (b"true", b"false", b"null"):
        if buf[pos] == word[0]:
            for k, ch in enumerate(word):
                if pos + k >= len(buf) or buf[pos + k] != ch:
                    raise _json_fail(min(pos + k, len(buf)))
            return pos + len(word)
    raise _json_fail(pos)


def _key(buf: bytes, pos: int) -> int:
    """Scan ``"key" :`` at ``pos``; return the offset of the member's value."""
    if pos >= len(buf) or buf[pos] != 0x22:
        raise _json_fail(min(pos, len(buf)))
    pos = _ws(buf, _string(buf, pos))
    if pos >= len(buf) or buf[pos] != 0x3A:
        raise _json_fail(min(pos, len(buf)))
    return _ws(buf, pos + 1)


def _dollar_key(buf: bytes, pos: int) -> bool:
    """Whether the checked key string at ``pos`` (its opening quote) begins with "$",
    written plainly or as the escape \\u0024 (the only escape that decodes to "$")."""
    return buf[pos + 1] == 0x24 or buf.startswith(b"\\u0024", pos + 1)


def key_at(buf: bytes, pos: int) -> str:
    """The decoded text of the checked key string whose opening quote is at ``pos``."""
    key: str = json.loads(buf[pos : _string(buf, pos)])
    return key


def _value(buf: bytes, pos: int) -> tuple[int, int, int]:
    """Scan the one JSON value that starts at ``pos`` (no whitespace skipped before it).

    Returns (offset just after it, member count if it is an object else -1, offset of the
    opening quote of its first top-level key that begins with "$" else -1: the encoder's
    refusal of server-owned meta keys, noted in the pass the scan makes anyway); raises
    FrameError at the first bad byte. Stops at the value's last byte whatever follows, so a
    value inside a larger text scans exactly as it would on its own.
    """
    end = len(buf)
    stack = bytearray()  # the open brackets, innermost last
    members = reserved = -1
    while True:
        if pos >= end:
            raise _json_fail(end)
        c = buf[pos]
        if c in b"[{":
            if len(stack) >= _MAX_DEPTH:
                raise _json_fail(pos)
            stack.append(c)
            if c == 0x7B and len(stack) == 1:
                members = 0
            pos = _ws(buf, pos + 1)
            if pos < end and buf[pos] == c + 2:  # "]" / "}" follow "[" / "{" by 2
                stack.pop()
                pos += 1
            else:
                if c == 0x7B:
                    key, pos = pos, _key(buf, pos)
                    if len(stack) == 1:
                        members += 1
                        if reserved < 0 and _dollar_key(buf, key):
                            reserved = key
                continue
        elif c == 0x22:
            pos = _string(buf, pos)
        elif c == 0x2D or 0x30 <= c <= 0x39:
            pos = _number(buf, pos)
        else:
            pos = _literal(buf, pos)
        while True:  # after a value: close containers until a "," or the end
            if not stack:
                return pos, members, reserved
            pos = _ws(buf, pos)
            if pos >= end:
                raise _json_fail(end)
            if buf[pos] == 0x2C:
                pos = _ws(buf, pos + 1)
                if stack[-1] == 0x7B:
                    key, pos = pos, _key(buf, pos)
                    if len(stack) == 1:
                        members += 1
                        if reserved < 0 and _dollar_key(buf, key):
                            reserved = key
                break
            if buf[pos] != stack[-1] + 2:
                raise _json_fail(pos)
            stack.pop()
            pos += 1


_NUMBER_RULE = "a number with more than 308 integer digits (I-JSON: beyond any double)"
_SURROGATE_RULE = "a lone UTF-16 surrogate escape (I-JSON: no reader can decode it)"
_DIGIT_RUN = re.compile(rb"[0-9]+")


def _json_message(buf: bytes, err: int) -> str:
    """The error for a scan that failed at ``err``, naming the I-JSON rule when that is
    what failed (the C scanner's _json_message: a lone surrogate fails at the escape's
    "u", a long integer at its digit past the limit, where no other error can be)."""
    at = f"invalid JSON at byte {err}"
    if 1 <= err < len(buf) and buf[err] == 0x75 and buf[err - 1] == 0x5C:
        return f"{at}: {_SURROGATE_RULE}"
    if _MAX_INT_DIGITS <= err < len(buf) and _DIGIT_RUN.fullmatch(
        buf, err - _MAX_INT_DIGITS, err + 1
    ):
        return f"{at}: {_NUMBER_RULE}"
    return at


def json_check(data: Buffer) -> int:
    return json_scan(as_bytes(data))[0]


def json_scan(buf: bytes) -> tuple[int, int]:
    """json_check's check of ``buf``, returning (members, reserved) as _value does."""
    try:
        pos, members, reserved = _value(buf, _ws(buf, 0))
        pos = _ws(buf, pos)
        if pos != len(buf):
            raise _json_fail(pos)
    except FrameError as exc:
        err = int(str(exc).rsplit(" ", 1)[1])
        raise FrameError(_json_message(buf, err), -1, "data", "json") from None
    return members, reserved


def split_array(buf: bytes, count: int) -> list[tuple[int, int, int, int]]:
    """Split what dumps() made of a list of ``count`` values into one span per value.

    The encoders this is used with write a list as "[" + ",".join(texts) + "]", each text
    exactly what they make of that value alone; a span (start, stop, members, reserved)
    runs from just after one delimiter to just before the next (whitespace included, as a
    standalone text would have it) and must hold exactly one valid JSON value (json_check's
    rules; reserved is _value's, counted from start).
    Returns the ``count`` spans when the whole text splits cleanly, else []: an element
    that does not check (NaN or Infinity, say), a missing delimiter or a wrong count means
    the values go through dumps() one by one, and that path reports the failing record
    exactly. (No prefix is trusted: a text from ujson's verbatim __json__ hook that holds
    a "," shifts every span after it.)
    """
    spans: list[tuple[int, int, int, int]] = []
    if count == 0 or not buf.startswith(b"["):
        return []
    pos = 0
    for j in range(count):
        try:
            stop, members, reserved = _value(buf, _ws(buf, pos + 1))
        except FrameError:
            return []
        stop = _ws(buf, stop)
        if stop >= len(buf) or buf[stop] != (0x2C if j + 1 < count else 0x5D):
            return []
        spans.append((pos + 1, stop, members, reserved - pos - 1 if reserved >= 0 else -1))
        pos = stop
    return spans if pos == len(buf) - 1 else []
