"""Spark read throughput of the ``topics`` data source against a plain Reader loop.

    .venv/bin/python bench/spark_read.py [--records 1000000] [--dir DIR] [--repeat 2]
        [--quick] [--json out.json]

Builds (or reuses) a data directory with one topic of ``--records`` order-like records
(~75-byte JSON payload and a tag), starts ``topics-server`` on it, and prints records/s for:

- the plain single-process ``topics.Reader`` loop: raw pages (``records_json`` only),
  decoded ``Record`` objects (``page.records``), and pages split into row columns the way
  the data source does (``topics._core.scan``), which is the per-record work of a task;
- ``df.count()``, ``df.select("seq").collect()`` and ``df.select("data").toArrow()``
  through the data source in path mode (``topics.Reader`` on each executor) and url mode
  (``POST /v0/topics/:t/diff``), each with ``local[1]`` and ``local[2]``.

Each Spark number is the best of ``--repeat`` runs after one warm-up query (Python
worker start-up, the executors' first Reader open), and includes planning (the driver
re-reads the data directory, or asks the server for the head).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from pyspark.sql import SparkSession

import topics
import topics.spark
from topics._core.scan import split_write_body

TOPIC = "orders"


def build(path: str, n: int) -> None:
    try:
        if topics.Reader(path).head_seq(TOPIC) == n:
            print(f"reusing {path} ({n} records)")
            return
    except (FileNotFoundError, topics.TopicNotFoundError):
        pass
    shutil.rmtree(path, ignore_errors=True)
    t0 = time.perf_counter()
    with topics.open(path) as db:
        db.put_topic(TOPIC, {"durability": "disk"})
        for start in range(0, n, 10_000):
            db.write(
                TOPIC,
                [
                    {
                        "data": b'{"id":%d,"sku":"A%d","qty":%d,"price":%d.50,"customer":"c-%d"}'
                        % (i, i % 97, i % 7, i % 13, i % 1000),
                        "tag": f"c-{i % 1000}",
                    }
                    for i in range(start, min(n, start + 10_000))
                ],
            )
    print(f"wrote {n} records into {path} in {time.perf_counter() - t0:.1f} s")


def reader_loops(path: str, n: int) -> dict[str, float]:
    t0 = time.perf_counter()
    reader = topics.Reader(path)
    open_s = time.perf_counter() - t0
    print(f"topics.Reader open (recovery of the directory): {open_s:.2f} s")

    def loop(work: Callable[[topics.DiffResult], int]) -> float:
        t = time.perf_counter()
        cursor = total = 0
        while True:
            page = reader.diff(TOPIC, from_seq=cursor, limit=1000, include_tags=True)
            total += work(page)
            cursor = page.next_from_seq
            if page.caught_up:
                break
        assert total == n, total
        return n / (time.perf_counter() - t)

    def split(page: topics.DiffResult) -> int:
        records, _ = split_write_body(b'{"records":' + page.records_json + b"}")
        return len(records or [])

    out = {
        "open_s": open_s,
        "raw_pages_records_s": loop(lambda p: p.record_count),
        "split_columns_records_s": loop(split),
        "decoded_records_s": loop(lambda p: len(p.records)),
    }
    print(f"Reader loop, raw pages:           {out['raw_pages_records_s']:>12,.0f} records/s")
    print(f"Reader loop, split into columns:  {out['split_columns_records_s']:>12,.0f} records/s")
    print(f"Reader loop, decoded Records:     {out['decoded_records_s']:>12,.0f} records/s")
    return out


def start_server(path: str) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "topics.frontends.server", "--port", "0", "--data-dir", path]
    env = dict(os.environ, TOPICS_LOG_LEVEL="WARNING")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("topics-server listening on "):
            return proc, line.split()[-1]
    raise SystemExit("topics-server did not start")


def spark_runs(master: str, locations: dict[str, str], n: int, repeat: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    spark = (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    topics.spark.register(spark)
    try:
        for mode, where in locations.items():
            df = (
                spark.read.format("topics")
                .option(mode, where)
                .option("topic", TOPIC)
                .option("partition_records", str(max(1, n // 8)))
                .load()
            )
            df.count()  # warm-up
            actions: dict[str, Callable[[], int]] = {
                "count()": df.count,
                'select("seq").collect()': lambda df=df: len(df.select("seq").collect()),
                'select("data").toArrow()': lambda df=df: df.select("data").toArrow().num_rows,
            }
            for name, action in actions.items():
                best = float("inf")
                for _ in range(repeat):
                    t = time.perf_counter()
                    assert action() == n
                    best = min(best, time.perf_counter() - t)
                parts = df.rdd.getNumPartitions()
                rows.append(
                    {
                        "master": master,
                        "mode": mode,
                        "action": name,
                        "records_s": n / best,
                        "seconds": best,
                        "partitions": parts,
                    }
                )
                print(
                    f"{master:9s} {mode:4s} {name:26s} {n / best:>12,.0f} records/s "
                    f"({best:.2f} s, {parts} partitions)"
                )
    finally:
        spark.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--dir", default="/tmp/topics-bench-spark")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--quick", action="store_true", help="100k records, 1 repeat, local[1] only"
    )
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    masters = ["local[1]", "local[2]"]
    if args.quick:
        args.records, args.repeat, masters = 100_000, 1, ["local[1]"]
        if args.dir == parser.get_default("dir"):
            args.dir += "-quick"  # keep the full run's 1M-record directory reusable
    build(args.dir, args.records)
    results: dict[str, Any] = {
        "records": args.records,
        "reader": reader_loops(args.dir, args.records),
    }
    server, url = start_server(args.dir)
    try:
        results["spark"] = [
            row
            for master in masters
            for row in spark_runs(master, {"path": args.dir, "url": url}, args.records, args.repeat)
        ]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
