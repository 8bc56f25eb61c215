"""Batched write throughput of topics-server with and without hostile connections attached
(issue 14).

One command starts topics-server (memory-only, ``TOPICS_API_KEYS`` set, default deadlines)
on a free loopback port and alternates rounds:

* **a**: ``--writers`` client connections (threads here, raw keep-alive sockets) write
  100-record batches to one capped topic for ``--duration`` seconds;
* **b**: the same, while a separate attacker process holds ``--slowloris`` connections
  that trickle a request head one byte every ``--trickle-s`` seconds (never finishing it)
  and ``--preauth`` connections that send a write head with ``Content-Length: 1048575``
  and no valid key (half none, half a wrong one), then trickle the body. The attacker
  reopens whatever the server closes ``--reconnect-s`` later (default: the trickle
  interval; 0 makes the refused holders a connection flood, a different attack).

Rounds go a/b/a/b/... (``--rounds`` pairs) so both see the same neighbours; the report gives
medians, b/a per pair, and the server's RSS growth under attack (the peak during a b round
over the RSS at the end of the a round before it; the topic is capped, so stored records do
not grow it). Targets (issue 14): b/a >= 80 %, RSS growth <= 64 MB. It prints; it never
asserts.

``--queries`` runs the query attacks instead (issue 30, bench/_hostile_queries.py): the
server CPU of one hostile ``where`` over 1,000 records, then a/b rounds where b adds
``--queriers`` connections sending it back to back, with a bystander's ``/v0/health``
latency measured in both. Targets: <= 5 ms per query, b/a >= 80 %, p99 <= 50 ms.

    python bench/hostile.py [--rounds 3] [--duration 10] [--writers 4] [--slowloris 1000]
        [--preauth 200] [--queries [--queriers 2] [--cost-queries 20]] [--quick]
        [--json out.json]

The open-file limit is raised (to the hard limit) for this process and its children only.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import resource
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from _hostile_queries import (
    QTOPIC,
    exchange,
    query_attack_main,
    query_cost,
    query_report,
    query_rounds,
    seed,
    start_query_attacker,
)

ROOT = Path(__file__).resolve().parents[1]
KEY = "bench-hostile-key"
TOPIC = "bench-hostile"
BATCH = 100
CAP_RECORDS = 20_000
RECORD = {"data": {"user": "u-4711", "action": "click", "n": 12345}}
BODY = json.dumps({"records": [RECORD] * BATCH}, separators=(",", ":")).encode()
TARGET_RATIO = 0.80
TARGET_RSS_MB = 64


# -- the server ----------------------------------------------------------------------------


def start_server(log: Path) -> tuple[subprocess.Popen[bytes], tuple[str, int]]:
    env = {**os.environ, "TOPICS_LOG_LEVEL": "WARNING", "PYTHONUNBUFFERED": "1"}
    env["TOPICS_API_KEYS"] = KEY
    cmd = [sys.executable, "-m", "topics.frontends.server", "--port", "0", "--memory"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=log.open("wb"))
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if not line.startswith("topics-server listening on "):
        proc.kill()
        raise SystemExit(f"topics-server did not start: {line!r}; see {log}")
    host, port = line.rsplit(" ", 1)[1].strip().removeprefix("http://").rsplit(":", 1)
    return proc, (host, int(port))


def cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` so far (seconds)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def request(sock: socket.socket, data: bytes) -> tuple[int, bool]:
    """Send one request, read its (Content-Length) response: the status, and whether the
    server closes the connection after it."""
    status, close, _ = exchange(sock, data)
    return status, close


def _write_request(method: str = "POST", body: bytes = BODY, path: str = "") -> bytes:
    return (
        f"{method} /v0/topics/{TOPIC}{path} HTTP/1.1\r\nHost: bench\r\n"
        f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


# -- writers ---------------------------------------------------------------------------------


def write_round(
    addr: tuple[str, int], server_pid: int, writers: int, duration: float
) -> dict[str, Any]:
    """``writers`` threads writing batches for ``duration`` s: records/s and statuses."""
    statuses: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()
    stop = time.monotonic() + duration
    req = _write_request()

    def writer() -> None:
        mine: collections.Counter[int] = collections.Counter()
        sock = socket.create_connection(addr, timeout=30)
        try:
            while time.monotonic() < stop:
                try:
                    status, close = request(sock, req)
                    mine[status] += 1
                except OSError:  # 0: a request lost with its connection
                    mine[0] += 1
                    close = True
                if close:
                    sock.close()
                    sock = socket.create_connection(addr, timeout=30)
        finally:
            sock.close()
            with lock:
                statuses.update(mine)

    t0 = time.monotonic()
    cpu0 = cpu_s(server_pid)
    threads = [threading.Thread(target=writer) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - t0
    ok = statuses[200] + statuses[201]
    return {
        "server_cpu_s": cpu_s(server_pid) - cpu0,
        "records_s": ok * BATCH / took,
        "requests": sum(statuses.values()),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
    }


# -- the attacker (its own process: its loop must not take the writers' GIL) -----------------


SLOW_HEAD = (
    f"POST /v0/topics/{TOPIC} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
    "X-Padding: " + "a" * 4000
).encode()


def _preauth_head(i: int) -> bytes:
    auth = "Authorization: Bearer wrong-key\r\n" if i % 2 else ""
    return (
        f"POST /v0/topics/{TOPIC} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        f"{auth}Content-Length: 1048575\r\n\r\n"
    ).encode()


class Attacker:
    """Holds the hostile connections: one selector, one queue of due trickles."""

    def __init__(
        self,
        addr: tuple[str, int],
        slowloris: int,
        preauth: int,
        trickle_s: float,
        reconnect_s: float,
    ) -> None:
        self.addr = addr
        self.trickle_s = trickle_s
        self.reconnect_s = reconnect_s
        self.reconnects: collections.deque[tuple[float, str, int]] = collections.deque()
        self.sel = selectors.DefaultSelector()
        self.due: collections.deque[tuple[float, socket.socket]] = collections.deque()
        self.state: dict[socket.socket, tuple[str, int, int]] = {}  # kind, index, offset
        self.stats: collections.Counter[str] = collections.Counter()
        now = time.monotonic()
        kinds = [("slow", i) for i in range(slowloris)] + [("preauth", i) for i in range(preauth)]
        for n, (kind, i) in enumerate(kinds):
            self.open(kind, i, now + trickle_s * n / max(1, len(kinds)))

    def open(self, kind: str, i: int, when: float) -> None:
        try:
            sock = socket.create_connection(self.addr, timeout=2)
            first = b"P" if kind == "slow" else _preauth_head(i)
            sock.sendall(first)
        except OSError:
            self.stats["connect_failed"] += 1
            return
        sock.setblocking(False)
        self.sel.register(sock, selectors.EVENT_READ)
        self.state[sock] = (kind, i, len(first) if kind == "slow" else 0)
        self.due.append((when, sock))
        self.stats[f"{kind}_opened"] += 1

    def drop(self, sock: socket.socket) -> None:
        kind, i, _ = self.state.pop(sock)
        self.sel.unregister(sock)
        sock.close()
        self.stats[f"{kind}_closed_by_server"] += 1
        self.reconnects.append((time.monotonic() + self.reconnect_s, kind, i))

    def trickle(self, sock: socket.socket) -> None:
        kind, i, offset = self.state[sock]
        byte = (SLOW_HEAD[offset : offset + 1] or b"a") if kind == "slow" else b"x"
        try:
            sock.send(byte)
        except BlockingIOError:
            pass
        except OSError:
            self.drop(sock)
            return
        self.state[sock] = (kind, i, offset + 1)
        self.due.append((time.monotonic() + self.trickle_s, sock))

    def run(self, stop: threading.Event | None = None) -> None:
        while stop is None or not stop.is_set():
            now = time.monotonic()
            while self.reconnects and self.reconnects[0][0] <= now:
                _, kind, i = self.reconnects.popleft()
                self.open(kind, i, now + self.trickle_s)
            while self.due and self.due[0][0] <= now:
                _, sock = self.due.popleft()
                if sock in self.state:
                    self.trickle(sock)
            waits = [q[0][0] - now for q in (self.due, self.reconnects) if q]
            timeout = max(0.0, min([0.5, *waits]))
            for key, _ in self.sel.select(timeout):
                ready = key.fileobj
                assert isinstance(ready, socket.socket)
                try:
                    data = ready.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if data.startswith(b"HTTP/1.1 "):
                    self.stats[f"status_{data[9:12].decode()}"] += 1
                if not data:
                    self.drop(ready)

    def attached(self) -> int:
        return len(self.state)


def attack_main(addr: tuple[str, int], args: argparse.Namespace) -> None:
    """``--attack``: hold the connections until SIGTERM, then print the stats as JSON."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    attacker = Attacker(addr, args.slowloris, args.preauth, args.trickle_s, args.reconnect_s)
    print(f"attached {attacker.attached()}", flush=True)
    attacker.run(stop)
    print(json.dumps(dict(attacker.stats)), flush=True)


