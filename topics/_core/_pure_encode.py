"""``encode_batch``: records checked in order and written as frames.

A client's batch (``server_meta`` given) also has its meta refused when a top-level key
begins with "$" (topics/_meta_keys.py): the JSON scan every meta gets notes such a key
as it passes (_pure_json._value), so the refusal costs no pass of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeGuard

from ._pure_format import (
    BODY,
    I64,
    KIND_RECORD,
    MIN_FRAME,
    U16,
    U32,
    U32S,
    U64,
    Buffer,
    FrameError,
    as_bytes,
    crc32c,
    int_in,
)
from ._pure_json import json_scan, key_at, split_array

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

_MISSING = object()
# Largest data+meta limit that still keeps every frame_len within a u32.
_MAX_RECORD_LIMIT = U32 - MIN_FRAME - 2 * U16


_REASONS = {"missing": "required", "type": "wrong type", "empty": "must not be empty"}
_REASONS.update({"too_large": "too large", "meta_keys": "too many keys"})


def _record_error(index: int, field: str, reason: str, detail: str = "") -> FrameError:
    return FrameError(detail or _REASONS[reason], index, field, reason)


def _checked(raw: bytes, index: int, field: str) -> tuple[int, int]:
    """json_scan's (members, reserved) of ``raw``, or the record's "json" error."""
    try:
        return json_scan(raw)
    except FrameError as exc:
        raise _record_error(index, field, "json", str(exc)) from None


def _reserved_error(index: int, raw: bytes, at: int) -> FrameError:
    """The refusal of a meta whose top-level key at offset ``at`` (its opening quote, in
    checked JSON) begins with "$", naming the key as a reader decodes it."""
    key = key_at(raw, at)
    detail = f'has the key "{key}": top-level meta keys beginning with "$" are the server\'s'
    return _record_error(index, "meta", "meta_reserved", detail)


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
    split per value (split_array). take() hands out the next value's (JSON, members,
    reserved), or
    None when every value must go through dumps() on its own (no batch call was made, it
    failed, or its text did not split cleanly)."""

    def __init__(self, values: list[object], dumps: Callable[[object], str] | None) -> None:
        self.text = b""
        self.spans: list[tuple[int, int, int, int]] = []
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
            self.spans = split_array(text, len(values))

    def take(self) -> tuple[bytes, int, int] | None:
        j = self.next
        self.next += 1
        if j >= len(self.spans):
            return None
        start, stop, members, reserved = self.spans[j]
        return self.text[start:stop], members, reserved


def _meta_json(
    meta: object,
    index: int,
    limits: tuple[int, ...],
    dumps: Callable[[object], str],
    batch: _Dumped,
    server_meta: type | None,
) -> bytes:
    if not isinstance(meta, dict | bytes | bytearray | memoryview):
        raise _record_error(index, "meta", "type")
    got = batch.take() if isinstance(meta, dict) else None
    if got is not None:
        raw, keys, reserved = got  # checked by split_array
    else:
        raw = as_bytes(meta) if _is_buffer(meta) else _dumps_json(meta, index, "meta", dumps)
    if len(raw) > limits[1]:
        raise _record_error(index, "meta", "too_large")
    if got is None:
        keys, reserved = _checked(raw, index, "meta")
    if keys < 0:
        raise _record_error(index, "meta", "type")
    if reserved >= 0 and server_meta is not None and type(meta) is not server_meta:
        raise _reserved_error(index, raw, reserved)
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
    highs = (_MAX_RECORD_LIMIT, U32, U32, U16, U16)
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
    server_meta: type | None,
) -> tuple[bytes, bytes, bytes, bytes]:
    """Validate one record; return its (node, tag, meta, data) bytes (b"" = absent)."""
    data, meta, tag, node = fields
    got = None
    if data is None:
        raw = b"null"
    elif _is_buffer(data):
        raw = as_bytes(data)
    else:
        got = data_batch.take()
        raw = got[0] if got is not None else _dumps_json(data, index, "data", dumps)
    if got is None:
        _checked(raw, index, "data")
    meta_raw = (
        b"" if meta is None else _meta_json(meta, index, limits, dumps, meta_batch, server_meta)
    )
    tag_raw = _name(tag, index, "tag", limits[3])
    node_raw = _name(default_node if node is None else node, index, "node", limits[4])
    if len(raw) + len(meta_raw) > limits[0]:
        raise _record_error(index, "record", "too_large")
    return node_raw, tag_raw, meta_raw, raw


def _frame(seq: int, ts_ms: int, fields: tuple[bytes, bytes, bytes, bytes], salt: int) -> bytes:
    node, tag, meta, data = fields
    size = MIN_FRAME + len(node) + len(tag) + len(meta) + len(data)
    lengths = (len(node), len(tag), 0, len(meta), len(data))
    body = BODY.pack(KIND_RECORD, 0, *lengths, seq, ts_ms) + node + tag + meta + data
    head = U32S.pack(size)
    return head + U32S.pack(crc32c(body, crc32c(head, salt))) + body + b"\0"


def encode_batch(
    records: Sequence[Mapping[str, object]],
    first_seq: int,
    ts_ms: int,
    default_node: str | None,
    salt: int,
    limits: tuple[int, int, int, int, int],
    dumps: Callable[[object], str],
    server_meta: type | None = None,
) -> tuple[bytes, list[bytes | None] | None]:
    int_in(first_seq, 0, U64, "first_seq")
    int_in(ts_ms, -I64, I64 - 1, "ts_ms")
    int_in(salt, 0, U32, "salt")
    checked = _check_limits(limits)
    if server_meta is not None and not isinstance(server_meta, type):
        raise TypeError("server_meta must be a type or None")
    batch = list(records)
    if batch and first_seq + len(batch) - 1 > U64:
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
        _encode_record(f, i, default_node, checked, dumps, data_batch, meta_batch, server_meta)
        for i, f in enumerate(fields)
    ]
    if error is not None:
        raise error
    frames = [_frame(first_seq + i, ts_ms, f, salt) for i, f in enumerate(encoded)]
    tags: list[bytes | None] = [f[1] or None for f in encoded]
    return b"".join(frames), tags if any(tags) else None
