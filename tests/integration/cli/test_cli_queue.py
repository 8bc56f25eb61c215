"""``topics queue``: a settle that did not happen fails (issue 34), deadlines as ISO times."""

from __future__ import annotations

import json
import re

import pytest

from .conftest import Run
from .test_cli import ISO, name, ok


@pytest.mark.cli_process
def test_ack_nack_extend_of_a_lease_not_held_fail(topics_cli: Run) -> None:
    q = name("settle")
    ok(topics_cli("put", q, "type=queue"))
    ok(topics_cli("write", q, input="1\n2\n3\n"))
    ok(topics_cli("queue", "claim", q, "--node", "w", "--max", "2"))
    mixed = topics_cli("queue", "ack", q, "--node", "w", "1", "3")  # 3 was never claimed
    assert mixed.returncode == 4
    assert mixed.stdout == "acked 1\n"
    assert mixed.stderr == (
        f"topics: not acked: seq 3 of {q}: no lease of node w holds it (never claimed, "
        "already settled, or its lease expired or went to another worker)\n"
    )
    assert "this node" not in mixed.stderr
    other = topics_cli("queue", "nack", q, "--node", "x", "2")
    assert other.returncode == 4
    assert other.stderr.startswith(f"topics: not nacked: seq 2 of {q}: no lease of node x")
    ext = topics_cli("--json", "queue", "extend", q, "--node", "w", "--lease-ms", "60000", "2", "3")
    assert ext.returncode == 4
    assert json.loads(ext.stdout)["skipped"] == [3]
    assert ext.stderr.startswith("topics: not extended: seq 3 of")
    assert ok(topics_cli("queue", "ack", q, "--node", "w", "2")) == "acked 1\n"


def test_claim_shows_the_deadline_as_an_iso_time(topics_cli: Run) -> None:
    q = name("claimiso")
    ok(topics_cli("put", q, "type=queue"))
    ok(topics_cli("write", q, input="1\n2\n"))
    rows = ok(topics_cli("queue", "claim", q, "--node", "w")).splitlines()
    assert rows[0].split() == ["SEQ", "LEASE_ID", "DELIVERIES", "DEADLINE", "DATA"]
    assert re.fullmatch(ISO, rows[1].split()[3]), rows
    raw = ok(topics_cli("queue", "claim", q, "--node", "w", "--raw-ts")).splitlines()
    assert raw[1].split()[3].isdigit()
