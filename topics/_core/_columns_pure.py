"""Pure-Python diff-page column builder: the oracle for ``_columns`` (same results).

See ``_columns.pyi`` for the interface and ``_columns.pyx`` for the rules. Kept small:
``json.JSONDecoder.raw_decode`` finds where each value ends, over the buffer decoded as
Latin-1 so that character offsets are byte offsets; strings are then decoded from their
own bytes as UTF-8.
"""

from __future__ import annotations

import json
import struct
from typing import Any

__all__ = [
    "KIND_BOOL",
    "KIND_FLOAT",
    "KIND_INT",
    "KIND_STRING",
    "KIND_TEXT",
    "WANT_ALL",
    "WANT_DATA",
    "WANT_LINES",
    "WANT_META",
    "WANT_NODE",
    "WANT_TAG",
    "data_fields",
    "record_columns",
]

WANT_NODE = 1
WANT_TAG = 2
WANT_DATA = 4
WANT_META = 8
WANT_LINES = 16
WANT_ALL = 15
KIND_BOOL = 1
KIND_INT = 2
KIND_FLOAT = 3
KIND_STRING = 4
KIND_TEXT = 5
_INT64 = (-(1 << 63), (1 << 63) - 1)

_TEXT = (("$node", "node", WANT_NODE), ("$tag", "tag", WANT_TAG))
_RAW = (("data", "data", WANT_DATA), ("meta", "meta", WANT_META))
_DEC = json.JSONDecoder()
_WS = " \t\r\n"


def _text(raw: bytes) -> bytes:
    """A JSON string's value as UTF-8 (a lone surrogate becomes U+FFFD, as compiled)."""
    value: str = json.loads(raw)
    return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in value).encode()


def record_columns(
    buf: Any, start: int = 0, hi: int = -1, want: int = WANT_ALL
) -> tuple[int, int, dict[str, Any]]:
    """Split the records array at ``buf[start:]`` into column buffers; see _columns.pyi."""
    data = bytes(buf)
    if start < 0 or start > len(data):
        raise ValueError(f"start {start} is outside the buffer")
    text = data.decode("latin-1")
    rows: list[dict[str, bytes | int | None]] = []
    pos = _skip_ws(text, start)
    try:
        if text[pos] != "[":
            raise ValueError(f"expected '[' at byte {pos}")
        end = _DEC.raw_decode(text, pos)[1]
        cursor = _skip_ws(text, pos + 1)
        while text[cursor] != "]":
            obj_end = _DEC.raw_decode(text, cursor)[1]
            rec = _record(data, text, cursor)
            if hi >= 0 and int(rec["$seq"] or 0) > hi:  # rule 4
                end = cursor
                break
            rows.append(rec)
            cursor = _skip_ws(text, obj_end)
            if text[cursor] == ",":
                cursor = _skip_ws(text, cursor + 1)
    except (IndexError, ValueError) as exc:
        raise ValueError(f"malformed diff records: {exc}") from None
    return len(rows), end, _columns(rows, want)


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


def _record(data: bytes, text: str, pos: int) -> dict[str, bytes | int | None]:
    """One record object: ints for $seq/$ts, raw value bytes for the rest."""
    rec: dict[str, bytes | int | None] = {"$seq": None, "$ts": 0}
    pos = _skip_ws(text, pos + 1)
    while text[pos] != "}":
        key, pos = _DEC.raw_decode(text, pos)
        pos = _skip_ws(text, _skip_ws(text, pos) + 1)  # past ':'
        value, end = _DEC.raw_decode(text, pos)
        if key in ("$seq", "$ts"):
            rec[key] = int(value)
        else:
            rec[key] = None if value is None and key != "data" else data[pos:end]
        pos = _skip_ws(text, end)
        if text[pos] == ",":
            pos = _skip_ws(text, pos + 1)
    if rec["$seq"] is None:
        raise ValueError("a record has no $seq")
    return rec


