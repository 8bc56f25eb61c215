"""``topics jobs schedule`` and ``topics dlq redrive`` (issue 19) against the real server."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from .conftest import Run
from .test_cli import name, ok


def test_jobs_schedule(topics_cli: Run) -> None:
    q = name("jq")
    ok(topics_cli("put", q, "type=queue"))
    out = ok(topics_cli("jobs", "schedule", q, '{"n": 1}', "--in", "5m", "--dedupe-key", "n1"))
    assert out == f"job 1 in {q}, claimable in 300000 ms\n"
    out = ok(topics_cli("jobs", "schedule", q, '{"n": 2}', "--dedupe-key", "n1"))
    assert out == "not added: job 1 holds dedupe key 'n1'\n"
    out = ok(topics_cli("jobs", "schedule", q, '{"n": 3}', "--dedupe-key", "n1", "--replace"))
    assert out == f"job 2 in {q}, claimable at once (replaced job 1)\n"
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    res = json.loads(
        ok(
            topics_cli(
                "--json", "jobs", "schedule", q, "4", "--at", tomorrow,
                "--dedupe-key", "w", "--dedupe", "window", "--dedupe-ms", "1000",
            )
        )
    )  # fmt: skip
    assert (res["seqs"], res["dedupe"]) == ([3], [])
    stat = json.loads(ok(topics_cli("--json", "stat", q)))
    assert stat["queue"]["scheduled"] == 1
    bad = topics_cli("jobs", "schedule", q, "1", "--in", "soon")
    assert bad.returncode == 2
    assert "not a duration" in bad.stderr
    both = topics_cli("jobs", "schedule", q, "1", "--in", "1s", "--at", "0")
    assert both.returncode == 2
    server_says = topics_cli("jobs", "schedule", q, "1", "--dedupe", "window", "--dedupe-key", "x")
    assert server_says.returncode == 1
    assert "dedupe_ms" in server_says.stderr


def test_dlq_redrive(topics_cli: Run) -> None:
    q, dlq = name("rq"), name("rdlq")
    ok(topics_cli("put", q, "type=queue", "max_deliveries=1", f"dead_letter={dlq}"))
    ok(topics_cli("write", q, input='{"job":1}\n{"job":2}\n'))
    ok(topics_cli("queue", "claim", q, "--node", "w", "--max", "2"))
    ok(topics_cli("queue", "nack", q, "--node", "w", "1", "2"))
    ok(topics_cli("queue", "claim", q, "--node", "w", "--max", "2"))  # both dead-lettered
    out = ok(topics_cli("dlq", "redrive", dlq, "--max", "1"))
    assert out == f"moved 1 to {q} (seqs 3..3)\nmoved 1; 1 left in {dlq}\n"
    res = json.loads(ok(topics_cli("--json", "dlq", "redrive", dlq, "--origin", q)))
    assert (res["moved"], res["remaining"]) == (1, 0)
    missing = topics_cli("dlq", "redrive", dlq, "--to", name("nope"))
    assert missing.returncode == 3


@pytest.mark.cli_process
def test_dlq_ls_shows_where_each_job_came_from(topics_cli: Run) -> None:
    q, q2, dlq = name("lq"), name("lq2"), name("ldlq")
    for queue in (q, q2):
        ok(topics_cli("put", queue, "type=queue", "max_deliveries=1", f"dead_letter={dlq}"))
    ok(topics_cli("write", q, "--tag", "red", input='{"job":1}\n{"job":2}\n'))
    ok(topics_cli("write", q2, input='{"job":3}\n'))
    for queue, seqs in ((q, ["1", "2"]), (q2, ["1"])):
        ok(topics_cli("queue", "claim", queue, "--node", "w", "--max", "2"))
        ok(topics_cli("queue", "nack", queue, "--node", "w", *seqs))
        ok(topics_cli("queue", "claim", queue, "--node", "w", "--max", "2"))  # dead-lettered
    rows = ok(topics_cli("dlq", "ls", dlq)).splitlines()
    assert rows[0].split() == ["SEQ", "TIME", "FROM", "SRC_SEQ", "DELIVERIES", "TAG", "DATA"]
    assert [r.split()[:1] + r.split()[2:] for r in rows[1:]] == [
        ["1", q, "1", "1", "red", '{"job":1}'],
        ["2", q, "2", "1", "red", '{"job":2}'],
        ["3", q2, "1", "1", "-", '{"job":3}'],
    ]
    only = ok(topics_cli("dlq", "ls", dlq, "--origin", q2)).splitlines()
    assert [r.split()[0] for r in only[1:]] == ["3"]
    tagged = ok(topics_cli("dlq", "ls", dlq, "--match", "re*", "--max", "1")).splitlines()
    assert [r.split()[0] for r in tagged[1:]] == ["1"]
    recs = [json.loads(line) for line in ok(topics_cli("--json", "dlq", "ls", dlq)).splitlines()]
    assert recs[2]["meta"] == {"$dead_letter_from": q2, "$dead_letter_deliveries": 1,
                               "$dead_letter_src_seq": 1}  # fmt: skip
    missing = topics_cli("dlq", "ls", name("nodlq"))
    assert missing.returncode == 3
