"""The LOSS line (issue 34): a read from the start is told a topic's evicted history once per
terminal session; ``--quiet`` leaves the line out; ``--json`` keeps its tombstone line."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import Run
from .test_cli import lines_json, name, no_ts, ok


@pytest.mark.cli_process
def test_loss_from_the_start_is_told_once_per_terminal_session(
    topics_cli: Run, tmp_path: Path
) -> None:
    t = name("lossonce")
    ok(topics_cli("put", t, "cap_records=2"))
    ok(topics_cli("write", t, input="1\n2\n3\n4\n"))
    first = topics_cli("read", t)
    assert "LOSS in" in first.stderr
    again = topics_cli("read", t)
    assert no_ts(ok(again)) == ["3  3", "4  4"]
    assert again.stderr == ""  # told already in this session
    # Scripts still see it: the --json line is data, never remembered away.
    assert lines_json(ok(topics_cli("--json", "read", t)))[0]["tombstone"]["gap_to"] == 2
    # A read from a position it had: a real gap, told every time.
    assert "seqs 2..2 are gone" in topics_cli("read", t, "--from", "1").stderr
    assert "seqs 2..2 are gone" in topics_cli("read", t, "--from", "1").stderr
    # Another terminal session (here: another runtime directory) is told again.
    other = {"XDG_RUNTIME_DIR": str(tmp_path / "other")}
    (tmp_path / "other").mkdir()
    assert "LOSS in" in topics_cli("read", t, env=other).stderr


def test_quiet_leaves_out_the_loss_line(topics_cli: Run) -> None:
    t = name("quiet")
    ok(topics_cli("put", t, "cap_records=2"))
    ok(topics_cli("write", t, input="1\n2\n3\n4\n"))
    proc = topics_cli("read", t, "--from", "1", "-q")
    assert (no_ts(ok(proc)), proc.stderr) == (["3  3", "4  4"], "")
    as_json = topics_cli("--json", "read", t, "--from", "1", "--quiet")
    assert lines_json(ok(as_json))[0]["tombstone"]["gap_from"] == 2
    assert as_json.stderr == ""
    tail = topics_cli("tail", t, "--from", "1", "--count", "2", "-q")
    assert (no_ts(ok(tail)), tail.stderr) == ([f"{t}  3  3", f"{t}  4  4"], "")
