"""topics-server beside Redis Streams, both driven by C load generators (issue 33).

A ratio taken against a peer whose Python client is the bottleneck measures the client,
so here both servers get a C load generator, the same connections, the same pipeline depth
and the same durability:

* topics-server (``python -m topics.frontends.server``, a temp data dir, topics of the
  default ``disk`` class: WAL written at once, fdatasync shortly after) driven by ``wrk -t1``;
* redis-server (Debian's; its own temp dir and loopback port; ``appendonly yes``,
  ``appendfsync everysec``: also written at once, synced within a second) driven by
  ``redis-benchmark``, one record per ``XADD`` with the same ~45-byte JSON as the field value.

Shapes (records are the same ~45-byte JSON object on both sides):

* ``single_16``: one record per request, 16 connections (``wrk -c16`` / ``-c 16 -P 1``);
* ``single_1``: one record per request, 1 connection (``wrk -c1`` / ``-c 1 -P 1``);
* ``batch_16x100``: 100 records per request, 16 connections: one POST of 100 records
  (``?return_seqs=false``: the answer gives the first and last seq) against 100 XADDs in one
  pipeline (``-P 100``, the 100 ids returned);
* ``mixed_16``: 8 connections writing one record per request while 8 others read the latest
  100 records, two generators at once on each side: ``diff`` from the previous answer's
  ``head_seq`` - 100 (limit 100) against ``XREVRANGE key + - COUNT 100``, Redis's own read of
  the newest 100 entries (topics has no "last N" read; the head comes with every answer).

Every round runs every shape on both sides, the side going first alternating by round;
each run is ``--duration`` seconds (redis-benchmark counts requests, so it is given the count
its previous run reached in that time). Reported per shape: medians over the rounds of
records/s, requests/s, the tools' p50/p99 latency, the server's CPU time per record
(/proc/PID/stat, children included) and the per-round ratio topics / Redis.

NATS: ``nats bench`` (the natscli tool) is the NATS peer's C-class load generator; it is not
packaged for Debian 12 and Debian's Go (1.19) is too old to build it, so when ``nats`` is not
on PATH the results say so and no NATS rows are made (bench/peers_nats.py measures NATS
through nats-py, client-bound).

Usage: python bench/peers_c.py [--rounds 3] [--duration 3] [--json out.json]
Needs: wrk, redis-server, redis-benchmark (apt-get install -y wrk redis-server redis-tools).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _c_load as cl
from _machine import facts, loadavg, utc_now
from http_load import (
    BATCH,
    ONE_BODY,
    PAYLOAD,
    RECORD,
    WRITE_BODY,
    Proc,
    free_port,
    http_call,
    start_topics,
)

MIXED_READ = 100  # records per read in the mixed shape
HALF = 8  # connections per side of the mixed shape (16 in all)
# A first guess of Redis's rate per shape (requests/s), only for sizing its warm-up run.
FIRST_GUESS = {"single_16": 50_000, "single_1": 15_000, "batch_16x100": 400_000}
SHAPES = {
    "single_16": "one record per request, 16 connections",
    "single_1": "one record per request, 1 connection",
    "batch_16x100": "100 records per request (Redis: a pipeline of 100), 16 connections",
    "mixed_16": "8 connections writing 1 record + 8 reading the latest 100, at once",
}


def start_redis(tmp: Path) -> tuple[Proc, int]:
    port = free_port()
    rdir = tmp / "redis"
    rdir.mkdir()
    cmd = [
        "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(rdir),
        "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
        "--protected-mode", "yes", "--daemonize", "no",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=(tmp / "redis.log").open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while redis_cli(port, "PING") != "PONG":
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"redis-server did not start; see {tmp / 'redis.log'}")
        time.sleep(0.05)
    return Proc("redis", proc, f"redis://127.0.0.1:{port}"), port


def redis_cli(port: int, *args: str) -> str:
    done = subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args], capture_output=True, text=True
    )
    return done.stdout.strip()


@contextmanager
def servers(tmp: Path) -> Iterator[tuple[Proc, Proc, int]]:
    started: list[Proc] = []
    try:
        topics = start_topics(str(tmp / "data"), tmp / "topics.log")
        started.append(topics)
        redis, port = start_redis(tmp)
        started.append(redis)
        yield topics, redis, port
    finally:
        for proc in reversed(started):
            proc.stop()


class Runner:
    """One shape on one side per call; keeps Redis's request counts between rounds."""

    def __init__(self, topics: Proc, port: int, tmp: Path, duration: float) -> None:
        self.url, self.port, self.tmp, self.duration = topics.url, port, tmp, duration
        self.t_pid = topics.proc.pid
        self.redis_rate = dict(FIRST_GUESS)

    def prefill(self) -> None:
        """The mixed shape reads the latest 100 from the first request on."""
        body = json.dumps({"records": [RECORD] * 1000})
        http_call(self.url, "POST", "/v0/topics/bench-m?return_seqs=false", body)
        cmds = "".join(f"XADD bench-m * d {json.dumps(PAYLOAD)}\n" for _ in range(1000))
        subprocess.run(
            ["redis-cli", "-p", str(self.port)], input=cmds, capture_output=True, text=True,
            check=True,
        )  # fmt: skip

    def topics(self, shape: str) -> dict[str, Any]:
        def load(path: str, script: str, conns: int) -> cl.Load:
            return cl.wrk_load(
                self.url + path, script, self.tmp, conns=conns, duration=self.duration
            )

        if shape == "mixed_16":
            w, r = cl.run_loads(
                [load("/v0/topics/bench-m", cl.lua_post(ONE_BODY), HALF),
                 load("/v0/topics/bench-m/diff", cl.lua_latest(MIXED_READ), HALF)],
                self.duration, [self.t_pid],
            )  # fmt: skip
            return _mixed(w, r)
        if shape == "batch_16x100":
            (out,) = cl.run_loads(
                [load("/v0/topics/bench-b?return_seqs=false", cl.lua_post(WRITE_BODY), 16)],
                self.duration, [self.t_pid],
            )  # fmt: skip
            http_call(self.url, "DELETE", "/v0/topics/bench-b")
            return _writes(out, out["requests"], BATCH)
        conns = 16 if shape == "single_16" else 1
        (out,) = cl.run_loads(
            [load("/v0/topics/bench-s" + str(conns), cl.lua_post(ONE_BODY), conns)],
            self.duration, [self.t_pid],
        )  # fmt: skip
        return _writes(out, out["requests"], 1)

    def redis(self, shape: str, pid: int) -> dict[str, Any]:
        xadd = ["XADD", "bench-w", "*", "d", PAYLOAD]
        if shape == "mixed_16":
            w, r = cl.run_loads(
                [cl.redis_load(self.port, ["XADD", "bench-m", "*", "d", PAYLOAD],
                               conns=HALF, pipeline=1, requests=None),
                 cl.redis_load(self.port, ["XREVRANGE", "bench-m", "+", "-", "COUNT",
                                           str(MIXED_READ)], conns=HALF, pipeline=1,
                               requests=None)],
                self.duration, [pid],
            )  # fmt: skip
            return _mixed(w, r)
        conns, pipeline = {"single_16": (16, 1), "single_1": (1, 1), "batch_16x100": (16, 100)}[
            shape
        ]
        n = max(1000, round(self.redis_rate[shape] * self.duration))
        (out,) = cl.run_loads(
            [cl.redis_load(self.port, xadd, conns=conns, pipeline=pipeline, requests=n)],
            self.duration, [pid],
        )  # fmt: skip
        self.redis_rate[shape] = out["req_s"]
        redis_cli(self.port, "DEL", "bench-w")
        # redis-benchmark counts commands: with -P 100 a round trip carries 100 records.
        result = _writes(out, n, 1)
        result["req_s"] = out["req_s"] / pipeline
        return result


