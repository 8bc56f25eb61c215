"""Spark reads of a topic through the ``topics`` data source, beside Spark's own readers of
the same records exported to JSON lines and to Parquet (issue 17's table).

    .venv/bin/python bench/spark_read.py [--records 1000000] [--dir DIR] [--repeat 3]
        [--master local[2]] [--only path,url,stream,json,parquet,getjson] [--json out.json]

Builds (or reuses) a data directory with one topic of ``--records`` order-like records
(~45-byte JSON data: ``{"sku":"A12","qty":3,"price":12.5,"c":"c-123"}``), exports it
once with the data source itself to JSON lines and to Parquet (columns seq, ts in ms,
sku, qty, price, c: what a user who exports topics to files gets), starts
``topics-server`` on the directory (its default settings), and prints records/s (best and
median of ``--repeat`` rounds after a warm-up) for the cases below. The readers of one
action alternate round by round, and each row has the median over rounds of its rate
relative to the group's first row (``round_ratio``): ratios between rows share a load.

- ``count()``;
- ``agg (json)``: group by sku, sum qty, from the data text (``get_json_object``; only
  with ``getjson`` in ``--only``);
- ``agg (typed)``: the same over typed columns (``data_schema`` for topics; the files'
  own columns for JSON lines with a schema and Parquet);
- ``stream``: ``readStream`` with ``Trigger.AvailableNow`` over the whole backlog into the
  ``noop`` sink, url mode and path mode, alternating round by round with its batch
  counterpart (``noop sink``: the same read written to the ``noop`` sink), so the ratio
  of the two compares runs under the same load.

Planning is inside every number (path mode: the driver re-reads the data directory).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import topics
import topics.spark
from topics.spark._options import DEFAULT_PARTITION_RECORDS

TOPIC = "orders"
DATA_SCHEMA = "sku string, qty bigint, price double, c string"
FILE_SCHEMA = "seq bigint, ts bigint, " + DATA_SCHEMA


def bench_session(master: str = "local[2]") -> SparkSession:
    """The benches' SparkSession: no UI, two shuffle partitions, ``topics`` registered."""
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
    return spark


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
                        "data": b'{"sku":"A%02d","qty":%d,"price":%d.5,"c":"c-%03d"}'
                        % (i % 97, i % 7, i % 13, i % 1000)
                    }
                    for i in range(start, min(n, start + 10_000))
                ],
            )
    print(f"wrote {n} records into {path} in {time.perf_counter() - t0:.1f} s")


def export(spark: SparkSession, path: str, n: int) -> tuple[str, str]:
    """JSON lines and Parquet copies of the topic, written once by the data source."""
    out = {"json": path + ".jsonl", "parquet": path + ".parquet"}
    marker = path + ".exported"
    if os.path.exists(marker):
        with open(marker) as f:
            if f.read() == str(n):
                return out["json"], out["parquet"]
    df = (
        spark.read.format("topics")
        .option("path", path)
        .option("topic", TOPIC)
        .option("data_schema", DATA_SCHEMA)
        .option("mode", "FAILFAST")
        .load()
        .select("seq", F.col("ts_ms").alias("ts"), "sku", "qty", "price", "c")
    )
    t0 = time.perf_counter()
    df.write.mode("overwrite").json(out["json"])
    df.write.mode("overwrite").parquet(out["parquet"])
    with open(marker, "w") as f:
        f.write(str(n))
    print(f"exported to JSON lines and Parquet in {time.perf_counter() - t0:.1f} s")
    return out["json"], out["parquet"]


def start_server(path: str) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "topics.frontends.server", "--port", "0", "--data-dir", path]
    # The server's own settings (TOPICS_MAX_LIMIT 1000): url mode's Arrow answers join
    # windows, so nothing needs raising.
    env = dict(os.environ, TOPICS_LOG_LEVEL="WARNING")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("topics-server listening on "):
            return proc, line.split()[-1]
    raise SystemExit("topics-server did not start")


def noop(df: DataFrame) -> None:
    """Every row through Spark into the ``noop`` sink: what a stream into it does."""
    df.write.format("noop").mode("overwrite").save()


def agg_json(df: DataFrame) -> int:
    sku = F.get_json_object("data", "$.sku")
    qty = F.get_json_object("data", "$.qty").cast("bigint")
    return len(df.groupBy(sku.alias("sku")).agg(F.sum(qty)).collect())


