"""Typed data columns (``data_schema``), bad records both ways, and column pruning."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

import topics
from tests.integration.spark.conftest import Server
from tests.integration.spark.helpers import http_write

pytestmark = pytest.mark.slow

EVERY_TYPE = (
    "b boolean, i8 tinyint, i16 smallint, i32 int, i64 bigint, f float, d double, "
    "dec decimal(10,2), s string, day date, at timestamp, local timestamp_ntz, "
    "arr array<int>, st struct<x: int, y: string>"
)
GOOD = {
    "b": True,
    "i8": -128,
    "i16": 300,
    "i32": 70000,
    "i64": 9007199254740993,
    "f": 1.5,
    "d": 2,
    "dec": "12.34",
    "s": 'é\n"q"',
    "day": "2024-02-29",
    "at": "2024-01-02T03:04:05.250Z",
    "local": "2024-01-02T03:04:05",
    "arr": [1, None, 3],
    "st": {"x": 1, "y": "a"},
    "extra": {"ignored": True},
}
EXPECTED = {
    "b": True,
    "i8": -128,
    "i16": 300,
    "i32": 70000,
    "i64": 9007199254740993,
    "f": 1.5,
    "d": 2.0,
    "dec": Decimal("12.34"),
    "s": 'é\n"q"',
    "day": dt.date(2024, 2, 29),
    "local": dt.datetime(2024, 1, 2, 3, 4, 5),
    "arr": [1, None, 3],
}
# Each of these does not fit EVERY_TYPE: a record for each, beside good ones.
BAD = [
    7,  # not an object
    None,  # JSON null data
    "text",
    {"i8": 128},  # out of tinyint's range
    {"i64": 1.5},  # not an integer
    {"b": "yes"},
    {"d": "2.0"},  # a string where a number is expected
    {"day": "2024-02-30"},
    {"at": "2024-01-02T03:04:05"},  # a timestamp needs a zone offset
    {"arr": {"not": "a list"}},
    {"st": [1]},
    {"dec": 12.345},  # more scale than decimal(10,2)
]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("spark-typed"))
    with topics.open(path) as db:
        db.write(
            "typed", [{"data": GOOD, "tag": "g"}, {"data": {}}, {"data": {"s": 5, "i32": None}}]
        )
        db.write("typed", [{"data": bad, "tag": "bad"} for bad in BAD])
        db.write("typed", [{"data": GOOD, "tag": "g2"}])
    return path


def _typed(spark: SparkSession, where: tuple[str, str], **opts: str) -> DataFrame:
    reader = spark.read.format("topics").option(*where).option("topic", "typed")
    for key, value in {"data_schema": EVERY_TYPE, **opts}.items():
        reader = reader.option(key, value)
    return reader.load()


def _check_good(row: dict[str, Any]) -> None:
    for key, value in EXPECTED.items():
        assert row[key] == value, key
    assert row["at"].replace(tzinfo=None) == dt.datetime(2024, 1, 2, 3, 4, 5, 250000) or row[
        "at"
    ].astimezone(dt.UTC) == dt.datetime(2024, 1, 2, 3, 4, 5, 250000, tzinfo=dt.UTC)
    assert row["st"].asDict() == {"x": 1, "y": "a"}
    assert row["_corrupt_record"] is None


def test_every_type_permissive(spark: SparkSession, data_dir: str) -> None:
    df = _typed(spark, ("path", data_dir))
    fields = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert "data" not in fields
    assert fields["i8"] == "tinyint"
    assert fields["dec"] == "decimal(10,2)"
    assert fields["local"] == "timestamp_ntz"
    assert fields["_corrupt_record"] == "string"
    rows = {r.seq: r.asDict() for r in df.collect()}
    assert len(rows) == 4 + len(BAD)
    _check_good(rows[1])
    _check_good(rows[len(rows)])
    assert all(v is None for k, v in rows[2].items() if k in EXPECTED)  # {}: all missing
    assert rows[3]["s"] == "5"  # a string field takes another value's JSON text
    assert rows[3]["i32"] is None
    for i, bad in enumerate(BAD):
        row = rows[4 + i]
        assert row["_corrupt_record"] == json.dumps(bad, separators=(",", ":")), bad
        assert all(row[k] is None for k in EXPECTED), bad
        assert row["tag"] == "bad"


def test_failfast_names_the_first_bad_record(spark: SparkSession, data_dir: str) -> None:
    df = _typed(spark, ("path", data_dir), mode="FAILFAST")
    assert "_corrupt_record" not in df.columns
    with pytest.raises(Exception, match=r"seq 4: data 7 does not match data_schema"):
        df.collect()
    ok = _typed(spark, ("path", data_dir), mode="failfast", to_seq="3").collect()
    assert [r.seq for r in ok] == [1, 2, 3]


def test_url_mode_gives_the_same_rows(spark: SparkSession, server: Server, data_dir: str) -> None:
    records = [
        r.to_dict()
        for r in topics.Reader(data_dir).diff("typed", limit=1000, include_tags=True).records
    ]
    http_write(server.url, "typed", [{"data": r["data"], "tag": r.get("$tag")} for r in records])
    via_url = sorted(_typed(spark, ("url", server.url)).collect(), key=lambda r: r.seq)
    via_path = sorted(_typed(spark, ("path", data_dir)).collect(), key=lambda r: r.seq)
    strip = ("ts", "ts_ms")
    assert [{k: v for k, v in r.asDict().items() if k not in strip} for r in via_url] == [
        {k: v for k, v in r.asDict().items() if k not in strip} for r in via_path
    ]


def test_unsupported_types_fail_at_planning(spark: SparkSession, data_dir: str) -> None:
    for ddl in ("m map<string, int>", "raw binary"):
        with pytest.raises(Exception, match="cannot parse from JSON"):
            _typed(spark, ("path", data_dir), data_schema=ddl).collect()
    with pytest.raises(Exception, match="mode: expected PERMISSIVE or FAILFAST"):
        _typed(spark, ("path", data_dir), mode="DROPMALFORMED").collect()


def test_a_user_schema_prunes_columns_and_types_data_fields(
    spark: SparkSession, data_dir: str
) -> None:
    df = (
        spark.read.format("topics")
        .schema("seq bigint, tag string, i64 bigint")
        .option("path", data_dir)
        .option("topic", "typed")
        .load()
    )
    rows = sorted(df.collect(), key=lambda r: r.seq)
    assert df.columns == ["seq", "tag", "i64"]
    assert rows[0].asDict() == {"seq": 1, "tag": "g", "i64": 9007199254740993}
    assert spark.read.format("topics").schema("seq bigint").option("path", data_dir).option(
        "topic", "typed"
    ).load().count() == 4 + len(BAD)


def test_typed_stream_restart_is_exactly_once(
    spark: SparkSession, server: Server, tmp_path: Path
) -> None:
    http_write(server.url, "typed-events", [{"data": {"i": i}} for i in range(25)])
    seen: list[tuple[int, int]] = []
    fail = {"batch": 1}

    def sink(df: DataFrame, batch_id: int) -> None:
        if batch_id == fail.get("batch"):
            fail.clear()
            raise RuntimeError("injected failure")
        seen.extend((r.seq, r.i) for r in df.select("seq", "i").collect())

    def run() -> None:
        query = (
            spark.readStream.format("topics")
            .option("url", server.url)
            .option("topic", "typed-events")
            .option("data_schema", "i bigint")
            .option("max_records_per_trigger", "10")
            .load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()

    with pytest.raises(Exception, match="injected failure"):
        run()
    run()
    assert seen == [(s, s - 1) for s in range(1, 26)]  # no duplicate, no gap


def test_a_struct_data_column_is_written_as_json_once(spark: SparkSession, server: Server) -> None:
    from pyspark.sql import functions as F

    df = spark.createDataFrame(
        [
            (1, "a", Decimal("1.50"), dt.date(2024, 1, 2), [1, 2], "t1"),
            (2, None, None, None, [], None),
        ],
        "id bigint, name string, price decimal(10,2), day date, xs array<int>, tag string",
    )
    out = df.select(
        F.struct("id", "name", "price", "day", "xs").alias("data"),
        F.create_map(F.lit("src"), F.lit("test")).alias("meta"),
        "tag",
    )
    out.write.format("topics").mode("append").option("url", server.url).option(
        "topic", "typed-written"
    ).save()
    back = (
        spark.read.format("topics")
        .option("url", server.url)
        .option("topic", "typed-written")
        .load()
        .orderBy("seq")
        .collect()
    )
    back = sorted(back, key=lambda r: r.data)  # two tasks: either may write first
    assert [r.data for r in back] == [
        '{"id":1,"name":"a","price":1.50,"day":"2024-01-02","xs":[1,2]}',
        '{"id":2,"name":null,"price":null,"day":null,"xs":[]}',
    ]
    assert [r.meta for r in back] == ['{"src":"test"}'] * 2
    assert [r.tag for r in back] == ["t1", None]
    typed = (
        spark.read.format("topics")
        .option("url", server.url)
        .option("topic", "typed-written")
        .option("data_schema", "id bigint, price decimal(10,2), day date, xs array<int>")
        .option("mode", "FAILFAST")
        .load()
        .orderBy("id")
        .collect()
    )
    assert (typed[0].price, typed[0].day, typed[0].xs) == (
        Decimal("1.50"),
        dt.date(2024, 1, 2),
        [1, 2],
    )
