"""The query attacks of bench/hostile.py (``--queries``; issue 30, finding 1).

The hostile query is the finding's: an ``or`` of 63 ``In`` terms of 256 strings each (64
terms, the compile limit), half on a member every record has, over a topic of 1,000 small
records, read from the start with ``limit`` 1000 (every page, when the server's time
budget ends one early). Three measurements:

* **cost**: server CPU per query (utime + stime of the server over ``--cost-queries``
  back-to-back queries on one connection, divided by their number), and the same for the
  plain diff of the same records; target <= 5 ms for the hostile one;
* **a/b rounds**: the writers of bench/hostile.py, and a bystander asking ``GET
  /v0/health`` on its own keep-alive connection every 10 ms, without (a) and with (b)
  ``--queriers`` attacker connections (a separate process) each sending the hostile query
  ``--query-rate`` times a second (0: back to back, the default); targets: writes b/a >=
  80 %, the bystander's p99 in b <= 50 ms. Back to back, two connections are a third of
  the server's work however cheap each query is (one event loop serves connections in
  turn); the rate says what a client doing less costs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import socket
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

QTOPIC = "bench-hostile-q"
QRECORDS = 1000
TARGET_CPU_MS = 5.0
TARGET_P99_MS = 50.0


def costly_where() -> list[Any]:
    terms: list[Any] = []
    for t in range(63):
        field = "data.user" if t % 2 == 0 else f"data.k{t}"
        terms.append([field, "In", [f"nobody-{t}-{v}" for v in range(256)]])
    terms[-1][2][-1] = "u-3"
    return ["or", terms]


def exchange(sock: socket.socket, data: bytes) -> tuple[int, bool, bytes]:
    """Send one request, read its (Content-Length) response: the status, whether the
    server closes the connection after it, and the body."""
    sock.sendall(data)
    buf = b""
    while (end := buf.find(b"\r\n\r\n")) < 0:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    head = buf[:end].lower()
    start = head.find(b"content-length:")
    length = int(head[start + 15 :].split(b"\r\n", 1)[0]) if start >= 0 else 0
    while len(buf) < end + 4 + length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    body = buf[end + 4 : end + 4 + length]
    return int(buf.split(b" ", 2)[1]), b"\r\nconnection: close" in head, body


def _post(key: str, path: str, body: object) -> bytes:
    raw = json.dumps(body, separators=(",", ":")).encode()
    return (
        f"POST {path} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n"
    ).encode() + raw


def seed(addr: tuple[str, int], key: str) -> None:
    """The queried topic: 1,000 records like the writers' (a tenth are user u-3)."""
    with socket.create_connection(addr, timeout=30) as sock:
        for first in range(0, QRECORDS, 100):
            records = [{"data": {"user": f"u-{i % 10}", "n": i}} for i in range(first, first + 100)]
            status, _, body = exchange(
                sock, _post(key, f"/v0/topics/{QTOPIC}", {"records": records})
            )
            assert status in (200, 201), body


def where_member(where: object) -> bytes:
    """``,"where":...`` of a diff body, encoded once per client (on a two-core box the
    attacker's own encoding would take the CPU the server is measured on)."""
    return b"" if where is None else b',"where":' + json.dumps(where).encode()


