"""Where an ``AvailableNow`` stream's time goes, beside the same read as a batch.

    .venv/bin/python bench/spark_stream_cost.py [--records 1000000] [--rounds 3]

Reads one topic of ``--records`` order-like records in path mode into the ``noop`` sink,
as a batch and as a ``readStream`` with ``Trigger.AvailableNow`` (one trigger: no read
limit), alternating round by round. For the stream it prints the whole query's time
(``start()`` to ``awaitTermination()``) beside Spark's own ``triggerExecution`` of the
trigger that read the records, so the fixed cost of a streaming query (its start, its
logs, its stop) shows apart from the read.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from spark_read import bench_session
from spark_url_pages import build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default="/tmp/topics-bench-spark-url-pages")
    args = parser.parse_args()
    build(args.dir, args.records)
    spark = bench_session()

    def batch() -> float:
        t = time.perf_counter()
        df = spark.read.format("topics").option("path", args.dir).option("topic", "orders")
        df.load().write.format("noop").mode("overwrite").save()
        return time.perf_counter() - t

    def stream(round_no: int) -> tuple[float, float]:
        ckpt = f"{args.dir}.stream-ckpt-{round_no}"
        shutil.rmtree(ckpt, ignore_errors=True)
        df = spark.readStream.format("topics").option("path", args.dir).option("topic", "orders")
        t = time.perf_counter()
        query = (
            df.load()
            .writeStream.format("noop")
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        whole = time.perf_counter() - t
        shutil.rmtree(ckpt, ignore_errors=True)
        trigger = sum(
            p["durationMs"]["triggerExecution"] for p in query.recentProgress if p["numInputRows"]
        )
        return whole, trigger / 1000

    try:
        batch()
        stream(0)  # warm-up: the workers and their Readers
        rows = [(batch(), *stream(i)) for i in range(1, args.rounds + 1)]
    finally:
        spark.stop()
    for b, whole, trigger in rows:
        print(
            f"batch {b:.2f} s | stream {whole:.2f} s, of which the reading trigger {trigger:.2f} s"
        )
    med = [statistics.median(col) for col in zip(*rows, strict=True)]
    print(
        f"median: batch {med[0]:.2f} s, stream {med[1]:.2f} s ({med[0] / med[1]:.0%} of the "
        f"batch rate), its trigger {med[2]:.2f} s, the rest {med[1] - med[2]:.2f} s"
    )


if __name__ == "__main__":
    main()