def start_attacker(addr: tuple[str, int], args: argparse.Namespace) -> subprocess.Popen[str]:
    cmd = [sys.executable, __file__, "--attack", f"{addr[0]}:{addr[1]}"]
    cmd += ["--slowloris", str(args.slowloris), "--preauth", str(args.preauth)]
    cmd += ["--trickle-s", str(args.trickle_s), "--reconnect-s", str(args.reconnect_s)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("attached "):
        proc.kill()
        raise SystemExit(f"the attacker did not start: {line!r}")
    return proc


def stop_attacker(proc: subprocess.Popen[str]) -> dict[str, int]:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    with contextlib.suppress(ValueError, IndexError):
        return dict(json.loads(out.strip().splitlines()[-1]))
    return {}


# -- rounds ----------------------------------------------------------------------------------


def attacked_round(
    server: subprocess.Popen[bytes], addr: tuple[str, int], args: argparse.Namespace
) -> dict[str, Any]:
    rss_before = rss_mib(server.pid)
    attacker = start_attacker(addr, args)
    time.sleep(1.0)  # let the server accept and read them all
    rss_attached = rss_mib(server.pid)
    peak = [rss_attached]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            peak.append(rss_mib(server.pid))

    sampler = threading.Thread(target=sample)
    sampler.start()
    cpu = (cpu_s(server.pid), cpu_s(attacker.pid))
    try:
        result = write_round(addr, server.pid, args.writers, args.duration)
    finally:
        cpu = (cpu_s(server.pid) - cpu[0], cpu_s(attacker.pid) - cpu[1])
        done.set()
        sampler.join()
        result_attack = stop_attacker(attacker)
    result.update(
        rss_before_mib=rss_before,
        rss_attached_mib=rss_attached,
        rss_peak_mib=max(peak),
        rss_growth_mib=max(peak) - rss_before,
        attacker_cpu_s=cpu[1],
        attacker=result_attack,
    )
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="a/b pairs")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per round")
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--slowloris", type=int, default=1000)
    ap.add_argument("--preauth", type=int, default=200)
    ap.add_argument("--trickle-s", type=float, default=3.0, help="seconds between bytes")
    ap.add_argument(
        "--reconnect-s",
        type=float,
        default=None,
        help="seconds before the attacker reopens a connection the server closed "
        "(default: --trickle-s; 0 turns the holders into a connection flood)",
    )
    ap.add_argument("--quick", action="store_true", help="1 pair of 2 s rounds, 200 + 50")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--queries", action="store_true", help="the query attacks (issue 30)")
    ap.add_argument("--queriers", type=int, default=2, help="hostile query connections")
    ap.add_argument("--cost-queries", type=int, default=20, help="queries timed for the cost")
    ap.add_argument(
        "--query-rate", type=float, default=0.0, help="queries/s per querier (0: back to back)"
    )
    ap.add_argument("--attack", help=argparse.SUPPRESS)  # HOST:PORT: run as the attacker
    ap.add_argument("--query-attack", help=argparse.SUPPRESS)  # HOST:PORT: the query attacker
    args = ap.parse_args()
    if args.reconnect_s is None:
        args.reconnect_s = args.trickle_s
    if args.attack:
        host, port = args.attack.rsplit(":", 1)
        attack_main((host, int(port)), args)
        return
    if args.query_attack:
        host, port = args.query_attack.rsplit(":", 1)
        query_attack_main((host, int(port)), KEY, args.queriers, args.query_rate)
        return
    if args.quick:
        args.rounds, args.duration, args.slowloris, args.preauth = 1, 2.0, 200, 50
        args.cost_queries = 5
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # this process and children
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-hostile-{os.getpid()}.log"
    server, addr = start_server(log)
    try:
        with socket.create_connection(addr, timeout=30) as sock:
            config = json.dumps({"cap_records": CAP_RECORDS}).encode()
            assert request(sock, _write_request("PUT", config))[0] in (200, 201)
        print(
            f"topics-server {addr[0]}:{addr[1]} (memory-only, keys on); {args.writers} writers "
            f"x {BATCH}-record batches, {args.duration:.0f} s rounds"
        )
        write_round(addr, server.pid, args.writers, min(2.0, args.duration))  # warm-up
        if args.queries:
            queries_main(server, addr, args)
            return
        print(
            f"attack: {args.slowloris} slowloris + {args.preauth} pre-auth body holders, a byte "
            f"every {args.trickle_s:g} s, reopened {args.reconnect_s:g} s after the server "
            "closes one"
        )
        rounds: list[dict[str, Any]] = []
        for i in range(args.rounds):
            for kind in ("a", "b"):
                load = Path("/proc/loadavg").read_text()[:14]
                if kind == "a":
                    r = write_round(addr, server.pid, args.writers, args.duration)
                else:
                    r = attacked_round(server, addr, args)
                r.update(kind=kind, pair=i, load=load)
                rounds.append(r)
                extra = ""
                if kind == "b":
                    extra = (
                        f", RSS +{r['rss_growth_mib']:.1f} MiB, attacker CPU "
                        f"{r['attacker_cpu_s']:.1f} s, {r['attacker']}"
                    )
                print(
                    f"round {i + 1}{kind}: {r['records_s']:,.0f} records/s, server CPU "
                    f"{r['server_cpu_s']:.1f} s, "
                    f"statuses {r['statuses']}{extra} (load {load})",
                    flush=True,
                )
        report(rounds, args)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()


