"""HTTP load benchmark of topics-server beside its stack's ceiling and Redis Streams.

One command starts everything on free loopback ports, measures, stops everything and
prints a Markdown report (targets beside the numbers; it never asserts):

* topics-server (``python -m topics.frontends.server``, disk class, a temp data dir, no keys);
* a bare ASGI handler on the same hypercorn + trio set-up (this file, ``--serve-bare``):
  it reads the whole body and answers a fixed JSON body of the size asked in ``?size=``,
  so each of its workloads moves the same bytes as the topics workload it is the ceiling of;
* the same bare handler served through topics-server's fast lane (``--serve-bare
  --lane``, ``frontends/http/serve.py``): the ceiling of the set-up the hot routes really
  run on, so the app's own cost shows against both;
* topics-server with ``TOPICS_HTTP_LANE=0`` (hypercorn alone) for the batched writes: what
  the lane changes, side by side;
* redis-server (Debian's, AOF ``appendfsync everysec`` in a temp dir: the analog of the
  disk class, which group-commits without fsync per write), driven by redis-py.

Workloads (HTTP load by wrk with Lua scripts; Python clients where a Python client is the
comparison):

1. single-record write-ack latency p50/p99: ``wrk -t1 -c1 --latency`` (one connection,
   one request at a time);
2. batched writes: 16 connections x 100 records (~4.6 KB) per request, one topic;
3. diff at limit 256 and 1000 (random ``from_seq`` over a pre-filled topic), 16 connections;
4. the bare handler with the write-shaped and diff-1000-shaped requests and answers;
5. redis-py: XADD pipelined 100 per round trip (16 threads, one connection each) and
   ``XRANGE ... COUNT 1000`` (one connection, random start);
6. one Python client each, one connection: httpx ``POST .../diff`` limit 1000 decoded with
   ujson against redis-py ``XRANGE COUNT 1000`` (both decode into Python objects), and
   httpx 100-record writes against redis-py 100-XADD pipelines.

The machine is small and shared, so workloads alternate within each round and the report
gives medians over ``--rounds`` (and the server's own CPU time per request, from
/proc/PID/stat, which the neighbours disturb less than wall-clock rates).

Usage: python bench/http_load.py [--rounds 5] [--duration 3] [--json out.json]
Needs: wrk and redis-server on PATH (apt-get install -y wrk redis-server), redis-py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BATCH = 100
WRITERS = 16
PREFILL = 200_000  # records in the diff topic and the redis stream
TICK = os.sysconf("SC_CLK_TCK")

# The record every workload writes: ~45 bytes of JSON, so 100 make a ~4.6 KB body.
RECORD = {"data": {"user": "u-4711", "action": "click", "n": 12345}}
WRITE_BODY = json.dumps({"records": [RECORD] * BATCH}, separators=(",", ":"))
ONE_BODY = json.dumps({"records": [RECORD]}, separators=(",", ":"))
PAYLOAD = json.dumps(RECORD["data"], separators=(",", ":"))


# -- the bare ASGI handler (the stack's ceiling) -------------------------------------------


def serve_bare(port_file: str, lane: bool = False) -> None:
    """Serve the bare handler on a free loopback port (written to ``port_file``), through
    hypercorn alone or through topics-server's fast lane in front of it."""
    import hypercorn.trio
    import trio
    from hypercorn.config import Config

    bodies: dict[int, bytes] = {}

    def body_of(size: int) -> bytes:
        found = bodies.get(size)
        if found is None:
            head = b'{"ok":true,"pad":"'
            found = head + b"x" * max(0, size - len(head) - 2) + b'"}'
            bodies[size] = found
        return found

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        more = True
        while more:  # read the whole body, as the server does
            message = await receive()
            more = message.get("more_body", False)
        query = scope["query_string"]
        size = int(query[5:]) if query.startswith(b"size=") else 225
        body = body_of(size)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    # The same hypercorn settings as topics-server (frontends/server.py).
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.include_server_header = False
    config.backlog = 1024

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            if lane:
                from topics.frontends.http.serve import serve

                binds = await nursery.start(
                    partial(serve, app, config, accepts=lambda method, path: True,
                            shutdown_trigger=trio.sleep_forever)
                )  # fmt: skip
            else:
                binds = await nursery.start(hypercorn.trio.serve, app, config)
            await trio.Path(port_file).write_text(binds[0].rsplit(":", 1)[1])

    trio.run(main)


