"""Server-side read predicates: the ``where`` of diff, watch and WS subscribe (issue 18).

The language is the tuple form deletes and router filters already use (contract §5:
``["tag","Eq","X"]``, ``["tag","Glob","p*"]``, a bare string for a tag ``Eq``), extended:

* fields: ``tag``, ``node``, ``meta.<name>`` and ``data.<name>`` (a top-level member of
  the record's ``meta`` / ``data`` object; a record whose ``data`` is not an object has
  no such fields);
* operators: ``Eq``, ``Ne``, ``Glob`` (strings, one trailing ``*``), ``In`` (a list of
  scalars), ``Gt``/``Ge``/``Lt``/``Le`` (numbers), ``Exists`` (``[field, "Exists"]``,
  optionally with ``true``/``false``);
* combinators: ``["and", [e, ...]]``, ``["or", [e, ...]]``, ``["not", e]``.

Rules:
1. A missing field matches nothing but ``Exists false`` (and ``Ne``, which is ``not Eq``).
2. Equality is JSON equality: ``true`` never equals ``1``, ``1`` equals ``1.0``; order
   comparisons hold only between numbers (a string is never ``Gt`` anything).
3. The expression is checked and compiled once (:func:`compile_where`; a plan repeated by
   later requests comes from topics/query/plans.py); bad input is ``invalid_request``
   naming the path inside the expression.
4. Evaluation decodes a record's ``meta``/``data`` only when a test needs them, and a
   string ``Eq`` first looks for the operand's JSON text in the raw bytes: a record whose
   bytes cannot contain it (no escapes anywhere) is rejected undecoded. An ``In`` is a
   set (its strings, its numbers, which of true/false/null): one decode and one lookup,
   never a test per value (issue 30: 63 ``In`` of 256 values scanned each record ~16,000
   times).
5. ``needles`` are byte strings every matching record must contain, found from the
   ``and`` of the tree's string ``Eq`` tests (a ``tag``/``node`` value, or the JSON text of
   a ``data``/``meta`` operand). The core checks them with ``memmem`` before calling the
   predicate at all (``SegmentBuffer.render``); a ``data``/``meta`` part holding a
   backslash is always passed on (an escape could spell the operand differently).
6. ``program`` (topics/query/program.py) is the same expression as a flat postfix
   program the core evaluates in C
   on the raw bytes (a top-level member found by searching for its quoted key and
   checking each hit's depth, strings compared as bytes, integers parsed directly and
   other numbers with ``strtod``), three-valued: what it cannot decide exactly (an
   escaped key after the member, an escape in a compared string, an integer past 2**53,
   another number past 15 characters) is left to the predicate itself. None when the
   expression uses what the program cannot express (then the predicate decides).
7. A plan's ``cost`` is what the predicate may do per record at worst: one test per term
   (an ``In`` is one lookup, whatever its size) and one decode per part it reads (``data``,
   ``meta``); the C program and the needles only ever spare it work. A plan over the
   budget (``Limits.max_where_cost``, ``TOPICS_MAX_WHERE_COST``) is refused. Strings must
   be Unicode text UTF-8 can carry: a lone surrogate (``"\ud800"`` in the request's JSON)
   is invalid_request, never a failure later.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import ujson

from ..errors import InvalidRequestError
from .plans import PlanCache, plan_key
from .program import Instruction, program_of

__all__ = [
    "DEFAULT_MAX_COST",
    "PART_DATA",
    "PART_META",
    "PART_NODE",
    "PART_TAG",
    "Predicate",
    "compile_where",
]

#: Which raw parts of a record a predicate reads (the core passes None for the others).
PART_NODE, PART_TAG, PART_META, PART_DATA = 1, 2, 4, 8

MAX_NODES = 64  # tests in one expression
MAX_DEPTH = 8
MAX_IN = 256
MAX_NEEDLES = 8  # what the core checks in C (the rest is left to the predicate)
#: Rule 7's budget when none is given (``Limits.max_where_cost``'s default): above the
#: 66 the shape limits allow, so by default it refuses nothing they let through.
DEFAULT_MAX_COST = 128

_MISSING = object()
#: Compiled plans by (field, budget, JSON text): topics/query/plans.py.
_PLANS: PlanCache[Predicate] = PlanCache()
_Test = Callable[["_Rec"], bool]
_SCALAR_OPS = ("Eq", "Ne", "Glob", "In", "Gt", "Ge", "Lt", "Le", "Exists")


class _Rec:
    """One record's raw parts, decoding ``meta``/``data`` at most once."""

    __slots__ = ("_data", "_meta", "data", "meta", "node", "tag")

    def __init__(
        self, node: bytes | None, tag: bytes | None, meta: bytes | None, data: bytes | None
    ) -> None:
        self.node, self.tag, self.meta, self.data = node, tag, meta, data
        self._meta: Any = _MISSING
        self._data: Any = _MISSING

    def member(self, part: int, name: str) -> Any:
        if part == PART_DATA:
            obj = self._data
            if obj is _MISSING:
                obj = self._data = _decoded(self.data)
        else:
            obj = self._meta
            if obj is _MISSING:
                obj = self._meta = _decoded(self.meta)
        return obj.get(name, _MISSING) if isinstance(obj, dict) else _MISSING


