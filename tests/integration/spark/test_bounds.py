"""Time bounds (``starting_ts`` / ``ending_ts``) and ``where`` push-down (issue 18)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import topics
from tests.integration.spark.conftest import Server
from tests.integration.spark.helpers import http_records, http_write, read_seqs
from tests.integration.spark.test_stream import Collector, _run
from topics._clock import ManualClock
from topics.spark import OptionError
from topics.spark._options import parse_read_options

pytestmark = pytest.mark.slow

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
REFUNDS = '["data.kind", "Eq", "refund"]'


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``timed``: seq i committed at T0 + (i - 1) s; ``kinds``: every third a refund."""
    path = str(tmp_path_factory.mktemp("spark-bounds"))
    clock = ManualClock(T0)
    with topics.open(path, clock=clock) as db:
        for i in range(10):
            db.write("timed", [{"data": {"i": i}}])
            db.write("other", [{"data": {"i": i}}])
            clock.advance(1000)
        db.write(
            "kinds",
            [{"data": {"kind": "refund" if i % 3 == 0 else "sale", "n": i}} for i in range(30)],
        )
    return path


def _seqs(spark: SparkSession, where: tuple[str, str], **options: str) -> list[tuple[str, int]]:
    return read_seqs(spark, where, **{"topic": "timed", **options})


def test_time_options_parse_ms_iso_and_maps() -> None:
    base = {"path": "d", "topic": "a,b"}
    opts = parse_read_options({**base, "starting_ts": "2026-01-01T00:00:03Z"})
    assert opts.starting_ts_for("a") == T0 + 3000
    opts = parse_read_options(
        {**base, "starting_ts": '{"a": 5}', "ending_ts": '{"b": "2026-01-01T01:00:00+01:00"}'}
    )
    assert (opts.starting_ts_for("a"), opts.starting_ts_for("b")) == (5, None)
    assert (opts.ending_ts_for("a"), opts.ending_ts_for("b")) == (None, T0)
    assert parse_read_options({**base, "where": REFUNDS}).where == ["data.kind", "Eq", "refund"]
    bad = [
        ({"starting_ts": "yesterday"}, "starting_ts: expected ms since the epoch"),
        ({"ending_ts": "2026-01-01T00:00:00"}, "ending_ts: expected .* with a zone"),
        ({"starting_ts": "5", "from_seq": "3"}, "give from_seq or starting_ts, not both"),
        ({"ending_ts": "5", "to_seq": "3"}, "give to_seq or ending_ts, not both"),
        ({"where": "[data.kind"}, "where: not JSON"),
        ({"where": '["data.kind", "Like", "x"]'}, "where: "),
    ]
    for options, message in bad:
        with pytest.raises(OptionError, match=message):
            parse_read_options({**base, **options})


def test_path_read_between_two_times(spark: SparkSession, data_dir: str) -> None:
    at = ("path", data_dir)
    timed = [("timed", s) for s in range(1, 11)]
    assert _seqs(spark, at, starting_ts=str(T0 + 3000)) == timed[3:]  # $ts >= T0 + 3 s
    assert _seqs(spark, at, starting_ts=str(T0 + 2500)) == timed[3:]
    assert _seqs(spark, at, ending_ts=str(T0 + 6000)) == timed[:7]  # $ts <= T0 + 6 s
    assert (
        _seqs(spark, at, starting_ts="2026-01-01T00:00:03Z", ending_ts="2026-01-01T00:00:06.5Z")
        == timed[3:7]
    )
    assert _seqs(spark, at, starting_ts=str(T0 - 1)) == timed  # before the first: all
    assert _seqs(spark, at, starting_ts=str(T0 + 60_000)) == []
    assert _seqs(spark, at, ending_ts=str(T0 - 1)) == []
    both = _seqs(
        spark,
        at,
        topic="timed,other",
        starting_ts=json.dumps({"timed": T0 + 8000}),
        ending_ts=json.dumps({"other": T0 + 1000}),
    )
    assert both == [("other", 1), ("other", 2), ("timed", 9), ("timed", 10)]


def test_url_read_between_two_times_matches_the_records_ts(
    spark: SparkSession, server: Server
) -> None:
    for i in range(12):
        http_write(server.url, "url-timed", [{"data": {"i": i}}])
    stored = http_records(server.url, "url-timed")
    start, end = stored[3]["$ts"], stored[8]["$ts"]
    expected = [("url-timed", r["$seq"]) for r in stored if start <= r["$ts"] <= end]
    iso = dt.datetime.fromtimestamp(start / 1000, dt.UTC).isoformat(timespec="milliseconds")
    got = _seqs(spark, ("url", server.url), topic="url-timed", starting_ts=iso, ending_ts=str(end))
    assert got == expected
    assert got[0][1] <= 4
    assert got[-1][1] >= 9


@pytest.mark.parametrize("mode", ["path", "url"])
def test_where_is_pushed_down(
    spark: SparkSession, server: Server, data_dir: str, mode: str
) -> None:
    if mode == "url":
        records = [{"data": r.data} for r in topics.Reader(data_dir).diff("kinds").records]
        http_write(server.url, "url-kinds", records)
        location, topic = ("url", server.url), "url-kinds"
    else:
        location, topic = ("path", data_dir), "kinds"
    df = (
        spark.read.format("topics")
        .option(*location)
        .option("topic", topic)
        .option("where", REFUNDS)
        .option("data_schema", "kind string, n int")
        .option("partition_records", "7")
        .load()
    )
    rows = sorted(df.collect(), key=lambda r: r.seq)
    assert [(r.seq, r.kind, r.n) for r in rows] == [(n + 1, "refund", n) for n in range(0, 30, 3)]


def test_stream_from_a_time_with_a_filter(
    spark: SparkSession, server: Server, tmp_path: Path
) -> None:
    for i in range(6):
        http_write(server.url, "url-stream-kinds", [{"data": {"kind": "refund", "n": i}}])
        http_write(server.url, "url-stream-kinds", [{"data": {"kind": "sale", "n": i}}])
    stored = http_records(server.url, "url-stream-kinds")
    start = stored[4]["$ts"]
    expected = [r["$seq"] for r in stored if r["$ts"] >= start and r["data"]["kind"] == "refund"]
    sink = Collector()
    options = {"topic": "url-stream-kinds", "starting_ts": str(start), "where": REFUNDS}
    _run(spark, ("url", server.url), tmp_path, sink, max_records_per_trigger="3", **options)
    assert sink.seqs == expected
    http_write(server.url, "url-stream-kinds", [{"data": {"kind": "refund", "n": 99}}])
    http_write(server.url, "url-stream-kinds", [{"data": {"kind": "sale", "n": 99}}])
    _run(spark, ("url", server.url), tmp_path, sink, **options)
    assert sink.seqs == [*expected, len(stored) + 1]
