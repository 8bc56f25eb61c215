"""Queue benchmarks (issue: queues). Prints a table; never asserts.

End to end — produce N jobs, claim them in batches, ack them — with W workers, measuring:
  * jobs/s from the first produce to the last ack;
  * claim latency p50/p99 (claims that returned jobs, measured by the caller);
  * fairness: the coefficient of variation (stdev/mean) of jobs handled per worker.

Three set-ups, one run, the same N, W and batch size:
  1. topics in-process: the async Engine, W worker tasks and a producer task in one trio
     run (memory-only engine), for claim_jitter_ms 0 and 2;
  2. topics over HTTP: a ``topics-server --memory`` subprocess; W worker threads and a
     producer thread in this process, each with its own keep-alive ``http.client``
     connection (the claim/ack routes are on the server's fast path);
  3. Redis Streams consumer groups: a ``redis-server`` subprocess on a free loopback port
     (no persistence), the same W threads with redis-py: XADD (pipelined, like the batch
     write) / XREADGROUP COUNT batch BLOCK / XACK.

The HTTP and Redis set-ups share one client harness (threads in one process), so the
client-side Python cost is paid alike. Usage:

    python bench/queues.py [--jobs 50000] [--workers 16] [--batch 16] [--quick]
"""

from __future__ import annotations

import argparse
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

import trio

import topics

PRODUCE_BATCH = 100
PAYLOAD_PAD = "x" * 48


@dataclass
class Run:
    name: str
    jobs: int
    seconds: float
    claim_us: list[float] = field(default_factory=list)
    per_worker: list[int] = field(default_factory=list)

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


def _record(i: int) -> dict[str, object]:
    return {"data": {"job": i, "pad": PAYLOAD_PAD}}


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
                        await engine._wait_claimable("jobs")
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
        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            if concurrent:
                nursery.start_soon(producer)
            for k in range(workers):
                nursery.start_soon(worker, k)
        seconds = time.perf_counter() - t0
    name = f"topics in-process, jitter {jitter_ms} ms"
    return Run(name, n, seconds, latencies, per_worker)


# -- shared thread harness (HTTP, Redis) ----------------------------------------------------


def _threaded(
    name: str,
    n: int,
    workers: int,
    produce: Callable[[int, int], None],
    make_worker: Callable[[int], Callable[[], tuple[int, Callable[[], None]]]],
    concurrent: bool,
) -> Run:
    """Run a producer thread and ``workers`` worker threads until ``n`` jobs are acked.

    ``make_worker(k)`` returns a step function: claim once and return (count, ack) where
    ``ack()`` acks what was claimed (count 0: nothing claimed, the step already waited).
    """
    lock = threading.Lock()
    acked = [0]
    per_worker = [0] * workers
    latencies: list[list[float]] = [[] for _ in range(workers)]
    stop = threading.Event()

    def producer() -> None:
        for start in range(0, n, PRODUCE_BATCH):
            produce(start, min(n, start + PRODUCE_BATCH))

    def run_worker(k: int) -> None:
        step = make_worker(k)
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
    t0 = time.perf_counter()
    prod = threading.Thread(target=producer if concurrent else lambda: None)
    prod.start()
    for t in threads:
        t.start()
    prod.join()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    return Run(name, n, seconds, [x for lat in latencies for x in lat], per_worker)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# -- 2. HTTP -----------------------------------------------------------------------------------


def _start_topics_server() -> tuple[subprocess.Popen[str], str, int]:
    cmd = [sys.executable, "-m", "topics.frontends.server", "--port", "0", "--memory"]
    env = {**os.environ, "TOPICS_LOG_LEVEL": "WARNING", "TOPICS_THROTTLE_LAG_MS": "0"}
    env.pop("TOPICS_API_KEYS", None)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("topics-server listening on "):
            url = line.split()[-1]
            host, port = url.removeprefix("http://").rsplit(":", 1)
            return proc, host, int(port)
    raise RuntimeError("topics-server did not start")


