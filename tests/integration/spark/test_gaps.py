"""Tombstones through the data source: ``on_gap=fail`` raises, ``on_gap=emit`` adds gap rows."""

from __future__ import annotations

import pytest
from pyspark.sql import DataFrame, SparkSession

import topics
from tests.integration.spark.conftest import Server
from tests.integration.spark.helpers import http_put_topic, http_write

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def capped_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A topic capped at 10 records after 30 writes: seqs 1..20 were lost to the cap."""
    path = str(tmp_path_factory.mktemp("spark-gaps"))
    with topics.open(path) as db:
        db.put_topic("capped", {"cap_records": 10})
        for start in range(0, 30, 10):
            db.write("capped", [{"data": {"i": i}} for i in range(start, start + 10)])
    return path


def _read(spark: SparkSession, location: tuple[str, str], **options: str) -> DataFrame:
    reader = spark.read.format("topics").option(*location).option("topic", "capped")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_gap_fails_the_read_by_default_naming_the_lost_range(
    spark: SparkSession, capped_dir: str
) -> None:
    with pytest.raises(Exception, match=r"seqs 1\.\.20 were lost \(tombstone reason 'cap'\)"):
        _read(spark, ("path", capped_dir)).collect()
    # Starting after the gap is not a loss: nothing to report.
    rows = _read(spark, ("path", capped_dir), from_seq="20").collect()
    assert sorted(r.seq for r in rows) == list(range(21, 31))


def test_gap_row_is_emitted_with_data_null_and_the_gap_struct(
    spark: SparkSession, capped_dir: str
) -> None:
    df = _read(spark, ("path", capped_dir), on_gap="emit")
    assert df.schema["gap"].dataType.simpleString() == (
        "struct<gap_from:bigint,gap_to:bigint,reason:string,missed_estimate:bigint>"
    )
    rows = sorted(df.collect(), key=lambda r: r.seq)
    gap, records = rows[0], rows[1:]
    assert (gap.topic, gap.seq, gap.ts, gap.ts_ms, gap.data, gap.meta) == (
        "capped",
        20,
        None,
        None,
        None,
        None,
    )
    assert gap.gap.asDict() == {"gap_from": 1, "gap_to": 20, "reason": "cap", "missed_estimate": 20}
    assert [r.seq for r in records] == list(range(21, 31))
    assert all(r.gap is None and r.data is not None for r in records)


def test_a_gap_spanning_partitions_is_one_clipped_row_per_partition(
    spark: SparkSession, server: Server
) -> None:
    http_put_topic(server.url, "capped", {"cap_records": 10})
    for start in range(0, 30, 10):
        http_write(server.url, "capped", [{"data": {"i": i}} for i in range(start, start + 10)])
    df = _read(spark, ("url", server.url), on_gap="emit", partition_records="7")
    assert df.rdd.getNumPartitions() == 5
    rows = df.collect()
    gaps = sorted((r.gap.gap_from, r.gap.gap_to) for r in rows if r.gap is not None)
    assert gaps == [(1, 7), (8, 14), (15, 20)]  # together exactly the lost seqs 1..20
    assert sorted(r.seq for r in rows if r.gap is None) == list(range(21, 31))
    with pytest.raises(Exception, match=r"seqs 1\.\.7 were lost|seqs 8\.\.14|seqs 15\.\.20"):
        _read(spark, ("url", server.url), partition_records="7").collect()