# -- processes -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (seconds)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Proc:
    def __init__(self, name: str, proc: subprocess.Popen[bytes], url: str) -> None:
        self.name, self.proc, self.url = name, proc, url

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_topics(data_dir: str, log: Path, lane: bool = True) -> Proc:
    env = {**os.environ, "TOPICS_LOG_LEVEL": "WARNING", "PYTHONUNBUFFERED": "1"}
    env["TOPICS_HTTP_LANE"] = "1" if lane else "0"
    env.pop("TOPICS_API_KEYS", None)
    cmd = [sys.executable, "-m", "topics.frontends.server", "--port", "0", "--data-dir", data_dir]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=log.open("wb"))
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if not line.startswith("topics-server listening on "):
        proc.kill()
        raise SystemExit(f"topics-server did not start: {line!r}; see {log}")
    return Proc("topics", proc, line.rsplit(" ", 1)[1].strip())


def start_bare(tmp: str, log: Path, lane: bool = False) -> Proc:
    port_file = os.path.join(tmp, "bare-lane.port" if lane else "bare.port")
    cmd = [sys.executable, __file__, "--serve-bare", port_file, *(["--lane"] if lane else [])]
    proc = subprocess.Popen(cmd, stderr=log.open("wb"))
    deadline = time.monotonic() + 30
    while not os.path.exists(port_file) or not Path(port_file).read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the bare ASGI server did not start; see {log}")
        time.sleep(0.05)
    return Proc("bare", proc, f"http://127.0.0.1:{Path(port_file).read_text()}")


def start_redis(tmp: str, log: Path) -> Proc:
    import redis

    port = free_port()
    rdir = os.path.join(tmp, "redis")
    os.mkdir(rdir)
    cmd = [
        "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", rdir,
        "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
        "--protected-mode", "yes", "--daemonize", "no",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 30
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"redis-server did not start; see {log}") from None
            time.sleep(0.05)
    return Proc("redis", proc, f"redis://127.0.0.1:{port}")


# -- wrk ---------------------------------------------------------------------------------------


def lua_post(body: str) -> str:
    return (
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        f"wrk.body = {json.dumps(body)}\n"
    )


def lua_diff(limit: int, top: int) -> str:
    """A diff from a random cursor, so every request returns a full window."""
    return (
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        "math.randomseed(os.time())\n"
        "request = function()\n"
        f'  local body = string.format(\'{{"from_seq":%d,"limit":{limit}}}\', '
        f"math.random(0, {top - limit}))\n"
        "  return wrk.format(nil, nil, nil, body)\n"
        "end\n"
    )


_WRK_TOTAL = re.compile(r"(\d+) requests in ([\d.]+)(us|ms|s|m)")
_WRK_NON2XX = re.compile(r"Non-2xx or 3xx responses: (\d+)")
_WRK_ERRORS = re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")
_WRK_PCT = re.compile(r"^\s+(50|75|90|99)%\s+([\d.]+)(us|ms|s)\s*$", re.M)
_UNIT = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def wrk(
    url: str, script: str, tmp: str, *, conns: int, duration: float, pids: Sequence[int] = ()
) -> dict[str, Any]:
    """Run wrk; good (2xx) requests per second, latency percentiles, server CPU/request."""
    path = os.path.join(tmp, f"s{abs(hash(script))}.lua")
    Path(path).write_text(script)
    cmd = [
        "wrk",
        "-t1",
        f"-c{conns}",
        f"-d{max(1, round(duration))}s",
        "--latency",
        "-s",
        path,
        url,
    ]
    cpu0 = sum(cpu_seconds(p) for p in pids)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    cpu = sum(cpu_seconds(p) for p in pids) - cpu0
    total = _WRK_TOTAL.search(out)
    if total is None:
        raise RuntimeError(f"unparsable wrk output:\n{out}")
    n = int(total.group(1))
    secs = float(total.group(2)) * _UNIT[total.group(3)]
    bad = int(m.group(1)) if (m := _WRK_NON2XX.search(out)) else 0
    errors = sum(int(x) for x in m.groups()) if (m := _WRK_ERRORS.search(out)) else 0
    pct = {f"p{p}_ms": float(v) * _UNIT[u] * 1e3 for p, v, u in _WRK_PCT.findall(out)}
    good = n - bad
    return {
        "req_s": good / secs,
        "non_2xx": bad,
        "socket_errors": errors,
        "cpu_us_per_req": cpu / max(good, 1) * 1e6 if pids else None,
        **pct,
    }


