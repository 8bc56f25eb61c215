"""Pure-Python core: the fallback for, and reference oracle of, ``topics._core._ext``.

Behaviour (results, error index/field/reason and messages) matches the compiled module
exactly; ``_ext.pyi`` documents the interface. Clarity wins over speed here: the compiled
module is the fast path and is tested against this one.

Choices the stub leaves open, shared by both implementations:
- encode_batch validates each record in the order data, meta, tag, node, record size.
  With ujson's dumps it encodes a batch's data values in one dumps(list) call and its dict
  metas in another, split per value (see _split_array), and falls back to one call per
  value when that fails or does not split cleanly; other dumps are called per value.
- json_check rejects nesting deeper than 512 and reports the offset of the first byte
  that cannot continue a valid document (the lead byte of a bad UTF-8 sequence).
- iter_frames checks truncation, then length, then CRC, then kind/reserved/flags.
"""

from __future__ import annotations

import array
import re
import struct
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from typing import Final, Protocol, TypeGuard

try:
    import ujson
except ImportError:  # pragma: no cover - ujson is a dependency
    _BATCH_DUMPS: tuple[object, ...] = ()
else:
    # The dumps functions encode_batch calls once per batch, matched by identity: within
    # ujson's output for a list, each value's text is exactly what ujson makes of it alone
    # (no indent, no separator spaces). Any other dumps is called once per value, keeping
    # exactly what it makes of each: json.dumps writes ", " between elements, say.
    _BATCH_DUMPS = (ujson.dumps, ujson.encode)

Buffer = bytes | bytearray | memoryview

FORMAT_VERSION: Final = 1
FRAME_HEADER_SIZE: Final = 40
FRAME_TRAILER_SIZE: Final = 1
KIND_RECORD: Final = 1
FLAG_LIVE: Final = 0
FLAG_DELETED: Final = 1
RENDER_DATA: Final = 1
RENDER_META: Final = 2
RENDER_TAGS: Final = 4

_MIN_FRAME = FRAME_HEADER_SIZE + FRAME_TRAILER_SIZE
_U16, _U32, _U64 = 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF
_I64 = 1 << 63
# Largest data+meta limit that still keeps every frame_len within a u32.
_MAX_RECORD_LIMIT = _U32 - _MIN_FRAME - 2 * _U16
_MAX_DEPTH = 512
_BODY = struct.Struct("<BBHHHIIQq")  # frame bytes [8:40]
_U32S = struct.Struct("<I")
_MISSING = object()


class _Keep(Protocol):
    """A render filter: ``parts`` bit 1 node, 2 tag, 4 meta, 8 data (what it reads)."""

    parts: int

    def __call__(
        self, node: bytes | None, tag: bytes | None, meta: bytes | None, data: bytes | None, /
    ) -> bool: ...


class FrameError(ValueError):
    """The one error of the core: bad record input, or bytes that are not valid frames."""

    def __init__(
        self, message: str, index: int = -1, field: str = "frame", reason: str = "frame"
    ) -> None:
        super().__init__(message)
        self.index = index
        self.field = field
        self.reason = reason

    def __reduce__(self) -> tuple[type[FrameError], tuple[str, int, str, str]]:
        return (type(self), (str(self), self.index, self.field, self.reason))


def _int_in(value: int, low: int, high: int, what: str) -> int:
    # Mirrors the compiled module's C integer conversions (TypeError / OverflowError).
    if not isinstance(value, int):
        raise TypeError(f"{what} must be an int")
    if not low <= value <= high:
        raise OverflowError(f"{what} out of range")
    return value


# --- CRC32C -------------------------------------------------------------------------


def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE: Final = _crc_table()


def _as_bytes(data: Buffer) -> bytes:
    # Any buffer, but not bytes(int) or other non-buffers that bytes() would accept.
    return data if type(data) is bytes else memoryview(data).tobytes()


def crc32c(data: Buffer, crc: int = 0) -> int:
    table = _CRC_TABLE
    c = _int_in(crc, 0, _U32, "crc") ^ _U32
    for b in _as_bytes(data):
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ _U32


def _frame_crc(frame: bytes, salt: int) -> int:
    return crc32c(frame[8:-1], crc32c(frame[:4], salt))


# --- JSON syntax check --------------------------------------------------------------

