"""A streaming Spark pipeline over topics: typed read, aggregate, write back, restart.

    .venv/bin/python examples/spark_stream_pipeline.py [--orders 20000] [--keep DIR]

1. start ``topics-server`` on a fresh data directory and write the first half of the
   ``orders`` through it (``topics.Client``);
2. stream ``orders`` with ``data_schema`` (typed columns, no JSON parsing in SQL; a record
   that does not fit lands in ``_corrupt_record``, and one bad order is written on
   purpose to show it), keep running totals per SKU (a stateful aggregation in update
   mode), and write each micro-batch's updated totals back into the ``sku_totals``
   topic as struct ``data`` (encoded to JSON once, in the task) tagged by SKU, from
   ``foreachBatch`` with ``write_id`` = the batch id (so a replayed batch dedupes);
3. run it with ``Trigger.AvailableNow``: it processes what is there and stops;
4. write the second half of the orders, run the same query again from its checkpoint:
   it resumes after the last committed offset (no order read twice, none skipped) with
   its aggregation state, and appends the new totals;
5. check the newest ``sku_totals`` record per SKU against totals computed from every
   order: they must match exactly.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
from typing import Any

from _spark_local import every_record_data, spark_and_server
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from topics.client import Client

SKUS = ["A1", "B7", "C3", "D9"]
ORDER_SCHEMA = "id bigint, sku string, qty int, price decimal(10,2)"


def write_orders(url: str, first: int, n: int, expected: dict[str, int]) -> None:
    rng = random.Random(first)
    with Client(url) as client:
        for start in range(first, first + n, 1000):
            batch = []
            for i in range(start, min(first + n, start + 1000)):
                sku, qty = rng.choice(SKUS), rng.randint(1, 5)
                expected[sku] = expected.get(sku, 0) + qty
                order = {"id": i, "sku": sku, "qty": qty, "price": round(rng.uniform(1, 50), 2)}
                batch.append({"data": order})
            client.write("orders", batch)
        client.write("orders", [{"data": {"id": -1, "sku": "A1", "qty": "three"}}])  # bad
    print(f"   wrote orders {first}..{first + n - 1} and one bad order")


def run_stream(spark: SparkSession, url: str, checkpoint: str) -> None:
    orders = (
        spark.readStream.format("topics")
        .option("url", url)
        .option("topic", "orders")
        .option("data_schema", ORDER_SCHEMA)  # typed columns; mode PERMISSIVE by default
        .option("max_records_per_trigger", "5000")
        .load()
    )
    good = orders.where(F.col("_corrupt_record").isNull())
    totals = good.groupBy("sku").agg(F.sum("qty").alias("qty"), F.count("*").alias("orders"))
    out = totals.select(F.struct("sku", "qty", "orders").alias("data"), F.col("sku").alias("tag"))

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        # A Python sink supports append only; foreachBatch gets each micro-batch's
        # updated totals. write_id = the batch id: a batch replayed after a crash sends
        # the same idempotency keys, and the server drops what it already has.
        (
            batch.write.format("topics")
            .mode("append")
            .option("url", url)
            .option("topic", "sku_totals")
            .option("write_id", f"sku-totals-{batch_id}")
            .save()
        )

    query = (
        out.writeStream.outputMode("update")  # each micro-batch: the totals it changed
        .foreachBatch(write_batch)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    batches = [p["batchId"] for p in query.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    print(f"   stream read {rows} orders in micro-batches {batches}")


def latest_totals(url: str) -> dict[str, Any]:
    """The newest ``sku_totals`` record per SKU (later records supersede earlier ones)."""
    return {data["sku"]: data for data in every_record_data(url, "sku_totals")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--keep", metavar="DIR", help="use (and keep) this directory")
    args = parser.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="topics-spark-stream-")
    if args.keep:
        shutil.rmtree(root, ignore_errors=True)
    data_dir, checkpoint = os.path.join(root, "data"), os.path.join(root, "checkpoint")
    os.makedirs(data_dir)
    expected: dict[str, int] = {}
    half = args.orders // 2
    try:
        with spark_and_server("topics-spark-stream-pipeline", data_dir) as (spark, url):
            print(f"1. topics-server on {url}")
            write_orders(url, 0, half, expected)
            print("2-3. first run (Trigger.AvailableNow)")
            run_stream(spark, url, checkpoint)
            write_orders(url, half, args.orders - half, expected)
            print("4. second run, restarted from the checkpoint")
            run_stream(spark, url, checkpoint)
            latest = latest_totals(url)
        print("5. newest sku_totals record per SKU:")
        for sku in sorted(latest):
            row = latest[sku]
            print(f"   {sku}  qty {row['qty']:7d}  orders {row['orders']:6d}")
        assert {s: r["qty"] for s, r in latest.items()} == expected, (latest, expected)
        assert sum(r["orders"] for r in latest.values()) == args.orders
        print("   totals match every order exactly once")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
