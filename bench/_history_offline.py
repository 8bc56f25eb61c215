"""bench/history.py's offline part: the whole directory read without a server, as Spark's
path mode reads it (``topics.Reader`` in each task), and by Spark itself when it is here.

Each is compared with ``--baseline`` (an earlier history.py JSON, e.g. from the commit
before issue 31) when one is given: issue 31 must not make the path mode slower.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import time
from pathlib import Path
from typing import Any

import topics

LIMIT = 1000


def reader_rate(path: str, heads: dict[str, int]) -> dict[str, Any]:
    t0 = time.perf_counter()
    reader = topics.Reader(path)
    opened = time.perf_counter() - t0
    got = 0
    for name in heads:
        start = 0
        while True:
            page = reader.diff(name, from_seq=start, limit=LIMIT)
            got += page.record_count
            start = page.next_from_seq
            if page.caught_up:
                break
    took = time.perf_counter() - t0
    reader.close()
    return {"records": got, "open_s": opened, "seconds": took, "records_s": got / took}


def spark_rate(path: str, heads: dict[str, int]) -> dict[str, Any]:
    missing = [m for m in ("pyspark",) if importlib.util.find_spec(m) is None]
    if missing or shutil.which("java") is None:
        return {"note": "skipped: pyspark or java is not installed"}
    from spark_read import bench_session  # imports pyspark: only when it is there

    spark = bench_session()
    try:

        def count(name: str) -> int:
            # A SIGKILL round may leave a crash tombstone (seqs reserved ahead): counted
            # past, as a gap row, rather than failing the read.
            reader = spark.read.format("topics").option("path", path).option("on_gap", "emit")
            df = reader.option("topic", name).load()
            return int(df.where(df.gap.isNull()).count())

        count(next(iter(heads)))  # warm-up: the JVM's classes, the data source's planning
        t0 = time.perf_counter()
        got = sum(count(name) for name in heads)
        took = time.perf_counter() - t0
    finally:
        spark.stop()
    return {"records": got, "seconds": took, "records_s": got / took, "action": "count()"}


def offline(
    path: str, heads: dict[str, int], *, spark: bool, baseline: str | None
) -> dict[str, Any]:
    out: dict[str, Any] = {"reader": reader_rate(path, heads)}
    out["spark"] = spark_rate(path, heads) if spark else {"note": "skipped (--no-spark)"}
    if baseline:
        old = json.loads(Path(baseline).read_text()).get("offline", {})
        for key, entry in out.items():
            before = old.get(key, {}).get("records_s")
            if before and entry.get("records_s"):
                entry["baseline_records_s"] = before
                entry["over_baseline"] = entry["records_s"] / before
    return out
