"""The benchmarks run_all.py knows, and how one is run: its own subprocess, its JSON."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from _machine import ROOT, loadavg, utc_now, which


@dataclass(frozen=True)
class Bench:
    name: str
    script: str
    what: str
    full: tuple[str, ...] = ()
    quick: tuple[str, ...] = ("--quick",)
    # returns why it cannot run here, or None
    precheck: Callable[[], str | None] = field(default=lambda: None)
    # scripts that print a table but cannot (yet) write JSON: parse the table instead
    stdout_parser: Callable[[str], dict[str, Any] | None] | None = None
    # seconds a full run of this one may take when run_all is given no --timeout
    full_timeout_s: float | None = None


def _needs(*tools: str, modules: tuple[str, ...] = ()) -> Callable[[], str | None]:
    def check() -> str | None:
        missing = [t for t in tools if which(t) is None]
        missing += [m for m in modules if importlib.util.find_spec(m) is None]
        return f"missing: {', '.join(missing)}" if missing else None

    return check


_QUEUE_ROW = re.compile(
    r"^(?P<setup>\S.*?)\s{2,}(?P<pipeline>[\d,]+)\s+(?P<drain>[\d,]+)\s+(?P<p50>[\d,]+|nan)\s+"
    r"(?P<p99>[\d,]+|nan)\s+(?P<cv>[\d.]+|nan)\s+(?P<cv_pipe>[\d.]+|nan)\b.*$",
    re.M,
)


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def parse_queues_stdout(out: str) -> dict[str, Any] | None:
    """The rows of queues.py's printed table (for a queues.py without --json)."""
    rows = [
        {
            "setup": m["setup"].strip(),
            "pipeline_jobs_s": _num(m["pipeline"]),
            "drain_jobs_s": _num(m["drain"]),
            "claim_p50_us": _num(m["p50"]),
            "claim_p99_us": _num(m["p99"]),
            "cv": _num(m["cv"]),
        }
        for m in _QUEUE_ROW.finditer(out)
    ]
    head = re.search(r"queues: ([\d,]+) jobs, (\d+) workers, batch (\d+)", out)
    if not rows:
        return None
    data: dict[str, Any] = {"rows": rows, "parsed_from": "stdout"}
    if head:
        data.update(jobs=int(_num(head[1])), workers=int(head[2]), batch=int(head[3]))
    return data


def _spark_ready() -> str | None:
    missing = _needs("java", modules=("pyspark",))()
    return missing


