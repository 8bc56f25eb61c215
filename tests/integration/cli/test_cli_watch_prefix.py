"""``topics tail --prefix`` and ``--max-backlog`` (issue 18 items 3-4) on the real server."""

from __future__ import annotations

import pytest

from .conftest import Run
from .test_cli import lines_json, name, ok


def test_tail_a_prefix_from_the_start(topics_cli: Run) -> None:
    p = name("tp") + "."
    ok(topics_cli("write", p + "a", input='"a1"\n'))
    ok(topics_cli("write", p + "b", input='"b1"\n"b2"\n'))
    ok(topics_cli("write", name("other"), input='"x"\n'))
    out = ok(topics_cli("--json", "tail", "--prefix", p, "--from", "0", "--count", "3"))
    assert sorted((r["topic"], r["data"]) for r in lines_json(out)) == [
        (p + "a", "a1"),
        (p + "b", "b1"),
        (p + "b", "b2"),
    ]


def test_tail_with_max_backlog_skips_a_long_backlog_and_says_so(topics_cli: Run) -> None:
    p = name("tb") + "."
    ok(topics_cli("write", p + "big", input="".join(f"{i}\n" for i in range(10))))
    ok(topics_cli("write", p + "small", input='"s"\n'))
    proc = topics_cli(
        "--json", "tail", "--prefix", p, "--from", "0", "--max-backlog", "5", "--count", "1"
    )
    assert [(r["topic"], r["data"]) for r in lines_json(ok(proc))] == [(p + "small", "s")]
    assert f"topics: {p}big was 10 records behind" in proc.stderr
    assert "skipped to seq 10" in proc.stderr


@pytest.mark.cli_process
def test_tail_needs_a_topic_or_a_prefix(topics_cli: Run) -> None:
    proc = topics_cli("tail")
    assert proc.returncode != 0
    assert "--prefix" in proc.stderr
