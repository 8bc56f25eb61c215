"""Structured Streaming reads: exact per-topic seq offsets across restarts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

import topics
from tests.integration.spark.conftest import Server
from tests.integration.spark.helpers import http_records, http_write

pytestmark = pytest.mark.slow


class Collector:
    """A foreachBatch sink that keeps (batch id, seq) and can fail one batch once."""

    def __init__(self) -> None:
        self.seqs: list[int] = []
        self.batches: list[int] = []
        self.fail_batch: int | None = None

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        if batch_id == self.fail_batch:
            self.fail_batch = None
            raise RuntimeError(f"injected failure in batch {batch_id}")
        self.batches.append(batch_id)
        self.seqs += [r.seq for r in df.select("seq").collect()]


def _run(
    spark: SparkSession, location: tuple[str, str], checkpoint: Path, sink: Collector, **opts: str
) -> None:
    reader = spark.readStream.format("topics").option(*location)
    for key, value in {"topic": "events", **opts}.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def _offsets(checkpoint: Path) -> list[dict[str, int]]:
    """The end offsets Spark journaled, one per planned batch."""
    out = []
    for f in sorted(
        (checkpoint / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1
    ):
        if f.name.isdigit():
            out.append(json.loads(f.read_text().splitlines()[-1]))
    return out


def test_restart_from_checkpoint_neither_loses_nor_repeats_url_mode(
    spark: SparkSession, server: Server, tmp_path: Path
) -> None:
    http_write(server.url, "events", [{"data": {"i": i}} for i in range(25)])
    sink = Collector()
    sink.fail_batch = 1  # batch 1 is planned and journaled, then fails before its commit
    with pytest.raises(Exception, match="injected failure"):
        _run(spark, ("url", server.url), tmp_path, sink, max_records_per_trigger="10")
    assert sink.seqs == list(range(1, 11))
    assert _offsets(tmp_path)[-1] == {"events": 20}

    _run(spark, ("url", server.url), tmp_path, sink, max_records_per_trigger="10")
    assert sink.seqs == list(range(1, 26))  # batch 1 replayed with the same range, then 2
    assert sink.batches == [0, 1, 2]

    http_write(server.url, "events", [{"data": {"i": i}} for i in range(25, 40)])
    _run(spark, ("url", server.url), tmp_path, sink)
    assert sink.seqs == list(range(1, 41))
    assert _offsets(tmp_path)[-1] == {"events": 40}


def test_restart_from_checkpoint_path_mode_reads_each_seq_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    data = str(tmp_path / "data")
    with topics.open(data) as db:
        db.write("events", [{"data": {"i": i}} for i in range(12)])
    sink = Collector()
    checkpoint = tmp_path / "checkpoint"
    _run(spark, ("path", data), checkpoint, sink, partition_records="5")
    assert sorted(sink.seqs) == list(range(1, 13))

    with topics.open(data) as db:
        db.write("events", [{"data": {"i": i}} for i in range(12, 20)])
    _run(spark, ("path", data), checkpoint, sink, partition_records="5")
    assert sorted(sink.seqs) == list(range(1, 21))
    assert len(sink.seqs) == 20
    assert _offsets(checkpoint)[-1] == {"events": 20}


def test_stream_writer_appends_each_micro_batch_once(
    spark: SparkSession, server: Server, tmp_path: Path
) -> None:
    data = str(tmp_path / "data")
    with topics.open(data) as db:
        db.write("events", [{"data": {"i": i}, "tag": f"t{i % 2}"} for i in range(30)])

    def run() -> None:
        query = (
            spark.readStream.format("topics")
            .option("path", data)
            .option("topic", "events")
            .option("max_records_per_trigger", "12")
            .load()
            .writeStream.format("topics")
            .option("url", server.url)
            .option("topic", "events-copy")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()

    run()
    with topics.open(data) as db:
        db.write("events", [{"data": {"i": i}} for i in range(30, 35)])
    run()
    copied = http_records(server.url, "events-copy")
    assert sorted(r["data"]["i"] for r in copied) == list(range(35))
    assert [r.get("$tag") for r in copied[:2]] == ["t0", "t1"]


def test_a_stream_ends_at_its_topic_s_to_seq(
    spark: SparkSession, server: Server, tmp_path: Path
) -> None:
    http_write(server.url, "bounded", [{"data": {"i": i}} for i in range(25)])
    sink = Collector()
    ends = {"topic": "bounded", "from_seq": "earliest", "to_seq": '{"bounded": 15}'}
    _run(spark, ("url", server.url), tmp_path, sink, max_records_per_trigger="10", **ends)
    assert sink.seqs == list(range(1, 16))
    http_write(server.url, "bounded", [{"data": {"i": i}} for i in range(25, 30)])
    _run(spark, ("url", server.url), tmp_path, sink, **ends)
    assert sink.seqs == list(range(1, 16))  # nothing past seq 15, however far the head
    assert _offsets(tmp_path)[-1] == {"bounded": 15}
