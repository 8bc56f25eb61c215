"""What a user of the data source sees without tuning it: a read split over the session's
cores, and an error that reads as the data source's own message (_plan rule 5, _errors)."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

import topics

pytestmark = pytest.mark.slow

RECORDS = 250_000  # over twice MIN_AUTO_PARTITION_RECORDS: a task for each of the 2 cores


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("spark-splits"))
    with topics.open(path) as db:
        for start in range(0, RECORDS, 10_000):
            db.write("big", [{"data": {"i": i}} for i in range(start, start + 10_000)])
        db.put_topic("capped", {"cap_records": 5})
        db.write("capped", [{"data": i} for i in range(20)])
    return path


def _read(spark: SparkSession, data_dir: str, topic: str, **options: str):  # type: ignore[no-untyped-def]
    reader = spark.read.format("topics").option("path", data_dir).option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_a_read_without_partition_records_runs_a_task_per_core(
    spark: SparkSession, data_dir: str
) -> None:
    assert spark.sparkContext.defaultParallelism == 2  # conftest: local[2,2]
    df = _read(spark, data_dir, "big")
    assert df.rdd.getNumPartitions() == 2
    assert df.count() == RECORDS
    explicit = _read(spark, data_dir, "big", partition_records="1000000")
    assert explicit.rdd.getNumPartitions() == 1  # an explicit partition_records wins


def _first_lines(exc: BaseException) -> str:
    return "\n".join(str(exc).splitlines()[:2])


def test_a_bad_option_reads_as_the_data_sources_message(spark: SparkSession, data_dir: str) -> None:
    with pytest.raises(Exception) as caught:
        _read(spark, data_dir, "big", on_gap="bogus").count()
    said = str(caught.value)
    assert "Traceback" not in said, said
    assert "topics.spark.OptionError: on_gap: expected 'fail' or 'emit', got 'bogus'" in (
        _first_lines(caught.value)
    ), said


def test_a_task_error_reads_as_the_data_sources_message(spark: SparkSession, data_dir: str) -> None:
    with pytest.raises(Exception) as caught:
        _read(spark, data_dir, "capped").collect()
    said = str(caught.value)
    assert "Traceback" not in said, said
    assert "topics.spark.GapError: topic 'capped': seqs 1..15 were lost" in (
        _first_lines(caught.value)
    ), said