def _http(n: int, workers: int, batch: int, concurrent: bool) -> Run:
    proc, host, port = _start_topics_server()
    try:

        def call(conn: http.client.HTTPConnection, method: str, path: str, body: object) -> dict:
            payload = json.dumps(body).encode() if body is not None else None
            headers = {"content-type": "application/json"} if payload else {}
            conn.request(method, path, body=payload, headers=headers)
            out: dict = json.loads(conn.getresponse().read())
            return out

        setup = http.client.HTTPConnection(host, port)
        call(setup, "PUT", "/v0/topics/jobs", {"type": "queue"})
        prod_conn = http.client.HTTPConnection(host, port)

        def produce(lo: int, hi: int) -> None:
            body = {"records": [_record(i) for i in range(lo, hi)], "return_seqs": False}
            call(prod_conn, "POST", "/v0/topics/jobs", body)

        def make_worker(k: int) -> Callable[[], tuple[int, Callable[[], None]]]:
            conn = http.client.HTTPConnection(host, port)
            node = f"w{k}"

            def step() -> tuple[int, Callable[[], None]]:
                res = call(conn, "POST", "/v0/topics/jobs/claim", {"node": node, "max": batch})
                jobs = res["claimed"]
                if not jobs:
                    time.sleep(0.001)  # HTTP claim has no long-poll: back off briefly
                    return 0, lambda: None

                def ack() -> None:
                    body = {
                        "node": node,
                        "seqs": [j["$seq"] for j in jobs],
                        "lease_ids": [j["lease_id"] for j in jobs],
                    }
                    call(conn, "POST", "/v0/topics/jobs/ack", body)

                return len(jobs), ack

            return step

        return _threaded("topics over HTTP", n, workers, produce, make_worker, concurrent)
    finally:
        proc.terminate()
        proc.wait(30)


# -- 3. Redis Streams ---------------------------------------------------------------------------


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

        def make_worker(k: int) -> Callable[[], tuple[int, Callable[[], None]]]:
            conn = redis.Redis(host="127.0.0.1", port=port)
            consumer = f"w{k}"

            def step() -> tuple[int, Callable[[], None]]:
                res = conn.xreadgroup("g", consumer, {"jobs": ">"}, count=batch, block=5)
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
        return _threaded(name, n, workers, produce, make_worker, concurrent)
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)


# -- main ----------------------------------------------------------------------------------------


def _row(name: str, pipeline: Run | str, drain: Run | str) -> None:
    if isinstance(pipeline, str) or isinstance(drain, str):
        print(f"{name:<34} skipped: {pipeline if isinstance(pipeline, str) else drain}")
        return
    print(
        f"{name:<34} {pipeline.rate:>10,.0f} {drain.rate:>10,.0f} {drain.pct(0.5):>9,.0f} "
        f"{drain.pct(0.99):>9,.0f} {drain.cv:>6.3f} {pipeline.cv:>6.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help="5k jobs (a smoke run)")
    args = parser.parse_args()
    n = 5_000 if args.quick else args.jobs
    w, b = args.workers, args.batch
    from topics._core import IMPLEMENTATION

    print(
        f"queues: {n:,} jobs, {w} workers, batch {b}, core={IMPLEMENTATION}, nproc={os.cpu_count()}"
    )
    print("pipeline = produce while consuming; drain = consume a produced backlog")
    print(
        f"{'set-up':<34} {'pipeline/s':>10} {'drain/s':>10} {'p50 µs':>9} {'p99 µs':>9} "
        f"{'CV':>6} {'CV pipe':>6}"
    )
    for jitter in (0, 2):
        runs = [trio.run(_inproc, n, w, b, jitter, c) for c in (True, False)]
        _row(runs[0].name, runs[0], runs[1])
    _row("topics over HTTP", _http(n, w, b, True), _http(n, w, b, False))
    _row("Redis Streams XREADGROUP/XACK", _redis(n, w, b, True), _redis(n, w, b, False))
    print("(p50/p99: the caller's view of one claim that returned jobs, drain phase;")
    print(" CV = stdev/mean of jobs per worker, 0 = perfectly even)")


if __name__ == "__main__":
    main()