_WS = re.compile(rb"[ \t\n\r]*")
_DIGITS = re.compile(rb"[0-9]*")
_STR_BODY = re.compile(rb'(?:[^"\\\x00-\x1f]+|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*')
_HEX = frozenset(b"0123456789abcdefABCDEF")


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
    try:
        buf[pos + 1 : stop].decode()
    except UnicodeDecodeError as exc:
        raise _json_fail(pos + 1 + exc.start) from None
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


def _number(buf: bytes, pos: int) -> int:
    end = len(buf)
    if buf[pos] == 0x2D:
        pos += 1
    if pos < end and buf[pos] == 0x30:
        pos += 1
    elif pos < end and 0x31 <= buf[pos] <= 0x39:
        pos = _DIGITS.match(buf, pos + 1).end()  # type: ignore[union-attr]
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


def _value(buf: bytes, pos: int) -> tuple[int, int]:
    """Scan the one JSON value that starts at ``pos`` (no whitespace skipped before it).

    Returns (offset just after it, member count if it is an object else -1); raises
    FrameError at the first bad byte. Stops at the value's last byte whatever follows, so a
    value inside a larger text scans exactly as it would on its own.
    """
    end = len(buf)
    stack = bytearray()  # the open brackets, innermost last
    members = -1
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
                    pos = _key(buf, pos)
                    members += len(stack) == 1
                continue
        elif c == 0x22:
            pos = _string(buf, pos)
        elif c == 0x2D or 0x30 <= c <= 0x39:
            pos = _number(buf, pos)
        else:
            pos = _literal(buf, pos)
        while True:  # after a value: close containers until a "," or the end
            if not stack:
                return pos, members
            pos = _ws(buf, pos)
            if pos >= end:
                raise _json_fail(end)
            if buf[pos] == 0x2C:
                pos = _ws(buf, pos + 1)
                if stack[-1] == 0x7B:
                    pos = _key(buf, pos)
                    members += len(stack) == 1
                break
            if buf[pos] != stack[-1] + 2:
                raise _json_fail(pos)
            stack.pop()
            pos += 1


def json_check(data: Buffer) -> int:
    buf = _as_bytes(data)
    pos, members = _value(buf, _ws(buf, 0))
    pos = _ws(buf, pos)
    if pos != len(buf):
        raise _json_fail(pos)
    return members


def _split_array(buf: bytes, count: int) -> list[tuple[int, int, int]]:
    """Split what dumps() made of a list of ``count`` values into one span per value.

    The encoders this is used with write a list as "[" + ",".join(texts) + "]", each text
    exactly what they make of that value alone; a span (start, stop, members) runs from
    just after one delimiter to just before the next (whitespace included, as a standalone
    text would have it) and must hold exactly one valid JSON value (json_check's rules).
    Returns the ``count`` spans when the whole text splits cleanly, else []: an element
    that does not check (NaN or Infinity, say), a missing delimiter or a wrong count means
    the values go through dumps() one by one, and that path reports the failing record
    exactly. (No prefix is trusted: a text from ujson's verbatim __json__ hook that holds
    a "," shifts every span after it.)
    """
    spans: list[tuple[int, int, int]] = []
    if count == 0 or not buf.startswith(b"["):
        return []
    pos = 0
    for j in range(count):
        try:
            stop, members = _value(buf, _ws(buf, pos + 1))
        except FrameError:
            return []
        stop = _ws(buf, stop)
        if stop >= len(buf) or buf[stop] != (0x2C if j + 1 < count else 0x5D):
            return []
        spans.append((pos + 1, stop, members))
        pos = stop
    return spans if pos == len(buf) - 1 else []


# --- encoding -----------------------------------------------------------------------


_REASONS = {"missing": "required", "type": "wrong type", "empty": "must not be empty"}
_REASONS.update({"too_large": "too large", "meta_keys": "too many keys"})


def _record_error(index: int, field: str, reason: str, detail: str = "") -> FrameError:
    return FrameError(detail or _REASONS[reason], index, field, reason)


def _checked(raw: bytes, index: int, field: str) -> int:
    try:
        return json_check(raw)
    except FrameError as exc:
        raise _record_error(index, field, "json", str(exc)) from None


def _is_buffer(value: object) -> TypeGuard[Buffer]:
    return isinstance(value, bytes | bytearray | memoryview)


