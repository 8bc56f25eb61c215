"""The CLI's readable filters and times, turned into the API's (docs/CLI.md, "Filters").

``--where`` text maps onto the ``where`` tuple language (topics/query/where.py)::

    kind=refund                      ["data.kind", "Eq", "refund"]
    data.kind!=refund                ["data.kind", "Ne", "refund"]
    amount>3   amount>=3  a<3  a<=3  ["data.amount", "Gt", 3] ...
    tag=chat-42:*                    ["tag", "Glob", "chat-42:*"]   (a trailing bare *)
    kind in refund,chargeback        ["data.kind", "In", ["refund", "chargeback"]]
    has meta.urgent                  ["meta.urgent", "Exists"]
    a=1 and (b=2 or not c=3)         ["and", [..., ["or", [..., ["not", ...]]]]]

Rules:
1. A field is ``tag``, ``node``, ``data.NAME`` or ``meta.NAME``; any other bare name means
   ``data.NAME``.
2. A value is JSON when it parses as a number, ``true``, ``false`` or ``null``; a
   ``"quoted"`` value is always a string (and never a glob); anything else is a string.
3. ``not`` binds tightest, then ``and``, then ``or``; parentheses group.

``--since``/``--until`` take a duration back from now (``90s``, ``10m``, ``2h``, ``1d``,
``500ms``), an RFC 3339 time (``2026-11-25T17:00:00Z``) or epoch milliseconds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import ujson

__all__ = ["FilterSyntaxError", "bounded_starts", "parse_time", "parse_where"]


class FilterSyntaxError(ValueError):
    """Text that is not a filter or a time; the message says where and why."""


_TOKEN = re.compile(
    r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<op>!=|>=|<=|=|>|<|\(|\)|,)|(?P<word>[^\s"=!<>(),]+))'
)
_OPS = {"=": "Eq", "!=": "Ne", ">": "Gt", ">=": "Ge", "<": "Lt", "<=": "Le"}
_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise FilterSyntaxError(f"cannot read {text[pos:].strip()!r} (at character {pos})")
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise FilterSyntaxError("the filter ends too early")
        self.i += 1
        return tok

    def word_is(self, word: str) -> bool:
        tok = self.peek()
        return tok is not None and tok[0] == "word" and tok[1].lower() == word

    def expr(self) -> object:
        terms = [self.conj()]
        while self.word_is("or"):
            self.i += 1
            terms.append(self.conj())
        return terms[0] if len(terms) == 1 else ["or", terms]

    def conj(self) -> object:
        terms = [self.unary()]
        while self.word_is("and"):
            self.i += 1
            terms.append(self.unary())
        return terms[0] if len(terms) == 1 else ["and", terms]

    def unary(self) -> object:
        if self.word_is("not"):
            self.i += 1
            return ["not", self.unary()]
        if self.word_is("has"):
            self.i += 1
            return [_field(self.name()), "Exists"]
        tok = self.peek()
        if tok == ("op", "("):
            self.i += 1
            inner = self.expr()
            if self.take() != ("op", ")"):
                raise FilterSyntaxError("a ( is not closed")
            return inner
        field = _field(self.name())
        if self.word_is("in"):
            self.i += 1
            values = [_value(*self.value_token())]
            while self.peek() == ("op", ","):
                self.i += 1
                values.append(_value(*self.value_token()))
            return [field, "In", values]
        kind, op = self.take()
        if kind != "op" or op not in _OPS:
            raise FilterSyntaxError(
                f"expected =, !=, >, >=, <, <= or 'in' after {field}, got {op!r}"
            )
        vkind, raw = self.value_token()
        value = _value(vkind, raw)
        if op == "=" and vkind == "word" and raw.endswith("*"):
            return [field, "Glob", raw]
        return [field, _OPS[op], value]

    def name(self) -> str:
        kind, tok = self.take()
        if kind != "word":
            raise FilterSyntaxError(f"expected a field name, got {tok!r}")
        return tok

    def value_token(self) -> tuple[str, str]:
        kind, tok = self.take()
        if kind == "op":
            raise FilterSyntaxError(f"expected a value, got {tok!r}")
        return kind, tok


def _field(name: str) -> str:
    if name in ("tag", "node") or name.startswith(("data.", "meta.")):
        return name
    return f"data.{name}"


def _value(kind: str, raw: str) -> object:
    if kind == "str":
        try:
            return ujson.loads(raw)
        except ValueError:  # an escape JSON does not have, such as \\q
            raise FilterSyntaxError(f"cannot read {raw!r}: not a JSON string") from None
    # ASCII digits only: other scripts' digits are text, as they are to JSON.
    if raw in ("true", "false", "null") or re.fullmatch(
        r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?", raw
    ):
        value = ujson.loads(raw)
        if isinstance(value, float) and math.isinf(value):
            raise FilterSyntaxError("a number in the filter is too large for JSON")
        return value
    return raw


def parse_where(text: str) -> object:
    """The ``where`` expression a CLI filter stands for (raises FilterSyntaxError)."""
    p = _Parser(text)
    if p.peek() is None:
        raise FilterSyntaxError("the filter is empty")
    out = p.expr()
    if p.peek() is not None:
        raise FilterSyntaxError(f"unexpected {p.peek()[1]!r} after a complete filter")  # type: ignore[index]
    return out


def parse_time(text: str, now_ms: int) -> int:
    """Epoch ms of ``--since``/``--until`` text: a duration ago, RFC 3339, or epoch ms."""
    text = text.strip()
    m = re.fullmatch(r"([0-9]+)(ms|s|m|h|d)", text)
    if m:
        return max(0, now_ms - int(m.group(1)) * _UNITS[m.group(2)])
    if re.fullmatch(r"[0-9]+", text):
        return int(text)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise FilterSyntaxError(
            f"{text!r} is not a duration (10m, 2h, 1d), an RFC 3339 time or epoch ms"
        ) from None
    if when.tzinfo is None:
        raise FilterSyntaxError(f"{text!r} needs a time zone (e.g. Z)")
    return int(when.timestamp() * 1000)


def bounded_starts(
    topics: Mapping[str, Any] | Sequence[str], bounds: Mapping[str, int]
) -> dict[str, dict[str, Any]]:
    """``tail``'s per-topic watch starts with ``from_ts``/``to_ts``/``to_seq`` added: a
    list of names (new records only) or a name -> from_seq map; ``from_ts`` replaces the
    start."""
    if isinstance(topics, Mapping):
        base = {
            t: dict(s) if isinstance(s, Mapping) else {"from_seq": s} for t, s in topics.items()
        }
    else:
        base = {t: {"tail": True} for t in topics}
    if "from_ts" in bounds:
        base = {t: {} for t in base}
    return {t: {**start, **bounds} for t, start in base.items()}