def agg_typed(df: DataFrame) -> int:
    return len(df.groupBy("sku").agg(F.sum("qty")).collect())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--dir", default="/tmp/topics-bench-spark17")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--only", default="path,url,stream,json,parquet,getjson")
    parser.add_argument(
        "--partition-records", type=int, default=0, help="0: the data source's default"
    )
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    n, only = args.records, set(args.only.split(","))
    parts = str(args.partition_records or DEFAULT_PARTITION_RECORDS)
    build(args.dir, n)
    spark = bench_session(args.master)
    jsonl, parquet = export(spark, args.dir, n)
    server, url = start_server(args.dir)
    rows: list[dict[str, Any]] = []

    def record(source: str, action: str, times: list[float], ratio: float | None = None) -> None:
        seconds, median = min(times), statistics.median(times)
        rows.append(
            {
                "source": source,
                "action": action,
                "seconds": seconds,
                "records_s": n / seconds,
                "median_s": median,
                "median_records_s": n / median,
                "times": times,
                # the median over rounds of (this case's rate / the group's first case's)
                "round_ratio": ratio,
            }
        )
        print(
            f"{source:24s} {action:14s} {n / seconds:>12,.0f} records/s best "
            f"({seconds:.2f} s), {n / median:>12,.0f} median",
            flush=True,
        )

    def paired(*cases: tuple[str, str, Callable[[], Any]]) -> None:
        """Run the cases in turn, ``--repeat`` rounds after a warm-up, so every case of a
        round shares its load; each row gets its round-by-round ratio to the first case."""
        if not cases:
            return
        for _, _, fn in cases:
            fn()
        times: list[list[float]] = [[] for _ in cases]
        for _ in range(args.repeat):
            for i, (_, _, fn) in enumerate(cases):
                t = time.perf_counter()
                fn()
                times[i].append(time.perf_counter() - t)
        for (source, action, _), ts in zip(cases, times, strict=True):
            ratio = statistics.median(t0 / t for t0, t in zip(times[0], ts, strict=True))
            record(source, action, ts, ratio)
            print(f"{'':24s} {'':14s} {ratio:.2f}x {cases[0][0]} {cases[0][1]} (median by round)")

    def topics_df(mode: str, where: str, typed: bool) -> DataFrame:
        r = spark.read.format("topics").option(mode, where).option("topic", TOPIC)
        r = r.option("partition_records", parts)
        return (r.option("data_schema", DATA_SCHEMA) if typed else r).load()

    def stream(mode: str, where: str) -> Callable[[], None]:
        def go() -> None:
            ckpt = f"{args.dir}.ckpt-{mode}"
            shutil.rmtree(ckpt, ignore_errors=True)
            df = (
                spark.readStream.format("topics")
                .option(mode, where)
                .option("topic", TOPIC)
                .option("partition_records", parts)
                .load()
            )
            q = (
                df.writeStream.format("noop")
                .option("checkpointLocation", ckpt)
                .trigger(availableNow=True)
                .start()
            )
            q.awaitTermination()
            done = sum(p["numInputRows"] for p in q.recentProgress)
            assert done == n, done

        return go

    try:
        counts: list[tuple[str, str, Callable[[], Any]]] = []
        typed: list[tuple[str, str, Callable[[], Any]]] = []
        getjson: list[tuple[str, str, Callable[[], Any]]] = []
        for mode, where in (("path", args.dir), ("url", url)):
            if mode not in only:
                continue
            plain, schema = topics_df(mode, where, False), topics_df(mode, where, True)
            counts.append((f"topics {mode}", "count()", plain.count))
            typed.append((f"topics {mode} data_schema", "agg (typed)", partial(agg_typed, schema)))
            getjson.append((f"topics {mode}", "agg (json)", partial(agg_json, plain)))
        if "json" in only:
            files = spark.read.schema(FILE_SCHEMA).json(jsonl)
            counts.append(("JSON lines (schema)", "count()", files.count))
            typed.append(("JSON lines (schema)", "agg (typed)", partial(agg_typed, files)))
        if "parquet" in only:
            pq = spark.read.parquet(parquet)
            counts.append(("Parquet", "count()", pq.count))
            typed.append(("Parquet", "agg (typed)", partial(agg_typed, pq)))
        # Every reader of one action alternates round by round: their ratios share a load.
        paired(*counts)
        paired(*typed)
        if "getjson" in only:
            paired(*getjson)
        if "stream" in only:  # batch and stream alternate, so both see the same load
            for mode, where in (("path", args.dir), ("url", url)):
                plain = topics_df(mode, where, False)
                paired(
                    (f"topics {mode}", "noop sink", partial(noop, plain)),
                    (f"topics {mode} stream", "AvailableNow", stream(mode, where)),
                )
    finally:
        spark.stop()
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"records": n, "master": args.master, "repeat": args.repeat, "rows": rows},
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()
