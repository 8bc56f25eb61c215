"""Enrich a Spark DataFrame of (topic, seq) pairs with the records, through a per-executor
``topics.Reader`` (``topics.spark.ReaderHandle``) inside ``mapInArrow``.

    .venv/bin/python examples/spark_lookup.py [--records 200000] [--lookups 100000]

The pattern the design card calls "PySpark UDFs calling the embedded reader": the UDF
ships only a ``ReaderHandle`` (a path); each Python worker opens the data directory once
(read-only, lock-free, safe beside a live writer) and answers every lookup of every task
it runs from memory. Each Arrow batch's seqs are sorted per topic and read with as few
``Reader.diff`` windows as cover them (dense lookups share a window, a lone one reads
one record), each window turned into columns in one call
(``topics.wire.arrow.diff_batch``), so no Python object is built per field. A seq that is
gone (deleted, expired, or not written yet) gives NULLs.

Prints the lookup rate (lookups/s through Spark, ``local[2]``, into the ``noop`` sink);
docs/BENCHMARKS.md records it.
"""

from __future__ import annotations

import argparse
import bisect
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator

import pyarrow as pa
from _spark_local import local_spark
from pyspark.sql import functions as F

import topics
from topics._core.columns import WANT_DATA, WANT_TAG
from topics.spark import ReaderHandle
from topics.wire.arrow import diff_batch

OUT_SCHEMA = "topic string, seq bigint, ts bigint, tag string, data string"


def make_lookup(
    handle: ReaderHandle,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: (topic, seq) batches in, the records out."""

    def lookup(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        reader = handle.get()  # opened once per Python worker, shared by its tasks
        for batch in batches:
            topics_in = batch.column("topic").to_pylist()
            seqs_in = batch.column("seq").to_pylist()
            wanted: dict[str, list[int]] = {}
            for topic, seq in zip(topics_in, seqs_in, strict=True):
                if topic is not None and seq is not None and seq > 0:
                    wanted.setdefault(topic, []).append(seq)
            windows: list[pa.RecordBatch] = []
            where: dict[tuple[str, int], int] = {}  # (topic, seq) -> row of the windows
            base = 0
            for topic, seqs in wanted.items():
                for window in _windows(reader, topic, sorted(set(seqs))):
                    for i, seq in enumerate(window.column("seq").to_pylist()):
                        where[(topic, seq)] = base + i
                    windows.append(window)
                    base += window.num_rows
            found = pa.Table.from_batches(windows, schema=_WINDOW) if windows else None
            take = pa.array(
                [where.get((t, q)) for t, q in zip(topics_in, seqs_in, strict=True)],
                type=pa.int64(),
            )
            yield pa.RecordBatch.from_arrays(
                [
                    batch.column("topic"),
                    batch.column("seq"),
                    *(_take(found, name, take) for name in ("ts", "tag", "data")),
                ],
                names=["topic", "seq", "ts", "tag", "data"],
            )

    return lookup


_WINDOW = pa.schema(
    [("seq", pa.int64()), ("ts", pa.int64()), ("tag", pa.string()), ("data", pa.string())]
)


def _windows(reader: topics.Reader, topic: str, seqs: list[int]) -> Iterator[pa.RecordBatch]:
    """Diff windows covering the wanted ``seqs`` (ascending): each starts at a wanted seq
    and reaches the farthest wanted seq within 1000 of it, so dense lookups share one
    read and a lone lookup reads one record."""
    i = 0
    while i < len(seqs):
        seq = seqs[i]
        j = bisect.bisect_right(seqs, seq + 999) - 1
        try:
            page = reader.diff(topic, from_seq=seq - 1, limit=seqs[j] - seq + 1, include_tags=True)
        except topics.TopicNotFoundError:
            return
        if page.record_count:
            yield diff_batch(page.records_json, WANT_TAG | WANT_DATA)[0]
        i = bisect.bisect_left(seqs, max(page.next_from_seq + 1, seqs[j] + 1))


def _take(found: pa.Table | None, name: str, take: pa.Array) -> pa.Array:
    if found is None:
        return pa.nulls(len(take), _WINDOW.field(name).type)
    return found.column(name).take(take).combine_chunks()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--lookups", type=int, default=100_000)
    args = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="topics-spark-lookup-")
    try:
        with topics.open(data_dir) as db:
            for start in range(0, args.records, 10_000):
                end = min(args.records, start + 10_000)
                db.write(
                    "prices",
                    [
                        {"data": {"sku": i, "price": i % 100 + 0.5}, "tag": f"s{i}"}
                        for i in range(start, end)
                    ],
                )
            db.delete_records("prices", before_seq=11)  # seqs 1..10 are gone: NULLs
        print(f"wrote {args.records} records into {data_dir}")
        with local_spark("topics-spark-lookup") as spark:
            pairs = spark.range(args.lookups, numPartitions=4).select(
                F.lit("prices").alias("topic"),
                ((F.col("id") * 7919) % (args.records + 5) + 1).alias("seq"),  # a few past the head
            )
            enriched = pairs.mapInArrow(make_lookup(ReaderHandle(data_dir)), OUT_SCHEMA)
            enriched.count()  # warm-up: workers start and open the Reader
            t = time.perf_counter()
            rows = enriched.collect()
            seconds = time.perf_counter() - t
            by_seq = {r.seq: r for r in rows}
            assert by_seq[5].data is None  # deleted
            assert by_seq[args.records + 3].data is None  # past the head
            assert by_seq[12].data == '{"sku":11,"price":11.5}'
            assert by_seq[12].tag == "s11"
            print(f"collect(): {len(rows)} enriched rows to the driver in {seconds:.2f} s")
            t = time.perf_counter()
            enriched.write.format("noop").mode("overwrite").save()
            seconds = time.perf_counter() - t
            print(
                f"{args.lookups} lookups in {seconds:.2f} s: {args.lookups / seconds:,.0f} lookups/s"
            )
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
