"""C load generators for bench/peers_c.py: wrk against HTTP, redis-benchmark against Redis.

Both sides of a comparison are driven the same way: one C process per workload (``wrk -t1``,
``redis-benchmark`` with its default single thread), a fixed number of connections, one
request or pipeline in flight per connection, and the server's CPU time read from
/proc/PID/stat around the run. Two workloads can run at once (the mixed read/write shape):
each is started, both are waited for, each is parsed on its own.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")
_UNIT = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}
_WRK_TOTAL = re.compile(r"(\d+) requests in ([\d.]+)(us|ms|s|m)")
_WRK_NON2XX = re.compile(r"Non-2xx or 3xx responses: (\d+)")
_WRK_ERRORS = re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")
_WRK_PCT = re.compile(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", re.M)
# redis-benchmark -l prints "NAME: rps=X (overall: Y) avg_msec=A (overall: B)" every 250 ms.
_RB_PROGRESS = re.compile(r"overall: ([\d.]+)\) avg_msec=[\d.na-]+ \(overall: ([\d.]+)\)")


def server_cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` and of its reaped children (Redis forks for AOF rewrites)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / TICK


# -- wrk -------------------------------------------------------------------------------------


def lua_post(body: str) -> str:
    """Every request POSTs the same body."""
    return (
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        f"wrk.body = {_lua_string(body)}\n"
    )


def lua_latest(limit: int) -> str:
    """A diff of the latest ``limit`` records: each answer carries ``head_seq``, and the next
    request reads from ``head_seq - limit`` (what a client wanting the newest window does; the
    contract has no "last N" read, so the head comes from the previous answer)."""
    return (
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        "local head = 0\n"
        "request = function()\n"
        f"  local from = head - {limit}\n"
        "  if from < 0 then from = 0 end\n"
        f'  local body = string.format(\'{{"from_seq":%d,"limit":{limit}}}\', from)\n'
        "  return wrk.format(nil, nil, nil, body)\n"
        "end\n"
        "response = function(status, headers, body)\n"
        "  local h = string.match(body, '\"head_seq\":(%d+)')\n"
        "  if h then head = tonumber(h) end\n"
        "end\n"
    )


def _lua_string(text: str) -> str:
    if "]]" in text:
        raise ValueError("a wrk body may not contain ']]'")
    return f"[[{text}]]"


@dataclass(frozen=True)
class Load:
    """One load generator run: the command and what to parse its output with."""

    cmd: list[str]
    kind: str  # "wrk", "redis-benchmark" (csv) or "redis-benchmark-loop" (stopped by SIGINT)


def wrk_load(url: str, script: str, script_dir: Path, *, conns: int, duration: float) -> Load:
    path = script_dir / f"wrk-{abs(hash(script)):x}.lua"
    path.write_text(script)
    secs = max(1, round(duration))
    cmd = ["wrk", "-t1", f"-c{conns}", f"-d{secs}s", "--latency", "-s", str(path), url]
    return Load(cmd, "wrk")


def redis_load(
    port: int, command: Sequence[str], *, conns: int, pipeline: int, requests: int | None
) -> Load:
    """``requests`` commands, or (None) a loop stopped after the run's duration."""
    base = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(conns)]
    base += ["-P", str(pipeline)]
    if requests is None:
        return Load([*base, "-l", *command], "redis-benchmark-loop")
    return Load([*base, "-n", str(requests), "--csv", *command], "redis-benchmark")


def parse_wrk(out: str) -> dict[str, Any]:
    total = _WRK_TOTAL.search(out)
    if total is None:
        raise RuntimeError(f"unparsable wrk output:\n{out}")
    n = int(total.group(1))
    secs = float(total.group(2)) * _UNIT[total.group(3)]
    bad = int(m.group(1)) if (m := _WRK_NON2XX.search(out)) else 0
    if bad:
        # An error answer is cheap and would flatter the rate: a run with any is void.
        raise RuntimeError(f"wrk saw {bad} non-2xx answers:\n{out}")
    errors = sum(int(x) for x in m.groups()) if (m := _WRK_ERRORS.search(out)) else 0
    pct = {f"p{p}_ms": float(v) * _UNIT[u] * 1e3 for p, v, u in _WRK_PCT.findall(out)}
    return {"requests": n, "seconds": secs, "req_s": n / secs, "socket_errors": errors, **pct}


def parse_redis_csv(out: str) -> dict[str, Any]:
    """The data line of ``--csv``: the test name (quoted, may hold quotes and commas) and
    seven numbers, so the numbers are taken from the end."""
    lines = [ln for ln in out.splitlines() if ln.strip() and not ln.startswith('"test"')]
    try:
        fields = [float(f.strip('"')) for f in lines[-1].rsplit(",", 7)[1:]]
        rps, _avg, _min, p50, _p95, p99, _max = fields
    except (IndexError, ValueError):
        raise RuntimeError(f"unparsable redis-benchmark output:\n{out}") from None
    return {"req_s": rps, "p50_ms": p50, "p99_ms": p99}


def parse_redis_loop(out: str, seconds: float) -> dict[str, Any]:
    found = _RB_PROGRESS.findall(out.replace("\r", "\n"))
    if not found:
        raise RuntimeError(f"redis-benchmark printed no progress:\n{out[-2000:]}")
    rps, avg_ms = (float(x) for x in found[-1])
    return {"req_s": rps, "avg_ms": avg_ms, "seconds": seconds}


def run_loads(loads: Sequence[Load], duration: float, pids: Sequence[int]) -> list[dict[str, Any]]:
    """Start every load at once, wait for all (loops are stopped after ``duration``), parse
    each; the servers' CPU seconds over the whole run go into the first result."""
    cpu0 = sum(server_cpu_seconds(p) for p in pids)
    t0 = time.monotonic()
    procs = [
        subprocess.Popen(
            load.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        )
        for load in loads
    ]
    if any(load.kind == "redis-benchmark-loop" for load in loads):
        time.sleep(duration)
        for load, proc in zip(loads, procs, strict=True):
            if load.kind == "redis-benchmark-loop":
                proc.send_signal(signal.SIGINT)
    outs = [proc.communicate(timeout=duration + 120)[0] for proc in procs]
    elapsed = time.monotonic() - t0
    cpu = sum(server_cpu_seconds(p) for p in pids) - cpu0
    results = []
    for load, proc, out in zip(loads, procs, outs, strict=True):
        if load.kind == "wrk":
            if proc.returncode != 0:
                raise RuntimeError(f"wrk failed ({proc.returncode}):\n{out}")
            results.append(parse_wrk(out))
        elif load.kind == "redis-benchmark":
            if proc.returncode != 0:
                raise RuntimeError(f"redis-benchmark failed ({proc.returncode}):\n{out}")
            results.append(parse_redis_csv(out))
        else:
            results.append(parse_redis_loop(out, elapsed))
    results[0]["server_cpu_s"] = cpu
    results[0]["wall_s"] = elapsed
    return results
