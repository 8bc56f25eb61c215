"""Where an ``AvailableNow`` stream's time goes, beside the same read as a batch.

    .venv/bin/python bench/spark_stream_cost.py [--records 1000000] [--rounds 3]

Reads one topic of ``--records`` order-like records in path mode into the ``noop`` sink,
as a batch and as a ``readStream`` with ``Trigger.AvailableNow`` (one trigger: no read
limit), alternating round by round. For the stream it splits the whole query's time
(``load()`` and ``start()`` to ``awaitTermination()``) with Spark's own progress events:
``start``, from the call to the first trigger's start (Spark starts the Python process
that runs the source's stream reader, which answers the first offset calls), the
trigger (``durationMs``: ``addBatch`` is the read, the rest is Spark's offset and commit
logs and planning), and ``end``, after the trigger.

Then it times what that Python process imports before the stream reader exists, in
fresh processes started the way Spark starts them (``pyspark.zip`` first on the path,
``PYTHONDONTWRITEBYTECODE=1``), beside the same imports from the installed, compiled
pyspark: the part of ``start`` that no data source can avoid.
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import os
import shutil
import statistics
import subprocess
import sys
import time

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

import pyspark
from spark_read import bench_session
from spark_url_pages import build

PARTS = ("addBatch", "walCommit", "commitOffsets", "queryPlanning", "latestOffset", "getBatch")

_IMPORTS = """
import time
t0 = time.perf_counter()
import pyspark.sql.streaming.python_streaming_source_runner
t1 = time.perf_counter()
import topics
t2 = time.perf_counter()
import topics.spark
t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2)
"""


def fresh_imports(spark_path: bool) -> tuple[float, float, float, float]:
    """(process wall, pyspark runner, topics, topics.spark) seconds in a new process."""
    lib = os.path.join(os.path.dirname(pyspark.__file__), "python", "lib")
    path = [os.path.join(lib, "pyspark.zip"), *glob.glob(os.path.join(lib, "py4j-*.zip"))]
    if not spark_path:
        path = []
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join([*path, env.get("PYTHONPATH", "")])
    t = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", _IMPORTS], env=env, capture_output=True, text=True, check=True
    ).stdout
    wall = time.perf_counter() - t
    runner, top, spark = (float(x) for x in out.split())
    return wall, runner, top, spark


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

    def stream(round_no: int) -> dict[str, float]:
        ckpt = f"{args.dir}.stream-ckpt-{round_no}"
        shutil.rmtree(ckpt, ignore_errors=True)
        t, wall = time.perf_counter(), time.time()
        df = spark.readStream.format("topics").option("path", args.dir).option("topic", "orders")
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
        reading = [p for p in query.recentProgress if p["numInputRows"]]
        assert sum(p["numInputRows"] for p in reading) == args.records
        began = dt.datetime.fromisoformat(reading[0]["timestamp"].replace("Z", "+00:00"))
        out = {"whole": whole, "start": began.timestamp() - wall}
        out["trigger"] = sum(p["durationMs"]["triggerExecution"] for p in reading) / 1000
        for part in PARTS:
            out[part] = sum(p["durationMs"].get(part, 0) for p in reading) / 1000
        out["end"] = whole - out["start"] - out["trigger"]
        return out

    try:
        batch()
        stream(0)  # warm-up: the workers and their Readers
        rows = [(batch(), stream(i)) for i in range(1, args.rounds + 1)]
    finally:
        spark.stop()
    for b, s in rows:
        print(
            f"batch {b:.2f} s | stream {s['whole']:.2f} s: start {s['start']:.2f}, trigger "
            f"{s['trigger']:.2f} ({', '.join(f'{k} {s[k]:.2f}' for k in PARTS)}), "
            f"end {s['end']:.2f}"
        )
    med_b = statistics.median(b for b, _ in rows)
    med = {k: statistics.median(s[k] for _, s in rows) for k in rows[0][1]}
    print(
        f"median: batch {med_b:.2f} s, stream {med['whole']:.2f} s ({med_b / med['whole']:.0%} "
        f"of the batch rate): start {med['start']:.2f}, trigger {med['trigger']:.2f} "
        f"(addBatch {med['addBatch']:.2f}), end {med['end']:.2f}"
    )
    for spark_path, label in ((True, "as Spark starts it (pyspark.zip)"), (False, "installed")):
        runs = [fresh_imports(spark_path) for _ in range(args.rounds)]
        wall, runner, top, ours = (statistics.median(col) for col in zip(*runs, strict=True))
        print(
            f"a fresh stream-reader process, {label}: {wall:.2f} s, of which pyspark's runner "
            f"{runner:.2f}, topics {top:.2f}, topics.spark {ours:.2f}"
        )


if __name__ == "__main__":
    main()