def _dumps_json(value: object, index: int, field: str, dumps: Callable[[object], str]) -> bytes:
    try:
        text: object = dumps(value)
        if isinstance(text, bytes):
            return text
        if isinstance(text, str):
            return text.encode()
    except (TypeError, ValueError, OverflowError):
        pass  # UnicodeEncodeError is a ValueError too
    raise _record_error(index, field, "type")


class _Dumped:
    """One dumps(list) call over the values a batch would otherwise dumps() one by one,
    split per value (_split_array). take() hands out the next value's (JSON, members), or
    None when every value must go through dumps() on its own (no batch call was made, it
    failed, or its text did not split cleanly)."""

    def __init__(self, values: list[object], dumps: Callable[[object], str] | None) -> None:
        self.text = b""
        self.spans: list[tuple[int, int, int]] = []
        self.next = 0
        if not values or dumps is None:
            return
        try:
            text: object = dumps(values)
            if isinstance(text, str):
                text = text.encode()
        except Exception:
            # Which value failed is for the per-record path to find: it raises the first
            # failing record's error (or this same exception) exactly as it always has.
            return
        if isinstance(text, bytes):
            self.text = text
            self.spans = _split_array(text, len(values))

    def take(self) -> tuple[bytes, int] | None:
        j = self.next
        self.next += 1
        if j >= len(self.spans):
            return None
        start, stop, members = self.spans[j]
        return self.text[start:stop], members


def _meta_json(
    meta: object,
    index: int,
    limits: tuple[int, ...],
    dumps: Callable[[object], str],
    batch: _Dumped,
) -> bytes:
    if not isinstance(meta, dict | bytes | bytearray | memoryview):
        raise _record_error(index, "meta", "type")
    got = batch.take() if isinstance(meta, dict) else None
    if got is not None:
        raw, keys = got  # checked by _split_array
    else:
        raw = _as_bytes(meta) if _is_buffer(meta) else _dumps_json(meta, index, "meta", dumps)
    if len(raw) > limits[1]:
        raise _record_error(index, "meta", "too_large")
    if got is None:
        keys = _checked(raw, index, "meta")
    if keys < 0:
        raise _record_error(index, "meta", "type")
    if keys > limits[2]:
        raise _record_error(index, "meta", "meta_keys")
    return raw


def _name(value: object, index: int, field: str, limit: int) -> bytes:
    if value is None:
        return b""
    if not isinstance(value, str):
        raise _record_error(index, field, "type")
    if not value:
        raise _record_error(index, field, "empty")
    try:
        raw = value.encode()
    except UnicodeEncodeError:
        raise _record_error(index, field, "type") from None
    if len(raw) > limit:
        raise _record_error(index, field, "too_large")
    return raw


def _check_limits(limits: tuple[int, int, int, int, int]) -> tuple[int, ...]:
    """Reject negative limits; clamp the rest to what a frame can hold."""
    if not isinstance(limits, tuple):
        raise TypeError("limits must be a tuple")
    if len(limits) != 5:
        raise ValueError("limits must have 5 items")
    if not all(isinstance(v, int) for v in limits):
        raise TypeError("limits must be ints")
    if min(limits) < 0:
        raise ValueError("limits must be >= 0")
    highs = (_MAX_RECORD_LIMIT, _U32, _U32, _U16, _U16)
    return tuple(min(v, high) for v, high in zip(limits, highs, strict=True))


_Fields = tuple[object, object, object, object]


def _fetch(record: object, index: int) -> _Fields:
    """A record's (data, meta, tag, node); absent ones None."""
    if not isinstance(record, Mapping):
        raise _record_error(index, "record", "type")
    data = record.get("data", _MISSING)
    if data is _MISSING:
        raise _record_error(index, "data", "missing")
    return data, record.get("meta"), record.get("tag"), record.get("node")


