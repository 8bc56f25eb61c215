"""Queue benchmarks (issue #7). Prints a table; never asserts.

End to end — produce N jobs, claim them in batches, ack them — with W workers, measuring:
  * jobs/s from the first produce to the last ack;
  * claim latency p50/p99 (the caller's wait for a batch that had jobs);
  * fairness: the coefficient of variation (stdev/mean) of jobs handled per worker;
  * CPU per job of the server process (/proc/PID/stat) and of this (client) process.

Set-ups, one run, the same N, W and batch size B:
  1. topics in-process: the async Engine, W worker tasks and a producer task in one trio
     run (memory-only engine), for claim_jitter_ms 0 and 2;
  2. topics over HTTP, push: a ``topics-server --memory`` subprocess; each of W worker
     threads holds a ``GET /v0/topics/jobs/work?max=B`` stream (jobs arrive without a
     claim round trip) and acks each batch it read with one ``POST …/ack`` — what
     ``client.work()`` does;
  3. topics over HTTP, poll: ``POST …/claim`` (max B) then ``POST …/ack`` per batch;
  4. Redis Streams consumer groups: a ``redis-server`` subprocess on a free loopback port
     (no persistence), the same W threads with redis-py: XADD (pipelined, like the batch
     write) / XREADGROUP COUNT B BLOCK / one XACK per batch.

Fairness of the comparison: HTTP and Redis share one client harness (threads in one
process, one connection per worker, the producer in its own thread), batch sizes match
(max=B vs COUNT B), each side acks a batch in one call, and each worker decodes every
job's JSON. The HTTP client is a minimal keep-alive HTTP/1.1 client on a socket (what
redis-py is for RESP): ``http.client`` parses every response's headers with the email
package and would make the topics side client-bound (``--http-client stdlib`` shows it).

    python bench/queues.py [--jobs 20000] [--workers 16] [--batch 16] [--repeat 1]
                           [--only inproc,push,poll,redis] [--json PATH] [--quick]

``--json PATH`` writes one flat dict (stable keys, see ``_flat``) for the bench runner.
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

import topics

PRODUCE_BATCH = 100
PAYLOAD_PAD = "x" * 48
SETUPS = ("inproc", "push", "poll", "redis")


@dataclass
class Run:
    name: str
    jobs: int
    seconds: float
    claim_us: list[float] = field(default_factory=list)
    per_worker: list[int] = field(default_factory=list)
    server_cpu_s: float = float("nan")
    client_cpu_s: float = float("nan")

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds

    def pct(self, q: float) -> float:
        data = sorted(self.claim_us)
        return data[min(len(data) - 1, int(q * len(data)))] if data else float("nan")

    @property
    def cv(self) -> float:
        mean = statistics.fmean(self.per_worker)
        return statistics.pstdev(self.per_worker) / mean if mean else float("nan")

    @property
    def server_us_per_job(self) -> float:
        return self.server_cpu_s / self.jobs * 1e6

    @property
    def client_us_per_job(self) -> float:
        return self.client_cpu_s / self.jobs * 1e6


def _record(i: int) -> dict[str, object]:
    return {"data": {"job": i, "pad": PAYLOAD_PAD}}


def _proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- 1. in-process ----------------------------------------------------------------------------


async def _inproc(n: int, workers: int, batch: int, jitter_ms: int, concurrent: bool) -> Run:
    async with topics.open_engine(None) as engine:
        await engine.put_topic("jobs", {"type": "queue", "claim_jitter_ms": jitter_ms})
        done = trio.Event()
        acked = 0
        latencies: list[float] = []
        per_worker = [0] * workers

        async def producer() -> None:
            for start in range(0, n, PRODUCE_BATCH):
                records = [_record(i) for i in range(start, min(n, start + PRODUCE_BATCH))]
                await engine.write("jobs", records, return_seqs=False)
                await trio.lowlevel.checkpoint()

        async def worker(k: int) -> None:
            nonlocal acked
            node = f"w{k}"
            while not done.is_set():
                t0 = time.perf_counter()
                res = await engine.claim("jobs", node=node, max=batch)
                if not res.count:
                    with trio.move_on_after(0.05):
                        await engine.wait_claimable("jobs")
                    continue
                latencies.append((time.perf_counter() - t0) * 1e6)
                await engine.ack("jobs", node=node, seqs=res.seqs, lease_ids=res.lease_ids)
                per_worker[k] += res.count
                acked += res.count
                if acked >= n:
                    done.set()
                await trio.lowlevel.checkpoint()  # a real worker does I/O between batches

        if not concurrent:
            await producer()
        c0 = time.process_time()
        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            if concurrent:
                nursery.start_soon(producer)
            for k in range(workers):
                nursery.start_soon(worker, k)
        seconds = time.perf_counter() - t0
        cpu = time.process_time() - c0
    name = f"topics in-process, jitter {jitter_ms} ms"
    # One process is both sides: all of its CPU is counted as the server's.
    return Run(name, n, seconds, latencies, per_worker, server_cpu_s=cpu, client_cpu_s=0.0)


# -- shared thread harness (HTTP, Redis) ----------------------------------------------------

Step = Callable[[], tuple[int, Callable[[], None]]]


def _threaded(
    name: str,
    n: int,
    workers: int,
    produce: Callable[[int, int], None],
    make_worker: Callable[[int], Step],
    concurrent: bool,
    server_pid: int,
) -> Run:
    """Run a producer thread and ``workers`` worker threads until ``n`` jobs are acked.

    ``make_worker(k)`` returns a step function: wait for one batch and return (count, ack)
    where ``ack()`` acks what was received (count 0: nothing came, the step already waited
    a little). Connections are made before the clock starts.
    """
    lock = threading.Lock()
    acked = [0]
    per_worker = [0] * workers
    latencies: list[list[float]] = [[] for _ in range(workers)]
    stop = threading.Event()

    def producer() -> None:
        for start in range(0, n, PRODUCE_BATCH):
            produce(start, min(n, start + PRODUCE_BATCH))

    steps = [make_worker(k) for k in range(workers)]

    def run_worker(k: int) -> None:
        step = steps[k]
        while not stop.is_set():
            t0 = time.perf_counter()
            count, ack = step()
            if not count:
                continue
            latencies[k].append((time.perf_counter() - t0) * 1e6)
            ack()
            per_worker[k] += count
            with lock:
                acked[0] += count
                if acked[0] >= n:
                    stop.set()

    threads = [threading.Thread(target=run_worker, args=(k,)) for k in range(workers)]
    if not concurrent:
        producer()
    s0, c0 = _proc_cpu_s(server_pid), time.process_time()
    t0 = time.perf_counter()
    prod = threading.Thread(target=producer if concurrent else lambda: None)
    prod.start()
    for t in threads:
        t.start()
    prod.join()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    server_cpu, client_cpu = _proc_cpu_s(server_pid) - s0, time.process_time() - c0
    lat = [x for one in latencies for x in one]
    return Run(name, n, seconds, lat, per_worker, server_cpu, client_cpu)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# -- 2./3. HTTP -----------------------------------------------------------------------------


class LeanHttp:
    """A keep-alive HTTP/1.1 JSON client on one socket: one ``sendall`` per request, the
    response read into a buffer and cut by Content-Length (the server always sends it);
    reconnects when the server ends the connection (hypercorn does after 1000 requests)."""

    def __init__(self, host: str, port: int) -> None:
        self.addr = (host, port)
        self.head = f"Host: {host}:{port}\r\n".encode()
        self._connect()

    def _connect(self) -> None:
        self.sock = socket.create_connection(self.addr)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def call(self, method: str, path: str, body: object = None) -> Any:
        payload = json.dumps(body).encode() if body is not None else b""
        req = b"%s %s HTTP/1.1\r\n%s" % (method.encode(), path.encode(), self.head)
        if payload:
            req += b"content-type: application/json\r\ncontent-length: %d\r\n" % len(payload)
        self.sock.sendall(req + b"\r\n" + payload)
        while (end := self.buf.find(b"\r\n\r\n")) < 0:
            self._more()
        head, self.buf = self.buf[: end + 2].lower(), self.buf[end + 4 :]
        i = head.index(b"content-length:")
        length = int(head[i + 15 : head.index(b"\r\n", i)])
        while len(self.buf) < length:
            self._more()
        out, self.buf = self.buf[:length], self.buf[length:]
        if b"connection: close" in head:
            self.sock.close()
            self._connect()
        return json.loads(out)

    def _more(self) -> None:
        chunk = self.sock.recv(262144)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buf += chunk

    def close(self) -> None:
        self.sock.close()


class StdlibHttp:
    """The same calls through ``http.client`` (for ``--http-client stdlib``)."""

    def __init__(self, host: str, port: int) -> None:
        self.conn = http.client.HTTPConnection(host, port)

    def call(self, method: str, path: str, body: object = None) -> Any:
        payload = json.dumps(body).encode() if body is not None else None
        headers = {"content-type": "application/json"} if payload else {}
        self.conn.request(method, path, body=payload, headers=headers)
        return json.loads(self.conn.getresponse().read())

    def close(self) -> None:
        self.conn.close()


class WorkStream:
    """A ``GET …/work`` SSE stream on its own socket: the chunked body is de-chunked and
    cut into events; ``jobs()`` returns every complete job event received so far, waiting
    (up to the socket timeout) only when there is none."""

    def __init__(self, host: str, port: int, path: str) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        req = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\naccept: text/event-stream\r\n\r\n"
        self.sock.sendall(req.encode())
        self.raw = b""  # chunked transfer encoding, not yet decoded
        self.text = b""  # decoded SSE bytes, not yet cut into events
        while (end := self.raw.find(b"\r\n\r\n")) < 0:
            self._recv()
        status = self.raw[: self.raw.find(b"\r\n")]
        if b" 200 " not in status:
            raise RuntimeError(f"/work answered {status!r}")
        self.raw = self.raw[end + 4 :]
        self.sock.settimeout(0.05)

    def _recv(self) -> None:
        chunk = self.sock.recv(262144)
        if not chunk:
            raise ConnectionError("server closed the stream")
        self.raw += chunk

    def _dechunk(self) -> None:
        raw = self.raw
        pos = 0
        while True:
            eol = raw.find(b"\r\n", pos)
            if eol < 0:
                break
            size = int(raw[pos:eol], 16)
            if len(raw) < eol + 2 + size + 2:
                break
            self.text += raw[eol + 2 : eol + 2 + size]
            pos = eol + 2 + size + 2
        self.raw = raw[pos:]

    def jobs(self) -> list[dict[str, Any]]:
        while True:
            self._dechunk()
            cut = self.text.rfind(b"\n\n")
            if cut >= 0:
                events, self.text = self.text[: cut + 2], self.text[cut + 2 :]
                out = [
                    json.loads(line[6:])
                    for line in events.split(b"\n")
                    if line.startswith(b"data: ")
                ]
                if out:
                    return out
            try:
                self._recv()
            except TimeoutError:
                return []

    def close(self) -> None:
        self.sock.close()


#: The source tree this bench belongs to: its server is the one measured (unless --base).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _start_topics_server(base: str | None = None) -> tuple[subprocess.Popen[str], str, int]:
    cmd = [sys.executable, "-m", "topics.frontends.server", "--port", "0", "--memory"]
    env = {**os.environ, "TOPICS_LOG_LEVEL": "WARNING", "TOPICS_THROTTLE_LAG_MS": "0"}
    env.pop("TOPICS_API_KEYS", None)
    # ``-m`` puts the working directory first on sys.path, ahead of PYTHONPATH: the server
    # has to start in the tree it is to run, or an A/B (``base``: another tree, say the
    # last commit) measures the bench's own tree twice.
    tree = base if base is not None else ROOT
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (tree, env.get("PYTHONPATH"))))
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=tree
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("topics-server listening on "):
            url = line.split()[-1]
            host, port = url.removeprefix("http://").rsplit(":", 1)
            return proc, host, int(port)
    raise RuntimeError("topics-server did not start")


def _http(
    n: int, workers: int, batch: int, concurrent: bool, mode: str, client: str, base: str | None
) -> Run:
    proc, host, port = _start_topics_server(base)
    conn_class = LeanHttp if client == "lean" else StdlibHttp
    opened: list[LeanHttp | StdlibHttp | WorkStream] = []

    def connect() -> LeanHttp | StdlibHttp:
        conn = conn_class(host, port)
        opened.append(conn)
        return conn

    try:
        connect().call("PUT", "/v0/topics/jobs", {"type": "queue"})
        prod_conn = connect()

        def produce(lo: int, hi: int) -> None:
            body = {"records": [_record(i) for i in range(lo, hi)], "return_seqs": False}
            prod_conn.call("POST", "/v0/topics/jobs", body)

        def acker(conn: LeanHttp | StdlibHttp, node: str, jobs: list[Any]) -> Callable[[], None]:
            def ack() -> None:
                body = {
                    "node": node,
                    "seqs": [j["$seq"] for j in jobs],
                    "lease_ids": [j["lease_id"] for j in jobs],
                }
                conn.call("POST", "/v0/topics/jobs/ack", body)

            return ack

        def make_poller(k: int) -> Step:
            conn, node = connect(), f"w{k}"

            def step() -> tuple[int, Callable[[], None]]:
                jobs = conn.call("POST", "/v0/topics/jobs/claim", {"node": node, "max": batch})[
                    "claimed"
                ]
                if not jobs:
                    time.sleep(0.001)  # HTTP claim has no long-poll: back off briefly
                    return 0, lambda: None
                return len(jobs), acker(conn, node, jobs)

            return step

        def make_pushed(k: int) -> Step:
            conn, node = connect(), f"w{k}"
            stream = WorkStream(host, port, f"/v0/topics/jobs/work?node={node}&max={batch}")
            opened.append(stream)

            def step() -> tuple[int, Callable[[], None]]:
                jobs = stream.jobs()
                return len(jobs), acker(conn, node, jobs)

            return step

        make = make_pushed if mode == "push" else make_poller
        name = f"topics over HTTP, {mode}" + (" (base)" if base else "")
        return _threaded(name, n, workers, produce, make, concurrent, proc.pid)
    finally:
        for conn in opened:
            conn.close()
        proc.terminate()
        proc.wait(30)


# -- 4. Redis Streams ---------------------------------------------------------------------------


def _redis(n: int, workers: int, batch: int, concurrent: bool) -> Run | str:
    exe = shutil.which("redis-server")
    if exe is None:
        return "redis-server not installed (apt-get install redis-server)"
    try:
        import redis
    except ImportError:
        return "redis-py not installed (pip install redis)"
    port = _free_port()
    workdir = tempfile.mkdtemp(prefix="bench-redis-")
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = redis.Redis(host="127.0.0.1", port=port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        client.xgroup_create("jobs", "g", id="$", mkstream=True)
        prod = redis.Redis(host="127.0.0.1", port=port)

        def produce(lo: int, hi: int) -> None:
            pipe = prod.pipeline(transaction=False)
            for i in range(lo, hi):
                pipe.xadd("jobs", {"data": json.dumps(_record(i)["data"])})
            pipe.execute()

        def make_worker(k: int) -> Step:
            conn = redis.Redis(host="127.0.0.1", port=port)
            conn.ping()  # connect before the clock starts, like the HTTP workers
            consumer = f"w{k}"

            def step() -> tuple[int, Callable[[], None]]:
                res: Any = conn.xreadgroup("g", consumer, {"jobs": ">"}, count=batch, block=5)
                entries = res[0][1] if res else []
                if not entries:
                    return 0, lambda: None
                ids = [entry_id for entry_id, _ in entries]
                for _, fields in entries:
                    json.loads(fields[b"data"])  # the worker reads its job, as topics' does

                def ack() -> None:
                    conn.xack("jobs", "g", *ids)

                return len(entries), ack

            return step

        name = "Redis Streams XREADGROUP/XACK"
        return _threaded(name, n, workers, produce, make_worker, concurrent, proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)


# -- main ----------------------------------------------------------------------------------------

#: set-up key -> (label, runs per repetition: pipeline, drain)
Results = dict[str, tuple[list[Run], list[Run]] | str]


def _median_run(runs: list[Run]) -> Run:
    return sorted(runs, key=lambda r: r.rate)[len(runs) // 2]


def _row(label: str, result: tuple[list[Run], list[Run]] | str) -> None:
    if isinstance(result, str):
        print(f"{label:<34} skipped: {result}")
        return
    pipe, drain = _median_run(result[0]), _median_run(result[1])
    print(
        f"{label:<34} {pipe.rate:>10,.0f} {drain.rate:>10,.0f} {drain.pct(0.5):>9,.0f} "
        f"{drain.pct(0.99):>9,.0f} {drain.cv:>6.3f} {pipe.cv:>6.3f} "
        f"{drain.server_us_per_job:>7.1f} {drain.client_us_per_job:>7.1f}"
    )


def _flat(args: dict[str, Any], results: Results) -> dict[str, Any]:
    """The results as one flat dict: ``<setup>_<phase>_<metric>`` plus the parameters and
    the ratios against Redis (``<setup>_vs_redis_<phase>``, > 1 = faster than Redis)."""
    out: dict[str, Any] = dict(args)
    for key, result in results.items():
        if isinstance(result, str):
            out[f"{key}_skipped"] = result
            continue
        for phase, runs in zip(("pipeline", "drain"), result, strict=True):
            run = _median_run(runs)
            p = f"{key}_{phase}"
            out[f"{p}_jobs_s"] = round(run.rate, 1)
            out[f"{p}_jobs_s_all"] = [round(r.rate, 1) for r in runs]
            out[f"{p}_claim_p50_us"] = round(run.pct(0.5), 1)
            out[f"{p}_claim_p99_us"] = round(run.pct(0.99), 1)
            out[f"{p}_cv"] = round(run.cv, 4)
            out[f"{p}_server_cpu_us_per_job"] = round(run.server_us_per_job, 2)
            out[f"{p}_client_cpu_us_per_job"] = round(run.client_us_per_job, 2)
    redis = results.get("redis")
    if redis is not None and not isinstance(redis, str):
        for key, result in results.items():
            if key == "redis" or isinstance(result, str):
                continue
            for i, phase in enumerate(("pipeline", "drain")):
                ours, theirs = _median_run(result[i]).rate, _median_run(redis[i]).rate
                out[f"{key}_vs_redis_{phase}"] = round(ours / theirs, 3)
    return out


def _inproc_run(n: int, w: int, b: int, jitter: int, concurrent: bool) -> Run:
    return trio.run(_inproc, n, w, b, jitter, concurrent)


def _http_run(
    n: int, w: int, b: int, mode: str, client: str, base: str | None, concurrent: bool
) -> Run:
    return _http(n, w, b, concurrent, mode, client, base)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=1, help="runs per set-up (median)")
    parser.add_argument("--only", default=",".join(SETUPS), help="comma-separated set-ups")
    parser.add_argument("--http-client", choices=("lean", "stdlib"), default="lean")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument(
        "--base",
        metavar="DIR",
        help="A/B: also run the HTTP set-ups against the server of this source tree, started "
        "in DIR (e.g. git archive HEAD | tar -x -C DIR, plus the built .so files); the other "
        "rows run the server of the tree this bench file is in, wherever it is started from",
    )
    parser.add_argument("--quick", action="store_true", help="5k jobs (a smoke run)")
    args = parser.parse_args()
    n = 5_000 if args.quick else args.jobs
    w, b = args.workers, args.batch
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(only) - set(SETUPS)
    if unknown:
        parser.error(f"unknown set-ups {sorted(unknown)}; choose from {SETUPS}")
    from topics._core import IMPLEMENTATION

    print(
        f"queues: {n:,} jobs, {w} workers, batch {b}, core={IMPLEMENTATION}, "
        f"nproc={os.cpu_count()}, loadavg {os.getloadavg()[0]:.2f}, repeat {args.repeat}, "
        f"http client {args.http_client}"
    )
    print("pipeline = produce while consuming; drain = consume a produced backlog")
    print(
        f"{'set-up':<34} {'pipeline/s':>10} {'drain/s':>10} {'p50 µs':>9} {'p99 µs':>9} "
        f"{'CV':>6} {'CV pipe':>6} {'srv µs/j':>7} {'cli µs/j':>7}"
    )

    def both(run: Callable[[bool], Run | str]) -> tuple[Run | str, Run | str]:
        return run(True), run(False)

    plan: dict[str, tuple[str, Callable[[bool], Run | str]]] = {}
    if "inproc" in only:
        for jitter in (0, 2):
            plan[f"inproc_j{jitter}"] = (
                f"topics in-process, jitter {jitter} ms",
                functools.partial(_inproc_run, n, w, b, jitter),
            )
    for mode in ("push", "poll"):
        if mode not in only:
            continue
        plan[f"http_{mode}"] = (
            f"topics over HTTP, {mode}",
            functools.partial(_http_run, n, w, b, mode, args.http_client, None),
        )
        if args.base:
            plan[f"base_http_{mode}"] = (
                f"topics over HTTP, {mode} (base)",
                functools.partial(_http_run, n, w, b, mode, args.http_client, args.base),
            )
    if "redis" in only:
        plan["redis"] = ("Redis Streams XREADGROUP/XACK", functools.partial(_redis, n, w, b))
    collected: dict[str, tuple[list[Run], list[Run]]] = {k: ([], []) for k in plan}
    skipped: dict[str, str] = {}
    load = [os.getloadavg()[0]]
    for rep in range(args.repeat):
        # Set-ups interleaved, so a noisy neighbour hits all alike; every other repetition
        # in reverse order, so none always runs first (or right after the same one).
        order = list(plan.items())
        for key, (_, run) in order[::-1] if rep % 2 else order:
            if key in skipped:
                continue
            for i, res in enumerate(both(run)):
                if isinstance(res, str):
                    skipped[key] = res
                    break
                collected[key][i].append(res)
            load.append(os.getloadavg()[0])
    results: Results = {k: skipped.get(k) or collected[k] for k in plan}
    for key, (label, _) in plan.items():
        _row(label, results[key])
    print("(median of the runs by jobs/s; p50/p99: the caller's wait for one batch, drain")
    print(" phase; CV = stdev/mean of jobs per worker, 0 = even; srv/cli µs/j: CPU per job of")
    print(" the server process and of this client process, drain phase)")
    if args.json:
        params = {
            "bench": "queues",
            "jobs": n,
            "workers": w,
            "batch": b,
            "produce_batch": PRODUCE_BATCH,
            "repeat": args.repeat,
            "http_client": args.http_client,
            "base": args.base or "",
            "core": IMPLEMENTATION,
            "nproc": os.cpu_count(),
            "loadavg_1m_max": round(max(load), 2),
            "loadavg_1m_start": round(load[0], 2),
        }
        with open(args.json, "w") as f:
            json.dump(_flat(params, results), f, indent=1, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main()
