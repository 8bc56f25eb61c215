"""The ``where`` program the core runs in C (topics/query/where.py rule 6).

A checked expression becomes a flat postfix program of ``(op, part, key, raw, num, count)``
instructions that topics/_core/_where.pxi ``_run_program`` evaluates on a frame's raw
bytes. An ``In`` of several values is one instruction per kind of value, not one per
value (issue 30): its strings sorted as UTF-8 bytes (``OP_IN_RAW``; a string member is
compared without its quotes), its numbers as sorted doubles (``OP_IN_NUM``), and an
equality for each of true/false/null it holds; the core finds the member once per
instruction and binary-searches.

:func:`program_of` returns None when the expression uses what the program cannot express
(an ``Eq``/``Glob`` operand or a member name that needs an escape, an integer past 2**53):
then the predicate decides every record. An ``In`` string that needs one is left out of
its lookup instead: a stored string equal to it holds an escape, which the core always
leaves to the predicate.
"""

from __future__ import annotations

import re
from array import array
from itertools import accumulate
from typing import Any

import ujson

__all__ = ["MAX_PROGRAM", "Instruction", "program_of"]

#: Instruction codes (topics/_core/_where.pxi reads the same numbers).
OP_EQ_RAW, OP_EQ_NUM, OP_GT, OP_GE, OP_LT, OP_LE, OP_EXISTS, OP_PREFIX = 1, 2, 3, 4, 5, 6, 7, 8
OP_IN_RAW, OP_IN_NUM = 9, 13
OP_AND, OP_OR, OP_NOT = 10, 11, 12
#: The core's program size (``_P_MAX``): three instructions for each of the 64 terms an
#: expression may hold, so all but ones full of ``In`` of mixed kinds fit (those are left
#: to the predicate, whose cost per record is bounded all the same).
MAX_PROGRAM = 192
_NUM_OPS = {"Gt": OP_GT, "Ge": OP_GE, "Lt": OP_LT, "Le": OP_LE}
_EXACT_FLOAT = 1 << 53
PART_NODE, PART_TAG, PART_META, PART_DATA = 1, 2, 4, 8  # topics/query/where.py's

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


#: What the JSON text of a string escapes (as stored: ujson with ``ensure_ascii=False``
#: and ``escape_forward_slashes=False`` escapes exactly these, nothing else).
_ESCAPED = re.compile(r'[\x00-\x1f"\\]')


def _raw_string(s: str) -> bytes:
    """The JSON text of ``s`` when it has no escape (else the program cannot compare it)."""
    if _ESCAPED.search(s):
        raise _NotInC
    return b'"' + s.encode() + b'"'


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
    """An ``In`` of several values: one sorted lookup for its strings (compared without
    their quotes), one for its numbers, an equality for each of true/false/null it holds,
    and an ``or`` of those. Built with C-level passes over the values: a request may hold
    63 x 256 of them, and this runs once per request."""
    strings = [v for v in values if isinstance(v, str)]
    others = () if len(strings) == len(values) else [v for v in values if not isinstance(v, str)]
    escaped = False
    if key == b"":  # a tag or node is never anything but a string
        others = ()
    elif _ESCAPED.search("".join(strings)):  # one search, not one per value
        # A stored string equal to one of these holds an escape, and the core leaves any
        # escaped member to the predicate: only the others need comparing here.
        strings = [v for v in strings if not _ESCAPED.search(v)]
        escaped = True
    out: list[Instruction] = []
    if strings or escaped:
        unique = sorted(set(strings))  # code point order is UTF-8 byte order
        out.append((OP_IN_RAW, part, key, _in_raw(unique), 0.0, len(unique)))
    numbers = sorted({_number(v) for v in others if v is not None and not isinstance(v, bool)})
    if numbers:
        out.append((OP_IN_NUM, part, key, array("d", numbers).tobytes(), 0.0, len(numbers)))
    for single in (True, False, None):
        if any(v is single for v in others):
            out.append(_eq(part, key, single))
    if not out:
        return [(OP_EQ_RAW, part, key, _NEVER_TAG, 0.0, 1)]
    if len(out) > 1:
        out.append((OP_OR, 0, b"", b"", 0.0, len(out)))
    return out


def _in_raw(ordered: list[str]) -> bytes:
    """``count + 1`` native uint32 offsets, then the strings' UTF-8 bytes in order (the
    order of ``memcmp`` then length, which the core's binary search assumes)."""
    joined = "".join(ordered)
    blob = joined.encode()
    sizes = map(len, ordered) if len(blob) == len(joined) else map(len, map(str.encode, ordered))
    return array("I", accumulate(sizes, initial=0)).tobytes() + blob


def _number(v: object) -> float:
    if isinstance(v, int) and abs(v) > _EXACT_FLOAT:
        raise _NotInC
    assert isinstance(v, int | float)
    return float(v)