# -- topics and redis set-up -----------------------------------------------------------------


def http_call(url: str, method: str, path: str, body: str | None = None) -> Any:
    import httpx

    headers = {"content-type": "application/json"} if body is not None else {}
    r = httpx.request(method, url + path, content=body, headers=headers, timeout=60)
    r.raise_for_status()
    return r.json()


def prefill_topics(url: str) -> None:
    batch = json.dumps({"records": [RECORD] * 1000, "return_seqs": False})
    http_call(url, "PUT", "/v0/topics/bench-r", "{}")
    for _ in range(PREFILL // 1000):
        http_call(url, "POST", "/v0/topics/bench-r", batch)


def prefill_redis(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    client.delete("bench-r")
    for start in range(0, PREFILL, 1000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, start + 1000):
            pipe.xadd("bench-r", {"d": PAYLOAD}, id=f"{i + 1}-0")
        pipe.execute()


def redis_xadd(url: str, duration: float, threads: int, pid: int) -> dict[str, Any]:
    """Records/s of ``threads`` redis-py clients, each XADDing 100 per pipeline."""
    import redis

    stop = time.perf_counter() + duration
    counts = [0] * threads

    def writer(i: int) -> None:
        client = redis.Redis.from_url(url)
        while time.perf_counter() < stop:
            pipe = client.pipeline(transaction=False)
            for _ in range(BATCH):
                pipe.xadd("bench-w", {"d": PAYLOAD})
            pipe.execute()
            counts[i] += BATCH

    cpu0 = cpu_seconds(pid)
    t0 = time.perf_counter()
    pool = [threading.Thread(target=writer, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - t0
    cpu = cpu_seconds(pid) - cpu0
    redis.Redis.from_url(url).delete("bench-w")
    total = sum(counts)
    return {
        "records_s": total / elapsed,
        "req_s": total / BATCH / elapsed,
        "cpu_us_per_req": cpu / max(total / BATCH, 1) * 1e6,
    }


def redis_xrange(url: str, duration: float) -> dict[str, Any]:
    """Records/s read by one redis-py client with XRANGE COUNT 1000 from random starts."""
    import redis

    client = redis.Redis.from_url(url)
    rng = random.Random(1)
    records = calls = 0
    stop = time.perf_counter() + duration
    t0 = time.perf_counter()
    while time.perf_counter() < stop:
        start = rng.randint(1, PREFILL - 1000)
        entries = client.xrange("bench-r", f"{start}-0", "+", count=1000)
        records += len(entries or ())
        calls += 1
    return {"records_s": records / (time.perf_counter() - t0), "calls": calls}


def py_diff(url: str, duration: float) -> dict[str, Any]:
    """Records/s read by one httpx client (one connection), each answer decoded by ujson."""
    import httpx
    import ujson

    rng = random.Random(1)
    records = 0
    headers = {"content-type": "application/json"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        stop = time.perf_counter() + duration
        t0 = time.perf_counter()
        while time.perf_counter() < stop:
            body = b'{"from_seq":%d,"limit":1000}' % rng.randint(0, PREFILL - 1000)
            r = client.post("/v0/topics/bench-r/diff", content=body)
            records += len(ujson.loads(r.content)["records"])
        return {"records_s": records / (time.perf_counter() - t0)}


def py_write(url: str, duration: float) -> dict[str, Any]:
    """Records/s of one httpx client (one connection) posting 100-record writes."""
    import httpx

    body = WRITE_BODY.encode()
    headers = {"content-type": "application/json"}
    records = 0
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        stop = time.perf_counter() + duration
        t0 = time.perf_counter()
        while time.perf_counter() < stop:
            client.post("/v0/topics/bench-py?return_seqs=false", content=body).raise_for_status()
            records += BATCH
        elapsed = time.perf_counter() - t0
    http_call(url, "DELETE", "/v0/topics/bench-py")
    return {"records_s": records / elapsed}


def py_xadd_one(url: str, duration: float) -> dict[str, Any]:
    """Records/s of one redis-py connection XADDing 100 per pipeline."""
    import redis

    client = redis.Redis.from_url(url)
    records = 0
    stop = time.perf_counter() + duration
    t0 = time.perf_counter()
    while time.perf_counter() < stop:
        pipe = client.pipeline(transaction=False)
        for _ in range(BATCH):
            pipe.xadd("bench-py", {"d": PAYLOAD})
        pipe.execute()
        records += BATCH
    elapsed = time.perf_counter() - t0
    client.delete("bench-py")
    return {"records_s": records / elapsed}


# -- the run -----------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    model = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
        "kernel": platform.release(),
        "python": platform.python_version(),
        "wrk": subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split()[1],
        "redis": subprocess.run(["redis-server", "--version"], capture_output=True,
                                text=True).stdout.split()[2],
    }  # fmt: skip


@contextmanager
def services(tmp: str) -> Iterator[tuple[Proc, Proc, Proc, Proc, Proc]]:
    logs = Path(tmp)
    started: list[Proc] = []
    try:
        topics = start_topics(os.path.join(tmp, "data"), logs / "topics.log")
        started.append(topics)
        plain = start_topics(os.path.join(tmp, "data-plain"), logs / "plain.log", lane=False)
        started.append(plain)
        bare = start_bare(tmp, logs / "bare.log")
        started.append(bare)
        bare_lane = start_bare(tmp, logs / "bare-lane.log", lane=True)
        started.append(bare_lane)
        red = start_redis(tmp, logs / "redis.log")
        started.append(red)
        yield topics, plain, bare, bare_lane, red
    finally:
        for proc in reversed(started):
            proc.stop()


def run(rounds: int, duration: float) -> dict[str, Any]:
    tmp = tempfile.mkdtemp(prefix="http-load-")
    results: dict[str, list[dict[str, Any]]] = {}

    def record(name: str, value: dict[str, Any]) -> None:
        results.setdefault(name, []).append(value)
        print(f"  {name:<22} {json.dumps({k: _round(v) for k, v in value.items()})}", flush=True)

    try:
        with services(tmp) as (topics, plain, bare, bare_lane, red):
            t_pid, b_pid, r_pid = topics.proc.pid, bare.proc.pid, red.proc.pid
            p_pid, bl_pid = plain.proc.pid, bare_lane.proc.pid
            print("prefilling ...", flush=True)
            prefill_topics(topics.url)
            prefill_redis(red.url)
            write_ack = len(json.dumps(http_call(topics.url, "POST", "/v0/topics/bench-w",
                                                 WRITE_BODY)))  # fmt: skip
            diff_answer = len(json.dumps(http_call(topics.url, "POST", "/v0/topics/bench-r/diff",
                                                   '{"limit":1000}')))  # fmt: skip
            http_call(topics.url, "DELETE", "/v0/topics/bench-w")
            http_call(topics.url, "PUT", "/v0/topics/bench-empty", "{}")
            small_answer = len(json.dumps(http_call(topics.url, "POST",
                                                    "/v0/topics/bench-empty/diff", "{}")))  # fmt: skip
            workloads: list[tuple[str, Callable[[], dict[str, Any]]]] = [
                ("write_1_latency", lambda: wrk(
                    topics.url + "/v0/topics/bench-lat", lua_post(ONE_BODY), tmp,
                    conns=1, duration=duration, pids=[t_pid])),
                ("bare_write_shape", lambda: wrk(
                    f"{bare.url}/v0/topics/bench-w?size={write_ack}", lua_post(WRITE_BODY), tmp,
                    conns=WRITERS, duration=duration, pids=[b_pid])),
                ("write_16x100", lambda: _write_run(topics.url, tmp, duration, t_pid)),
                ("bare_write_shape_lane", lambda: wrk(
                    f"{bare_lane.url}/v0/topics/bench-w?size={write_ack}", lua_post(WRITE_BODY),
                    tmp, conns=WRITERS, duration=duration, pids=[bl_pid])),
                ("write_16x100_hypercorn", lambda: _write_run(plain.url, tmp, duration, p_pid)),
                ("bare_diff1000_shape", lambda: wrk(
                    f"{bare.url}/v0/topics/bench-r/diff?size={diff_answer}",
                    lua_diff(1000, PREFILL), tmp, conns=WRITERS, duration=duration,
                    pids=[b_pid])),
                ("bare_small", lambda: wrk(
                    f"{bare.url}/v0/topics/bench-empty/diff?size={small_answer}",
                    lua_post("{}"), tmp, conns=WRITERS, duration=duration, pids=[b_pid])),
                ("bare_small_lane", lambda: wrk(
                    f"{bare_lane.url}/v0/topics/bench-empty/diff?size={small_answer}",
                    lua_post("{}"), tmp, conns=WRITERS, duration=duration, pids=[bl_pid])),
                ("diff_1_empty", lambda: wrk(
                    topics.url + "/v0/topics/bench-empty/diff", lua_post("{}"), tmp,
                    conns=WRITERS, duration=duration, pids=[t_pid])),
                ("diff_256", lambda: wrk(
                    topics.url + "/v0/topics/bench-r/diff", lua_diff(256, PREFILL), tmp,
                    conns=WRITERS, duration=duration, pids=[t_pid])),
                ("diff_1000", lambda: wrk(
                    topics.url + "/v0/topics/bench-r/diff", lua_diff(1000, PREFILL), tmp,
                    conns=WRITERS, duration=duration, pids=[t_pid])),
                ("redis_xadd_16x100", lambda: redis_xadd(red.url, duration, WRITERS, r_pid)),
                ("redis_xrange_1000", lambda: redis_xrange(red.url, duration)),
                ("py_diff_1000", lambda: py_diff(topics.url, duration)),
                ("py_write_100", lambda: py_write(topics.url, duration)),
                ("py_xadd_100", lambda: py_xadd_one(red.url, duration)),
            ]  # fmt: skip
            for i in range(rounds):
                print(f"round {i + 1}/{rounds} (load {Path('/proc/loadavg').read_text()[:14]})")
                for name, fn in workloads:
                    record(name, fn())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"machine": machine(), "rounds": rounds, "duration_s": duration, "results": results}


def _write_run(url: str, tmp: str, duration: float, pid: int) -> dict[str, Any]:
    out = wrk(url + "/v0/topics/bench-w?return_seqs=false", lua_post(WRITE_BODY), tmp,
              conns=WRITERS, duration=duration, pids=[pid])  # fmt: skip
    out["records_s"] = out["req_s"] * BATCH
    http_call(url, "DELETE", "/v0/topics/bench-w")  # bound the memory across rounds
    return out


def _round(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 3 if value < 10 else 1)
    return value


# -- the report ----------------------------------------------------------------------------------


def _median(results: dict[str, list[dict[str, Any]]], name: str, key: str) -> float:
    values = [r[key] for r in results[name] if r.get(key) is not None]
    return statistics.median(values) if values else float("nan")


def _ratios(results: dict[str, list[dict[str, Any]]], a: str, b: str, key: str) -> list[float]:
    """Per-round ratios a/b (the runs of a round are close in time: the pairs share noise)."""
    return [x[key] / y[key] for x, y in zip(results[a], results[b], strict=True) if y[key]]


def report(data: dict[str, Any], command: str) -> str:
    res = data["results"]
    m = data["machine"]

    def med(name: str, key: str) -> float:
        return _median(res, name, key)

    def ratio(a: str, b: str, key: str) -> str:
        rs = _ratios(res, a, b, key)
        return f"{statistics.median(rs):.2f}x (rounds: {min(rs):.2f}-{max(rs):.2f})"

    write_vs_bare = _ratios(res, "write_16x100", "bare_write_shape", "req_s")
    small_vs_bare = _ratios(res, "diff_1_empty", "bare_small", "req_s")
    # The redis-py baseline is its better configuration in each round (16 threads share
    # one GIL, so one connection is often faster).
    res["redis_xadd_best"] = [
        {"records_s": max(a["records_s"], b["records_s"])}
        for a, b in zip(res["redis_xadd_16x100"], res["py_xadd_100"], strict=True)
    ]
    lines = [
        f"Command: `{command}`",
        "",
        f"Machine: {m['nproc']} cores, {m['cpu_model']}, load average {' '.join(m['loadavg'])} "
        f"at the end; kernel {m['kernel']}, Python {m['python']}, wrk {m['wrk']}, "
        f"redis-server {m['redis']}. {data['rounds']} alternating rounds of "
        f"{data['duration_s']} s per workload; medians (per-round min-max for ratios).",
        "",
        "| workload | client | median | server CPU / request |",
        "| --- | --- | --- | --- |",
        f"| single-record write ack, sequential | wrk -c1 | p50 {med('write_1_latency', 'p50_ms'):.2f} ms, "
        f"p99 {med('write_1_latency', 'p99_ms'):.2f} ms "
        f"({med('write_1_latency', 'req_s'):,.0f} req/s) | "
        f"{med('write_1_latency', 'cpu_us_per_req'):.0f} µs |",
        f"| batched writes, 16 x 100 records (disk class) | wrk -c16 | "
        f"**{med('write_16x100', 'records_s'):,.0f} records/s** "
        f"({med('write_16x100', 'req_s'):,.0f} req/s) | "
        f"{med('write_16x100', 'cpu_us_per_req'):.0f} µs |",
        f"| bare ASGI, same request and answer size | wrk -c16 | "
        f"{med('bare_write_shape', 'req_s'):,.0f} req/s | "
        f"{med('bare_write_shape', 'cpu_us_per_req'):.0f} µs |",
        f"| bare ASGI through the fast lane, same request and answer | wrk -c16 | "
        f"{med('bare_write_shape_lane', 'req_s'):,.0f} req/s | "
        f"{med('bare_write_shape_lane', 'cpu_us_per_req'):.0f} µs |",
        f"| batched writes, hypercorn alone (TOPICS_HTTP_LANE=0) | wrk -c16 | "
        f"{med('write_16x100_hypercorn', 'records_s'):,.0f} records/s | "
        f"{med('write_16x100_hypercorn', 'cpu_us_per_req'):.0f} µs |",
        f"| diff, limit 256 | wrk -c16 | {med('diff_256', 'req_s') * 256:,.0f} records/s "
        f"({med('diff_256', 'req_s'):,.0f} req/s) | {med('diff_256', 'cpu_us_per_req'):.0f} µs |",
        f"| diff, limit 1000 | wrk -c16 | {med('diff_1000', 'req_s') * 1000:,.0f} records/s "
        f"({med('diff_1000', 'req_s'):,.0f} req/s) | "
        f"{med('diff_1000', 'cpu_us_per_req'):.0f} µs |",
        f"| diff `{{}}`, empty topic | wrk -c16 | {med('diff_1_empty', 'req_s'):,.0f} req/s | "
        f"{med('diff_1_empty', 'cpu_us_per_req'):.0f} µs |",
        f"| bare ASGI, same small request and answer | wrk -c16 | "
        f"{med('bare_small', 'req_s'):,.0f} req/s | {med('bare_small', 'cpu_us_per_req'):.0f} µs |",
        f"| bare ASGI through the fast lane, same small request | wrk -c16 | "
        f"{med('bare_small_lane', 'req_s'):,.0f} req/s | "
        f"{med('bare_small_lane', 'cpu_us_per_req'):.0f} µs |",
        f"| bare ASGI, diff-1000-shaped | wrk -c16 | {med('bare_diff1000_shape', 'req_s'):,.0f} "
        f"req/s | {med('bare_diff1000_shape', 'cpu_us_per_req'):.0f} µs |",
        f"| redis XADD, pipelines of 100, 16 threads | redis-py | "
        f"{med('redis_xadd_16x100', 'records_s'):,.0f} records/s | "
        f"{med('redis_xadd_16x100', 'cpu_us_per_req'):.0f} µs per pipeline |",
        f"| redis XRANGE COUNT 1000, 1 connection | redis-py | "
        f"{med('redis_xrange_1000', 'records_s'):,.0f} records/s | |",
        f"| diff limit 1000 decoded (ujson), 1 connection | httpx | "
        f"{med('py_diff_1000', 'records_s'):,.0f} records/s | |",
        f"| writes of 100, 1 connection | httpx | {med('py_write_100', 'records_s'):,.0f} "
        f"records/s | |",
        f"| XADD pipelines of 100, 1 connection | redis-py | "
        f"{med('py_xadd_100', 'records_s'):,.0f} records/s | |",
        "",
        "| target | result | met? |",
        "| --- | --- | --- |",
        f"| batched HTTP writes >= 100,000 records/s | {med('write_16x100', 'records_s'):,.0f} | "
        f"{_yes(med('write_16x100', 'records_s') >= 100_000)} |",
        f"| batched writes >= 85% of the bare-ASGI request rate (same bytes) | "
        f"{statistics.median(write_vs_bare):.0%} (rounds {min(write_vs_bare):.0%}-"
        f"{max(write_vs_bare):.0%}); by server CPU/request "
        f"{med('bare_write_shape', 'cpu_us_per_req') / med('write_16x100', 'cpu_us_per_req'):.0%} "
        f"| {_yes(statistics.median(write_vs_bare) >= 0.85)} |",
        f"| the same, small requests: diff `{{}}` on an empty topic vs bare (225-byte answers) "
        f"| {statistics.median(small_vs_bare):.0%} (rounds {min(small_vs_bare):.0%}-"
        f"{max(small_vs_bare):.0%}); by server CPU/request "
        f"{med('bare_small', 'cpu_us_per_req') / med('diff_1_empty', 'cpu_us_per_req'):.0%} "
        f"| {_yes(statistics.median(small_vs_bare) >= 0.85)} |",
        f"| batched writes >= 1.5x redis-py pipelined XADD (its better configuration per "
        f"round) | {ratio('write_16x100', 'redis_xadd_best', 'records_s')} | "
        f"{_yes(statistics.median(_ratios(res, 'write_16x100', 'redis_xadd_best', 'records_s')) >= 1.5)} |",
        f"| HTTP diff limit 1000 >= 2x redis-py XRANGE COUNT 1000 (one Python client each, "
        f"decoded) | {ratio('py_diff_1000', 'redis_xrange_1000', 'records_s')} | "
        f"{_yes(statistics.median(_ratios(res, 'py_diff_1000', 'redis_xrange_1000', 'records_s')) >= 2)} |",
        "",
        "Also: diff limit 1000 through wrk (16 connections, no client decoding) vs the one "
        "redis-py client: "
        f"{med('diff_1000', 'req_s') * 1000 / med('redis_xrange_1000', 'records_s'):.1f}x; "
        f"diff 1000 vs its bare ceiling: {ratio('diff_1000', 'bare_diff1000_shape', 'req_s')}; "
        f"batched writes vs the bare handler through the same fast lane: "
        f"{ratio('write_16x100', 'bare_write_shape_lane', 'req_s')}, small requests "
        f"{ratio('diff_1_empty', 'bare_small_lane', 'req_s')}; batched writes with the lane vs "
        f"hypercorn alone: {ratio('write_16x100', 'write_16x100_hypercorn', 'req_s')}; "
        f"one-connection Python writers, httpx vs redis-py: "
        f"{ratio('py_write_100', 'py_xadd_100', 'records_s')}.",
        "",
        f"Non-2xx answers (429 under CPU pressure) across all runs: "
        f"{sum(r.get('non_2xx', 0) for rs in res.values() for r in rs)}; socket errors: "
        f"{sum(r.get('socket_errors', 0) for rs in res.values() for r in rs)}.",
    ]  # fmt: skip
    return "\n".join(lines)


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per workload")
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument("--serve-bare", metavar="PORT_FILE", help=argparse.SUPPRESS)
    parser.add_argument("--lane", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_bare:
        serve_bare(args.serve_bare, lane=args.lane)
        return 0
    missing = [tool for tool in ("wrk", "redis-server") if shutil.which(tool) is None]
    try:
        import redis  # noqa: F401
    except ImportError:
        missing.append("redis-py (pip install redis)")
    if missing:
        print(f"missing: {', '.join(missing)} (apt-get install -y wrk redis-server)",
              file=sys.stderr)  # fmt: skip
        return 2
    command = "python bench/http_load.py " + " ".join(argv if argv is not None else sys.argv[1:])
    data = run(args.rounds, args.duration)
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=2))
    print()
    print(report(data, command.strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