def read_all(sock: socket.socket, key: str, where_json: bytes) -> tuple[int, int]:
    """One query: every page of the topic under the filter (``where_member``); (pages,
    records returned)."""
    cursor = pages = returned = 0
    while cursor < QRECORDS:
        body = b'{"from_seq":%d,"limit":%d%s}' % (cursor, QRECORDS, where_json)
        head = (
            f"POST /v0/topics/{QTOPIC}/diff HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer "
            f"{key}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        status, _, raw = exchange(sock, head.encode() + body)
        if status != 200:
            raise RuntimeError(f"diff answered {status}: {raw[:200]!r}")
        answer = json.loads(raw)
        cursor, pages, returned = (
            answer["next_from_seq"],
            pages + 1,
            returned + len(answer["records"]),
        )
    return pages, returned


def query_cost(
    addr: tuple[str, int], key: str, pid: int, n: int, cpu_s: Callable[[int], float]
) -> dict[str, Any]:
    """Server CPU per query (ms) for the hostile query and the plain diff.

    The server is not idle meanwhile (the held connections of the other attacks tick), and
    a paced key's queries (TOPICS_WHERE_CPU_SHARE) spread over more wall time, so the
    server's idle CPU rate, measured first over two seconds, is taken off."""
    out: dict[str, Any] = {}
    cpu0, t0 = cpu_s(pid), time.monotonic()
    time.sleep(2.0)
    idle_per_s = (cpu_s(pid) - cpu0) / (time.monotonic() - t0)
    out["idle_cpu_ms_per_s"] = idle_per_s * 1000
    with socket.create_connection(addr, timeout=60) as sock:
        for name, where in (("plain", None), ("hostile", costly_where())):
            where_json = where_member(where)
            read_all(sock, key, where_json)  # warm-up
            cpu0, t0 = cpu_s(pid), time.monotonic()
            pages = returned = 0
            for _ in range(n):
                p, r = read_all(sock, key, where_json)
                pages, returned = pages + p, returned + r
            wall = time.monotonic() - t0
            out[name] = {
                "server_cpu_ms": (cpu_s(pid) - cpu0 - idle_per_s * wall) * 1000 / n,
                "wall_ms": wall * 1000 / n,
                "pages": pages / n,
                "returned": returned / n,
            }
    return out


class Bystander(threading.Thread):
    """``GET /v0/health`` every ``interval`` s on one keep-alive connection: latencies."""

    def __init__(self, addr: tuple[str, int], interval: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.addr = addr
        self.interval = interval
        self.stop = threading.Event()
        self.latencies_ms: list[float] = []
        self.failures = 0

    def run(self) -> None:
        req = b"GET /v0/health HTTP/1.1\r\nHost: bench\r\n\r\n"
        sock = socket.create_connection(self.addr, timeout=30)
        try:
            while not self.stop.wait(self.interval):
                t0 = time.perf_counter()
                try:
                    status, close, _ = exchange(sock, req)
                except OSError:
                    status, close = 0, True
                self.latencies_ms.append((time.perf_counter() - t0) * 1000)
                if status != 200:
                    self.failures += 1
                if close:
                    sock.close()
                    sock = socket.create_connection(self.addr, timeout=30)
        finally:
            sock.close()

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latencies_ms)
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else float("nan")
        return {
            "health_n": len(lat),
            "health_p50_ms": statistics.median(lat) if lat else float("nan"),
            "health_p99_ms": p99,
            "health_max_ms": lat[-1] if lat else float("nan"),
            "health_failures": self.failures,
        }


def query_attack_main(addr: tuple[str, int], key: str, queriers: int, rate: float) -> None:
    """``--query-attack``: ``queriers`` connections send the hostile query (``rate`` per
    second each; 0: back to back) until SIGTERM; then print what they did as JSON."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    counts = {"queries": 0, "pages": 0, "errors": 0}
    lock = threading.Lock()

    def querier() -> None:
        where_json = where_member(costly_where())
        sock = socket.create_connection(addr, timeout=60)
        due = time.monotonic()
        try:
            while not stop.wait(max(0.0, due - time.monotonic()) if rate else 0):
                due += 1 / rate if rate else 0
                try:
                    pages, _ = read_all(sock, key, where_json)
                    done = {"queries": 1, "pages": pages, "errors": 0}
                except (OSError, RuntimeError):
                    done = {"queries": 0, "pages": 0, "errors": 1}
                    sock.close()
                    sock = socket.create_connection(addr, timeout=60)
                with lock:
                    for k, v in done.items():
                        counts[k] += v
        finally:
            sock.close()

    threads = [threading.Thread(target=querier, daemon=True) for _ in range(queriers)]
    for t in threads:
        t.start()
    print("attached", flush=True)
    while not stop.wait(0.2):
        pass
    for t in threads:
        t.join(10)
    print(json.dumps(counts), flush=True)


def start_query_attacker(
    script: str, addr: tuple[str, int], queriers: int, rate: float, python: str
) -> subprocess.Popen[str]:
    cmd = [python, script, "--query-attack", f"{addr[0]}:{addr[1]}", "--queriers", str(queriers)]
    cmd += ["--query-rate", str(rate)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "attached":
        proc.kill()
        raise SystemExit("the query attacker did not start")
    return proc


def stop_query_attacker(proc: subprocess.Popen[str]) -> dict[str, int]:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    with contextlib.suppress(ValueError, IndexError):
        return dict(json.loads(out.strip().splitlines()[-1]))
    return {}


def query_rounds(
    addr: tuple[str, int],
    pid: int,
    args: argparse.Namespace,
    write_round: Callable[[], dict[str, Any]],
    start_attacker: Callable[[], subprocess.Popen[str]],
) -> list[dict[str, Any]]:
    """a/b pairs: the writers and the bystander, without and with the query attackers."""
    rounds: list[dict[str, Any]] = []
    for i in range(args.rounds):
        for kind in ("a", "b"):
            load = Path("/proc/loadavg").read_text()[:14]
            attacker = start_attacker() if kind == "b" else None
            bystander = Bystander(addr)
            bystander.start()
            try:
                r = write_round()
            finally:
                bystander.stop.set()
                bystander.join()
                attack = stop_query_attacker(attacker) if attacker is not None else {}
            r.update(bystander.summary(), kind=kind, pair=i, load=load, attacker=attack)
            rounds.append(r)
            print(
                f"round {i + 1}{kind}: {r['records_s']:,.0f} records/s, server CPU "
                f"{r['server_cpu_s']:.1f} s, /v0/health p50 {r['health_p50_ms']:.1f} ms p99 "
                f"{r['health_p99_ms']:.1f} ms max {r['health_max_ms']:.1f} ms "
                f"({r['health_n']} asked, {r['health_failures']} failed), statuses {r['statuses']}"
                + (f", attackers {attack}" if attack else "")
                + f" (load {load})",
                flush=True,
            )
    return rounds


def query_report(
    rounds: list[dict[str, Any]], cost: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    a = [r["records_s"] for r in rounds if r["kind"] == "a"]
    b = [r["records_s"] for r in rounds if r["kind"] == "b"]
    ratios = [rb / ra for ra, rb in zip(a, b, strict=True) if ra]
    ratio = statistics.median(ratios) if ratios else float("nan")
    p99_a = max(r["health_p99_ms"] for r in rounds if r["kind"] == "a")
    p99_b = max(r["health_p99_ms"] for r in rounds if r["kind"] == "b")
    hostile, plain = cost["hostile"], cost["plain"]
    print(
        f"-- one hostile query over {QRECORDS} records: {hostile['server_cpu_ms']:.2f} ms server "
        f"CPU ({hostile['pages']:.1f} pages, {hostile['wall_ms']:.1f} ms wall; target <= "
        f"{TARGET_CPU_MS:g} ms); the plain diff {plain['server_cpu_ms']:.2f} ms (the server's "
        f"idle {cost['idle_cpu_ms_per_s']:.1f} ms/s of CPU taken off)\n"
        f"-- writes: a {statistics.median(a):,.0f} records/s, b {statistics.median(b):,.0f} "
        f"records/s; b/a {ratio:.0%} (pairs {', '.join(f'{x:.0%}' for x in ratios)}; target "
        f">= 80%); bystander /v0/health p99, worst round: a {p99_a:.1f} ms, b {p99_b:.1f} ms "
        f"(target <= {TARGET_P99_MS:g} ms)"
    )
    return {
        "rounds": rounds,
        "cost": cost,
        "a_records_s": statistics.median(a),
        "b_records_s": statistics.median(b),
        "ratio": ratio,
        "ratios": ratios,
        "health_p99_a_ms": p99_a,
        "health_p99_b_ms": p99_b,
        "queriers": args.queriers,
        "query_rate": args.query_rate,
        "writers": args.writers,
        "duration_s": args.duration,
    }
