"""Live-delivery benchmark: SSE watch fan-out vs Redis Streams XREAD BLOCK. Prints numbers.

Measures, with a real ``topics-server --memory`` and a real ``redis-server`` (both started
here on free loopback ports and stopped at the end):

  * write -> deliver latency p50/p99/max with 1, 10, 100, 1000 and 10,000 SSE watchers of
    one topic (each record carries a monotonic stamp taken just before the write; a watcher
    stamps again when the frame's bytes arrive), and the fewest records any one watcher got
    (a starved watcher shows there, the slowest in ``max_ms``);
  * deliveries per second (a burst of writes, until every watcher has every record);
  * server memory per idle SSE connection (RSS growth with N idle streams, each on its
    own watch session, divided by N; N = 1000, and 10,000 when that point is measured);
  * the same fan-out on Redis Streams: N readers in XREAD BLOCK on one stream, XADD per
    message, in the same run.

Client fairness (why the client looks the way it does): on a 2-core machine a thousand
watcher clients are CPU too, and a heavy client (one asyncio/trio task per reader, redis-py's
reply parser) measures itself, not the server. So every reader of *both* systems lives in
one separate child process (``--_readers``, a plain ``epoll`` loop over raw non-blocking
sockets): an SSE reader only finds ``"stamp":N`` in the bytes it receives; a Redis reader
walks the RESP reply just far enough to find the stamps, the last entry id and the reply's
end, then sends its next ``XREAD BLOCK``. The writers are blocking raw sockets in this
process (one keep-alive HTTP/1.1 POST of one record, one RESP ``XADD``). Same client code
path, same process layout, same stamping point for both systems. A watcher's latency
includes the client time spent on the watchers served before it in the same epoll batch,
for both systems alike.

At 10,000 watchers the readers are spread over several such processes (``--per-process``
sockets each, default 2500), which connect in batches so that no server's accept queue
overflows; every process here and every server started here (topics, Redis, the floors)
raises its soft open-file limit to the hard one (``RLIMIT_NOFILE``). The reader processes'
CPU per delivery is reported beside the server's (``client_cpu_us_per_delivery``): it is the
client's own overhead, and on two cores it competes with the server for the same CPU.
Writes are 10 ms apart (50 ms at 1,000 watchers, 1 s at 10,000, where fewer are sent),
so every write finds the server idle.

The floors (``--floors``, default at 1, 10, 100 and 10,000 watchers): the same writer and
readers against bench/_floor_server.py, a relay that does nothing but read a POST, write its
body as one SSE frame to every watcher socket and answer, once on trio (the loop topics is
built on) and once on a bare ``select.epoll`` loop. They say how much of a latency is any
Python server's on this machine, and how much is topics' own; at 10,000 the epoll relay is
mostly the client and the kernel's loopback sends.

``--baseline DIR`` also runs a second topics-server whose ``topics`` package is imported
from ``DIR`` (a copy of an earlier tree), interleaved with the current one in the same run
(A/B on a shared, noisy machine); ``--rounds R`` repeats everything and reports medians.

Never asserts; targets are printed beside the numbers.

Usage: python bench/watch.py [--quick] [--watchers 1,10,100,1000,10000] [--json out.json]
                             [--baseline DIR] [--rounds R] [--per-process N]
"""

from __future__ import annotations

import argparse
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
from typing import Any

import httpx
from _readers import Framer, ReaderGroup, process_cpu_s, raise_fd_limit, serve

LISTENING = "topics-server listening on "
STAMP = re.compile(rb'"stamp":(\d+)')
TARGETS = {
    100: "p50 <= 2 ms, p99 <= 8 ms",
    1000: "p99 <= 60 ms",
    10_000: "every watcher gets every record",
}
#: Issue 15: topics' p99 at most this times the trio relay's at 1, 10 and 100 watchers.
TRIO_FLOOR_FACTOR = 1.25
#: Issue 15: server memory per idle watcher at the 10,000 point.
IDLE_KIB_10K = 13.5
#: Reader sockets per reader process (bench/_readers.py ReaderGroup).
PER_PROCESS = 2500
#: Sockets a reader process connects before it waits for their streams to open.
CONNECT_BATCH = 200


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


def _summary(lat_ms: list[float]) -> dict[str, Any]:
    return {
        "p50_ms": round(statistics.median(lat_ms), 3),
        "p99_ms": round(_pct(lat_ms, 0.99), 3),
        "max_ms": round(max(lat_ms), 3),
        "samples": len(lat_ms),
    }