def _encode_record(
    fields: _Fields,
    index: int,
    default_node: str | None,
    limits: tuple[int, ...],
    dumps: Callable[[object], str],
    data_batch: _Dumped,
    meta_batch: _Dumped,
) -> tuple[bytes, bytes, bytes, bytes]:
    """Validate one record; return its (node, tag, meta, data) bytes (b"" = absent)."""
    data, meta, tag, node = fields
    got = None
    if data is None:
        raw = b"null"
    elif _is_buffer(data):
        raw = _as_bytes(data)
    else:
        got = data_batch.take()
        raw = got[0] if got is not None else _dumps_json(data, index, "data", dumps)
    if got is None:
        _checked(raw, index, "data")
    meta_raw = b"" if meta is None else _meta_json(meta, index, limits, dumps, meta_batch)
    tag_raw = _name(tag, index, "tag", limits[3])
    node_raw = _name(default_node if node is None else node, index, "node", limits[4])
    if len(raw) + len(meta_raw) > limits[0]:
        raise _record_error(index, "record", "too_large")
    return node_raw, tag_raw, meta_raw, raw


def _frame(seq: int, ts_ms: int, fields: tuple[bytes, bytes, bytes, bytes], salt: int) -> bytes:
    node, tag, meta, data = fields
    size = _MIN_FRAME + len(node) + len(tag) + len(meta) + len(data)
    lengths = (len(node), len(tag), 0, len(meta), len(data))
    body = _BODY.pack(KIND_RECORD, 0, *lengths, seq, ts_ms) + node + tag + meta + data
    head = _U32S.pack(size)
    return head + _U32S.pack(crc32c(body, crc32c(head, salt))) + body + b"\0"


def encode_batch(
    records: Sequence[Mapping[str, object]],
    first_seq: int,
    ts_ms: int,
    default_node: str | None,
    salt: int,
    limits: tuple[int, int, int, int, int],
    dumps: Callable[[object], str],
) -> tuple[bytes, list[bytes | None] | None]:
    _int_in(first_seq, 0, _U64, "first_seq")
    _int_in(ts_ms, -_I64, _I64 - 1, "ts_ms")
    _int_in(salt, 0, _U32, "salt")
    checked = _check_limits(limits)
    batch = list(records)
    if batch and first_seq + len(batch) - 1 > _U64:
        raise OverflowError("seq overflows u64")
    # Fetch every record first; a record that cannot be read is reported only after the
    # records before it are checked, as an earlier record's error wins.
    fields: list[_Fields] = []
    error: Exception | None = None
    for i, record in enumerate(batch):
        try:
            fields.append(_fetch(record, i))
        except Exception as exc:
            error = exc
            break
    # With ujson, one dumps() call for all data values and one for all dict metas
    # (mirroring _ext, where this saves most of the per-call cost of dumps()).
    batched = dumps if any(dumps is d for d in _BATCH_DUMPS) else None
    data_batch = _Dumped(
        [f[0] for f in fields if f[0] is not None and not _is_buffer(f[0])], batched
    )
    meta_batch = _Dumped([f[1] for f in fields if isinstance(f[1], dict)], batched)
    encoded = [
        _encode_record(f, i, default_node, checked, dumps, data_batch, meta_batch)
        for i, f in enumerate(fields)
    ]
    if error is not None:
        raise error
    frames = [_frame(first_seq + i, ts_ms, f, salt) for i, f in enumerate(encoded)]
    tags: list[bytes | None] = [f[1] or None for f in encoded]
    return b"".join(frames), tags if any(tags) else None


# --- frames -------------------------------------------------------------------------


def _check_frame(buf: bytes, off: int, index: int, salt: int, verify: bool) -> int:
    """Return the length of the valid frame at ``off`` or raise FrameError."""

    def fail(reason: str) -> FrameError:
        return FrameError(f"frame {index} at offset {off}: {reason}", index, "frame", reason)

    avail = len(buf) - off
    if avail < _MIN_FRAME:
        raise fail("truncated")
    size = _U32S.unpack_from(buf, off)[0]
    if size > avail:
        raise fail("truncated")
    if size < _MIN_FRAME:
        raise fail("kind")
    frame = buf[off : off + size]
    if verify and _U32S.unpack_from(frame, 4)[0] != _frame_crc(frame, salt):
        raise fail("crc")
    kind, res1, nlen, tlen, res2, mlen, dlen, _, _ = _BODY.unpack_from(frame, 8)
    # Any non-zero trailer reads as deleted (see _ext: a garbled flip must not corrupt).
    if kind != KIND_RECORD or res1 or res2:
        raise fail("kind")
    if dlen == 0 or _MIN_FRAME + nlen + tlen + mlen + dlen != size:
        raise fail("kind")
    return int(size)


