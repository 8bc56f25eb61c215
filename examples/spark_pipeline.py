"""A complete Spark pipeline over topics, in local mode, with one command:

    .venv/bin/python examples/spark_pipeline.py [--orders 20000] [--keep DIR]

1. generate an ``orders`` topic with the embedded engine (``topics.open``);
2. start ``topics-server`` on that data directory (a subprocess on a free loopback port);
3. read ``orders`` with the Spark data source in path mode (``topics.Reader``, lock-free
   beside the live server), parse the JSON ``data`` column and count orders and revenue
   per 10-minute window of the orders' own event time;
4. write one record per window into ``order_stats`` through the server (url mode, with
   idempotency keys, so a retried Spark task cannot duplicate a window);
5. read ``order_stats`` back over SSE (``POST /v0/watch`` through ``topics.Client``), or
   over the diff route when the server has no watch endpoint, and print it.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
from typing import Any

from _spark_local import every_record_data, spark_and_server
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import topics

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: the orders' event time starts here
SKUS = ["A1", "B7", "C3", "D9"]


def generate_orders(data_dir: str, n: int) -> None:
    """Step 1: ``n`` orders over two hours of event time, written in batches of 5,000."""
    rng = random.Random(7)
    with topics.open(data_dir) as db:
        db.put_topic("orders", {"durability": "disk"})
        for start in range(0, n, 5000):
            batch = []
            for i in range(start, min(n, start + 5000)):
                at = START_MS + i * 7_200_000 // n
                order = {"id": i, "at": at, "sku": rng.choice(SKUS), "qty": rng.randint(1, 5)}
                order["price"] = round(rng.uniform(1, 50), 2)
                batch.append({"data": order, "tag": f"customer-{rng.randint(1, 300)}"})
            db.write("orders", batch)
    print(f"1. wrote {n} orders into {data_dir} (embedded engine, now closed)")


def window_stats(spark: SparkSession, data_dir: str) -> Any:
    """Step 3: orders and revenue per 10-minute event-time window, per SKU."""
    orders = (
        spark.read.format("topics")
        .option("path", data_dir)  # read-only Reader: safe while the server writes
        .option("topic", "orders")
        .option("partition_records", "5000")
        .load()
    )
    schema = "id long, at long, sku string, qty int, price double"
    parsed = orders.select(F.from_json("data", schema).alias("o")).select("o.*")
    stats = (
        parsed.withColumn("at", F.timestamp_millis("at"))
        .groupBy(F.window("at", "10 minutes"), "sku")
        .agg(
            F.count("*").alias("orders"),
            F.round(F.sum(F.col("qty") * F.col("price")), 2).alias("revenue"),
        )
        .select(
            F.date_format("window.start", "yyyy-MM-dd'T'HH:mm'Z'").alias("window_start"),
            "sku",
            "orders",
            "revenue",
        )
    )
    print(
        f"3. read {orders.count()} orders with the data source ({orders.rdd.getNumPartitions()} partitions)"
    )
    return stats


def write_stats(stats: Any, url: str) -> None:
    """Step 4: one record per (window, sku), tagged by window, through the server."""
    out = stats.select(
        F.to_json(F.struct("window_start", "sku", "orders", "revenue")).alias("data"),
        F.concat(F.lit("window:"), F.col("window_start")).alias("tag"),
    )
    (
        out.write.format("topics")
        .mode("append")
        .option("url", url)
        .option("topic", "order_stats")
        .option("config", json.dumps({"durability": "fsync"}))  # only if the write creates it
        .save()
    )
    print("4. wrote the window stats into order_stats (url mode, idempotency keys per chunk)")


def read_back(url: str) -> list[dict[str, Any]]:
    """Step 5: SSE when the server has /v0/watch, else the diff route (and say so)."""
    from topics.client import Client
    from topics.watch_types import CaughtUpEvent, TombstoneEvent

    rows: list[dict[str, Any]] = []
    with Client(url) as client:
        try:
            with client.watch({"order_stats": 0}) as events:
                for ev in events:
                    if isinstance(ev, TombstoneEvent):
                        raise SystemExit(f"order_stats lost records: {ev}")
                    if isinstance(ev, CaughtUpEvent):
                        break
                    rows.append(ev.record.data)  # type: ignore[union-attr]
            print(f"5. read {len(rows)} records of order_stats back over SSE (POST /v0/watch)")
            return rows
        except topics.NotFoundError as exc:
            if isinstance(exc, topics.TopicNotFoundError):
                raise
            print("5. this server has no /v0/watch yet: reading order_stats with diff instead")
    return every_record_data(url, "order_stats")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--keep", metavar="DIR", help="use (and keep) this data directory")
    args = parser.parse_args()
    data_dir = args.keep or tempfile.mkdtemp(prefix="topics-spark-")
    if args.keep:
        shutil.rmtree(data_dir, ignore_errors=True)
    generate_orders(data_dir, args.orders)
    try:
        with spark_and_server("topics-spark-pipeline", data_dir) as (spark, url):
            print(f"2. topics-server on {url} over the same data directory")
            write_stats(window_stats(spark, data_dir), url)
            rows = read_back(url)
        rows.sort(key=lambda r: (r["window_start"], r["sku"]))
        total = sum(r["orders"] for r in rows)
        print(f"   {len(rows)} (window, sku) rows covering {total} orders; the first six:")
        for r in rows[:6]:
            print(
                f"   {r['window_start']}  {r['sku']}  {r['orders']:5d} orders  {r['revenue']:10.2f}"
            )
        assert total == args.orders, (total, args.orders)
    finally:
        if not args.keep:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
