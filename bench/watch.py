"""Live-delivery benchmark: SSE watch fan-out vs Redis Streams XREAD BLOCK. Prints numbers.

Measures, with a real ``topics-server --memory`` and a real ``redis-server`` (both started
here on free loopback ports and stopped at the end):

  * write -> deliver latency p50/p99/max with 1, 10, 100 and 1000 SSE watchers of one
    topic (each record carries a monotonic stamp taken just before the write; a watcher
    stamps again when the frame's bytes arrive);
  * deliveries per second (a burst of writes, until every watcher has every record);
  * server memory per idle SSE connection (RSS growth with N idle streams, each on its
    own watch session, divided by N);
  * the same fan-out on Redis Streams: N readers in XREAD BLOCK on one stream, XADD per
    message, in the same run.

The client side (writers and all readers) runs in this one process for both systems, so
both pay the same client cost. Never asserts; targets are printed beside the numbers.

Usage: python bench/watch.py [--quick] [--watchers 1,10,100,1000] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, cast

import httpx
import trio

LISTENING = "topics-server listening on "
STAMP = re.compile(rb'"stamp":(\d+)')
TARGETS = {
    100: "p50 <= 2 ms, p99 <= 8 ms",
    1000: "p99 <= 60 ms",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(lat_ms: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(lat_ms), 3),
        "p99_ms": round(_pct(lat_ms, 0.99), 3),
        "max_ms": round(max(lat_ms), 3),
        "samples": len(lat_ms),
    }


# -- servers ---------------------------------------------------------------------------------


def start_topics() -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ, TOPICS_LOG_LEVEL="WARNING", TOPICS_THROTTLE_LAG_MS="0")
    env.pop("TOPICS_API_KEYS", None)
    env["TOPICS_MAX_SSE_CONNECTIONS_PER_KEY"] = "0"
    proc = subprocess.Popen(
        [sys.executable, "-m", "topics.frontends.server", "--memory", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(LISTENING):
            return proc, line[len(LISTENING) :].strip()
    raise RuntimeError("topics-server did not start")


def start_redis() -> tuple[subprocess.Popen[bytes], int, str]:
    exe = shutil.which("redis-server")
    if exe is None:
        raise RuntimeError("redis-server not found (apt-get install -y redis-server)")
    port = _free_port()
    workdir = tempfile.mkdtemp(prefix="bench-redis-")
    proc = subprocess.Popen(
        [
            exe,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            workdir,
            "--maxclients",
            "10000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port, workdir
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("redis-server did not start")


# -- SSE side (trio) ------------------------------------------------------------------------


class SseReader:
    """One raw-socket SSE client: records a latency per stamped record it receives."""

    def __init__(self, lat_ms: list[float]) -> None:
        self.lat_ms = lat_ms
        self.count = 0
        self.ready = trio.Event()
        self.stream: trio.SocketStream | None = None

    async def run(self, host: str, port: int, wid: str) -> None:
        stream = self.stream = await trio.open_tcp_stream(host, port)
        await stream.send_all(
            f"GET /v0/watch/{wid} HTTP/1.1\r\nHost: b\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        buf = b""
        while not self.ready.is_set():
            buf += await stream.receive_some(65536)
            if b"caught-up" in buf:
                self.ready.set()
        lat, now_ns = self.lat_ms, time.monotonic_ns
        carry = b""
        while True:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            t = now_ns()
            data = carry + chunk
            cut = data.rfind(b"\n") + 1  # a frame split across reads counts when complete
            for m in STAMP.finditer(data, 0, cut):
                lat.append((t - int(m.group(1))) / 1e6)
                self.count += 1
            carry = data[cut:]


class RawWriter:
    """A keep-alive HTTP/1.1 writer on a raw socket: the cheapest client-side write, so the
    measured latency is the server's, not httpx's (redis-py gets the same treatment).
    Reconnects when the server ends the connection (hypercorn recycles a keep-alive
    connection after ``keep_alive_max_requests``)."""

    def __init__(self, host: str, port: int, topic: str) -> None:
        self.host, self.port = host, port
        self.stream: trio.SocketStream | None = None
        self.head = (
            f"POST /v0/topics/{topic} HTTP/1.1\r\nHost: b\r\n"
            "Content-Type: application/json\r\nContent-Length: "
        ).encode()

    async def write_stamp(self) -> None:
        if self.stream is None:
            self.stream = await trio.open_tcp_stream(self.host, self.port)
        stream = self.stream
        body = b'{"records":[{"data":{"stamp":%d}}]}' % time.monotonic_ns()
        await stream.send_all(self.head + b"%d\r\n\r\n" % len(body) + body)
        buf = b""
        while True:
            chunk = await stream.receive_some(65536)
            if not chunk:
                raise RuntimeError("the server closed the connection mid-response")
            buf += chunk
            head, sep, rest = buf.partition(b"\r\n\r\n")
            if not sep:
                continue
            match = re.search(rb"(?i)content-length: (\d+)", head)
            if match is not None and len(rest) >= int(match.group(1)):
                if re.search(rb"(?i)connection: close", head):
                    await self.aclose()
                return

    async def aclose(self) -> None:
        if self.stream is not None:
            await self.stream.aclose()
            self.stream = None


async def sse_fanout(base: str, n: int, messages: int, burst: int) -> dict[str, Any]:
    host, port = base.removeprefix("http://").split(":")
    topic = f"bench-{n}"
    lat: list[float] = []
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        (await http.put(f"/v0/topics/{topic}", json={})).raise_for_status()
        wids = []
        for _ in range(n):
            r = await http.post("/v0/watch", json={"topics": {topic: {"tail": True}}})
            r.raise_for_status()
            wids.append(r.json()["wid"])
        readers = [SseReader(lat) for _ in range(n)]
        async with trio.open_nursery() as nursery:
            for reader, wid in zip(readers, wids, strict=True):
                nursery.start_soon(reader.run, host, int(port), wid)
            for reader in readers:
                await reader.ready.wait()
            await trio.sleep(0.2)
            writer = RawWriter(host, int(port), topic)
            # Latency: spaced writes, one record each.
            for _ in range(messages):
                await writer.write_stamp()
                await trio.sleep(0.01 if n < 1000 else 0.05)
            with trio.move_on_after(30):
                while sum(r.count for r in readers) < n * messages:  # noqa: ASYNC110 - polls its own counters
                    await trio.sleep(0.01)
            latency = list(lat)
            # Throughput: a burst of writes, until everyone has everything.
            before = sum(r.count for r in readers)
            t0 = time.perf_counter()
            for _ in range(burst):
                await writer.write_stamp()
            with trio.move_on_after(120):
                while sum(r.count for r in readers) < before + n * burst:  # noqa: ASYNC110 - polls its own counters
                    await trio.sleep(0.005)
            elapsed = time.perf_counter() - t0
            delivered = sum(r.count for r in readers) - before
            nursery.cancel_scope.cancel()
        await writer.aclose()
        for reader in readers:
            if reader.stream is not None:
                await reader.stream.aclose()
    out = _summary(latency) if latency else {}
    out["deliveries_per_s"] = round(delivered / elapsed)
    out["complete"] = delivered == n * burst
    return out


async def idle_memory(base: str, pid: int, n: int) -> float:
    """KiB of server RSS per idle SSE connection (with its session)."""
    host, port = base.removeprefix("http://").split(":")
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        (await http.put("/v0/topics/idle", json={})).raise_for_status()
        # Warm up: one stream, so code paths and pools are allocated before the baseline.
        wids = []
        for _ in range(n + 1):
            r = await http.post("/v0/watch", json={"topics": {"idle": {"tail": True}}})
            wids.append(r.json()["wid"])
        readers = [SseReader([]) for _ in range(n + 1)]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(readers[0].run, host, int(port), wids[0])
            await readers[0].ready.wait()
            await trio.sleep(0.5)
            base_kib = _rss_kib(pid)
            for reader, wid in zip(readers[1:], wids[1:], strict=True):
                nursery.start_soon(reader.run, host, int(port), wid)
            for reader in readers:
                await reader.ready.wait()
            await trio.sleep(1.0)
            grown = _rss_kib(pid) - base_kib
            nursery.cancel_scope.cancel()
        for reader in readers:
            if reader.stream is not None:
                await reader.stream.aclose()
    return round(grown / n, 2)


# -- Redis side (asyncio, redis-py) --------------------------------------------------------------


async def redis_fanout(port: int, n: int, messages: int, burst: int) -> dict[str, Any]:
    import redis.asyncio as aioredis

    key = f"bench-{n}"
    lat: list[float] = []
    counts = [0] * n
    writer = aioredis.Redis(host="127.0.0.1", port=port)
    await writer.delete(key)
    await writer.xadd(key, {"stamp": "0"})
    clients = [aioredis.Redis(host="127.0.0.1", port=port) for _ in range(n)]
    ready = [asyncio.Event() for _ in range(n)]

    async def reader(i: int) -> None:
        r = clients[i]
        last = "$"
        ready[i].set()
        while True:
            got = await r.xread({key: last}, block=0, count=10_000)
            t = time.monotonic_ns()
            for _, entries in cast(Any, got):
                for entry_id, fields in entries:
                    last = entry_id
                    lat.append((t - int(fields[b"stamp"])) / 1e6)
                    counts[i] += 1

    tasks = [asyncio.create_task(reader(i)) for i in range(n)]
    for e in ready:
        await e.wait()
    await asyncio.sleep(0.5)  # every reader is blocked in XREAD
    for _ in range(messages):
        await writer.xadd(key, {"stamp": str(time.monotonic_ns())})
        await asyncio.sleep(0.01 if n < 1000 else 0.05)
    deadline = time.monotonic() + 30
    while sum(counts) < n * messages and time.monotonic() < deadline:  # noqa: ASYNC110 - polls its own counters
        await asyncio.sleep(0.01)
    latency = list(lat)
    before = sum(counts)
    t0 = time.perf_counter()
    for _ in range(burst):
        await writer.xadd(key, {"stamp": str(time.monotonic_ns())})
    deadline = time.monotonic() + 120
    while sum(counts) < before + n * burst and time.monotonic() < deadline:  # noqa: ASYNC110 - polls its own counters
        await asyncio.sleep(0.005)
    elapsed = time.perf_counter() - t0
    delivered = sum(counts) - before
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for c in clients:
        await c.aclose()
    await writer.aclose()
    out = _summary(latency) if latency else {}
    out["deliveries_per_s"] = round(delivered / elapsed)
    out["complete"] = delivered == n * burst
    return out


# -- main ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer messages")
    parser.add_argument("--watchers", default="1,10,100,1000")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    counts = [int(x) for x in args.watchers.split(",")]
    messages = 50 if args.quick else 200
    results: dict[str, Any] = {"sse": {}, "redis": {}}
    idle_n = 1000 if not args.quick else 200
    fresh, fresh_base = start_topics()  # a fresh process: freed memory would hide growth
    try:
        results["idle_kib_per_connection"] = trio.run(idle_memory, fresh_base, fresh.pid, idle_n)
    finally:
        fresh.terminate()
        fresh.wait(30)
    print(
        f"memory per idle SSE connection (incl. its session, {idle_n} streams): "
        f"{results['idle_kib_per_connection']} KiB  (target <= 20 KiB)\n"
    )
    topics_proc, base = start_topics()
    redis_proc, redis_port, redis_dir = start_redis()
    try:
        for n in counts:
            msgs = messages if n < 1000 else messages // 2
            burst = max(20, 5_000 // n) if not args.quick else max(10, 1_000 // n)
            results["sse"][n] = trio.run(sse_fanout, base, n, msgs, burst)
            results["redis"][n] = asyncio.run(redis_fanout(redis_port, n, msgs, burst))
            _print_row(n, results["sse"][n], results["redis"][n])
    finally:
        topics_proc.terminate()
        topics_proc.wait(30)
        redis_proc.terminate()
        redis_proc.wait(30)
        shutil.rmtree(redis_dir, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


def _print_row(n: int, sse: dict[str, Any], red: dict[str, Any]) -> None:
    if n == 1 or not getattr(_print_row, "header", False):
        _print_row.header = True  # type: ignore[attr-defined]
        print(
            f"{'watchers':>8} | {'system':<6} | {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
            f"| {'deliveries/s':>12} | target"
        )
    for name, row in (("sse", sse), ("redis", red)):
        target = TARGETS.get(n, "") if name == "sse" else ""
        if name == "sse" and red.get("p99_ms") is not None:
            target = (target + "; " if target else "") + f"p99 <= redis ({red['p99_ms']})"
        print(
            f"{n:>8} | {name:<6} | {row.get('p50_ms', 0):>8} {row.get('p99_ms', 0):>8} "
            f"{row.get('max_ms', 0):>8} | {row['deliveries_per_s']:>12} | {target}"
            + ("" if row["complete"] else "  (INCOMPLETE)")
        )
    sys.stdout.flush()


Reader = Callable[..., Any]

if __name__ == "__main__":
    main()