def _writes(out: dict[str, Any], requests: float, per_request: int) -> dict[str, Any]:
    records = requests * per_request
    seconds = out.get("seconds") or records / (out["req_s"] * per_request)
    return {
        "records_s": records / seconds,
        "req_s": requests / seconds,
        "p50_ms": out.get("p50_ms"),
        "p99_ms": out.get("p99_ms"),
        "cpu_us_per_record": out["server_cpu_s"] / records * 1e6,
    }


def _mixed(w: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    ops = (w["req_s"] + r["req_s"]) * w["wall_s"]
    return {
        "ops_s": w["req_s"] + r["req_s"],
        "writes_s": w["req_s"],
        "reads_s": r["req_s"],
        "records_read_s": r["req_s"] * MIXED_READ,
        "write_p50_ms": w.get("p50_ms"),
        "write_p99_ms": w.get("p99_ms"),
        "read_p50_ms": r.get("p50_ms"),
        "read_p99_ms": r.get("p99_ms"),
        "write_avg_ms": w.get("avg_ms"),
        "read_avg_ms": r.get("avg_ms"),
        "cpu_us_per_op": w["server_cpu_s"] / max(ops, 1) * 1e6,
    }


def _median(rows: list[dict[str, Any]]) -> dict[str, float]:
    keys = [k for k in rows[0] if all(isinstance(r.get(k), int | float) for r in rows)]
    return {k: statistics.median(r[k] for r in rows) for k in keys}


def run(rounds: int, duration: float, log: Callable[[str], None]) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="peers-c-"))
    out: dict[str, Any] = {
        "shapes": {s: {"what": w, "topics": [], "redis": []} for s, w in SHAPES.items()}
    }
    try:
        with servers(tmp) as (topics, redis, port):
            runner = Runner(topics, port, tmp, duration)
            runner.prefill()
            log("warming up both servers ...")
            warm = Runner(topics, port, tmp, 1.0)
            for shape in SHAPES:
                warm.topics(shape)
                warm.redis(shape, redis.proc.pid)
                if shape in FIRST_GUESS:
                    runner.redis_rate[shape] = warm.redis_rate[shape]
            for k in range(rounds):
                for shape in SHAPES:
                    for side in ("topics", "redis") if k % 2 == 0 else ("redis", "topics"):
                        if side == "topics":
                            row = runner.topics(shape)
                        else:
                            row = runner.redis(shape, redis.proc.pid)
                        out["shapes"][shape][side].append(row)
                        log(f"round {k + 1} {shape:<13} {side:<6} "
                            + json.dumps({a: round(b, 3) for a, b in row.items() if b is not None}))  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for entry in out["shapes"].values():
        key = "ops_s" if "ops_s" in entry["topics"][0] else "records_s"
        entry["unit"] = "ops/s" if key == "ops_s" else "records/s"
        entry["ratio"] = [
            t[key] / r[key] for t, r in zip(entry["topics"], entry["redis"], strict=True)
        ]
        entry["median"] = {
            "topics": _median(entry["topics"]),
            "redis": _median(entry["redis"]),
            "ratio": statistics.median(entry["ratio"]),
        }
    return out