def iter_frames(buf: Buffer, salt: int, verify: bool = True) -> list[tuple[int, int]]:
    _int_in(salt, 0, _U32, "salt")
    data = _as_bytes(buf)
    spans: list[tuple[int, int]] = []
    off = 0
    while off < len(data):
        size = _check_frame(data, off, len(spans), salt, verify)
        spans.append((off, size))
        off += size
    return spans


def frame_offsets(buf: Buffer, salt: int, verify: bool = True, start: int = 0) -> array.array[int]:
    spans = iter_frames(buf, salt, verify)
    if not isinstance(start, int):
        raise TypeError("start must be an int")
    if start < 0:
        raise ValueError("negative start offset")
    if start + len(buf) > _U32:
        raise OverflowError("frame offsets pass 4 GiB (u32)")
    return array.array("I", [start + off for off, _ in spans])


_WAL_FRAME = struct.Struct("<IIQB3x")


def encode_wal_frames(frames: Sequence[tuple[int, int, bytes]], salt: int) -> bytearray:
    _int_in(salt, 0, _U32, "salt")
    items = list(frames)
    for item in items:
        if type(item) is not tuple or len(item) != 3:
            raise TypeError("each frame must be a (lsn, entry_type, payload) tuple")
        lsn, kind, payload = item
        if not isinstance(lsn, int) or not 0 <= lsn <= _U64:
            raise ValueError(f"lsn {lsn!r} is not a u64")
        if not isinstance(kind, int) or not 0 <= kind <= 0xFF:
            raise ValueError(f"entry_type {kind!r} is not a u8")
        if not isinstance(payload, bytes):
            raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
        if len(payload) > _U32:
            raise ValueError(f"payload of {len(payload)} bytes is over u32")
    out = bytearray()
    for lsn, kind, payload in items:
        head = _WAL_FRAME.pack(len(payload), 0, lsn, kind)
        crc = crc32c(head[8:] + payload, crc32c(head[:4], salt))
        out += head[:4] + _U32S.pack(crc) + head[8:] + payload
    return out


def frame_seq(buf: Buffer, offset: int = 0) -> int:
    if offset < 0:
        raise IndexError("negative frame offset")
    if len(buf) - offset < FRAME_HEADER_SIZE:
        raise FrameError(f"frame at offset {offset}: truncated", -1, "frame", "truncated")
    return int(struct.unpack_from("<Q", buf, offset + 24)[0])


# --- segment ------------------------------------------------------------------------

_ESCAPE_RE = re.compile(rb'[\x00-\x1f"\\]')
_ESCAPES = {i: b"\\u%04x" % i for i in range(32)}
_ESCAPES.update({0x22: b'\\"', 0x5C: b"\\\\", 8: b"\\b", 9: b"\\t", 10: b"\\n"})
_ESCAPES.update({12: b"\\f", 13: b"\\r"})


def _escape(raw: bytes) -> bytes:
    return _ESCAPE_RE.sub(lambda m: _ESCAPES[m.group()[0]], raw)


