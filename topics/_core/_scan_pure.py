"""Pure-Python write-body splitter: the fallback for, and oracle of, ``topics._core._scan``.

``split_write_body`` splits an HTTP write body (one JSON object) into its records and its
other top-level fields *without* re-encoding the records' payloads: each record's
``data`` and ``meta`` come back as the exact bytes of their JSON text in the body, so
what a client sent is what gets stored (``1.50`` stays ``1.50``, key order and escapes
are kept). ``_scan.pyi`` documents the interface; the compiled module must match this one
exactly (results, and each error's path, offset and message). Clarity wins over speed.

Rules shared by both implementations:
- The body is exactly one JSON object (RFC 8259; whitespace is space, tab, CR, LF only;
  valid UTF-8, checked strictly like ``bytes.decode``; no BOM, NaN or Infinity).
- Syntax errors are reported at the first byte that cannot continue a valid body (the
  lead byte of a bad UTF-8 sequence; ``len(body)`` when the body ends too early).
- Each member value (a record's data, a top-level field, ...) may nest 512 levels deep,
  like ``json_check``, so a data span that passes here also passes there.
- The shape errors ("records" not an array, a record not an object) wait until the whole
  body has been read, because a later duplicate "records" member replaces an earlier one
  (the last duplicate wins everywhere, like ``json.loads``).
- Decoded values: strings are fully unescaped (a lone surrogate escape stays a lone
  surrogate, like ``json.loads``); numbers go through ``int()``/``float()``; arrays and
  objects through ``ujson.loads`` of their span. A value those cannot decode (an integer
  over Python's 4300-digit limit) is a BodyError too.
"""

from __future__ import annotations

import json
import re
from typing import Final

import ujson

__all__ = ["MAX_DEPTH", "BodyError", "split_write_body"]

MAX_DEPTH: Final = 512

# The problems a BodyError can name; _scan.pyx holds the same texts.
EOF: Final = "unexpected end of body"
VALUE: Final = "expected a JSON value"
NUMBER: Final = "invalid number"
LITERAL: Final = "invalid literal"
ESCAPE: Final = "invalid escape in string"
CONTROL: Final = "unescaped control character in string"
UTF8: Final = "invalid UTF-8"
KEY: Final = "expected a string key"
COLON: Final = "expected ':'"
OBJECT_END: Final = "expected ',' or '}'"
ARRAY_END: Final = "expected ',' or ']'"
DEPTH: Final = "nesting deeper than 512"
TRAILING: Final = "unexpected data after the body"
NOT_OBJECT: Final = "the body must be a JSON object"
RECORDS: Final = "records must be an array"
RECORD: Final = "a record must be a JSON object"
DECODE: Final = "value cannot be decoded"

_WS = re.compile(rb"[ \t\n\r]*")
_DIGITS = re.compile(rb"[0-9]*")
# A string body up to the first byte that is not plain text or a complete valid escape.
_STR_BODY = re.compile(rb'(?:[^"\\\x00-\x1f]+|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*')
_HEX = frozenset(b"0123456789abcdefABCDEF")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_LITERALS: Final = {0x74: (b"true", True), 0x66: (b"false", False), 0x6E: (b"null", None)}
_SPANS: Final = ("data", "meta")


class BodyError(ValueError):
    """A write body that cannot be split: ``path`` names where ("$", "$.records[3].data",
    '$["odd key"]'), ``offset`` is the byte offset in the body, ``problem`` says what."""

    def __init__(self, problem: str, path: str = "$", offset: int = 0) -> None:
        super().__init__(f"{problem} at {path} (byte {offset})")
        self.problem = problem
        self.path = path
        self.offset = offset

    def __reduce__(self) -> tuple[type[BodyError], tuple[str, str, int]]:
        return (type(self), (self.problem, self.path, self.offset))


def member_path(parent: str, key: str) -> str:
    """``parent.key``, or ``parent["key"]`` when the key is not a plain ASCII identifier."""
    if _IDENT.match(key):
        return f"{parent}.{key}"
    return f"{parent}[{json.dumps(key)}]"


def _decode_number(span: bytes) -> int | float:
    # The span is already strict JSON, so int()/float() only fail on size.
    if b"." in span or b"e" in span or b"E" in span:
        return float(span)
    return int(span)


