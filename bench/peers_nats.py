"""NATS JetStream as a peer of topics: the same four workloads, one temp server, one run.

Starts ``nats-server -js -sd <tmp> -p <free port>`` on loopback (file storage), drives it
with nats-py (asyncio) from this one process, prints each number and stops the server:

  (a) publish: one client publishes batches of 100 messages with every PubAck of a batch
      awaited together (``publish_async``, then ``asyncio.gather`` of the acks), file
      storage: the peer of topics' batched writes (records/s);
  (b) replay: a pull consumer (no acks) fetches 1000 messages per call through a
      prefilled stream from random start sequences: the peer of ``diff`` at limit 1000
      (records/s, payloads left as bytes, as redis-py leaves XRANGE fields);
  (c) fan-out: N push consumers (deliver new, no acks) of one stream, each read by its own
      raw connection in one epoll reader process (bench/watch.py's layout for topics and
      Redis); each message carries a monotonic stamp taken just before its publish and the
      reader stamps its arrival: write->deliver latency p50/p99 and, for a burst,
      deliveries/s: the peer of topics' SSE watch and Redis XREAD BLOCK;
  (d) work queue: a work-queue stream with one durable pull consumer shared by W workers
      (one connection each) that fetch batches and ack every message, jobs/s while the
      producer runs ("pipeline") and over a produced backlog ("drain"): the peer of
      bench/queues.py.

Every phase is bounded in count and time. Never asserts.

Usage: python bench/peers_nats.py [--quick] [--subscribers 1,10,100,1000] [--json out.json]
Needs: nats-server (apt-get install -y nats-server) and nats-py (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from _readers import ReaderProcess, raise_fd_limit, serve

# The same ~45-byte record body bench/http_load.py writes to topics and Redis.
PAYLOAD = b'{"user":"u-4711","action":"click","n":12345}'
BATCH = 100
FETCH = 1000


def find_nats_server() -> str | None:
    # Debian installs it in /usr/sbin, which a non-root PATH often lacks.
    return shutil.which("nats-server") or shutil.which("nats-server", path="/usr/sbin:/sbin")


def server_version(exe: str) -> str:
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    return out.strip().rsplit(" ", 1)[-1].lstrip("v") if out else "?"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def nats_server(exe: str) -> Iterator[str]:
    """A JetStream server with file storage in a temp dir; yields its URL."""
    store = tempfile.mkdtemp(prefix="bench-nats-")
    port = _free_port()
    cmd = [exe, "-js", "-sd", store, "-a", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("nats-server did not start") from None
                time.sleep(0.05)
        yield f"nats://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(store, ignore_errors=True)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _latency(lat_ms: list[float]) -> dict[str, Any]:
    if not lat_ms:
        return {"samples": 0}
    return {
        "p50_ms": round(statistics.median(lat_ms), 3),
        "p99_ms": round(_pct(lat_ms, 0.99), 3),
        "max_ms": round(max(lat_ms), 3),
        "samples": len(lat_ms),
    }


async def _stream(js: Any, name: str, subject: str, **extra: Any) -> None:
    from nats.js.api import StorageType, StreamConfig

    config = StreamConfig(name=name, subjects=[subject], storage=StorageType.FILE, **extra)
    await js.add_stream(config)


async def _publish_batch(js: Any, subject: str, payloads: list[bytes]) -> None:
    # publish_async sends at once and hands back the PubAck future: nats-py's own way to
    # keep a batch in flight (20-40 % faster here than gathering plain publish calls).
    acks = [await js.publish_async(subject, p) for p in payloads]
    await asyncio.gather(*acks)


# -- (a) publish ----------------------------------------------------------------------------


async def bench_publish(url: str, duration: float) -> dict[str, Any]:
    import nats

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await _stream(js, "PUB", "pub.w")
        batch = [PAYLOAD] * BATCH
        await _publish_batch(js, "pub.w", batch)  # warm up: the stream's first block file
        sent, batches = 0, 0
        t0 = time.perf_counter()
        stop = t0 + duration
        while time.perf_counter() < stop:
            await _publish_batch(js, "pub.w", batch)
            sent += BATCH
            batches += 1
        elapsed = time.perf_counter() - t0
        await js.delete_stream("PUB")
    finally:
        await nc.close()
    return {
        "batch": BATCH,
        "records_s": sent / elapsed,
        "batches_s": batches / elapsed,
        "messages": sent,
        "seconds": round(elapsed, 3),
    }


# -- (b) replay / fetch 1000 ------------------------------------------------------------------


async def bench_fetch(url: str, prefill: int, duration: float) -> dict[str, Any]:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await _stream(js, "REPLAY", "replay.r")
        for _ in range(prefill // BATCH):
            await _publish_batch(js, "replay.r", [PAYLOAD] * BATCH)
        rng = random.Random(1)
        records = calls = 0
        t0 = time.perf_counter()
        stop = t0 + duration
        while time.perf_counter() < stop:
            # A fresh consumer per random start, as a diff from a random cursor; it then
            # reads a few windows in order, which is how a replaying client uses it.
            start = rng.randint(1, max(1, prefill - 10 * FETCH))
            config = ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=start,
                ack_policy=AckPolicy.NONE,
                inactive_threshold=5.0,
            )
            sub = await js.pull_subscribe("replay.r", durable=None, config=config)
            for _ in range(10):
                msgs = await sub.fetch(FETCH, timeout=5)
                records += len(msgs)
                calls += 1
                if time.perf_counter() >= stop:
                    break
            await sub.unsubscribe()
        elapsed = time.perf_counter() - t0
        await js.delete_stream("REPLAY")
    finally:
        await nc.close()
    return {"limit": FETCH, "records_s": records / elapsed, "calls": calls, "prefill": prefill}


# -- (c) fan-out --------------------------------------------------------------------------------

STAMP = re.compile(rb"stamp=(\d+)")


def reader_main() -> None:
    """The reader child: ``{"port", "subjects"}`` on stdin, one raw NATS connection per
    subject, then bench/_readers.py's commands. Ready once every connection's SUB is
    registered (its PING answered). The same process layout as bench/watch.py's readers
    of topics and Redis, so the client costs the same for every system."""
    raise_fd_limit()
    spec = json.loads(sys.stdin.readline())
    socks: dict[int, socket.socket] = {}
    for subject in spec["subjects"]:
        s = socket.create_connection(("127.0.0.1", spec["port"]))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connect = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True}
        s.sendall(
            b"CONNECT %s\r\nSUB %s 1\r\nPING\r\n" % (json.dumps(connect).encode(), subject.encode())
        )
        buf = b""
        while b"PONG\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("nats-server closed the connection")
            buf += chunk
        socks[s.fileno()] = s

    def frame(fd: int, data: bytes) -> tuple[bytes, bytes | None, int]:
        # Every protocol line and payload ends in CRLF and a stamp holds none, so a frame
        # cut across reads is counted once its payload is whole.
        cut = data.rfind(b"\r\n") + 2
        if cut < 2:
            return data, None, 0
        whole = data[:cut]
        if b"PING\r\n" in whole:
            socks[fd].send(b"PONG\r\n")
        return data[cut:], whole, whole.count(b"stamp=")

    def latencies(got: list[tuple[int, bytes]]) -> list[float]:
        return [(t - int(m[1])) / 1e6 for t, d in got for m in STAMP.finditer(d)]

    serve(socks, frame, latencies)


class Readers(ReaderProcess):
    """The reader child process seen from the benchmark."""

    def __init__(self, port: int, subjects: list[str]) -> None:
        super().__init__(__file__, {"port": port, "subjects": subjects})

    async def wait_count(self, target: int, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        got = self.count()
        while got < target and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
            got = self.count()
        return got


async def bench_fanout(url: str, n: int, messages: int, burst: int) -> dict[str, Any]:
    """N push consumers (deliver new, no acks) of one stream, each delivering to its own
    subject, read by one raw connection each in the reader process."""
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    subject, stream = f"fan.{n}", f"FAN{n}"
    port = int(url.rsplit(":", 1)[1])
    pub = await nats.connect(url)
    readers: Readers | None = None
    try:
        js = pub.jetstream()
        await _stream(js, stream, subject)
        delivers = [f"_fan.{n}.{i}" for i in range(n)]
        for deliver in delivers:
            config = ConsumerConfig(
                deliver_subject=deliver,
                deliver_policy=DeliverPolicy.NEW,
                ack_policy=AckPolicy.NONE,
            )
            await js.add_consumer(stream, config=config)
        readers = Readers(port, delivers)
        await asyncio.sleep(0.2)
        for _ in range(messages):
            await js.publish(subject, b"stamp=%d" % time.monotonic_ns())
            await asyncio.sleep(0.01 if n < 1000 else 0.05)  # as bench/watch.py spaces them
        await readers.wait_count(n * messages, 30)
        latency = readers.take()
        before = readers.count()
        t0 = time.perf_counter()
        for _ in range(burst):
            await js.publish(subject, b"stamp=%d" % time.monotonic_ns())
        delivered = await readers.wait_count(before + n * burst, 120) - before
        elapsed = time.perf_counter() - t0
        await js.delete_stream(stream)
    finally:
        if readers is not None:
            readers.close()
        await pub.close()
    out = _latency(latency)
    out["deliveries_per_s"] = round(delivered / elapsed)
    out["complete"] = delivered == n * burst
    return out


# -- (d) work queue -------------------------------------------------------------------------------


async def bench_workqueue(url: str, jobs: int, workers: int, batch: int) -> dict[str, Any]:
    import nats
    from nats.js.api import RetentionPolicy

    async def one_run(concurrent: bool, tag: str) -> dict[str, Any]:
        name, subject = f"JOBS{tag}", f"jobs.{tag}"
        pub = await nats.connect(url)
        conns = [await nats.connect(url) for _ in range(workers)]
        try:
            js = pub.jetstream()
            await _stream(js, name, subject, retention=RetentionPolicy.WORK_QUEUE)
            subs = [
                await c.jetstream().pull_subscribe(subject, durable="workers", stream=name)
                for c in conns
            ]

            async def produce() -> None:
                for lo in range(0, jobs, BATCH):
                    payloads = [
                        json.dumps({"job": i, "pad": "x" * 48}).encode()
                        for i in range(lo, min(jobs, lo + BATCH))
                    ]
                    await _publish_batch(js, subject, payloads)

            done = asyncio.Event()
            acked = 0
            per_worker = [0] * workers
            claim_us: list[float] = []

            async def worker(k: int) -> None:
                nonlocal acked
                sub = subs[k]
                while not done.is_set():
                    t0 = time.perf_counter()
                    try:
                        msgs = await sub.fetch(batch, timeout=0.2)
                    except nats.errors.TimeoutError:
                        continue
                    claim_us.append((time.perf_counter() - t0) * 1e6)
                    for msg in msgs:
                        json.loads(msg.data)  # the worker reads its job, as in queues.py
                        await msg.ack()
                    per_worker[k] += len(msgs)
                    acked += len(msgs)
                    if acked >= jobs:
                        done.set()

            if not concurrent:
                await produce()
            t0 = time.perf_counter()
            tasks = [asyncio.create_task(worker(k)) for k in range(workers)]
            if concurrent:
                await produce()
            try:
                await asyncio.wait_for(done.wait(), timeout=300)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            seconds = time.perf_counter() - t0
            for c in conns:
                await c.flush()  # the acks are fire-and-forget publishes: let them land
            mean = statistics.fmean(per_worker)
            out = {
                "jobs": acked,
                "jobs_s": acked / seconds,
                "claim_p50_us": _pct(claim_us, 0.5),
                "claim_p99_us": _pct(claim_us, 0.99),
                "cv": statistics.pstdev(per_worker) / mean if mean else float("nan"),
            }
            await js.delete_stream(name)
            return out
        finally:
            for c in conns:
                await c.close()
            await pub.close()

    pipeline = await one_run(True, "p")
    drain = await one_run(False, "d")
    return {
        "jobs": jobs,
        "workers": workers,
        "batch": batch,
        "pipeline_jobs_s": pipeline["jobs_s"],
        "drain_jobs_s": drain["jobs_s"],
        "claim_p50_us": drain["claim_p50_us"],
        "claim_p99_us": drain["claim_p99_us"],
        "cv_drain": drain["cv"],
        "cv_pipeline": pipeline["cv"],
    }


# -- main ----------------------------------------------------------------------------------------


async def run(url: str, args: argparse.Namespace) -> dict[str, Any]:
    quick = args.quick
    out: dict[str, Any] = {}
    out["publish"] = await bench_publish(url, 1.0 if quick else args.duration)
    print(f"publish, batches of {BATCH} awaited together: {out['publish']['records_s']:,.0f} rec/s")
    prefill = 20_000 if quick else 200_000
    out["fetch"] = await bench_fetch(url, prefill, 1.0 if quick else args.duration)
    print(f"fetch {FETCH} per call (pull, no ack): {out['fetch']['records_s']:,.0f} rec/s")
    out["fanout"] = {}
    messages = 50 if quick else 200
    sizes = args.subscribers or ("1,10,100" if quick else "1,10,100,1000")
    for n in [int(x) for x in sizes.split(",") if x]:
        msgs = messages if n < 1000 else messages // 2
        burst = max(10, 1_000 // n) if quick else max(20, 5_000 // n)
        row = await bench_fanout(url, n, msgs, burst)
        out["fanout"][str(n)] = row
        print(
            f"fan-out to {n:>4} push consumers: p50 {row.get('p50_ms')} ms, "
            f"p99 {row.get('p99_ms')} ms, {row['deliveries_per_s']:,} deliveries/s"
            + ("" if row["complete"] else " (INCOMPLETE)")
        )
    jobs = 5_000 if quick else args.jobs
    out["workqueue"] = await bench_workqueue(url, jobs, args.workers, args.batch)
    wq = out["workqueue"]
    print(
        f"work queue, {jobs} jobs, {args.workers} workers, batch {args.batch}: pipeline "
        f"{wq['pipeline_jobs_s']:,.0f} jobs/s, drain {wq['drain_jobs_s']:,.0f} jobs/s"
    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short phases (a smoke run)")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds for (a) and (b)")
    parser.add_argument("--subscribers", help="fan-out sizes (1,10,100,1000; quick 1,10,100)")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--_readers", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._readers:
        reader_main()
        return 0
    exe = find_nats_server()
    if exe is None:
        print("missing: nats-server (apt-get install -y nats-server)", file=sys.stderr)
        return 2
    try:
        import nats  # noqa: F401
    except ImportError:
        print("missing: nats-py (pip install nats-py, or the bench extra)", file=sys.stderr)
        return 2
    with nats_server(exe) as url:
        results = asyncio.run(run(url, args))
    results["server"] = {"nats_server": server_version(exe), "storage": "file"}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