def _decoded(raw: bytes | None) -> Any:
    """A part's value, or None (no members) when no reader can decode it: a record stored
    before writes refused 309-digit integers (docs/GUARANTEES.md) must not fail the
    read, watch or subscription that meets it."""
    if not raw:
        return None
    try:
        return ujson.loads(raw)
    except (ValueError, OverflowError):
        return None


class Predicate:
    """A compiled ``where``: call it with a record's raw (node, tag, meta, data).

    ``parts`` says which of them it reads; ``source`` is the normalized expression
    (echoed back and stored in watch sessions).
    """

    __slots__ = ("_test", "cost", "needles", "parts", "program", "source")

    def __init__(
        self,
        test: _Test,
        parts: int,
        source: object,
        needles: tuple[tuple[int, bytes], ...] = (),
    ) -> None:
        self._test = test
        self.parts = parts
        self.source = source
        #: (part bit, bytes) that a matching record's part must contain (rule 5).
        self.needles = needles
        #: Rule 6's program, or None.
        self.program: tuple[Instruction, ...] | None = None
        #: Rule 7's cost per record.
        self.cost = 0

    def __call__(
        self, node: bytes | None, tag: bytes | None, meta: bytes | None, data: bytes | None
    ) -> bool:
        try:
            return self._test(_Rec(node, tag, meta, data))
        except (ValueError, TypeError, OverflowError, RecursionError):
            # A record no test can read does not match (docs/GUARANTEES.md "Stored data
            # stays readable"): one record must not fail the read or watch carrying the rest.
            return False

    def for_source(self, source: object) -> Predicate:
        """This plan with another ``source`` (a cached plan given to a new request)."""
        pred = Predicate(self._test, self.parts, source, self.needles)
        pred.program, pred.cost = self.program, self.cost
        return pred


def compile_where(
    value: object, field: str = "where", max_cost: int = DEFAULT_MAX_COST
) -> Predicate | None:
    """Check and compile a ``where`` expression; None (no filter) for None.

    ``max_cost`` is the budget of rule 7 (``Limits.max_where_cost``): a plan that costs
    more per record is refused (invalid_request naming the budget and its variable)."""
    if value is None:
        return None
    text = plan_key(value)
    key = (field, max_cost, text)
    if text is not None and (hit := _PLANS.get(key)) is not None:
        return hit.for_source(_normalize(value))  # as given (a tuple normalizes its own way)
    c = _Compiler(field)
    test = c.expr(value, field, 0)
    cost = c.tests + bin(c.parts & (PART_DATA | PART_META)).count("1")
    if cost > max_cost:
        raise InvalidRequestError(
            f"{field}: costs {cost} per record (a test per term, a decode per part read), "
            f"over the budget of {max_cost} (TOPICS_MAX_WHERE_COST); use fewer terms",
            detail={"field": field, "cost": cost, "max_cost": max_cost},
        )
    pred = Predicate(test, c.parts, _normalize(value), tuple(_needles(value))[:MAX_NEEDLES])
    pred.cost = cost
    pred.program = program_of(value)
    if text is not None:
        _PLANS.put(key, pred, c.weight)
    return pred


def _needles(value: object) -> list[tuple[int, bytes]]:
    """Rule 5: byte strings implied by ``value`` (already checked by the compiler)."""
    if isinstance(value, str):
        return [(PART_TAG, value.encode())]
    if not isinstance(value, list | tuple) or not value:
        return []
    if value[0] == "and":
        return [n for v in value[1] for n in _needles(v)]
    if len(value) != 3 or value[1] not in ("Eq", "Glob") or not isinstance(value[2], str):
        return []
    name, op, operand = value
    if name in ("tag", "node"):
        text = operand[:-1] if op == "Glob" else operand
        return [(PART_TAG if name == "tag" else PART_NODE, text.encode())] if text else []
    if op != "Eq":
        return []
    part = PART_DATA if name.startswith("data.") else PART_META
    return [(part, ujson.dumps(operand, ensure_ascii=False, escape_forward_slashes=False).encode())]


