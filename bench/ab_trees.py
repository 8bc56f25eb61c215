"""Did a change slow the hot paths? Two source trees alternated in one run.

Each round runs every case once per tree, A then B (B then A on odd rounds), each in a
fresh interpreter, so both trees see the same load on a shared machine:

* ``append_b100``, ``append_b1``: bench/engine.py's append (records/s, 64 B records,
  batches of 100 and of 1, in-process, memory-only);
* ``diff_limit1000``, ``diff_limit256``: bench/engine.py's diff (records/s over 300,000
  raw 64 B records), and ``render_ns_per_record``: the core alone (``SegmentBuffer.render``
  of 1000 such records, where the engine's per-call costs do not blur it);
* ``http_write_b1``, ``http_write_b100``: that tree's ``topics-server --memory`` on a free
  loopback port, one keep-alive connection posting single-record and 100-record writes
  for a fixed count (requests/s), and the server's CPU per request (``*_srv_us``, from
  /proc: less sensitive to the neighbours than a rate).

Prints each case's medians and the median of the per-round B/A ratios (a rate: above 1
is faster; ``*_srv_us`` and ``render_ns_per_record``: below 1 is cheaper). Build each tree's core first
(``python setup.py build_ext --inplace``). Never asserts.

Usage: python bench/ab_trees.py OLD_TREE NEW_TREE [--rounds N] [--only append,diff,http]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ENGINE_PROBE = """
import json, sys, trio
sys.path.insert(0, sys.argv[1])
import bench.engine as be
import topics._core as core
assert core.IMPLEMENTATION == "cython", core.IMPLEMENTATION
be.REPEATS = 5
out = {}
if "append" in sys.argv[2]:
    out["append_b100"] = trio.run(be.bench_append, 100, 64, False, 200_000)
    out["append_b1"] = trio.run(be.bench_append, 1, 64, False, 20_000)
if "diff" in sys.argv[2]:
    out.update({f"diff_limit{n}": trio.run(be.bench_diff, n, 300_000) for n in (1000, 256)})
    # The core alone: SegmentBuffer.render of 1000 raw 64 B records, ns per record.
    import statistics, time, ujson
    from topics._core import _ext
    recs = [{"data": b'{"k":"' + b"x" * 56 + b'"}'} for _ in range(1000)]
    limits = (1 << 20, 1 << 20, 256, 256, 1 << 20)
    frames, _ = _ext.encode_batch(recs, 1, 1000, None, 7, limits, ujson.dumps)
    seg = _ext.SegmentBuffer(1, 7)
    seg.append(frames)
    ns = []
    for _ in range(30):
        t0 = time.perf_counter()
        for _ in range(50):
            seg.render(0, 1000, 1 << 30, None, 3)
        ns.append((time.perf_counter() - t0) / 50 / 1000 * 1e9)
    out["render_ns_per_record"] = statistics.median(ns)
print(json.dumps(out))
"""

HTTP_PROBE = """
import json, os, re, socket, subprocess, sys, tempfile, time
tree = sys.argv[1]
env = dict(os.environ, TOPICS_LOG_LEVEL="WARNING", PYTHONPATH=tree)
env.pop("TOPICS_API_KEYS", None)
proc = subprocess.Popen(
    [sys.executable, "-m", "topics.frontends.server", "--memory", "--port", "0"],
    env=env, stdout=subprocess.PIPE, text=True, cwd=tempfile.gettempdir(),
)
try:
    line = proc.stdout.readline()
    host, port = line.rsplit("//", 1)[1].strip().split(":")
    tick = os.sysconf("SC_CLK_TCK")
    conn = []

    def cpu():
        fields = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    def post(body, target=b"POST /v0/topics/t?return_seqs=false"):
        # A new connection when the server closed the last (keep_alive_max_requests).
        if not conn:
            sock = socket.create_connection((host, int(port)))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(30)
            conn.append(sock)
        sock = conn[0]
        sock.sendall(
            target + b" HTTP/1.1\\r\\nHost: b\\r\\n"
            b"Content-Type: application/json\\r\\nContent-Length: %d\\r\\n\\r\\n%b"
            % (len(body), body)
        )
        buf = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                raise SystemExit("the server closed the connection mid-answer")
            buf += chunk
            head, sep, rest = buf.partition(b"\\r\\n\\r\\n")
            if sep:
                m = re.search(rb"(?i)content-length: (\\d+)", head)
                if m and len(rest) >= int(m.group(1)):
                    assert head.startswith(b"HTTP/1.1 2"), head
                    if re.search(rb"(?i)connection: close", head):
                        conn.pop().close()
                    return

    post(b"{}", b"PUT /v0/topics/t")
    record = b'{"data":{"k":"' + b"x" * 48 + b'"}}'
    out = {}
    for name, n, count in (("http_write_b1", 1, 3000), ("http_write_b100", 100, 600)):
        body = b'{"records":[' + b",".join([record] * n) + b"]}"
        for _ in range(200):
            post(body)  # warm-up
        c0, t0 = cpu(), time.perf_counter()
        for _ in range(count):
            post(body)
        wall, used = time.perf_counter() - t0, cpu() - c0
        out[name] = count / wall
        out[name + "_srv_us"] = used / count * 1e6
    print(json.dumps(out))
finally:
    proc.terminate()
    proc.wait()
"""


def _run(tree: str, only: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": tree}
    out: dict[str, float] = {}
    if "append" in only or "diff" in only:
        res = subprocess.run(
            [sys.executable, "-c", ENGINE_PROBE, tree, only],
            env=env, cwd=tree, check=True, capture_output=True, timeout=900,
        )  # fmt: skip
        out.update(json.loads(res.stdout))
    if "http" in only:
        res = subprocess.run(
            [sys.executable, "-c", HTTP_PROBE, tree],
            env=env, cwd=tree, capture_output=True, timeout=900,
        )  # fmt: skip
        if res.returncode:
            raise SystemExit(f"{tree}: the HTTP probe failed:\n{res.stderr.decode()[-2000:]}")
        out.update(json.loads(res.stdout))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", default="append,diff,http")
    args = ap.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    load = [os.getloadavg()[0]]
    for i in range(args.rounds):
        for side in ("old", "new") if i % 2 == 0 else ("new", "old"):
            runs[side].append(_run(getattr(args, side), args.only))
        load.append(os.getloadavg()[0])
    print(f"{args.rounds} rounds, load {min(load):.1f}-{max(load):.1f}")
    print(f"{'case':22} {'old':>12} {'new':>12} {'new/old':>8}")
    for case in runs["old"][0]:
        old = [r[case] for r in runs["old"]]
        new = [r[case] for r in runs["new"]]
        ratio = statistics.median(b / a for a, b in zip(old, new, strict=True))
        print(
            f"{case:22} {statistics.median(old):>12,.1f} {statistics.median(new):>12,.1f} "
            f"{ratio:>8.3f}"
        )


if __name__ == "__main__":
    main()