def versions() -> dict[str, str | None]:
    def first_line(cmd: list[str]) -> str | None:
        if shutil.which(cmd[0]) is None:
            return None
        done = subprocess.run(cmd, capture_output=True, text=True)
        return (
            (done.stdout or done.stderr).strip().splitlines()[0]
            if done.returncode in (0, 1)
            else None
        )

    return {
        "redis-server": first_line(["redis-server", "--version"]),
        "redis-benchmark": first_line(["redis-benchmark", "--version"]),
        "wrk": first_line(["wrk", "-v"]),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per run")
    parser.add_argument("--quick", action="store_true", help="1 round of 1 s")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.duration <= 0:
        parser.error("--rounds must be >= 1 and --duration > 0")
    rounds, duration = (1, 1.0) if args.quick else (args.rounds, args.duration)
    missing = [
        t for t in ("wrk", "redis-server", "redis-benchmark", "redis-cli") if not shutil.which(t)
    ]
    if missing:
        raise SystemExit(
            f"missing: {', '.join(missing)} (apt-get install -y wrk redis-server redis-tools)"
        )
    started, load0 = utc_now(), loadavg()
    results = run(rounds, duration, lambda line: print(line, flush=True))
    results.update(
        rounds=rounds, duration_s=duration, started_utc=started, finished_utc=utc_now(),
        load_start=load0, load_end=loadavg(), machine=facts(), versions=versions(),
        mixed_read_records=MIXED_READ,
        nats=({"status": "not run", "reason": "the `nats` CLI (natscli, whose `nats bench` is "
               "the NATS peer's load generator) is not on PATH: not packaged for Debian 12, and "
               "Debian's Go 1.19 is too old to build it"} if shutil.which("nats") is None
              else {"status": "not run", "reason": "`nats bench` rows are not implemented yet"}),
    )  # fmt: skip
    for name, shape in results["shapes"].items():
        m = shape["median"]
        print(f"{name:<13} topics/Redis {m['ratio']:.2f}x  ({shape['unit']}: topics "
              f"{m['topics'].get('records_s', m['topics'].get('ops_s')):,.0f}, Redis "
              f"{m['redis'].get('records_s', m['redis'].get('ops_s')):,.0f})")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(sys.argv[1:]))