def _normalize(value: object) -> object:
    if type(value) is list and len(value) == 3 and value[1] == "In" and type(value[2]) is list:
        return [value[0], "In", value[2][:]]  # checked scalars: nothing inside to normalize
    if isinstance(value, str):
        return ["tag", "Eq", value]
    if isinstance(value, tuple):
        return [_normalize(v) for v in value]
    if isinstance(value, list):
        return [_normalize(v) if isinstance(v, list | tuple) else v for v in value]
    return value


class _Compiler:
    def __init__(self, field: str) -> None:
        self.field = field
        self.parts = 0
        self.nodes = 0
        self.tests = 0  # leaves: rule 7's cost
        self.weight = 0  # terms and In values: what the plan cache counts

    def bad(self, path: str, problem: str) -> InvalidRequestError:
        return InvalidRequestError(f"{path}: {problem}", detail={"field": self.field, "path": path})

    def expr(self, value: object, path: str, depth: int) -> _Test:
        self.nodes += 1
        self.weight += 1
        if self.nodes > MAX_NODES:
            raise self.bad(path, f"too many terms (at most {MAX_NODES})")
        if depth > MAX_DEPTH:
            raise self.bad(path, f"nested too deep (at most {MAX_DEPTH} levels)")
        if isinstance(value, str):
            return self.leaf(["tag", "Eq", value], path)
        if not isinstance(value, list | tuple) or not value:
            raise self.bad(
                path,
                'must be a tag string, [field, op, value], ["and", [...]], ["or", [...]] '
                f'or ["not", expr]; got {value!r}',
            )
        head = value[0]
        if head in ("and", "or"):
            if len(value) != 2 or not isinstance(value[1], list | tuple) or not value[1]:
                raise self.bad(path, f'["{head}", [expr, ...]] takes a non-empty list')
            tests = [self.expr(v, f"{path}[1][{i}]", depth + 1) for i, v in enumerate(value[1])]
            if len(tests) == 1:
                return tests[0]
            if head == "and":
                return lambda r: all(t(r) for t in tests)
            return lambda r: any(t(r) for t in tests)
        if head == "not":
            if len(value) != 2:
                raise self.bad(path, '["not", expr] takes exactly one expression')
            inner = self.expr(value[1], f"{path}[1]", depth + 1)
            return lambda r: not inner(r)
        return self.leaf(value, path)

    def leaf(self, value: list[Any] | tuple[Any, ...], path: str) -> _Test:
        if len(value) not in (2, 3) or not isinstance(value[0], str):
            raise self.bad(path, f"a test is [field, op, value], got {value!r}")
        name, op = value[0], value[1]
        if op not in _SCALAR_OPS:
            raise self.bad(path, f"unknown operator {op!r} (one of {', '.join(_SCALAR_OPS)})")
        if len(value) == 2 and op != "Exists":
            raise self.bad(path, f"{op} takes a value")
        operand = value[2] if len(value) == 3 else True
        self.tests += 1
        get = self.getter(name, path)
        if op == "Exists":
            if not isinstance(operand, bool):
                raise self.bad(path, f"Exists takes true or false, got {operand!r}")
            return (lambda r: get(r) is not _MISSING) if operand else (lambda r: get(r) is _MISSING)
        if op in ("Eq", "Ne"):
            self.scalar(operand, path)
            eq = self.equals(name, get, operand)
            return eq if op == "Eq" else (lambda r: not eq(r))
        if op == "In":
            if not isinstance(operand, list | tuple) or not operand or len(operand) > MAX_IN:
                raise self.bad(path, f"In takes a list of 1 to {MAX_IN} values")
            self.values(operand, f"{path}[2]")
            self.weight += len(operand)
            return _member_of(name, get, operand)
        if op == "Glob":
            if not isinstance(operand, str) or not operand.endswith("*") or "*" in operand[:-1]:
                raise self.bad(
                    path, f"Glob takes a literal prefix followed by one trailing *, got {operand!r}"
                )
            self.text(operand, f"{path}[2]")
            prefix = operand[:-1]
            if name in ("tag", "node"):
                pb = prefix.encode()
                return lambda r: (v := get(r)) is not _MISSING and v.startswith(pb)
            return lambda r: isinstance(v := get(r), str) and v.startswith(prefix)
        # Gt Ge Lt Le
        if not _is_number(operand):
            raise self.bad(path, f"{op} takes a number, got {operand!r}")
        if name in ("tag", "node"):
            raise self.bad(path, f"{op} compares numbers; {name} is a string")
        cmp = _ORDER[op]
        x = operand
        return lambda r: _is_number(v := get(r)) and cmp(v, x)

    def scalar(self, operand: object, path: str) -> None:
        if isinstance(operand, str):
            self.text(operand, path)
            return
        if operand is None or isinstance(operand, bool):
            return
        if _is_number(operand):
            return
        raise self.bad(
            path, f"the value must be a string, number, boolean or null, got {operand!r}"
        )

    def values(self, operand: list[Any] | tuple[Any, ...], path: str) -> None:
        """``scalar`` over an ``In``'s values, in one pass over the common kinds (a
        request may hold 63 x 256 of them, and every one is checked per request)."""
        strings = [v for v in operand if isinstance(v, str)]
        try:
            "".join(strings).encode()  # a lone surrogate anywhere fails this
        except UnicodeEncodeError:
            strings = []
        if len(strings) != len(operand):  # something else: look at each
            for i, v in enumerate(operand):
                self.scalar(v, f"{path}[{i}]")

    def text(self, s: str, path: str) -> None:
        """Rule 7: a string UTF-8 can carry (not a lone surrogate)."""
        try:
            s.encode()
        except UnicodeEncodeError as exc:
            raise self.bad(
                path, f"{s!r} is not Unicode text (a lone surrogate at {exc.start})"
            ) from None

    def getter(self, name: str, path: str) -> Callable[[_Rec], Any]:
        self.text(name, f"{path}[0]")
        if name == "tag":
            self.parts |= PART_TAG
            return lambda r: _MISSING if r.tag is None else r.tag
        if name == "node":
            self.parts |= PART_NODE
            return lambda r: _MISSING if r.node is None else r.node
        part_name, _, member = name.partition(".")
        if part_name in ("data", "meta") and member:
            part = PART_DATA if part_name == "data" else PART_META
            self.parts |= part
            return lambda r: r.member(part, member)
        raise self.bad(
            path, f'the field must be "tag", "node", "data.<name>" or "meta.<name>", got {name!r}'
        )

    def equals(self, name: str, get: Callable[[_Rec], Any], operand: object) -> _Test:
        if name in ("tag", "node"):
            if not isinstance(operand, str):
                return lambda r: False  # tags and nodes are strings
            ob = operand.encode()
            return lambda r: get(r) == ob
        if isinstance(operand, str):
            # Rule 4: the operand's JSON text must occur in the raw bytes unless they
            # hold an escape (which could spell the same string differently).
            needle = ujson.dumps(operand, ensure_ascii=False, escape_forward_slashes=False).encode()
            raw_attr = "data" if name.startswith("data.") else "meta"

            def test(r: _Rec) -> bool:
                raw = getattr(r, raw_attr)
                if raw is None or (needle not in raw and b"\\" not in raw):
                    return False
                v = get(r)
                return isinstance(v, str) and v == operand

            return test
        if isinstance(operand, bool) or operand is None:
            return lambda r: (v := get(r)) is operand
        return lambda r: _is_number(v := get(r)) and v == operand