class SegmentBuffer:
    """An in-memory run of record frames with consecutive seqs (see ``_ext.pyi``)."""

    def __init__(self, base_seq: int, salt: int) -> None:
        self._base_seq = _int_in(base_seq, 0, _U64, "base_seq")
        self._salt = _int_in(salt, 0, _U32, "salt")
        self._buf = bytearray()
        self._offsets: list[int] = []
        self._live_count = 0
        self._live_bytes = 0
        self._retired = 0
        self._sealed = False

    @property
    def base_seq(self) -> int:
        return self._base_seq

    @property
    def salt(self) -> int:
        return self._salt

    @property
    def count(self) -> int:
        return len(self._offsets)

    @property
    def nbytes(self) -> int:
        return len(self._buf)

    @property
    def live_count(self) -> int:
        return self._live_count

    @property
    def live_bytes(self) -> int:
        return self._live_bytes

    @property
    def retired(self) -> int:
        return self._retired

    @property
    def sealed(self) -> bool:
        return self._sealed

    @property
    def last_ts(self) -> int:
        return self.ts_at(len(self._offsets) - 1) if self._offsets else -1

    def _extend(self, frames: Buffer, verify: bool) -> int:
        data = _as_bytes(frames)
        spans: list[tuple[int, int]] = []
        next_seq = self._base_seq + len(self._offsets)
        last_ts = self.last_ts if self._offsets else -_I64
        off = 0
        while off < len(data):  # like iter_frames, but the first bad frame wins
            i = len(spans)
            spans.append((off, _check_frame(data, off, i, self._salt, verify)))
            seq, ts = struct.unpack_from("<Qq", data, off + 24)
            if seq != next_seq + i or ts < last_ts:
                raise FrameError(f"frame {i} at offset {off}: seq", i, "frame", "seq")
            last_ts = ts
            off += spans[-1][1]
        if len(self._buf) + len(data) > _U32:
            raise ValueError("segment would exceed 4 GiB")
        base = len(self._buf)
        try:
            self._buf += data
        except BufferError:  # a view() is exported: leave it the old bytes
            self._buf = self._buf + data
        for off, size in spans:
            self._offsets.append(base + off)
            if data[off + size - 1] == FLAG_LIVE:
                self._live_count += 1
                self._live_bytes += size
        return len(spans)

    def append(self, frames: Buffer) -> int:
        if self._sealed:
            raise ValueError("segment is sealed")
        return self._extend(frames, False)

    def seal(self) -> None:
        self._sealed = True

    def _offset(self, i: int) -> int:
        if not 0 <= i < len(self._offsets):
            raise IndexError(f"frame index {i} out of range")
        return self._offsets[i]

    def _parts(self, i: int) -> tuple[int, int, bytes, bytes, bytes, bytes]:
        """(offset, frame_len, node, tag, meta, data) of frame i; absent parts are b""."""
        off = self._offset(i)
        size, nlen, tlen, _, mlen, dlen = struct.unpack_from("<I6xHHHII", self._buf, off)
        parts: list[bytes] = []
        pos = off + FRAME_HEADER_SIZE
        for n in (nlen, tlen, mlen, dlen):
            parts.append(bytes(self._buf[pos : pos + n]))
            pos += n
        node, tag, meta, data = parts
        return off, size, node, tag, meta, data

    def frame_len(self, i: int) -> int:
        return self._parts(i)[1]

    def ts_at(self, i: int) -> int:
        return int(struct.unpack_from("<q", self._buf, self._offset(i) + 32)[0])

    def tag_at(self, i: int) -> bytes | None:
        return self._parts(i)[3] or None

    def node_at(self, i: int) -> bytes | None:
        return self._parts(i)[2] or None

    def _flag(self, i: int) -> int:
        off = self._offsets[i]
        size: int = _U32S.unpack_from(self._buf, off)[0]
        return self._buf[off + size - 1]

    def is_live(self, i: int) -> bool:
        self._offset(i)
        return i >= self._retired and self._flag(i) == FLAG_LIVE

    def offset_of(self, i: int) -> int:
        return self._offset(i)

    def frame(self, i: int) -> bytes:
        off, size = self._parts(i)[:2]
        return bytes(self._buf[off : off + size])

    def decode(
        self, i: int
    ) -> tuple[int, int, bytes | None, bytes | None, bytes | None, bytes, bool]:
        off, _, node, tag, meta, data = self._parts(i)
        seq, ts = struct.unpack_from("<Qq", self._buf, off + 24)
        return seq, ts, node or None, tag or None, meta or None, data, self.is_live(i)

    def _unlive(self, i: int, trie: TagTrie | None) -> int:
        size = self.frame_len(i)
        self._live_count -= 1
        self._live_bytes -= size
        tag = self.tag_at(i) if trie is not None else None
        if trie is not None and tag is not None:
            trie.discard(tag, self._base_seq + i)
        return size

    def mark_deleted(self, i: int, trie: TagTrie | None = None) -> int:
        off, size = self._parts(i)[:2]
        live = self.is_live(i)
        self._buf[off + size - 1] = FLAG_DELETED
        return self._unlive(i, trie) if live else 0

    def retire_to(self, i: int, trie: TagTrie | None = None) -> tuple[int, int, int]:
        stop = min(max(i, self._retired), len(self._offsets))
        frames = nbytes = 0
        last = -1
        for j in range(self._retired, stop):
            if self._flag(j) == FLAG_LIVE:
                frames += 1
                nbytes += self._unlive(j, trie)
                last = j
        self._retired = stop
        return frames, nbytes, last

    def first_live(self, start: int) -> int:
        i = max(start, self._retired)
        while i < len(self._offsets) and self._flag(i) != FLAG_LIVE:
            i += 1
        return min(i, len(self._offsets))

    def first_ts_at_least(self, ts_ms: int) -> int:
        return bisect_left(range(len(self._offsets)), ts_ms, key=self.ts_at)

    def _render_one(self, i: int, flags: int) -> bytes:
        seq, ts, node, tag, meta, data, _ = self.decode(i)
        out = [b'{"$seq":%d,"$ts":%d' % (seq, ts)]
        if node is not None:
            out.append(b',"$node":"%s"' % _escape(node))
        if flags & RENDER_TAGS and tag is not None:
            out.append(b',"$tag":"%s"' % _escape(tag))
        if flags & RENDER_DATA:
            out.append(b',"data":' + data)
        if flags & RENDER_META and meta is not None:
            out.append(b',"meta":' + meta)
        out.append(b"}")
        return b"".join(out)

    def render(
        self,
        start: int,
        limit: int,
        max_bytes: int,
        skip_nodes: frozenset[bytes] | None,
        flags: int,
        stop: int = -1,
        keep: _Keep | None = None,
    ) -> tuple[bytes, int, int, int]:
        parts: list[bytes] = []
        size = -1  # the first record has no separating comma
        examined = 0
        count = len(self._offsets) if stop < 0 else min(stop, len(self._offsets))
        i = min(max(start, self._retired), count)
        while i < count and examined < limit:
            i += 1
            if self._flag(i - 1) != FLAG_LIVE:
                continue
            examined += 1
            node = self.node_at(i - 1)
            if skip_nodes and node is not None and node in skip_nodes:
                continue
            if keep is not None:
                _, _, _, tag, meta, data, _ = self.decode(i - 1)
                if not keep(node, tag, meta, data):
                    continue
            parts.append(self._render_one(i - 1, flags))
            size += len(parts[-1]) + 1
            if size >= max_bytes:
                break
        return b",".join(parts), len(parts), examined, i

    def view(self) -> memoryview:
        return memoryview(self._buf).toreadonly()

    @classmethod
    def from_frames(
        cls, buf: Buffer, base_seq: int, salt: int, verify: bool = True
    ) -> SegmentBuffer:
        segment = cls(base_seq, salt)
        segment._extend(buf, verify)
        return segment


