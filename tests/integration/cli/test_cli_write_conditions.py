"""``topics write --expect-head N`` and ``--producer-id P --epoch E`` (issue 19, docs/CLI.md)."""

from __future__ import annotations

import json
import time

from .conftest import Run


def _topic() -> str:
    return f"cli-cond-{time.monotonic_ns()}"


def test_expect_head_chains_batches_and_stops_on_a_mismatch(topics_cli: Run) -> None:
    t = _topic()
    out = topics_cli("--json", "write", t, "--batch", "1", "--expect-head", "0", input="1\n2\n3\n")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {
        "topic": t,
        "records": 3,
        "batches": 3,
        "first_seq": 1,
        "last_seq": 3,
    }
    stale = topics_cli("write", t, "--expect-head", "1", input="4\n")
    assert stale.returncode == 4  # a conflict
    assert "head_mismatch" in stale.stderr
    assert json.loads(topics_cli("--json", "stat", t).stdout)["head_seq"] == 3


def test_an_older_producer_epoch_is_fenced(topics_cli: Run) -> None:
    t = _topic()
    new = topics_cli("write", t, "--producer-id", "loader", "--epoch", "2", input="1\n")
    assert new.returncode == 0, new.stderr
    old = topics_cli("write", t, "--producer-id", "loader", "--epoch", "1", input="2\n")
    assert old.returncode == 4
    assert "producer_fenced" in old.stderr
    half = topics_cli("write", t, "--producer-id", "loader", input="2\n")
    assert half.returncode == 1  # invalid_request: epoch goes with producer_id
    assert "epoch" in half.stderr