def _member_of(name: str, get: Callable[[_Rec], Any], values: list[Any] | tuple[Any, ...]) -> _Test:
    """Rule 4's ``In``: one lookup in sets split by kind, so JSON equality holds
    (``1`` equals ``1.0``, ``true`` never equals ``1``, as Python's ``True == 1`` would)."""
    if name in ("tag", "node"):
        raw = frozenset(v.encode() for v in values if isinstance(v, str))
        return lambda r: get(r) in raw
    text = [v for v in values if isinstance(v, str)]
    others = [] if len(text) == len(values) else [v for v in values if not isinstance(v, str)]
    strings = frozenset(text)
    numbers = frozenset([v for v in others if _is_number(v)])
    # true, false and null by identity (each is a singleton), never hashed with numbers
    singles = tuple([v for v in others if v is None or isinstance(v, bool)])

    def test(r: _Rec) -> bool:
        v = get(r)
        if isinstance(v, str):
            return v in strings
        if v is None or isinstance(v, bool):
            return any(v is s for s in singles)
        return _is_number(v) and v in numbers

    return test


def _is_number(v: object) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool)) or (
        isinstance(v, float) and math.isfinite(v)
    )


_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "Gt": lambda a, b: a > b,
    "Ge": lambda a, b: a >= b,
    "Lt": lambda a, b: a < b,
    "Le": lambda a, b: a <= b,
}
