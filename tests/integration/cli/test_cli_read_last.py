"""``read -n N`` and ``--from -N`` (issue 34): the last N records, like ``kcat -o -N``."""

from __future__ import annotations

import pytest

from .conftest import Run
from .test_cli import name, no_ts, ok


@pytest.mark.cli_process
def test_read_last_n_prints_the_last_records_then_exits(topics_cli: Run) -> None:
    t = name("last")
    ok(topics_cli("write", t, input="".join(f"{i}\n" for i in range(1, 21))))
    assert no_ts(ok(topics_cli("read", t, "-n", "3"))) == ["18  18", "19  19", "20  20"]
    assert no_ts(ok(topics_cli("read", t, "--last", "2"))) == ["19  19", "20  20"]
    # --from -N is "N before the head", like kcat -o -N.
    assert no_ts(ok(topics_cli("read", t, "--from", "-3"))) == ["18  18", "19  19", "20  20"]
    assert ok(topics_cli("read", t, "-n", "0")) == ""
    assert len(ok(topics_cli("read", t, "-n", "500")).splitlines()) == 20
    both = topics_cli("read", t, "-n", "3", "--from", "5")
    assert both.returncode == 2
    assert "not both" in both.stderr
    negative = topics_cli("read", t, "-n", "-1")
    assert negative.returncode == 2
    assert "-n/--last" in negative.stderr


def test_read_last_n_of_a_capped_topic_reports_no_loss(topics_cli: Run) -> None:
    t = name("lastcap")
    ok(topics_cli("put", t, "cap_records=3"))
    ok(topics_cli("write", t, input="".join(f"{i}\n" for i in range(1, 11))))
    # More than is retained: what is there, not a LOSS line for what was never asked for.
    proc = topics_cli("read", t, "-n", "5")
    assert no_ts(ok(proc)) == ["8  8", "9  9", "10  10"]
    assert proc.stderr == ""
    assert no_ts(ok(topics_cli("read", t, "--from", "-2"))) == ["9  9", "10  10"]


def test_tail_from_before_the_head(topics_cli: Run) -> None:
    t = name("tailneg")
    ok(topics_cli("write", t, input="1\n2\n3\n"))
    out = ok(topics_cli("tail", t, "--from", "-2", "--count", "2"))
    assert no_ts(out) == [f"{t}  2  2", f"{t}  3  3"]