def _columns(rows: list[dict[str, bytes | int | None]], want: int) -> dict[str, Any]:
    n = len(rows)
    out: dict[str, Any] = {
        "seq": (None, struct.pack(f"<{n}q", *(r["$seq"] for r in rows))),
        "ts": (None, struct.pack(f"<{n}q", *(r["$ts"] for r in rows))),
    }
    for key, name, bit in (*_TEXT, *_RAW):
        if not want & bit:
            continue
        values: list[bytes | None] = []
        for r in rows:
            raw = r.get(key)
            assert raw is None or isinstance(raw, bytes)
            values.append(_text(raw) if raw is not None and bit in (1, 2) else raw)
        offsets, valid, size = [0], bytearray((n + 7) // 8), 0
        for i, v in enumerate(values):
            if v is not None:
                valid[i // 8] |= 1 << (i % 8)
                size += len(v)
            offsets.append(size)
        nulls = values.count(None)
        out[name] = (
            bytes(valid) if nulls else None,
            struct.pack(f"<{n + 1}i", *offsets),
            b"".join(v for v in values if v is not None),
            nulls,
        )
    if want & WANT_LINES:
        lines = []
        for r in rows:
            raw = r.get("data")
            assert raw is None or isinstance(raw, bytes)
            if raw is None or not raw.startswith(b"{"):
                raw = b"{}"  # not an object: see _columns.pyx rule 5
            line = raw.replace(b"\n", b" ").replace(b"\r", b" ")
            lines.append(line + b"\n")
        out["lines"] = b"".join(lines)
    return out


def _members(raw: bytes) -> list[tuple[bytes, bytes]] | None:
    """(raw key, raw value) of a JSON object's members, or None if it is not one."""
    text = raw.decode("latin-1")
    try:
        pos = _skip_ws(text, 0)
        if text[pos] != "{":
            return None
        out = []
        pos = _skip_ws(text, pos + 1)
        while text[pos] != "}":
            _, key_end = _DEC.raw_decode(text, pos)
            key = raw[pos + 1 : key_end - 1]
            pos = _skip_ws(text, _skip_ws(text, key_end) + 1)  # past ':'
            _, end = _DEC.raw_decode(text, pos)
            out.append((key, raw[pos:end]))
            pos = _skip_ws(text, end)
            if text[pos] == ",":
                pos = _skip_ws(text, pos + 1)
    except (IndexError, ValueError):
        return None
    return out


def _field(kind: int, raw: bytes) -> tuple[bool, bytes] | None:
    """(present, encoded value) of one member for ``kind``; None for a wrong type."""
    value = json.loads(raw)
    if value is None:
        return False, b""
    if kind == KIND_BOOL:
        return (True, bytes([value])) if isinstance(value, bool) else None
    if kind == KIND_INT:
        if isinstance(value, int) and not isinstance(value, bool) and raw.lstrip(b"-").isdigit():
            return (True, struct.pack("<q", value)) if _INT64[0] <= value <= _INT64[1] else None
        return None
    if kind == KIND_FLOAT:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return (True, struct.pack("<d", float(raw))) if ok else None
    if isinstance(value, str):
        return True, _text(raw)
    return (True, raw) if kind == KIND_STRING else None


def data_fields(
    offsets: Any, values: Any, first: int, rows: int, spec: list[tuple[str, int]]
) -> tuple[bytes, list[tuple[bytes, bytes, bytes | None]]]:
    """Typed columns of top-level data members; see _columns.pyi."""
    offs = struct.unpack_from(f"<{first + rows + 1}i", bytes(offsets))
    data = bytes(values)
    names = [name.encode() for name, _ in spec]
    bad: list[int] = []
    cells: list[list[tuple[bool, bytes]]] = [[] for _ in spec]
    for row in range(first, first + rows):
        members = _members(data[offs[row] : offs[row + 1]])
        found: dict[int, tuple[bool, bytes]] = {}
        verdict = -2 if members is None else -1
        for key, raw in members or []:
            if key in names:
                k = names.index(key)
                cell = _field(spec[k][1], raw)
                if cell is None:
                    verdict = k
                    break
                found[k] = cell  # a repeated key: the last one wins
        bad.append(verdict)
        for k, (_, kind) in enumerate(spec):
            cell = found.get(k, (False, b"")) if verdict == -1 else (False, b"")
            if not cell[0] and kind < KIND_STRING:
                cell = (False, b"\0" if kind == KIND_BOOL else b"\0" * 8)
            cells[k].append(cell)
    out = []
    for k, (_, kind) in enumerate(spec):
        valid = bytes(int(present) for present, _ in cells[k])
        vals = b"".join(v for _, v in cells[k])
        offsets_out = None
        if kind >= KIND_STRING:
            ends, size = [0], 0
            for _, v in cells[k]:
                size += len(v)
                ends.append(size)
            offsets_out = struct.pack(f"<{rows + 1}i", *ends)
        out.append((valid, vals, offsets_out))
    return struct.pack(f"<{rows}i", *bad), out
