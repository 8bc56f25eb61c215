"""The ``topics`` command line, driven as a subprocess against a real server: every
command, table and ``--json`` output, exit codes and error messages with the request id."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import topics
from tests.support.paths import ROOT
from topics.cli import build_parser

from .conftest import Run, ServerProcess

_n = iter(range(1, 10_000))


def name(prefix: str) -> str:
    return f"cli-{prefix}-{next(_n)}-{time.monotonic_ns() % 100_000}"


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def lines_json(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def no_ts(out: str) -> list[str]:
    """Record lines without their ISO ``$ts`` column (checked in test_cli_ux.py)."""
    return [re.sub(f"  {ISO}", "", line, count=1) for line in out.splitlines()]


@pytest.mark.cli_process
def test_write_read_stat_ls_rm(topics_cli: Run) -> None:
    t = name("w")
    out = ok(topics_cli("write", t, "--tag", "g", input='{"price":1.50}\n\n[1,2]\n"x"\n'))
    assert out == f"wrote 3 records to {t} (seqs 1..3)\n"
    table = ok(topics_cli("read", t))
    assert no_ts(table) == ['1  tag=g  {"price":1.50}', "2  tag=g  [1,2]", '3  tag=g  "x"']
    recs = lines_json(ok(topics_cli("--json", "read", t, "--from", "1")))
    assert [(r["$seq"], r["data"], r["$tag"]) for r in recs] == [(2, [1, 2], "g"), (3, "x", "g")]
    assert len(lines_json(ok(topics_cli("--json", "read", t, "--max", "1")))) == 1
    stat = ok(topics_cli("stat", t))
    assert re.search(r"^head_seq\s+3$", stat, re.M)
    assert re.search(r"^config.durability\s+disk$", stat, re.M)
    assert json.loads(ok(topics_cli("--json", "stat", t)))["count"] == 3
    listing = ok(topics_cli("ls", "--prefix", t)).splitlines()
    assert listing[0].split() == [
        "TOPIC",
        "TYPE",
        "HEAD",
        "EARLIEST",
        "COUNT",
        "BYTES",
        "DURABILITY",
    ]
    assert listing[1].split()[:5] == [t, "log", "3", "1", "3"]
    assert [
        x["topic"] for x in json.loads(ok(topics_cli("--json", "ls", "--prefix", t)))["topics"]
    ] == [t]
    assert ok(topics_cli("rm", t)) == f"deleted {t}\n"
    again = topics_cli("rm", t)  # like rm(1): nothing there is an error
    assert (again.returncode, again.stdout) == (3, "")
    assert again.stderr == f"topics: {t}: no such topic (nothing deleted)\n"
    as_json = topics_cli("--json", "rm", t)
    assert as_json.returncode == 3
    assert json.loads(as_json.stdout)["deleted"] is False


@pytest.mark.cli_process
def test_write_records_file_batches_and_progress(topics_cli: Run, tmp_path: Path) -> None:
    t = name("bulk")
    src = tmp_path / "in.jsonl"
    src.write_text(
        "".join(f'{{"data":{{"i":{i},"v":2.50}},"tag":"k{i % 2}"}}\n' for i in range(2500))
    )
    proc = topics_cli("--json", "write", t, str(src), "--records", "--batch", "1000", "--progress")
    summary = json.loads(ok(proc))
    assert summary == {"topic": t, "records": 2500, "batches": 3, "first_seq": 1, "last_seq": 2500}
    assert "100%" in proc.stderr
    assert "2,500 records" in proc.stderr
    recs = lines_json(ok(topics_cli("--json", "read", t, "--from", "2499")))
    assert recs == [
        {"$seq": 2500, "$ts": recs[0]["$ts"], "$tag": "k1", "data": {"i": 2499, "v": 2.5}}
    ]
    deleted = json.loads(ok(topics_cli("--json", "delete-records", t, "--match", "k1")))
    assert deleted["deleted"] == 1250
    out = ok(topics_cli("delete-records", t, "--before-seq", "11"))
    assert out == f"deleted 5 records; 1245 remain in {t}\n"
    bad = topics_cli("write", t, "--records", input="[1]\n")
    assert bad.returncode == 2
    assert "line 1: not a record object" in bad.stderr


@pytest.mark.slow
def test_put_and_queue_commands(topics_cli: Run) -> None:
    q = name("q")
    assert ok(topics_cli("put", q, "type=queue", "lease_ms=60000")) == f"created {q}\n"
    assert json.loads(ok(topics_cli("--json", "put", q, "lease_ms=60000")))["created"] is False
    ok(topics_cli("write", q, input='{"job":1}\n{"job":2}\n{"job":3}\n'))
    table = ok(topics_cli("queue", "claim", q, "--node", "w", "--max", "2")).splitlines()
    assert table[0].split() == ["SEQ", "LEASE_ID", "DELIVERIES", "DEADLINE", "DATA"]
    seq, lease = table[1].split()[:2]
    assert (seq, lease[:6]) == ("1", "lease_")
    claimed = json.loads(ok(topics_cli("--json", "queue", "claim", q, "--node", "w")))
    assert [j["$seq"] for j in claimed["claimed"]] == [3]
    out = ok(topics_cli("queue", "extend", q, "--node", "w", "--lease-ms", "60000", "1", "2"))
    assert out == "extended 2\n"
    mixed = topics_cli("queue", "extend", q, "--node", "w", "--lease-ms", "5000", f"1:{lease}", "2")
    assert mixed.returncode == 2
    assert "a lease id for every seq, or for none" in mixed.stderr
    assert ok(topics_cli("queue", "ack", q, "--node", "w", f"1:{lease}")) == "acked 1\n"
    not_held = topics_cli("queue", "ack", q, "--node", "other", "2")
    assert (not_held.returncode, not_held.stdout) == (4, "acked 0\n")
    nack = json.loads(
        ok(topics_cli("--json", "queue", "nack", q, "--node", "w", "2", "3", "--delay-ms", "0"))
    )
    assert (nack["nacked"], nack["ready"]) == (2, 2)
    stat = ok(topics_cli("stat", q))
    assert re.search(r"^queue.ready\s+2$", stat, re.M)
    assert re.search(r"^queue.backoff\s+0$", stat, re.M)
    ok(topics_cli("queue", "claim", q, "--node", "w"))
    ok(topics_cli("queue", "nack", q, "--node", "w", "2", "--delay-ms", "60000"))
    stat = ok(topics_cli("stat", q))  # a job waiting out its delay is counted somewhere
    assert re.search(r"^queue.backoff\s+1$", stat, re.M)
    assert re.search(r"^queue.ready\s+1$", stat, re.M)
    usage = topics_cli("queue", "ack", q, "--node", "w", "x")
    assert usage.returncode == 2
    assert "expected SEQ or SEQ:LEASE_ID" in usage.stderr


def test_router_commands(topics_cli: Run) -> None:
    src, dst = name("src"), name("dst")
    ok(topics_cli("put", src))
    assert ok(topics_cli("router", "put", "--source", src, "--dest", dst, "--filter", "pub:*")) == (
        f"created router {src}->{dst}: {src} -> {dst}\n"
    )
    r = f"{src}->{dst}"
    info = json.loads(ok(topics_cli("--json", "router", "get", r)))
    assert info["filter"] == ["tag", "Glob", "pub:*"]
    assert re.search(r"^guarantee\s+at_least_once$", ok(topics_cli("router", "get", r)), re.M)
    ls = ok(topics_cli("router", "ls", "--source", src)).splitlines()
    assert ls[0].split() == ["ROUTER", "SOURCE", "DEST", "GUARANTEE", "FORWARDED"]
    assert ls[1].split()[0] == r
    assert (
        json.loads(ok(topics_cli("--json", "router", "ls", "--source", src)))["routers"][0][
            "router"
        ]
        == r
    )
    upd = json.loads(ok(topics_cli("--json", "router", "put", r, "--source", src, "--dest", dst,
                                   "--guarantee", "exactly_once", "--no-preserve-node")))  # fmt: skip
    assert (upd["created"], upd["guarantee"], upd["preserve_node"]) == (
        False,
        "exactly_once",
        False,
    )
    assert ok(topics_cli("router", "rm", r)) == f"deleted {r}\n"
    assert ok(topics_cli("router", "rm", r)).startswith("no such router")


@pytest.mark.slow
def test_tail_follows_live_records(cli_server: ServerProcess) -> None:
    t = name("tail")
    with topics.Client(cli_server.base_url) as client:
        client.write(t, [{"data": "old"}])
        cmd = [sys.executable, "-m", "topics.cli", "--url", cli_server.base_url, "--json",
               "tail", t, "--count", "2", "-v"]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stderr is not None
            line = proc.stderr.readline()  # -v: "caught up at 1" once it is live at the head
            assert line == f"topics: {t} caught up at 1\n", line
            client.write(t, [{"data": "new1"}, {"data": "new2"}])
            out, err = proc.communicate(timeout=30)
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    assert [(r["topic"], r["data"]) for r in lines_json(out)] == [(t, "new1"), (t, "new2")]


def test_tail_from_a_seq(topics_cli: Run) -> None:
    t = name("tailfrom")
    ok(topics_cli("write", t, input='"old"\n'))
    assert no_ts(ok(topics_cli("tail", t, "--from", "0", "--count", "1"))) == [f'{t}  1  "old"']


@pytest.mark.cli_process
def test_tombstones_are_never_silent(topics_cli: Run) -> None:
    t = name("lossy")
    ok(topics_cli("put", t, "cap_records=2"))
    ok(topics_cli("write", t, input="1\n2\n3\n4\n"))
    proc = topics_cli("--json", "read", t)
    out = lines_json(ok(proc))
    assert out[0] == {"tombstone": {"topic": t, "gap_from": 1, "gap_to": 2, "reason": "cap",
                                    "missed_estimate": 2, "earliest_seq": 3, "head_seq": 4}}  # fmt: skip
    assert "LOSS in" in proc.stderr
    assert "seqs 1..2 are gone" in proc.stderr
    # From a position it had (the start is told once a session: test_cli_loss.py).
    tail = topics_cli("tail", t, "--from", "1", "--count", "2")
    assert "seqs 2..2 are gone" in tail.stderr
    assert no_ts(ok(tail)) == [f"{t}  3  3", f"{t}  4  4"]


@pytest.mark.cli_process
@pytest.mark.slow
def test_errors_exit_codes_and_request_ids(topics_cli: Run) -> None:
    missing = topics_cli("stat", name("missing"))
    assert missing.returncode == 3
    assert re.fullmatch(r"topics: topic_not_found: topic \".*\" does not exist \(request id [0-9a-f-]{36}\)\n",
                        missing.stderr)  # fmt: skip
    as_json = topics_cli("--json", "stat", "x" + name("missing"))
    assert as_json.returncode == 3
    err = json.loads(as_json.stdout)["error"]
    assert err["code"] == "topic_not_found"
    assert len(err["request_id"]) == 36
    log = name("log")
    ok(topics_cli("put", log))
    conflict = topics_cli("put", log, "type=queue")
    assert conflict.returncode == 4
    assert "topic_exists_incompatible" in conflict.stderr
    bad = topics_cli("write", "bad/name", input="1\n")
    assert bad.returncode == 1
    assert "invalid_request" in bad.stderr
    usage = topics_cli("put", log, "novalue")
    assert usage.returncode == 2
    assert "expected FIELD=VALUE" in usage.stderr
    assert topics_cli("frobnicate").returncode == 2
    down = topics_cli("--url", "http://127.0.0.1:9", "--timeout", "1", "ls")
    assert down.returncode == 6
    assert "could not connect" in down.stderr


@pytest.mark.cli_process
@pytest.mark.slow
def test_api_key_from_the_environment(start_keyed: ServerProcess, topics_cli: Run) -> None:
    env = {"TOPICS_URL": start_keyed.base_url}
    denied = topics_cli("ls", env=env)
    assert denied.returncode == 1
    assert "unauthorized" in denied.stderr
    assert ok(topics_cli("ls", env={**env, "TOPICS_API_KEY": "k1"})).startswith("TOPIC")
    assert ok(topics_cli("--api-key", "k1", "health", env=env)).startswith("status")


@pytest.fixture(scope="module")
def start_keyed() -> object:
    from tests.support.server import spawn_server

    server = spawn_server({"TOPICS_API_KEYS": "k1"})
    yield server
    assert server.stop() == 0


def test_help_and_console_script() -> None:
    parser = build_parser()
    assert parser.prog == "topics"
    text = parser.format_help()
    for cmd in ("ls", "stat", "put", "rm", "write", "read", "tail", "router", "queue"):
        assert cmd in text
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'topics = "topics.cli:main"' in pyproject