# --- tag trie -----------------------------------------------------------------------


class _Node:
    """A trie node: the edge label leading to it, children by first byte, its own seqs
    (ascending from ``head``, so dropping the smallest is O(1)) and its subtree size."""

    __slots__ = ("children", "head", "label", "seqs", "total")

    def __init__(self, label: bytes) -> None:
        self.label = label
        self.children: dict[int, _Node] = {}
        self.seqs: list[int] = []
        self.head = 0
        self.total = 0

    def size(self) -> int:
        return len(self.seqs) - self.head

    def take_below(self, below: int) -> list[int]:
        stop = bisect_left(self.seqs, below, self.head)
        taken = self.seqs[self.head : stop]
        self.head = stop
        self.compact()
        return taken

    def compact(self) -> None:
        # Amortised O(1): drop the consumed head once it is most of the list.
        if self.head == len(self.seqs):
            self.seqs, self.head = [], 0
        elif self.head > 16 and self.head * 2 > len(self.seqs):
            del self.seqs[: self.head]
            self.head = 0


def _check_tag(tag: bytes) -> bytes:
    if not isinstance(tag, bytes):
        raise TypeError("tag must be bytes")
    return tag


class TagTrie:
    """Tag -> ascending seqs in a compressed radix tree (see ``_ext.pyi``)."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self._root = _Node(b"")
        self._len = 0
        self._ntags = 0

    def __len__(self) -> int:
        return self._len

    @property
    def ntags(self) -> int:
        return self._ntags

    def _path(self, key: bytes, prefix: bool) -> list[_Node] | None:
        """Nodes from the root to the node of ``key`` or, for a prefix, to the topmost
        node whose tag starts with it; None when there is none."""
        node, path, pos = self._root, [self._root], 0
        while pos < len(key):
            child = node.children.get(key[pos])
            if child is None:
                return None
            if key.startswith(child.label, pos):
                pos += len(child.label)
            elif prefix and child.label.startswith(key[pos:]):
                pos = len(key)
            else:
                return None
            node = child
            path.append(node)
        return path

    def _descend_or_split(self, node: _Node, key: bytes, pos: int) -> _Node:
        """The child of ``node`` on the way to ``key[pos:]``, split or created as needed."""
        child = node.children.get(key[pos])
        if child is None:
            child = node.children[key[pos]] = _Node(key[pos:])
            return child
        common = 1
        while common < min(len(child.label), len(key) - pos):
            if child.label[common] != key[pos + common]:
                break
            common += 1
        if common < len(child.label):
            mid = node.children[key[pos]] = _Node(child.label[:common])
            child.label = child.label[common:]
            mid.children[child.label[0]] = child
            mid.total = child.total
            child = mid
        return child

    def add(self, tag: bytes, seq: int) -> None:
        _check_tag(tag)
        _int_in(seq, 0, _U64, "seq")
        node, path, pos = self._root, [self._root], 0
        while pos < len(tag):
            node = self._descend_or_split(node, tag, pos)
            pos += len(node.label)
            path.append(node)
        seqs = node.seqs
        if node.size() and seq <= seqs[-1]:
            j = bisect_left(seqs, seq, node.head)
            if seqs[j] == seq:
                return
            seqs.insert(j, seq)
        else:
            seqs.append(seq)
        for n in path:
            n.total += 1
        self._len += 1
        self._ntags += node.size() == 1

    def add_batch(self, tags: Sequence[bytes | None], first_seq: int) -> None:
        for i, tag in enumerate(tags):
            if tag is not None:
                self.add(tag, first_seq + i)

    def _removed(self, path: list[_Node], n: int) -> None:
        """Account for ``n`` entries taken from ``path[-1]`` and prune emptied nodes."""
        for node in path:
            node.total -= n
        self._len -= n
        self._ntags -= path[-1].size() == 0
        path[-1].compact()
        for d in range(len(path) - 1, 0, -1):
            if not self._tidy(path[d - 1], path[d]):
                break

    @staticmethod
    def _tidy(parent: _Node, node: _Node) -> bool:
        """Keep the tree compressed: drop an empty leaf (returns True so the caller tidies
        the parent next) or merge an entry-less node into its only child."""
        if node.size():
            return False
        if not node.children:
            del parent.children[node.label[0]]
            return True
        if len(node.children) == 1:
            (child,) = node.children.values()
            child.label = node.label + child.label
            parent.children[node.label[0]] = child
        return False

    def discard(self, tag: bytes, seq: int) -> bool:
        _int_in(seq, 0, _U64, "seq")
        path = self._path(_check_tag(tag), False)
        if path is None:
            return False
        node = path[-1]
        if node.size() and node.seqs[node.head] == seq:
            node.head += 1
        else:
            j = bisect_left(node.seqs, seq, node.head)
            if j == len(node.seqs) or node.seqs[j] != seq:
                return False
            del node.seqs[j]
        self._removed(path, 1)
        return True

    def pop_exact(self, tag: bytes, below: int) -> list[int]:
        path = self._path(_check_tag(tag), False)
        if path is None or not path[-1].size():
            return []
        taken = path[-1].take_below(below)
        if taken:
            self._removed(path, len(taken))
        return taken

    def pop_prefix(self, prefix: bytes, below: int) -> list[int]:
        path = self._path(_check_tag(prefix), True)
        if path is None:
            return []
        order: list[tuple[_Node, _Node | None]] = [(path[-1], None)]
        for node, _ in order:  # pre-order; the list grows while we walk it
            order.extend((child, node) for child in node.children.values())
        runs = []
        for node, parent in reversed(order):  # children before their parents
            if node.size():
                runs.append(node.take_below(below))
                self._ntags -= node.size() == 0
            node.total = node.size() + sum(c.total for c in node.children.values())
            if parent is not None:
                self._tidy(parent, node)
        taken = sorted(chain.from_iterable(runs))
        if taken:
            for node in path[:-1]:
                node.total -= len(taken)
            self._len -= len(taken)
            for d in range(len(path) - 1, 0, -1):
                if not self._tidy(path[d - 1], path[d]):
                    break
        return taken

    def count_exact(self, tag: bytes) -> int:
        path = self._path(_check_tag(tag), False)
        return path[-1].size() if path else 0

    def count_prefix(self, prefix: bytes) -> int:
        path = self._path(_check_tag(prefix), True)
        return path[-1].total if path else 0