def queries_main(
    server: subprocess.Popen[bytes], addr: tuple[str, int], args: argparse.Namespace
) -> None:
    """``--queries``: the cost of one hostile query, then the a/b rounds."""
    seed(addr, KEY)
    rate = f"{args.query_rate:g}/s each" if args.query_rate else "back to back"
    print(f"query attack: the 63 x 256 In filter over {QTOPIC}, {args.queriers} queriers, {rate}")
    cost = query_cost(addr, KEY, server.pid, args.cost_queries, cpu_s)
    rounds = query_rounds(
        addr,
        server.pid,
        args,
        lambda: write_round(addr, server.pid, args.writers, args.duration),
        lambda: start_query_attacker(
            __file__, addr, args.queriers, args.query_rate, sys.executable
        ),
    )
    out = query_report(rounds, cost, args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


def report(rounds: list[dict[str, Any]], args: argparse.Namespace) -> None:
    a = [r["records_s"] for r in rounds if r["kind"] == "a"]
    b = [r["records_s"] for r in rounds if r["kind"] == "b"]
    ratios = [rb / ra for ra, rb in zip(a, b, strict=True) if ra]
    growth = max(r["rss_growth_mib"] for r in rounds if r["kind"] == "b")
    ratio = statistics.median(ratios) if ratios else float("nan")
    print(
        f"-- medians: a {statistics.median(a):,.0f} records/s, b {statistics.median(b):,.0f} "
        f"records/s; b/a {ratio:.0%} (pairs {', '.join(f'{x:.0%}' for x in ratios)}; target "
        f">= {TARGET_RATIO:.0%}); RSS growth under attack, worst round: {growth:.1f} MiB "
        f"(target <= {TARGET_RSS_MB} MB)"
    )
    if args.json:
        out = {
            "rounds": rounds,
            "a_records_s": statistics.median(a),
            "b_records_s": statistics.median(b),
            "ratio": ratio,
            "ratios": ratios,
            "rss_growth_mib": growth,
            "writers": args.writers,
            "duration_s": args.duration,
            "slowloris": args.slowloris,
            "preauth": args.preauth,
            "trickle_s": args.trickle_s,
            "reconnect_s": args.reconnect_s,
        }
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
