"""The CLI's --where/--since syntax (topics/cli/filters.py) and `read` with it end to end."""

from __future__ import annotations

import json
from typing import Any

import pytest

from topics.cli.filters import FilterSyntaxError, parse_time, parse_where
from topics.query.where import compile_where

from .conftest import Run
from .test_cli import lines_json, name, ok


@pytest.mark.parametrize(
    ("text", "expr"),
    [
        ("kind=refund", ["data.kind", "Eq", "refund"]),
        ("data.kind!=refund", ["data.kind", "Ne", "refund"]),
        ("amount>3", ["data.amount", "Gt", 3]),
        ("amount >= 2.5", ["data.amount", "Ge", 2.5]),
        ("meta.n<-1", ["meta.n", "Lt", -1]),
        ("a<=0", ["data.a", "Le", 0]),
        ("tag=chat-42:*", ["tag", "Glob", "chat-42:*"]),
        ('tag="a*"', ["tag", "Eq", "a*"]),
        ('id="42"', ["data.id", "Eq", "42"]),
        ("ok=true", ["data.ok", "Eq", True]),
        ("v=null", ["data.v", "Eq", None]),
        ("node=w-1", ["node", "Eq", "w-1"]),
        ("a=\u0663", ["data.a", "Eq", "\u0663"]),  # another script's digit is text, as in JSON
        ("kind in refund, chargeback,3", ["data.kind", "In", ["refund", "chargeback", 3]]),
        ("has meta.urgent", ["meta.urgent", "Exists"]),
        ("not has x", ["not", ["data.x", "Exists"]]),
        (
            "a=1 and b=2 or c=3",
            ["or", [["and", [["data.a", "Eq", 1], ["data.b", "Eq", 2]]], ["data.c", "Eq", 3]]],
        ),
        (
            "a=1 AND (b=2 or not c=3)",
            [
                "and",
                [
                    ["data.a", "Eq", 1],
                    ["or", [["data.b", "Eq", 2], ["not", ["data.c", "Eq", 3]]]],
                ],
            ],
        ),
    ],
)
def test_cli_filters_map_onto_the_tuple_language(text: str, expr: Any) -> None:
    assert parse_where(text) == expr
    assert compile_where(expr) is not None  # and the server accepts what it maps to


@pytest.mark.parametrize(
    "text",
    [
        "",
        "kind",
        "kind=",
        "=x",
        "(a=1",
        "a=1 b=2",
        "a ~ 1",
        "a in",
        "a=1 and",
        'a="\\q"',
        "a=1e400",
    ],
)
def test_bad_filters_say_why(text: str) -> None:
    with pytest.raises(FilterSyntaxError):
        parse_where(text)


def test_times() -> None:
    now = 1_764_090_000_000
    assert parse_time("10m", now) == now - 600_000
    assert parse_time("90s", now) == now - 90_000
    assert parse_time("1d", now) == now - 86_400_000
    assert parse_time("250ms", now) == now - 250
    assert parse_time("1764000000000", now) == 1_764_000_000_000
    assert parse_time("2025-11-25T17:00:00Z", now) == 1_764_090_000_000
    for bad in ("yesterday", "2025-11-25T17:00:00", "10y", "\u00b2", "\u0663m"):
        with pytest.raises(FilterSyntaxError):
            parse_time(bad, now)


def test_read_with_where_since_to_and_cloudevents(topics_cli: Run) -> None:
    t = name("flt")
    lines = [{"kind": "refund", "n": 1}, {"kind": "sale", "n": 2}, {"kind": "refund", "n": 3}]
    ok(topics_cli("write", t, input="".join(json.dumps(x) + "\n" for x in lines)))
    recs = lines_json(ok(topics_cli("--json", "read", t, "--where", "kind=refund")))
    assert [r["$seq"] for r in recs] == [1, 3]
    recs = lines_json(ok(topics_cli("--json", "read", t, "--where", "n>=2", "--to", "2")))
    assert [r["$seq"] for r in recs] == [2]
    recs = lines_json(ok(topics_cli("--json", "read", t, "--since", "1h")))
    assert [r["$seq"] for r in recs] == [1, 2, 3]
    recs = lines_json(ok(topics_cli("--json", "read", t, "--since", "0", "--until", "1")))
    assert recs == []  # nothing was written in the first millisecond of 1970
    events = lines_json(ok(topics_cli("read", t, "--format", "cloudevents", "--max", "1")))
    assert events[0]["id"] == f"{t}@1"
    assert events[0]["specversion"] == "1.0"
    bad = topics_cli("read", t, "--where", "kind=")
    assert bad.returncode == 2
    assert "expected a value" in bad.stderr or "ends too early" in bad.stderr


def test_bounded_starts() -> None:
    from topics.cli.filters import bounded_starts

    assert bounded_starts(["a"], {"to_seq": 5}) == {"a": {"tail": True, "to_seq": 5}}
    assert bounded_starts({"a": 3}, {"to_ts": 9}) == {"a": {"from_seq": 3, "to_ts": 9}}
    assert bounded_starts(["a"], {"from_ts": 1, "to_seq": 2}) == {"a": {"from_ts": 1, "to_seq": 2}}


def test_tail_since_where_until_the_end(topics_cli: Run) -> None:
    t = name("tailflt")
    lines = [{"kind": "refund", "n": 1}, {"kind": "sale", "n": 2}, {"kind": "refund", "n": 3}]
    ok(topics_cli("write", t, input="".join(json.dumps(x) + "\n" for x in lines)))
    # Ends by itself once the topic reaches --to: no --count needed.
    out = ok(
        topics_cli("--json", "tail", t, "--since", "1h", "--where", "kind=refund", "--to", "3")
    )
    assert [(r["topic"], r["$seq"]) for r in lines_json(out)] == [(t, 1), (t, 3)]
    bad = topics_cli("tail", t, "--since", "1h", "--from", "0", "--count", "1")
    assert bad.returncode == 2
