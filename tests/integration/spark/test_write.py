"""Writes through the data source: rows appended, retried tasks not duplicated."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import topics
from tests.integration.spark.conftest import Server, start_server, stop_server
from tests.integration.spark.helpers import http_records, http_write, reader_records
from topics.spark._options import parse_write_options
from topics.spark._write import _HttpAppender, producer_id

pytestmark = pytest.mark.slow

ROWS = 600  # two partitions of 300; the first attempt of partition 0 fails at row 250


def _flaky_rows(spark: SparkSession, marker: Path, head_url: str | None) -> DataFrame:
    """Rows whose UDF raises once (the first time it meets i == 250), leaving a marker
    that records how many records the topic held at that moment."""

    def flaky(i: int) -> str:
        if i == 250 and not os.path.exists(marker):
            held = -1
            if head_url is not None:
                held = httpx.get(head_url, timeout=10).json()["head_seq"]
            marker.write_text(str(held))
            raise RuntimeError("injected task failure")
        return json.dumps({"i": i, "price": 1.5})

    udf = F.udf(lambda i: flaky(i), "string")  # a lambda: no type hints to infer from
    ids = spark.range(0, ROWS, numPartitions=2)
    return ids.select(
        udf("id").alias("data"),
        F.concat(F.lit("t-"), (F.col("id") % 3).cast("string")).alias("tag"),
        F.lit("spark-test").alias("node"),
    )


@pytest.fixture
def small_arrow_batches(spark: SparkSession) -> object:
    """Feed the writer in small Arrow batches, so a failing task has written some chunks."""
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "20")
    yield None
    spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def test_url_writer_retried_task_does_not_duplicate(
    spark: SparkSession, server: Server, tmp_path: Path, small_arrow_batches: object
) -> None:
    marker = tmp_path / "failed-once"
    http = httpx.put(f"{server.url}/v0/topics/retried", json={}, timeout=10)
    http.raise_for_status()
    df = _flaky_rows(spark, marker, f"{server.url}/v0/topics/retried?touch=false")
    (
        df.write.format("topics")
        .mode("append")
        .option("url", server.url)
        .option("topic", "retried")
        .option("batch_records", "20")
        .save()
    )
    assert marker.exists(), "the injected failure did not happen"
    records = http_records(server.url, "retried")
    ids = sorted(r["data"]["i"] for r in records)
    assert ids == list(range(ROWS))  # every row once: the retry's repeated chunks deduped
    assert {r["$tag"] for r in records} == {"t-0", "t-1", "t-2"}
    assert {r["$node"] for r in records} == {"spark-test"}
    print("records written before the injected failure:", marker.read_text())


def test_path_writer_retried_task_does_not_duplicate(
    spark: SparkSession, tmp_path: Path, small_arrow_batches: object
) -> None:
    data = str(tmp_path / "data")
    with topics.open(data) as db:
        db.put_topic("retried", {})
    marker = tmp_path / "failed-once"
    (
        _flaky_rows(spark, marker, None)
        .write.format("topics")
        .mode("append")
        .option("path", data)
        .option("topic", "retried")
        .option("batch_records", "20")
        .save()
    )
    assert marker.exists(), "the injected failure did not happen"
    records = reader_records(data, "retried")
    assert sorted(r.data["i"] for r in records) == list(range(ROWS))
    ledger = reader_records(data, topics.spark.LEDGER_TOPIC)
    assert len(ledger) == ROWS // 20  # one entry per chunk, none twice


def test_round_trip_copies_a_topic_verbatim_and_rejects_unknown_columns(
    spark: SparkSession, server: Server, tmp_path: Path
) -> None:
    data = str(tmp_path / "data")
    with topics.open(data) as db:
        db.write(
            "src", [{"data": b'{"p":1.50}', "tag": "a", "meta": {"m": 1}}, {"data": b"[1, 2]"}]
        )
    src = spark.read.format("topics").option("path", data).option("topic", "src").load()
    src.write.format("topics").mode("append").option("url", server.url).option(
        "topic", "copy"
    ).save()
    copied = http_records(server.url, "copy")
    assert [(r["data"], r.get("$tag"), r.get("meta")) for r in copied] == [
        ({"p": 1.5}, "a", {"m": 1}),
        ([1, 2], None, None),
    ]
    raw = httpx.post(f"{server.url}/v0/topics/copy/diff", json={"limit": 1}, timeout=10).content
    assert b'"data":{"p":1.50}' in raw  # stored as the JSON text the source read

    with pytest.raises(Exception, match="cannot be written to a topic"):
        src.withColumn("extra", F.lit(1)).write.format("topics").mode("append").option(
            "url", server.url
        ).option("topic", "copy").save()
    with pytest.raises(Exception, match="append-only"):
        src.write.format("topics").mode("overwrite").option("url", server.url).option(
            "topic", "copy"
        ).save()


def _rows(spark: SparkSession) -> DataFrame:
    ids = spark.range(0, ROWS, numPartitions=2)
    return ids.select(
        F.to_json(F.struct(F.col("id").alias("i"))).alias("data"),
        F.concat(F.lit("t-"), F.col("id").cast("string")).alias("tag"),
    )


def test_url_writer_rerun_after_a_server_restart_skips_what_the_ledger_lists(
    spark: SparkSession, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    running = start_server(data_dir)

    def write(url: str, topic: str, **extra: str) -> None:
        writer = _rows(spark).write.format("topics").mode("append").option("url", url)
        writer = writer.option("topic", topic).option("batch_records", "100")
        for key, value in {"write_id": "nightly-7", **extra}.items():
            writer = writer.option(key, value)
        writer.save()

    try:
        write(running.url, "kept")
        write(running.url, "forgot", ledger_topic="")
        stop_server(running)  # the server forgets its idempotency keys (SEMANTICS 19)
        running = start_server(data_dir)
        write(running.url, "kept")  # the same job again: every chunk is in the ledger
        write(running.url, "forgot", ledger_topic="")
        kept = http_records(running.url, "kept")
        assert sorted(r["data"]["i"] for r in kept) == list(range(ROWS))
        forgot = http_records(running.url, "forgot")
        assert len(forgot) == 2 * ROWS  # without a ledger the re-run appends again
        ledger = http_records(running.url, topics.spark.LEDGER_TOPIC)
        assert sorted(r["$tag"] for r in ledger) == sorted(
            f"spark:nightly-7:{p}:{c}" for p in range(2) for c in range(3)
        )
        assert {r["data"]["topic"] for r in ledger} == {"kept"}
    finally:
        stop_server(running)


def test_url_chunk_in_doubt_after_a_restart_is_found_not_resent(tmp_path: Path) -> None:
    """The answer to a write is lost with the connection and the server restarts (its
    keys forgotten): the appender finds the chunk by content and does not send it again;
    a chunk that never arrived is sent again."""
    data_dir = tmp_path / "data"
    running = start_server(data_dir)
    port = int(running.url.rsplit(":", 1)[1])
    opts = parse_write_options({"url": running.url, "topic": "doubt"})
    appender = _HttpAppender(opts)
    real_write = appender.client.write
    arrived = True

    def lost_answer(topic: str, body: bytes, retry_lost: bool = True) -> dict[str, Any]:
        nonlocal running
        appender.client.write = real_write  # type: ignore[method-assign]  # once
        if arrived:
            real_write(topic, body, retry_lost)
        stop_server(running)
        running = start_server(data_dir, port)
        raise ConnectionError("injected: the answer was lost")

    def chunk(start: int) -> list[dict[str, Any]]:
        return [
            {"data": b'{"i":%d, "p":1.50}' % i, "tag": f"t{i}", "meta": b'{"m":1}'}
            for i in range(start, start + 5)
        ]

    try:
        appender.append("spark:j:0:0", chunk(0))
        http_write(running.url, "doubt", [{"data": {"other": 1}}])  # another writer
        appender.client.write = lost_answer  # type: ignore[method-assign]
        appender.append("spark:j:0:1", chunk(5))  # arrived, answer lost, found
        arrived = False
        appender.client.write = lost_answer  # type: ignore[method-assign]
        appender.append("spark:j:0:2", chunk(10))  # never arrived: sent again
        appender.close()
        records = http_records(running.url, "doubt")
        assert [r["data"].get("i") for r in records] == [*range(5), None, *range(5, 15)]
        ledger = http_records(running.url, topics.spark.LEDGER_TOPIC)
        spans = {r["$tag"]: (r["data"]["first_seq"], r["data"]["last_seq"]) for r in ledger}
        assert spans == {"spark:j:0:0": (1, 5), "spark:j:0:1": (7, 11), "spark:j:0:2": (12, 16)}
    finally:
        stop_server(running)


def _chunk(start: int) -> list[dict[str, Any]]:
    return [{"data": b'{"i":%d}' % i, "tag": f"t{i}"} for i in range(start, start + 5)]


def test_a_chunk_the_ledger_missed_is_its_producer_s_last_batch_after_a_restart(
    tmp_path: Path,
) -> None:
    """A task appends a chunk and dies before the ledger hears of it; the server restarts
    (its idempotency keys gone); the retry skips what the ledger lists and sends the rest:
    the missed chunk is answered as its producer's last batch, durably. Without a
    producer id the same retry appends it again."""
    data_dir = tmp_path / "data"
    running = start_server(data_dir)
    try:
        for topic, producer in (("with-producer", producer_id(3)), ("without", None)):
            opts = parse_write_options({"url": running.url, "topic": topic})
            task = _HttpAppender(opts, producer)
            task.append("spark:j:3:0", _chunk(0))
            task.opts = dataclasses.replace(opts, ledger_topic="")  # dies before the ledger
            task.append("spark:j:3:1", _chunk(5))
            task.close()
        stop_server(running)
        running = start_server(data_dir)
        for topic, producer in (("with-producer", producer_id(3)), ("without", None)):
            opts = parse_write_options({"url": running.url, "topic": topic})
            retry = _HttpAppender(opts, producer)
            assert retry.done_keys("spark:j:3:") == {"spark:j:3:0"}
            retry.append("spark:j:3:1", _chunk(5))
            retry.close()
        kept = [r["data"]["i"] for r in http_records(running.url, "with-producer")]
        assert kept == list(range(10))
        again = [r["data"]["i"] for r in http_records(running.url, "without")]
        assert again == [*range(10), *range(5, 10)]
    finally:
        stop_server(running)
