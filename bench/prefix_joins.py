"""Topic creation with open prefix watches (issue 30, finding 2): hostile data, many prefix
watchers and a creator that keeps adding topics.

One command alternates rounds on a fresh topics-server each (memory-only, loopback,
default caps): ``--creations`` topics created by their first write (one keep-alive
connection, one request at a time), with

* **a**: no watch open;
* **b**: ``--watches`` prefix watches open (POST /v0/watch with ``topic_prefix`` and its
  SSE stream, all drained by one child process).

``--match`` says which watches a creation's name falls under: ``one`` (watch ``i`` follows
``pj.w{i}.``; creation ``j`` is ``pj.w{j % watches}.t{j}``, so each watch joins
``creations / watches`` topics, the target case), ``none`` (no creation is under any
watched prefix) or ``all`` (every watch follows ``pj.``: each creation reaches every watch,
and past ``TOPICS_MAX_WATCH_TOPICS`` each watch gets a ``join-refused`` frame instead).

The report gives each round's seconds and the server's CPU seconds over the creations,
b/a per pair (target for ``one``: <= 1.5), the server's RSS at the end of each round and
the SSE bytes the watchers received. It prints;
it never asserts.

    python bench/prefix_joins.py [--rounds 2] [--creations 10000] [--watches 100]
        [--match one|none|all] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import selectors
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _hostile_queries import exchange
from _machine import facts
from _readers import process_cpu_s, raise_fd_limit

ROOT = Path(__file__).resolve().parents[1]
BODY = b'{"records":[{"data":{"n":1}}]}'
TARGET_RATIO = 1.5


def start_server() -> tuple[subprocess.Popen[bytes], tuple[str, int]]:
    env = {**os.environ, "TOPICS_LOG_LEVEL": "WARNING", "PYTHONUNBUFFERED": "1"}
    env.pop("TOPICS_API_KEYS", None)
    cmd = [sys.executable, "-m", "topics.frontends.server", "--port", "0", "--memory"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if not line.startswith("topics-server listening on "):
        proc.kill()
        raise SystemExit(f"topics-server did not start: {line!r}")
    host, port = line.rsplit(" ", 1)[1].strip().removeprefix("http://").rsplit(":", 1)
    return proc, (host, int(port))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def call(sock: socket.socket, method: str, path: str, body: bytes) -> tuple[int, bytes, bool]:
    """One keep-alive request with a Content-Length answer: (status, body, whether the
    server closes the connection after it: it does every so many requests)."""
    status, close, answer = exchange(
        sock,
        f"{method} {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body,
    )
    return status, answer, close


class Drain:
    """Every watcher's stream, read (and counted) by a child process so none ever stalls
    and the reading does not compete with the creating client for its interpreter."""

    def __init__(self, addr: tuple[str, int], prefixes: list[str]) -> None:
        ctx = multiprocessing.get_context("fork")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_drain_main, args=(addr, prefixes, child), daemon=True)
        self._proc.start()
        if self._conn.recv() != "ready":
            raise SystemExit("the watchers did not open")
        self.bytes = 0

    def close(self) -> None:
        self._conn.send("stop")
        self.bytes = self._conn.recv()
        self._proc.join(10)


def _drain_main(addr: tuple[str, int], prefixes: list[str], conn: Any) -> None:
    sel = selectors.DefaultSelector()
    with socket.create_connection(addr) as ctl:
        for prefix in prefixes:
            body = json.dumps({"topics": {}, "topic_prefix": [prefix]}).encode()
            status, answer, _ = call(ctl, "POST", "/v0/watch", body)
            assert status == 200, answer
            sock = socket.create_connection(addr)
            sock.sendall(
                f"GET /v0/watch/{json.loads(answer)['wid']} HTTP/1.1\r\nHost: bench\r\n"
                "Accept: text/event-stream\r\n\r\n".encode()
            )
            sock.setblocking(False)
            sel.register(sock, selectors.EVENT_READ)
    sel.register(conn.fileno(), selectors.EVENT_READ)
    conn.send("ready")
    received = 0
    while True:
        for key, _ in sel.select():
            if key.fileobj == conn.fileno():
                conn.recv()
                conn.send(received)
                return
            try:
                received += len(key.fileobj.recv(1 << 20))  # type: ignore[union-attr]
            except BlockingIOError:
                continue


def names(args: argparse.Namespace) -> list[str]:
    if args.match == "one":
        return [f"pj.w{j % args.watches:03d}.t{j}" for j in range(args.creations)]
    if args.match == "all":
        return [f"pj.t{j}" for j in range(args.creations)]
    return [f"other.t{j}" for j in range(args.creations)]


def prefixes(args: argparse.Namespace) -> list[str]:
    if args.match == "all":
        return ["pj."] * args.watches
    return [f"pj.w{i:03d}." for i in range(args.watches)]


def one_round(args: argparse.Namespace, watched: bool) -> dict[str, Any]:
    """One round on a fresh server: seconds and server CPU of the creations, RSS after."""
    proc, addr = start_server()
    drain = None
    try:
        if watched:
            drain = Drain(addr, prefixes(args))
            time.sleep(0.5)  # the streams open
        sock = socket.create_connection(addr)
        cpu0 = process_cpu_s(proc.pid)
        t0 = time.perf_counter()
        for name in names(args):
            status, answer, closing = call(sock, "POST", f"/v0/topics/{name}", BODY)
            assert status == 201, answer
            if closing:
                sock.close()
                sock = socket.create_connection(addr)
        seconds = time.perf_counter() - t0
        sock.close()
        time.sleep(0.5)  # the last frames reach the watchers
        out = {
            "watched": watched,
            "seconds": seconds,
            "server_cpu_s": process_cpu_s(proc.pid) - cpu0,
            "rss_mib": rss_mib(proc.pid),
            "sse_bytes": 0,
        }
        if drain is not None:
            drain.close()
            out["sse_bytes"] = drain.bytes
            drain = None
        return out
    finally:
        if drain is not None:
            drain.close()
        proc.terminate()
        proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2, help="a/b pairs")
    ap.add_argument("--creations", type=int, default=10_000)
    ap.add_argument("--watches", type=int, default=100)
    ap.add_argument("--match", choices=("one", "none", "all"), default="one")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    raise_fd_limit()
    rounds = []
    for _ in range(args.rounds):
        for watched in (False, True):
            r = one_round(args, watched)
            rounds.append(r)
            print(
                f"{'b (watched)' if watched else 'a (none)   '}: {r['seconds']:.2f} s "
                f"(server CPU {r['server_cpu_s']:.2f} s), RSS {r['rss_mib']:.0f} MiB, "
                f"SSE {r['sse_bytes'] / 1e6:.1f} MB",
                flush=True,
            )
    pairs = list(zip(rounds[::2], rounds[1::2], strict=True))
    ratios = [b["seconds"] / a["seconds"] for a, b in pairs]
    cpu_ratios = [b["server_cpu_s"] / a["server_cpu_s"] for a, b in pairs]
    print(
        f"{args.creations} creations, {args.watches} watches, match={args.match}: b/a "
        + ", ".join(f"{r:.2f}" for r in ratios)
        + f" (median {statistics.median(ratios):.2f}; target <= {TARGET_RATIO} for "
        "match=one); server CPU b/a " + ", ".join(f"{r:.2f}" for r in cpu_ratios)
    )
    if args.json:
        out = {
            "args": vars(args),
            "rounds": rounds,
            "ratios": ratios,
            "cpu_ratios": cpu_ratios,
            "machine": facts(),
        }
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
