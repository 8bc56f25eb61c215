"""Batch reads through the data source, from a data directory and from a server."""

from __future__ import annotations

import httpx
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import topics
from tests.integration.spark.conftest import Server
from tests.integration.spark.helpers import (
    http_records,
    http_write,
    read_seqs,
    reader_records,
    record_key,
    row_key,
)

pytestmark = pytest.mark.slow

# ~1 KiB records: a segment holds about 1 MiB, so 3,000 records make several segments.
PAD = "x" * 1000


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("spark-read"))
    with topics.open(path) as db:
        for start in range(0, 3000, 500):
            db.write(
                "orders",
                [
                    {
                        "data": b'{"i":%d,"price":1.50,"pad":"%s"}' % (i, PAD.encode()),
                        "tag": f"c-{i % 7}",
                        "meta": {"n": i} if i % 2 else None,
                    }
                    for i in range(start, start + 500)
                ],
            )
        db.write("refunds", [{"data": {"r": i}} for i in range(5)])
        db.write("other", [{"data": {"o": 1}}])
    return path


def test_path_read_splits_at_segments_and_equals_a_reader_loop(
    spark: SparkSession, data_dir: str
) -> None:
    segments = topics.Reader(data_dir).segments("orders")
    assert len(segments) >= 3
    df = (
        spark.read.format("topics")
        .option("path", data_dir)
        .option("topic", "orders")
        .option("partition_records", "1")  # cut at every segment end
        .load()
    )
    assert df.rdd.getNumPartitions() == len(segments)
    rows = df.collect()
    assert sorted(row_key(r) for r in rows) == [
        record_key(r) for r in reader_records(data_dir, "orders")
    ]
    assert {r.topic for r in rows} == {"orders"}
    first = min(rows, key=lambda r: r.seq)
    assert first.data.startswith('{"i":0,"price":1.50,')  # verbatim JSON text
    assert first.meta is None
    assert first.node is None
    assert first.tag == "c-0"


def test_path_read_honours_from_seq_to_seq_and_topic_lists(
    spark: SparkSession, data_dir: str
) -> None:
    def read(**options: str) -> list[tuple[str, int]]:
        return read_seqs(spark, ("path", data_dir), **options)

    assert read(topic="orders", from_seq="2990", to_seq="2995") == [
        ("orders", s) for s in range(2991, 2996)
    ]
    both = read(topic="refunds,other")
    assert both == [("other", 1)] + [("refunds", s) for s in range(1, 6)]
    assert read(topic_prefix="re") == [("refunds", s) for s in range(1, 6)]
    assert read(topic="refunds", from_seq='{"refunds": 3}') == [("refunds", 4), ("refunds", 5)]
    assert read(topic="refunds", from_seq="latest") == []


def test_kafka_style_keywords_and_a_per_topic_end(spark: SparkSession, data_dir: str) -> None:
    def read(**options: str) -> list[tuple[str, int]]:
        return read_seqs(spark, ("path", data_dir), **options)

    assert read(topic="refunds", from_seq="earliest", to_seq="latest") == [
        ("refunds", s) for s in range(1, 6)
    ]
    assert read(
        topic="orders,refunds,other",
        from_seq='{"orders": 2997, "refunds": "earliest", "other": "latest"}',
        to_seq='{"orders": 2999, "refunds": 2}',
    ) == [("orders", 2998), ("orders", 2999), ("refunds", 1), ("refunds", 2)]
    assert read(topic="refunds", to_seq='{"refunds": "latest"}', from_seq="3") == [
        ("refunds", 4),
        ("refunds", 5),
    ]


def test_ts_is_a_timestamp_and_ts_ms_the_stored_millis(spark: SparkSession, data_dir: str) -> None:
    df = spark.read.format("topics").option("path", data_dir).option("topic", "refunds").load()
    assert dict(df.dtypes)["ts"] == "timestamp"
    assert dict(df.dtypes)["ts_ms"] == "bigint"
    rows = df.select("seq", "ts_ms", F.unix_millis("ts").alias("from_ts")).collect()
    stored = {r.seq: r.ts for r in reader_records(data_dir, "refunds")}
    assert {r.seq: r.ts_ms for r in rows} == stored
    assert all(r.from_ts == r.ts_ms for r in rows)  # ms exact through the timestamp
    # A schema written for the old layout (ts bigint) still gets the milliseconds.
    old = (
        spark.read.format("topics")
        .schema("seq bigint, ts bigint")
        .option("path", data_dir)
        .option("topic", "refunds")
        .load()
    )
    assert {r.seq: r.ts for r in old.collect()} == stored


def test_url_read_uses_fixed_ranges_and_equals_the_diff_route(
    spark: SparkSession, server: Server
) -> None:
    for start in range(0, 230, 100):
        http_write(
            server.url,
            "url-orders",
            [
                {"data": {"i": i, "p": 1.5}, "tag": f"t{i}"}
                for i in range(start, min(start + 100, 230))
            ],
        )
    raw = b'{"records":[{"data":{"price":2.50,"e":1E3}}]}'  # JSON text the server stores as is
    httpx.post(
        f"{server.url}/v0/topics/url-orders",
        content=raw,
        headers={"Content-Type": "application/json"},
    ).raise_for_status()
    df = (
        spark.read.format("topics")
        .option("url", server.url)
        .option("topic", "url-orders")
        .option("partition_records", "50")
        .load()
    )
    assert df.rdd.getNumPartitions() == 5  # seqs 1..231 in strides of 50
    rows = sorted(df.collect(), key=lambda r: r.seq)
    expected = http_records(server.url, "url-orders")
    assert [(r.seq, r.ts_ms, r.tag) for r in rows] == [
        (e["$seq"], e["$ts"], e.get("$tag")) for e in expected
    ]
    assert rows[0].data == '{"i":0,"p":1.5}'
    assert rows[-1].data == '{"price":2.50,"e":1E3}'  # verbatim, not re-encoded


def test_unknown_option_fails_at_planning(spark: SparkSession, data_dir: str) -> None:
    with pytest.raises(Exception, match="unknown option"):
        spark.read.format("topics").option("path", data_dir).option("topic", "orders").option(
            "on_gaps", "emit"
        ).load().count()