BENCHES: tuple[Bench, ...] = (
    Bench("engine", "bench/engine.py", "embedded engine: append, diff, tag delete, RSS"),
    Bench(
        "persistence",
        "bench/persistence.py",
        "append per durability class and writer count, fsync latency, recovery",
    ),
    Bench("routers", "bench/routers.py", "router latency, forwarding rate, WAL frames"),
    Bench(
        "http_load",
        "bench/http_load.py",
        "topics-server vs bare ASGI vs Redis Streams (wrk, redis-py)",
        full=("--rounds", "5", "--duration", "3"),
        quick=("--rounds", "1", "--duration", "1"),
        precheck=_needs("wrk", "redis-server", modules=("redis",)),
    ),
    Bench(
        "peers_c",
        "bench/peers_c.py",
        "topics-server vs Redis Streams, both driven by C load generators (wrk, redis-benchmark)",
        full=("--rounds", "3", "--duration", "3"),
        precheck=_needs("wrk", "redis-server", "redis-benchmark", "redis-cli"),
    ),
    Bench(
        "watch",
        "bench/watch.py",
        "SSE watch fan-out vs Redis XREAD BLOCK",
        # Three interleaved rounds, medians: one round's p99 at 1 watcher moved 0.9 -> 1.4 ms
        # between two runs ten minutes apart at the same low load.
        full=("--rounds", "3"),
        quick=("--quick", "--watchers", "1,10,100"),
        precheck=_needs("redis-server"),
    ),
    Bench(
        "queues",
        "bench/queues.py",
        "queues in-process, over HTTP, Redis consumer groups",
        precheck=_needs("redis-server", modules=("redis",)),
        stdout_parser=parse_queues_stdout,
    ),
    Bench(
        "nats",
        "bench/peers_nats.py",
        "NATS JetStream peer: publish, fetch 1000, fan-out, work queue",
        precheck=_needs("nats-server", modules=("nats",)),
    ),
    Bench(
        "spark_read",
        "bench/spark_read.py",
        "Spark data source vs Spark's JSON-lines and Parquet readers",
        full=("--records", "10000000"),
        quick=("--records", "200000", "--repeat", "1"),
        precheck=_spark_ready,
    ),
    Bench(
        "crash_heads",
        "bench/crash_heads.py",
        "crash recovery: seqs a SIGKILL skips, a write after a pause, the heads table's cost",
        full=(
            "--rounds",
            "5",
            "--pauses",
            "40",
            "--sporadic-writes",
            "40",
            "--repeats",
            "5",
            "--duration",
            "1.5",
        ),
        quick=("--rounds", "1", "--pauses", "6", "--sporadic-writes", "10", "--duration", "1"),
    ),
    Bench("encode_dict", "bench/encode_dict.py", "encode_batch of dict payloads vs ujson.dumps"),
    Bench("scan_body", "bench/scan_body.py", "the raw-span write-body scanner vs ujson.loads"),
    Bench("delete_flag", "bench/delete_flag.py", "durable delete: flag flip vs sidecar rewrite"),
    Bench(
        "diff_where",
        "bench/diff_where.py",
        "diff with a where predicate (keeps 10 %) vs the plain diff, same run (issue 18)",
        full=("--rounds", "9"),
        quick=("--rounds", "2"),
    ),
    Bench(
        "backup",
        "bench/backup.py",
        "write rate (batch 100, fsync and disk) during an online backup vs without (issue 32)",
        full=("--rounds", "5", "--duration", "3"),
    ),
    Bench(
        "hostile",
        "bench/hostile.py",
        "batched writes with 1,000 slowloris + 200 pre-auth body holders attached",
        full=("--rounds", "3", "--duration", "10"),
    ),
    Bench(
        "history",
        "bench/history.py",
        "history bigger than memory: cold vs hot diffs, RSS under a full scan, restarts "
        "(issue 31; the recorded run: 200 M records, ~20 GB of disk, about an hour)",
        full=("--records", "200000000"),
        full_timeout_s=4 * 3600.0,
    ),
)

BY_NAME = {b.name: b for b in BENCHES}


def _supports_json(script: Path) -> bool:
    # Cheaper and quieter than --help (some scripts import heavy modules first).
    return re.search(r"""["']--json["']""", script.read_text()) is not None


def _run(cmd: list[str], env: dict[str, str], log: IO[str], timeout: float) -> int | None:
    """Exit code, or None after a timeout. The benchmark gets its own process group so
    that a timeout also stops the servers it started (topics-server, redis, nats)."""
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(10)
                break
            except subprocess.TimeoutExpired:
                continue
        return None


def run_one(bench: Bench, quick: bool, workdir: Path, timeout: float) -> dict[str, Any]:
    """Run one benchmark in its own process; its entry for the results file."""
    entry: dict[str, Any] = {"what": bench.what, "started_utc": utc_now()}
    reason = bench.precheck()
    if reason is not None:
        entry.update(status="skipped", reason=reason)
        return entry
    script = ROOT / bench.script
    json_path = workdir / f"{bench.name}.json"
    log_path = workdir / f"{bench.name}.log"
    json_path.unlink(missing_ok=True)
    args = list(bench.quick if quick else bench.full)
    has_json = _supports_json(script)
    if has_json:
        args += ["--json", str(json_path)]
    cmd = [sys.executable, bench.script, *args]
    entry["command"] = "python " + " ".join([bench.script, *args[: len(args) - 2 * has_json]])
    entry["load_before"] = loadavg()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    t0 = time.monotonic()
    with log_path.open("w") as log:
        code = _run(cmd, env, log, timeout)
    entry["seconds"] = round(time.monotonic() - t0, 1)
    entry["load_after"] = loadavg()
    entry["log"] = str(log_path)
    out = log_path.read_text(errors="replace")
    entry["output_tail"] = out[-2000:]
    if code is None:
        entry.update(status="failed", reason=f"timed out after {timeout:.0f} s")
        return entry
    if code != 0:
        entry.update(status="failed", reason=f"exit code {code}")
        return entry
    if has_json and json_path.exists():
        entry.update(status="ok", data=json.loads(json_path.read_text()))
    elif bench.stdout_parser is not None and (parsed := bench.stdout_parser(out)) is not None:
        entry.update(
            status="ok",
            data=parsed,
            note=f"{bench.script} has no --json yet: its printed table was parsed",
        )
    else:
        entry.update(status="failed", reason="no JSON results written")
    return entry