_cpu_s = process_cpu_s


def _gap_s(n: int) -> float:
    """Seconds between two latency writes: long enough for the fan-out to end."""
    return 0.01 if n < 1000 else 0.05 if n < 10_000 else 1.0


def _messages(n: int, messages: int) -> int:
    return messages if n < 1000 else messages // 2 if n < 10_000 else max(5, messages // 10)


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# -- servers ---------------------------------------------------------------------------------


def start_topics(src: str | None = None) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ, TOPICS_LOG_LEVEL="WARNING", TOPICS_THROTTLE_LAG_MS="0")
    env.pop("TOPICS_API_KEYS", None)
    # 0 = unlimited: the 10,000 point (and its idle-memory run) needs more than the
    # default 10,000 sessions and streams, counting earlier points' sessions.
    env["TOPICS_MAX_SSE_CONNECTIONS_PER_KEY"] = "0"
    env["TOPICS_MAX_SSE_CONNECTIONS"] = "0"
    env["TOPICS_MAX_WATCH_SESSIONS"] = "0"
    if src is not None:
        # The editable install's finder comes after PYTHONPATH: ``src``'s package wins.
        env["PYTHONPATH"] = os.path.abspath(src)
    proc = subprocess.Popen(
        [sys.executable, "-m", "topics.frontends.server", "--memory", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        cwd=tempfile.gettempdir(),
        preexec_fn=raise_fd_limit,  # 10,000 streams need more than the default 1024
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
            "16000",  # 10,000 readers + the writer; Redis keeps 32 descriptors more
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=raise_fd_limit,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port, workdir
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("redis-server did not start")


# -- the reader process (both systems) -----------------------------------------------------------


def _resp_skip(buf: bytes, i: int, found: list[bytes]) -> int:
    """Index just past the RESP value at ``i`` (-1: incomplete); bulk strings land in
    ``found``. Enough RESP for XREAD replies (arrays, bulk strings, null, simple, int)."""
    end = buf.find(b"\r\n", i)
    if end < 0:
        return -1
    kind = buf[i]
    if kind == 0x2A:  # '*'
        n = int(buf[i + 1 : end])
        j = end + 2
        for _ in range(max(n, 0)):
            j = _resp_skip(buf, j, found)
            if j < 0:
                return -1
        return j
    if kind == 0x24:  # '$'
        n = int(buf[i + 1 : end])
        if n < 0:
            return end + 2
        if len(buf) < end + 2 + n + 2:
            return -1
        found.append(buf[end + 2 : end + 2 + n])
        return end + 2 + n + 2
    return end + 2  # '+', '-', ':', '_'


def _xread(key: bytes, last: bytes) -> bytes:
    parts = [b"XREAD", b"COUNT", b"10000", b"BLOCK", b"0", b"STREAMS", key, last]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


def reader_main() -> None:
    """The child: ``{"kind", "host", "port", "ids"}`` on stdin, then bench/_readers.py's
    commands. Ready once every reader waits for live data."""
    raise_fd_limit()
    spec = json.loads(sys.stdin.readline())
    kind, host, port, ids = spec["kind"], spec["host"], spec["port"], spec["ids"]
    socks: dict[int, socket.socket] = {}
    key = str(spec.get("key", "")).encode()
    # In batches: a batch's streams open (or its XREADs are sent) before the next batch
    # connects, so a server's accept queue never holds more than a few batches.
    for start in range(0, len(ids), CONNECT_BATCH):
        batch = []
        for ident in ids[start : start + CONNECT_BATCH]:
            s = socket.create_connection((host, port))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if kind == "sse":
                s.sendall(
                    f"GET /v0/watch/{ident} HTTP/1.1\r\nHost: b\r\n"
                    "Accept: text/event-stream\r\n\r\n".encode()
                )
            else:
                s.sendall(_xread(key, b"$"))
            socks[s.fileno()] = s
            batch.append(s)
        if kind == "sse":  # live once the stream said caught-up
            for s in batch:
                buf = b""
                while b"caught-up" not in buf:
                    chunk = s.recv(65536)
                    if not chunk:
                        raise RuntimeError("stream closed before caught-up")
                    buf += chunk
    if kind == "sse":
        serve(socks, _sse_framer, lambda got: _latencies(got, STAMP))
    else:
        serve(socks, _redis_framer(socks, key), lambda got: _latencies(got, REDIS_STAMP))


def _sse_framer(fd: int, data: bytes) -> tuple[bytes, bytes | None, int]:
    cut = data.rfind(b"\n") + 1  # a frame split across reads counts when whole
    if not cut:
        return data, None, 0
    return data[cut:], data[:cut], data.count(b'"stamp":', 0, cut)


def _redis_framer(socks: dict[int, socket.socket], key: bytes) -> Framer:
    prefix = b"*1\r\n*2\r\n$%d\r\n%s\r\n*" % (len(key), key)
    stamp_field = b"$5\r\nstamp\r\n"

    def frame(fd: int, data: bytes) -> tuple[bytes, bytes | None, int]:
        # One XREAD reply: *1 *2 key *M, then M entries (id, *2 "stamp" value); once it is
        # whole, the next XREAD BLOCK continues after its last id.
        if not data.endswith(b"\r\n") or not data.startswith(prefix):
            return data, None, 0
        m_end = data.index(b"\r\n", len(prefix))
        entries = int(data[len(prefix) : m_end])
        tail = data.rfind(b"\r\n", 0, len(data) - 2) + 2
        if data.count(stamp_field) != entries or data[tail : tail + 1] == b"$":
            return data, None, 0
        idx = data.rfind(b"\r\n*2\r\n$5\r\nstamp\r\n")
        socks[fd].send(_xread(key, data[data.rfind(b"\r\n", 0, idx) + 2 : idx]))
        return b"", data, entries

    return frame


REDIS_STAMP = re.compile(rb"\$5\r\nstamp\r\n\$\d+\r\n(\d+)\r\n")


def _latencies(got: list[tuple[int, bytes]], pattern: re.Pattern[bytes]) -> list[float]:
    return [(t - int(m.group(1))) / 1e6 for t, data in got for m in pattern.finditer(data)]


class Readers(ReaderGroup):
    """The reader child processes seen from here (one per ``PER_PROCESS`` readers)."""

    def __init__(self, kind: str, host: str, port: int, ids: list[str], key: str = "") -> None:
        spec = {"kind": kind, "host": host, "port": port, "key": key}
        super().__init__(__file__, spec, ids, PER_PROCESS)

    def wait_count(self, target: int, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        got = self.count()
        while got < target and time.monotonic() < deadline:
            time.sleep(0.005)
            got = self.count()
        return got


# -- writers (blocking raw sockets) ----------------------------------------------------------


class HttpWriter:
    """A keep-alive HTTP/1.1 POST of one stamped record; reconnects when hypercorn recycles
    the connection (``keep_alive_max_requests``)."""

    def __init__(self, host: str, port: int, topic: str) -> None:
        self.addr = (host, port)
        self.sock: socket.socket | None = None
        self.head = (
            f"POST /v0/topics/{topic} HTTP/1.1\r\nHost: b\r\n"
            "Content-Type: application/json\r\nContent-Length: "
        ).encode()

    def write(self) -> None:
        if self.sock is None:
            self.sock = socket.create_connection(self.addr)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock = self.sock
        body = b'{"records":[{"data":{"stamp":%d}}]}' % time.monotonic_ns()
        sock.sendall(self.head + b"%d\r\n\r\n" % len(body) + body)
        buf = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError("the server closed the connection mid-response")
            buf += chunk
            head, sep, rest = buf.partition(b"\r\n\r\n")
            if not sep:
                continue
            match = re.search(rb"(?i)content-length: (\d+)", head)
            if match is not None and len(rest) >= int(match.group(1)):
                if re.search(rb"(?i)connection: close", head):
                    self.close()
                return

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class RedisWriter:
    """``XADD key * stamp <ns>`` on a raw socket, waiting for the reply."""

    def __init__(self, port: int, key: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.key = key.encode()

    def command(self, *parts: bytes) -> bytes:
        msg = b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)
        self.sock.sendall(msg)
        buf = b""
        while True:
            buf += self.sock.recv(65536)
            if _resp_skip(buf, 0, []) >= 0:
                return buf

    def write(self) -> None:
        self.command(b"XADD", self.key, b"*", b"stamp", b"%d" % time.monotonic_ns())

    def close(self) -> None:
        self.sock.close()


# -- one fan-out measurement ----------------------------------------------------------------------


def _fanout(
    readers: Readers, write: Any, n: int, messages: int, burst: int, pid: int
) -> dict[str, Any]:
    time.sleep(0.3 if n < 10_000 else 1.0)
    # Server CPU per delivery: much steadier than latency on a shared machine (another
    # process's load delays us, it does not make our work bigger).
    cpu0, client0 = _cpu_s(pid), readers.cpu_s()
    gap_s = _gap_s(n)
    for _ in range(messages):
        write()
        time.sleep(gap_s)
    readers.wait_count(n * messages, 30)
    latency = readers.take()
    per_socket = readers.per_socket()
    # Throughput: a burst of writes, until everyone has everything.
    before = readers.count()
    t0 = time.perf_counter()
    for _ in range(burst):
        write()
    got = readers.wait_count(before + n * burst, 120)
    elapsed = time.perf_counter() - t0
    cpu = _cpu_s(pid) - cpu0
    client = readers.cpu_s() - client0
    delivered = got - before
    out: dict[str, Any] = _summary(latency) if latency else {}
    # Every watcher's count of the latency writes: fewer than ``messages`` is a starved one.
    out["min_records_per_watcher"] = min(per_socket, default=0)
    out["watchers_with_every_record"] = sum(c >= messages for c in per_socket)
    out["messages"] = messages
    out["server_cpu_us_per_delivery"] = round(cpu * 1e6 / max(1, got), 2)
    out["client_cpu_us_per_delivery"] = round(client * 1e6 / max(1, got), 2)
    out["deliveries_per_s"] = round(delivered / elapsed)
    out["complete"] = delivered == n * burst
    return out


def sse_fanout(base: str, n: int, messages: int, burst: int, pid: int) -> dict[str, Any]:
    host, port = base.removeprefix("http://").split(":")
    topic = f"bench-{n}"
    with httpx.Client(base_url=base, timeout=60) as http:
        http.delete(f"/v0/topics/{topic}")
        http.put(f"/v0/topics/{topic}", json={}).raise_for_status()
        wids = []
        for _ in range(n):
            r = http.post("/v0/watch", json={"topics": {topic: {"tail": True}}})
            r.raise_for_status()
            wids.append(r.json()["wid"])
    readers = Readers("sse", host, int(port), wids)
    writer = HttpWriter(host, int(port), topic)
    try:
        return _fanout(readers, writer.write, n, messages, burst, pid)
    finally:
        writer.close()
        readers.close()


def floor_fanout(kind: str, n: int, messages: int, burst: int) -> dict[str, Any]:
    """The same fan-out through bench/_floor_server.py (``kind``: one of its ``KINDS``), on
    a fresh server per measurement (it forgets nothing about closed watchers)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_floor_server.py")
    proc = subprocess.Popen(
        [sys.executable, script, kind],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=raise_fd_limit,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        readers = Readers("sse", "127.0.0.1", port, [""] * n)
        writer = HttpWriter("127.0.0.1", port, "floor")
        try:
            return _fanout(readers, writer.write, n, messages, burst, proc.pid)
        finally:
            writer.close()
            readers.close()
    finally:
        proc.kill()
        proc.wait(30)


def redis_fanout(port: int, n: int, messages: int, burst: int, pid: int) -> dict[str, Any]:
    key = f"bench-{n}"
    writer = RedisWriter(port, key)
    writer.command(b"DEL", key.encode())
    writer.command(b"XADD", key.encode(), b"*", b"stamp", b"0")
    readers = Readers("redis", "127.0.0.1", port, [""] * n, key)
    try:
        _wait_blocked(writer, n)
        return _fanout(readers, writer.write, n, messages, burst, pid)
    finally:
        writer.close()
        readers.close()


def _wait_blocked(writer: RedisWriter, n: int, timeout_s: float = 60.0) -> None:
    """Until ``n`` clients wait in XREAD BLOCK (a reader whose first XREAD ``$`` came after
    the first XADD would miss it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = writer.command(b"INFO", b"clients")
        match = re.search(rb"blocked_clients:(\d+)", info)
        if match is not None and int(match.group(1)) >= n:
            return
        time.sleep(0.05)
    raise RuntimeError(f"fewer than {n} Redis readers blocked after {timeout_s} s")


def idle_memory(src: str | None, n: int) -> float:
    """KiB of server RSS per idle SSE connection (with its session), on a fresh server
    (freed memory of earlier runs would hide growth)."""
    proc, base = start_topics(src)
    host, port = base.removeprefix("http://").split(":")
    try:
        with httpx.Client(base_url=base, timeout=60) as http:
            http.put("/v0/topics/idle", json={}).raise_for_status()
            wids = []
            for _ in range(n + 1):
                r = http.post("/v0/watch", json={"topics": {"idle": {"tail": True}}})
                wids.append(r.json()["wid"])
        # Warm up: one stream, so code paths and pools exist before the baseline.
        warm = Readers("sse", host, int(port), wids[:1])
        time.sleep(0.5)
        base_kib = _rss_kib(proc.pid)
        rest = Readers("sse", host, int(port), wids[1:])
        time.sleep(1.0)
        grown = _rss_kib(proc.pid) - base_kib
        rest.close()
        warm.close()
    finally:
        proc.terminate()
        proc.wait(30)
    return round(grown / n, 2)


# -- main ------------------------------------------------------------------------------------


def _median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    if len(rows) == 1:
        return rows[0]
    out: dict[str, Any] = {}
    for k in (
        "p50_ms",
        "p99_ms",
        "max_ms",
        "samples",
        "deliveries_per_s",
        "server_cpu_us_per_delivery",
        "client_cpu_us_per_delivery",
    ):
        vals = [r[k] for r in rows if k in r]
        if vals:
            out[k] = statistics.median(vals)
    # Starvation is judged on the worst round, not a median.
    maxes = [r["max_ms"] for r in rows if "max_ms" in r]
    if maxes:
        out["max_ms_worst_round"] = max(maxes)
    fewest = [r["min_records_per_watcher"] for r in rows if "min_records_per_watcher" in r]
    if fewest:
        out["min_records_per_watcher"] = min(fewest)
        out["watchers_with_every_record"] = min(r["watchers_with_every_record"] for r in rows)
        out["messages"] = min(r["messages"] for r in rows if "messages" in r)
    out["complete"] = all(r.get("complete", False) for r in rows)
    out["rounds"] = rows
    return out


def main() -> None:
    global PER_PROCESS
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer messages")
    parser.add_argument("--watchers", default="1,10,100,1000,10000")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--baseline", help="also run a topics-server importing topics from here")
    parser.add_argument("--rounds", type=int, default=1, help="repeat; report medians")
    parser.add_argument("--no-idle", action="store_true", help="skip the idle-memory run")
    parser.add_argument(
        "--floors",
        default="1,10,100,10000",
        help="watcher counts to also measure the --floor-kinds relays at ('' = none)",
    )
    parser.add_argument(
        "--floor-kinds",
        default="trio,epoll",
        help="which relays run at the --floors counts (bench/_floor_server.py: trio, epoll, "
        "trio-engine, trio-calls)",
    )
    parser.add_argument(
        "--per-process",
        type=int,
        default=PER_PROCESS,
        help="reader sockets per reader process (more readers: more processes)",
    )
    parser.add_argument("--_readers", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._readers:
        reader_main()
        return
    PER_PROCESS = args.per_process
    raise_fd_limit()
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    counts = [int(x) for x in args.watchers.split(",")]
    if max(counts) + 64 > soft:
        raise SystemExit(f"{max(counts)} watchers need more descriptors than RLIMIT_NOFILE {soft}")
    messages = 50 if args.quick else 200
    # Memory per idle watcher at 1,000 streams (the long-standing figure), and at the
    # largest point too when that is bigger (issue 15's 10,000).
    idle_counts = [1000 if not args.quick else 200]
    idle_counts += [n for n in sorted(set(counts)) if n > idle_counts[0] and n >= 10_000]
    floor_counts = {int(x) for x in args.floors.split(",") if x}
    kinds = [k for k in args.floor_kinds.split(",") if k]
    floors = ["floor_" + k.replace("-", "_") for k in kinds] if floor_counts & set(counts) else []
    systems = ["sse", "redis"] + (["sse_baseline"] if args.baseline else []) + floors
    results: dict[str, Any] = {s: {} for s in systems}
    results["client"] = "one epoll reader process, raw sockets, for both systems"
    results["loadavg_start"] = _loadavg()
    if not args.no_idle:
        results["idle_kib_by_streams"] = {}
        for idle_n in idle_counts:
            kib = idle_memory(None, idle_n)
            results["idle_kib_by_streams"][idle_n] = kib
            if idle_n == idle_counts[0]:
                results["idle_kib_per_connection"] = kib
            line = f"memory per idle SSE connection (incl. its session, {idle_n} streams): "
            line += f"{kib} KiB"
            if args.baseline and idle_n == idle_counts[0]:
                results["idle_kib_per_connection_baseline"] = idle_memory(args.baseline, idle_n)
                line += f" (baseline {results['idle_kib_per_connection_baseline']} KiB)"
            target = "<= 20 KiB" if idle_n < 10_000 else f"<= {IDLE_KIB_10K} KiB"
            print(line + f"  (target {target})", flush=True)
        print(flush=True)
    topics_proc, base = start_topics()
    base_proc, base_base = start_topics(args.baseline) if args.baseline else (None, "")
    redis_proc, redis_port, redis_dir = start_redis()
    rows: dict[str, dict[int, list[dict[str, Any]]]] = {s: {n: [] for n in counts} for s in systems}
    try:
        for _ in range(args.rounds):
            for n in counts:
                msgs = _messages(n, messages)
                burst = max(20, 5_000 // n) if not args.quick else max(10, 1_000 // n)
                rows["sse"][n].append(sse_fanout(base, n, msgs, burst, topics_proc.pid))
                if base_proc is not None:
                    rows["sse_baseline"][n].append(
                        sse_fanout(base_base, n, msgs, burst, base_proc.pid)
                    )
                rows["redis"][n].append(redis_fanout(redis_port, n, msgs, burst, redis_proc.pid))
                if n in floor_counts:
                    for name in floors:
                        rows[name][n].append(
                            floor_fanout(
                                name.removeprefix("floor_").replace("_", "-"), n, msgs, burst
                            )
                        )
                _print_row(n, {s: rows[s][n][-1] for s in systems if rows[s][n]})
        for s in systems:
            for n in counts:
                if rows[s][n]:
                    results[s][n] = _median_row(rows[s][n])
    finally:
        for p in (topics_proc, base_proc, redis_proc):
            if p is not None:
                p.terminate()
                p.wait(30)
        shutil.rmtree(redis_dir, ignore_errors=True)
    results["loadavg_end"] = _loadavg()
    if args.rounds > 1:
        print(f"\nmedians of {args.rounds} rounds:")
        _print_row.header = False  # type: ignore[attr-defined]
        for n in counts:
            _print_row(n, {s: results[s][n] for s in systems if n in results[s]})
    print(f"load average: start {results['loadavg_start']}, end {results['loadavg_end']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


def _print_row(n: int, rows: dict[str, dict[str, Any]]) -> None:
    if not getattr(_print_row, "header", False):
        _print_row.header = True  # type: ignore[attr-defined]
        print(
            f"{'watchers':>8} | {'system':<12} | {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
            f"| {'deliveries/s':>12} | {'cpu us/dlv':>10} | {'client us':>10} | target"
        )
    red = rows.get("redis", {})
    trio = rows.get("floor_trio", {})
    for name, row in rows.items():
        target = TARGETS.get(n, "") if name == "sse" else ""
        if name == "sse" and red.get("p99_ms") is not None:
            target = (target + "; " if target else "") + f"p99 <= redis ({red['p99_ms']})"
        if name == "sse" and n <= 100 and trio.get("p99_ms") is not None:
            bound = round(TRIO_FLOOR_FACTOR * trio["p99_ms"], 3)
            target += f"; p99 <= {TRIO_FLOOR_FACTOR}x trio relay ({bound})"
        fewest = row.get("min_records_per_watcher")
        starved = (
            f"  (a watcher got {fewest} of {row.get('messages')})"
            if fewest is not None and fewest < row.get("messages", 0)
            else ""
        )
        print(
            f"{n:>8} | {name:<12} | {row.get('p50_ms', 0):>8} {row.get('p99_ms', 0):>8} "
            f"{row.get('max_ms', 0):>8} | {row.get('deliveries_per_s', 0):>12} "
            f"| {row.get('server_cpu_us_per_delivery', 0):>10} "
            f"| {row.get('client_cpu_us_per_delivery', 0):>10} | {target}"
            + ("" if row.get("complete") else "  (INCOMPLETE)")
            + starved
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
