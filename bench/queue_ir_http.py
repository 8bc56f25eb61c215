"""Server instructions (callgrind) of a push drain over HTTP, for an A/B of two trees.
Prints one line; never asserts.

``topics-server --memory`` from TREE runs under ``valgrind --tool=callgrind``; after a
warm-up (one write, claim and ack) the counters are zeroed, N jobs are written in batches
of 100 and drained by 16 ``/work`` push workers that ack each batch, and the counters are
dumped. Background timers (the retention sweep, the WAL tick) run the whole time, and
valgrind makes the run ~50x longer, so totals vary by a few percent from run to run:
alternate the trees and compare means.

    python bench/queue_ir_http.py TREE [N] [OUT]    # e.g. TREE=/tmp/q-base N=1600
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from queues import LeanHttp, WorkStream, _record


def main() -> None:
    tree = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1600
    out = sys.argv[3] if len(sys.argv) > 3 else "/tmp/queue_ir_http.out"
    env = {**os.environ, "TOPICS_LOG_LEVEL": "WARNING", "TOPICS_THROTTLE_LAG_MS": "0"}
    env["PYTHONPATH"] = tree
    env.pop("TOPICS_API_KEYS", None)
    for old in glob.glob(out + "*"):
        os.remove(old)
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable]
    cmd += ["-m", "topics.frontends.server", "--port", "0", "--memory"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=tree
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("topics-server listening on "):
            host, port_text = line.split()[-1].removeprefix("http://").rsplit(":", 1)
            port = int(port_text)
            break
    http = LeanHttp(host, port)
    http.call("PUT", "/v0/topics/jobs", {"type": "queue"})
    http.call("POST", "/v0/topics/jobs", {"records": [_record(0)]})
    job = http.call("POST", "/v0/topics/jobs/claim", {"node": "x", "max": 1})["claimed"][0]
    ack = {"node": "x", "seqs": [job["$seq"]], "lease_ids": [job["lease_id"]]}
    http.call("POST", "/v0/topics/jobs/ack", ack)
    time.sleep(1)
    subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True, capture_output=True)
    for lo in range(0, n, 100):
        records = [_record(i) for i in range(lo, min(n, lo + 100))]
        http.call("POST", "/v0/topics/jobs", {"records": records, "return_seqs": False})
    done = [0]
    lock = threading.Lock()

    def worker(k: int) -> None:
        conn = LeanHttp(host, port)
        stream = WorkStream(host, port, f"/v0/topics/jobs/work?node=w{k}&max=16")
        while done[0] < n:
            jobs = stream.jobs()
            if not jobs:
                continue
            body = {
                "node": f"w{k}",
                "seqs": [j["$seq"] for j in jobs],
                "lease_ids": [j["lease_id"] for j in jobs],
            }
            conn.call("POST", "/v0/topics/jobs/ack", body)
            with lock:
                done[0] += len(jobs)

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True, capture_output=True)
    time.sleep(1)
    proc.terminate()
    proc.wait()
    with open(out + ".1", errors="replace") as f:
        total = next(int(line.split()[1]) for line in f if line.startswith("summary:"))
    print(f"{tree} {n} jobs: {total} Ir, {total / n:,.0f} per job")


if __name__ == "__main__":
    main()
