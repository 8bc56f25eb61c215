"""Url-mode page rates: one Spark task's read loop (``HttpSource.page``) against a server,
by the records asked per answer and the server's ``TOPICS_MAX_LIMIT``.

    .venv/bin/python bench/spark_url_pages.py [--records 1000000] [--rounds 5]

Two servers run on one data directory's copy at once (``TOPICS_MAX_LIMIT`` 1000, the
default, and 8000); the cases alternate round by round, so each round's load is shared,
and the report gives each case's median records/s and its ratio to the median of the
8000/8000 case (what url mode needed before the Arrow answer joined windows).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

import topics
import topics.spark._sources as sources
from topics._core.columns import WANT_ALL
from topics.spark._sources import HttpSource

DATA = b'{"sku":"A%02d","qty":%d,"price":%d.5,"c":"c-%03d"}'


def build(path: str, n: int) -> None:
    try:
        if topics.Reader(path).head_seq("orders") == n:
            return
    except (FileNotFoundError, topics.TopicNotFoundError):
        pass
    shutil.rmtree(path, ignore_errors=True)
    with topics.open(path) as db:
        db.put_topic("orders", {"durability": "disk"})
        for s in range(0, n, 10_000):
            rows = range(s, min(n, s + 10_000))
            db.write("orders", [{"data": DATA % (i % 97, i % 7, i % 13, i % 1000)} for i in rows])


def serve(path: str, max_limit: int) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ, TOPICS_LOG_LEVEL="ERROR", TOPICS_MAX_LIMIT=str(max_limit))
    cmd = [sys.executable, "-m", "topics.frontends.server", "--port", "0", "--data-dir", path]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("topics-server listening on "):
            return proc, line.split()[-1]
    raise SystemExit("topics-server did not start")


def read_all(url: str, ask: int, n: int) -> float:
    sources.URL_PAGE_RECORDS = ask
    src = HttpSource(url)
    t = time.perf_counter()
    cursor = 0
    while cursor < n:
        cursor = src.page("orders", cursor, n, WANT_ALL).next_from_seq
    src.close()
    return n / (time.perf_counter() - t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default="/tmp/topics-bench-spark-url-pages")
    args = parser.parse_args()
    build(args.dir, args.records)
    shutil.copytree(args.dir, args.dir + ".b", dirs_exist_ok=True)  # one writer lock each
    servers = {1000: serve(args.dir, 1000), 8000: serve(args.dir + ".b", 8000)}
    cases = [(1000, 1000), (1000, 8000), (1000, 16_000), (8000, 8000), (8000, 16_000)]
    rates: dict[tuple[int, int], list[float]] = {c: [] for c in cases}
    try:
        for limit, ask in cases:  # warm-up
            read_all(servers[limit][1], ask, args.records)
        for _ in range(args.rounds):
            for limit, ask in cases:
                rates[(limit, ask)].append(read_all(servers[limit][1], ask, args.records))
    finally:
        for proc, _ in servers.values():
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    base = statistics.median(rates[(8000, 8000)])
    print("| TOPICS_MAX_LIMIT | records asked | median records/s | vs 8000/8000 |")
    print("| --- | --- | --- | --- |")
    for limit, ask in cases:
        med = statistics.median(rates[(limit, ask)])
        print(f"| {limit} | {ask} | {med:,.0f} | {med / base:.2f}x |")


if __name__ == "__main__":
    main()
