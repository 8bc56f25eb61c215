"""The ``where`` program the core runs in C (topics/_where.py rule 6).

A checked expression becomes a flat postfix program of ``(op, part, key, raw, num, count)``
instructions that topics/_core/_where.pxi ``_run_program`` evaluates on a frame's raw
bytes. An ``In`` of several values is one instruction per kind of value, not one per
value (issue 30): its strings, booleans and null as their JSON texts sorted as bytes
(``OP_IN_RAW``), its numbers as sorted doubles (``OP_IN_NUM``); the core finds the member
once and binary-searches them.

:func:`program_of` returns None when the expression uses what the program cannot express
(an operand string that needs an escape, an integer past 2**53): then the predicate
decides every record.
"""

from __future__ import annotations

import struct
from typing import Any

import ujson

__all__ = ["MAX_PROGRAM", "Instruction", "program_of"]

#: Instruction codes (topics/_core/_where.pxi reads the same numbers).
OP_EQ_RAW, OP_EQ_NUM, OP_GT, OP_GE, OP_LT, OP_LE, OP_EXISTS, OP_PREFIX = 1, 2, 3, 4, 5, 6, 7, 8
OP_IN_RAW, OP_IN_NUM = 9, 13
OP_AND, OP_OR, OP_NOT = 10, 11, 12
#: The core's program size (``_P_MAX``): three instructions for each of the 64 terms an
#: expression may hold (a mixed ``In`` is two and an ``or``), so every expression fits.
MAX_PROGRAM = 192
_NUM_OPS = {"Gt": OP_GT, "Ge": OP_GE, "Lt": OP_LT, "Le": OP_LE}
_EXACT_FLOAT = 1 << 53
PART_NODE, PART_TAG, PART_META, PART_DATA = 1, 2, 4, 8  # topics/_where.py's

Instruction = tuple[int, int, bytes, bytes, float, int]


class _NotInC(Exception):
    pass


def program_of(value: object) -> tuple[Instruction, ...] | None:
    """The program of a checked expression, or None (the predicate decides)."""
    program: list[Instruction] = []
    try:
        _emit(value, program)
    except _NotInC:
        return None
    return tuple(program) if len(program) <= MAX_PROGRAM else None


def _raw_string(s: str) -> bytes:
    """The JSON text of ``s`` when it has no escape (else the program cannot compare it)."""
    raw = ujson.dumps(s, ensure_ascii=False, escape_forward_slashes=False).encode()
    if b"\\" in raw:
        raise _NotInC
    return raw


def _emit(value: object, out: list[Instruction]) -> None:
    if isinstance(value, str):
        value = ["tag", "Eq", value]
    assert isinstance(value, list | tuple)
    head = value[0]
    if head in ("and", "or"):
        for v in value[1]:
            _emit(v, out)
        out.append((OP_AND if head == "and" else OP_OR, 0, b"", b"", 0.0, len(value[1])))
        return
    if head == "not":
        _emit(value[1], out)
        out.append((OP_NOT, 0, b"", b"", 0.0, 0))
        return
    name, op = value[0], value[1]
    operand: Any = value[2] if len(value) == 3 else True
    if name in ("tag", "node"):
        part, key = (PART_TAG if name == "tag" else PART_NODE), b""
    else:
        part_name, _, member = name.partition(".")
        part = PART_DATA if part_name == "data" else PART_META
        key = _raw_string(member)  # quoted: the core searches for the key's JSON text
    if op == "Exists":
        out.append((OP_EXISTS, part, key, b"", 0.0, 0))
        if not operand:
            out.append((OP_NOT, 0, b"", b"", 0.0, 0))
        return
    if op == "In" and len(operand) > 1:
        out.extend(_in(part, key, operand))
        return
    if op in ("Eq", "Ne", "In"):
        out.append(_eq(part, key, operand[0] if op == "In" else operand))
        if op == "Ne":
            out.append((OP_NOT, 0, b"", b"", 0.0, 0))
        return
    if op == "Glob":
        prefix = operand[:-1]
        raw = prefix.encode() if key == b"" else _raw_string(prefix)[:-1]
        out.append((OP_PREFIX, part, key, raw, 0.0, 0))
        return
    out.append((_NUM_OPS[op], part, key, b"", _number(operand), 0))


_NEVER_TAG = b"\x00"  # an OP_EQ_RAW on a tag/node with count 1: "never equal"


def _eq(part: int, key: bytes, v: object) -> Instruction:
    if key == b"":  # tag / node: the raw bytes, or never (a non-string)
        if not isinstance(v, str):
            return (OP_EQ_RAW, part, key, _NEVER_TAG, 0.0, 1)
        return (OP_EQ_RAW, part, key, v.encode(), 0.0, 0)
    if isinstance(v, str):
        return (OP_EQ_RAW, part, key, _raw_string(v), 0.0, 0)
    if v is None or isinstance(v, bool):
        return (OP_EQ_RAW, part, key, ujson.dumps(v).encode(), 0.0, 0)
    return (OP_EQ_NUM, part, key, b"", _number(v), 0)


def _in(part: int, key: bytes, values: list[Any] | tuple[Any, ...]) -> list[Instruction]:
    """An ``In`` of several values: one lookup per kind of value (or an ``or`` of two)."""
    texts: set[bytes] = set()
    numbers: set[float] = set()
    for v in values:
        if key == b"":
            if isinstance(v, str):  # a tag or node is never anything but a string
                texts.add(v.encode())
        elif isinstance(v, str):
            texts.add(_raw_string(v))
        elif v is None or isinstance(v, bool):
            texts.add(ujson.dumps(v).encode())
        else:
            numbers.add(_number(v))
    out: list[Instruction] = []
    if texts:
        out.append((OP_IN_RAW, part, key, _in_raw(texts), 0.0, len(texts)))
    if numbers:
        ordered = sorted(numbers)
        packed = struct.pack(f"={len(ordered)}d", *ordered)
        out.append((OP_IN_NUM, part, key, packed, 0.0, len(ordered)))
    if not out:
        return [(OP_EQ_RAW, part, key, _NEVER_TAG, 0.0, 1)]
    if len(out) == 2:
        out.append((OP_OR, 0, b"", b"", 0.0, 2))
    return out


def _in_raw(texts: set[bytes]) -> bytes:
    """``count + 1`` native uint32 offsets, then the texts sorted as bytes (the order of
    ``memcmp`` then length, which the core's binary search assumes)."""
    ordered = sorted(texts)
    offsets = [0]
    for t in ordered:
        offsets.append(offsets[-1] + len(t))
    return struct.pack(f"={len(offsets)}I", *offsets) + b"".join(ordered)


def _number(v: object) -> float:
    if isinstance(v, int) and abs(v) > _EXACT_FLOAT:
        raise _NotInC
    assert isinstance(v, int | float)
    return float(v)