class _Scanner:
    __slots__ = ("buf", "end")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.end = len(buf)

    # --- tokens -------------------------------------------------------------------

    def ws(self, pos: int) -> int:
        m = _WS.match(self.buf, pos)
        assert m is not None  # the pattern matches the empty string
        return m.end()

    def at(self, pos: int, path: str) -> int:
        """The byte at ``pos``; the body ending there is an error at ``path``."""
        if pos >= self.end:
            raise BodyError(EOF, path, self.end)
        return self.buf[pos]

    def string(self, pos: int, path: str) -> int:
        """Check the string opening at ``pos``; return the offset after its closing quote."""
        buf = self.buf
        m = _STR_BODY.match(buf, pos + 1)
        assert m is not None
        stop = m.end()
        try:
            buf[pos + 1 : stop].decode()
        except UnicodeDecodeError as exc:
            raise BodyError(UTF8, path, pos + 1 + exc.start) from None
        c = self.at(stop, path)
        if c == 0x22:
            return stop + 1
        if c == 0x5C:  # an escape the pattern refused: blame its first bad byte
            bad = stop + 1
            if self.at(bad, path) == 0x75:
                bad += 1
                while self.at(bad, path) in _HEX:
                    bad += 1
            raise BodyError(ESCAPE, path, bad)
        raise BodyError(CONTROL, path, stop)

    def text(self, pos: int, path: str) -> tuple[str, int]:
        """Check and decode the string opening at ``pos``; return it and the offset after."""
        end = self.string(pos, path)
        raw = self.buf[pos:end]
        if b"\\" in raw:
            value: str = json.loads(raw)  # the reference for escapes and lone surrogates
            return value, end
        return raw[1:-1].decode(), end

    def digits(self, pos: int, path: str, required: bool) -> int:
        if required and not 0x30 <= self.at(pos, path) <= 0x39:
            raise BodyError(NUMBER, path, pos)
        m = _DIGITS.match(self.buf, pos)
        assert m is not None
        return m.end()

    def number(self, pos: int, path: str) -> int:
        buf, end = self.buf, self.end
        if buf[pos] == 0x2D:
            pos += 1
        if self.at(pos, path) == 0x30:
            pos += 1
            if pos < end and 0x30 <= buf[pos] <= 0x39:
                raise BodyError(NUMBER, path, pos)  # a leading zero
        else:
            pos = self.digits(pos, path, True)
        if pos < end and buf[pos] == 0x2E:
            pos = self.digits(pos + 1, path, True)
        if pos < end and buf[pos] in b"eE":
            pos += 1
            if self.at(pos, path) in b"+-":
                pos += 1
            pos = self.digits(pos, path, True)
        return pos

    def literal(self, pos: int, path: str) -> tuple[object, int]:
        word, value = _LITERALS[self.buf[pos]]
        for k in range(1, len(word)):
            if self.at(pos + k, path) != word[k]:
                raise BodyError(LITERAL, path, pos + k)
        return value, pos + len(word)

    def key(self, pos: int, path: str) -> tuple[str, int]:
        """Read ``"key" :`` at ``pos`` (inside the object at ``path``); return the key and
        the offset of its value."""
        if self.at(pos, path) != 0x22:
            raise BodyError(KEY, path, pos)
        key, pos = self.text(pos, path)
        pos = self.ws(pos)
        if self.at(pos, path) != 0x3A:
            raise BodyError(COLON, path, pos)
        return key, self.ws(pos + 1)

    # --- values -------------------------------------------------------------------

    def skip(self, pos: int, path: str) -> int:
        """Check the value at ``pos`` (errors name ``path``); return the offset after it.

        A loop over an explicit bracket stack rather than recursion, so 512 levels of
        nesting cannot hit Python's recursion limit.
        """
        stack = bytearray()  # the open brackets, innermost last
        while True:
            c = self.at(pos, path)
            if c == 0x7B or c == 0x5B:
                if len(stack) >= MAX_DEPTH:
                    raise BodyError(DEPTH, path, pos)
                stack.append(c)
                pos = self.ws(pos + 1)
                if self.at(pos, path) == c + 2:  # "]" / "}" follow "[" / "{" by 2
                    stack.pop()
                    pos += 1
                else:
                    if c == 0x7B:
                        pos = self.key(pos, path)[1]
                    continue
            elif c == 0x22:
                pos = self.string(pos, path)
            elif c == 0x2D or 0x30 <= c <= 0x39:
                pos = self.number(pos, path)
            elif c in _LITERALS:
                pos = self.literal(pos, path)[1]
            else:
                raise BodyError(VALUE, path, pos)
            while stack:  # after a value: close containers until a "," needs a new value
                pos = self.ws(pos)
                c = self.at(pos, path)
                if c == 0x2C:
                    pos = self.ws(pos + 1)
                    if stack[-1] == 0x7B:
                        pos = self.key(pos, path)[1]
                    break
                if c != stack[-1] + 2:
                    raise BodyError(OBJECT_END if stack[-1] == 0x7B else ARRAY_END, path, pos)
                stack.pop()
                pos += 1
            else:
                return pos

    def value(self, pos: int, path: str) -> tuple[object, int]:
        """Check and decode the value at ``pos``; return it and the offset after it."""
        c = self.at(pos, path)
        if c == 0x22:
            return self.text(pos, path)
        if c in _LITERALS:
            return self.literal(pos, path)
        end = self.skip(pos, path)
        try:
            if c == 0x7B or c == 0x5B:
                return ujson.loads(self.buf[pos:end]), end
            return _decode_number(self.buf[pos:end]), end
        except (ValueError, OverflowError):
            raise BodyError(DECODE, path, pos) from None

    # --- the write body -----------------------------------------------------------

    def record(self, pos: int, path: str) -> tuple[dict[str, object], int]:
        """Split the record object opening at ``pos``."""
        rec: dict[str, object] = {}
        pos = self.ws(pos + 1)
        if self.at(pos, path) == 0x7D:
            return rec, pos + 1
        while True:
            key, pos = self.key(pos, path)
            if key in _SPANS:
                end = self.skip(pos, member_path(path, key))
                rec[key] = None if self.buf[pos] == 0x6E else self.buf[pos:end]
            else:
                rec[key], end = self.value(pos, member_path(path, key))
            pos = self.ws(end)
            c = self.at(pos, path)
            if c == 0x7D:
                return rec, pos + 1
            if c != 0x2C:
                raise BodyError(OBJECT_END, path, pos)
            pos = self.ws(pos + 1)

    def records(self, pos: int) -> tuple[list[dict[str, object]] | None, BodyError | None, int]:
        """Split the "records" value at ``pos``: (records, shape error, offset after)."""
        path = "$.records"
        if self.at(pos, path) != 0x5B:
            return None, BodyError(RECORDS, path, pos), self.skip(pos, path)
        out: list[dict[str, object]] = []
        pending: BodyError | None = None
        pos = self.ws(pos + 1)
        if self.at(pos, path) == 0x5D:
            return out, None, pos + 1
        index = 0
        while True:
            item = f"{path}[{index}]"
            if self.at(pos, item) == 0x7B:
                rec, pos = self.record(pos, item)
                out.append(rec)
            else:
                if pending is None:
                    pending = BodyError(RECORD, item, pos)
                pos = self.skip(pos, item)
            pos = self.ws(pos)
            c = self.at(pos, path)
            if c == 0x5D:
                return (out if pending is None else None), pending, pos + 1
            if c != 0x2C:
                raise BodyError(ARRAY_END, path, pos)
            pos = self.ws(pos + 1)
            index += 1

    def body(self) -> tuple[list[dict[str, object]] | None, dict[str, object]]:
        records: list[dict[str, object]] | None = None
        pending: BodyError | None = None
        fields: dict[str, object] = {}
        pos = self.ws(0)
        if self.at(pos, "$") != 0x7B:
            raise BodyError(NOT_OBJECT, "$", pos)
        pos = self.ws(pos + 1)
        if self.at(pos, "$") == 0x7D:
            pos += 1
        else:
            while True:
                key, pos = self.key(pos, "$")
                if key == "records":
                    records, pending, pos = self.records(pos)
                else:
                    fields[key], pos = self.value(pos, member_path("$", key))
                pos = self.ws(pos)
                c = self.at(pos, "$")
                if c == 0x7D:
                    pos += 1
                    break
                if c != 0x2C:
                    raise BodyError(OBJECT_END, "$", pos)
                pos = self.ws(pos + 1)
        pos = self.ws(pos)
        if pos != self.end:
            raise BodyError(TRAILING, "$", pos)
        if pending is not None:
            raise pending
        return records, fields


def split_write_body(
    body: bytes | bytearray | memoryview,
) -> tuple[list[dict[str, object]] | None, dict[str, object]]:
    """Split a JSON write body into (records, fields) without re-encoding payloads.

    ``records`` is None when the body has no "records" member, else one dict per record:
    "data"/"meta" -> the raw JSON text bytes of the value (None for JSON null), every
    other member decoded. ``fields`` holds the other top-level members, decoded.
    Raises BodyError (a ValueError) for anything that is not such a body, TypeError
    for a ``body`` that is not bytes-like.
    """
    if not isinstance(body, bytes | bytearray | memoryview):
        raise TypeError(f"body must be bytes, bytearray or memoryview, not {type(body).__name__}")
    return _Scanner(bytes(body)).body()
