"""Options, partition planning and the range reader, without a SparkSession."""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa
import pytest

import topics
from topics.spark import GapError, OptionError, ReaderHandle
from topics.spark._options import parse_read_options, parse_write_options
from topics.spark._plan import MIN_AUTO_PARTITION_RECORDS, TopicRange, partition_target, plan_ranges
from topics.spark._rows import RangeReader
from topics.spark._sources import Page, fixed_cuts, segment_cuts
from topics.types import Tombstone
from topics.wire.arrow import diff_batch

SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("seq", pa.int64()),
        ("data", pa.string()),
        (
            "gap",
            pa.struct(
                [
                    ("gap_from", pa.int64()),
                    ("gap_to", pa.int64()),
                    ("reason", pa.string()),
                    ("missed_estimate", pa.int64()),
                ]
            ),
        ),
    ]
)


class FakeSource:
    """Records at the given seqs; seqs below ``floor`` were lost to the cap."""

    def __init__(self, seqs: list[int], floor: int = 1, head: int | None = None) -> None:
        self.seqs = seqs
        self.floor = floor
        self.head = head if head is not None else (seqs[-1] if seqs else 0)
        self.refreshes = 0

    def topic_names(self, prefix: str) -> list[str]:
        return ["t"]

    def head_seq(self, topic: str) -> int:
        return self.head

    def refresh(self) -> None:
        self.refreshes += 1

    def split_points(self, topic: str, lo: int, hi: int, target: int) -> list[int]:
        return fixed_cuts(lo, hi, target)

    def close(self) -> None:
        pass

    def page(self, topic: str, from_seq: int, hi: int, want: int, where: object = None) -> Page:
        earliest = next((s for s in self.seqs if s >= self.floor), self.head + 1)
        tomb = None
        if from_seq > self.head:
            tomb = Tombstone(1, earliest - 1, "recreated", earliest - 1, earliest, self.head)
            from_seq = earliest - 1
        elif from_seq + 1 < self.floor:
            tomb = Tombstone(from_seq + 1, earliest - 1, "cap", 0, earliest, self.head)
            from_seq = earliest - 1
        window = [s for s in self.seqs if s > from_seq][:3]
        nxt = window[-1] if len(window) == 3 else self.head
        rendered = b",".join(
            b'{"$seq":%d,"$ts":%d,"data":{"s":%d}}' % (s, 10 * s, s) for s in window
        )
        batch, _, lines = diff_batch(b"[" + rendered + b"]", want, hi=hi)
        return Page(
            batch if window else None, lines, tomb, nxt, self.head, earliest, nxt == self.head
        )


def _rows(source: FakeSource, lo: int, hi: int, on_gap: Any = "emit") -> list[dict[str, Any]]:
    reader = RangeReader(source, SCHEMA, on_gap)
    return [row for batch in reader.read("t", lo, hi) for row in batch.to_pylist()]


def test_range_reader_cuts_at_hi_and_keeps_data_text() -> None:
    rows = _rows(FakeSource(list(range(1, 11))), 2, 7)
    assert [r["seq"] for r in rows] == [3, 4, 5, 6, 7]
    assert rows[0] == {"topic": "t", "seq": 3, "data": '{"s":3}', "gap": None}


def test_range_reader_clips_a_gap_to_its_range() -> None:
    source = FakeSource(list(range(1, 21)), floor=11)
    rows = _rows(source, 3, 6)
    assert rows == [
        {
            "topic": "t",
            "seq": 6,
            "data": None,
            "gap": {"gap_from": 4, "gap_to": 6, "reason": "cap", "missed_estimate": 3},
        }
    ]
    with pytest.raises(GapError, match=r"seqs 4\.\.6 were lost"):
        _rows(source, 3, 6, on_gap="fail")


def test_range_reader_reports_recreation_when_the_head_fell_below_the_cursor() -> None:
    source = FakeSource([1, 2, 3])
    rows = _rows(source, 10, 3)  # streaming: offset 10, head now 3
    assert rows[0]["gap"]["reason"] == "recreated"
    assert [r["seq"] for r in rows[1:]] == [1, 2, 3]


def test_range_reader_refreshes_once_then_reports_a_short_head() -> None:
    source = FakeSource([1, 2, 3])
    rows = _rows(source, 0, 5)  # planned up to 5, but the head is 3
    assert source.refreshes == 1
    assert [r["seq"] for r in rows[:3]] == [1, 2, 3]
    assert rows[3]["gap"] == {
        "gap_from": 4,
        "gap_to": 5,
        "reason": "recreated",
        "missed_estimate": 2,
    }


def test_plans_cover_the_range_exactly_once() -> None:
    source = FakeSource(list(range(1, 101)))
    plan = plan_ranges(source, "t", 5, 100, 30)
    assert plan == [
        TopicRange("t", 5, 35),
        TopicRange("t", 35, 65),
        TopicRange("t", 65, 95),
        TopicRange("t", 95, 100),
    ]
    assert plan_ranges(source, "t", 7, 7, 30) == []
    assert pickle.loads(pickle.dumps(plan[0])) == plan[0]


def test_the_default_split_gives_every_core_a_task_and_an_explicit_one_wins() -> None:
    auto = parse_read_options({"path": ".", "topic": "t"})
    assert auto.partition_records is None
    assert partition_target(auto, 1_000_000, 2) == 500_000  # two cores, two tasks
    assert partition_target(auto, 1_000_001, 2) == 500_001  # (never a third, tiny task)
    assert partition_target(auto, 1_000_000, 8) == 125_000
    assert partition_target(auto, 50_000_000, 2) == 1_000_000  # no task over a million
    assert partition_target(auto, 150_000, 8) == MIN_AUTO_PARTITION_RECORDS  # nor tiny
    assert partition_target(auto, 1_000_000, 0) == 1_000_000  # parallelism unknown
    given = parse_read_options({"path": ".", "topic": "t", "partition_records": "7"})
    assert partition_target(given, 1_000_000, 2) == 7


def test_segment_cuts_fall_on_segment_ends() -> None:
    segments = [(1, 10), (11, 20), (21, 30), (31, 40)]
    assert segment_cuts(segments, 0, 40, 1) == [10, 20, 30]
    assert segment_cuts(segments, 0, 40, 15) == [20]
    assert segment_cuts(segments, 12, 35, 5) == [20, 30]


def test_options_are_checked_with_messages_naming_the_option() -> None:
    opts = parse_read_options({"path": "d", "topic": "a, b,a", "from_seq": '{"a": 5}'})
    assert opts.topics == ("a", "b")
    assert opts.from_seq_for("a") == 5
    assert opts.from_seq_for("b") == 0
    assert parse_read_options({"url": "http://h:1", "topic_prefix": "x"}).topic_prefix == "x"
    bad = [
        ({"topic": "a"}, "exactly one of option 'path'"),
        ({"path": "d", "url": "http://h:1", "topic": "a"}, "exactly one of option 'path'"),
        ({"path": "d"}, "exactly one of option 'topic'"),
        ({"path": "d", "topic": "a", "on_gap": "skip"}, "on_gap"),
        ({"path": "d", "topic": "a", "from_seq": "-1"}, "from_seq"),
        ({"path": "d", "topic": "../etc"}, "not a valid topic name"),
        ({"path": "d", "topic": "a", "parition_records": "5"}, "unknown option"),
    ]
    for options, message in bad:
        with pytest.raises(OptionError, match=message):
            parse_read_options(options)
    with pytest.raises(OptionError, match="exactly one topic"):
        parse_write_options({"url": "http://h:1", "topic": "a,b"})
    w = parse_write_options({"url": "http://h:1", "topic": "a"})
    assert w.ledger_topic == topics.spark.LEDGER_TOPIC
    assert (
        parse_write_options({"url": "http://h:1", "topic": "a", "ledger_topic": ""}).ledger_topic
        == ""
    )
    with pytest.raises(OptionError, match="not a valid topic name"):
        parse_write_options({"url": "http://h:1", "topic": "a", "ledger_topic": "a b"})
    assert (
        parse_write_options(
            {"url": "http://h:1", "topic": "a", "batch_records": "99999"}
        ).batch_records
        == 10_000
    )


def test_seq_options_take_kafka_keywords_and_per_topic_maps() -> None:
    base = {"path": "d", "topic": "a,b"}
    opts = parse_read_options({**base, "from_seq": "earliest", "to_seq": "latest"})
    assert (opts.from_seq_for("a"), opts.to_seq_for("a")) == (0, None)
    assert opts.end_for("a", 40) == 40
    opts = parse_read_options(
        {
            **base,
            "from_seq": '{"a": "latest", "b": "earliest"}',
            "to_seq": '{"a": 7, "b": "latest"}',
        }
    )
    assert (opts.from_seq_for("a"), opts.from_seq_for("b"), opts.from_seq_for("c")) == (None, 0, 0)
    assert (opts.end_for("a", 40), opts.end_for("a", 5), opts.end_for("b", 40)) == (7, 5, 40)
    assert opts.end_for("c", 40) == 40  # not in the map: the head
    assert parse_read_options({**base, "to_seq": "12"}).end_for("z", 40) == 12
    assert parse_read_options({**base, "from_seq": "LATEST"}).from_seq_for("a") is None
    bad = [
        ({"to_seq": "earliest"}, r"to_seq: expected a seq >= 0 or 'latest', got 'earliest'"),
        ({"to_seq": '{"a": -1}'}, r"to_seq\['a'\]"),
        ({"to_seq": "{"}, "to_seq: not a JSON object"),
        ({"from_seq": "first"}, "from_seq: expected a seq >= 0 or 'earliest' or 'latest'"),
        ({"from_seq": '{"a": true}'}, r"from_seq\['a'\]"),
        ({"to_seq": '{"../x": 1}'}, "not a valid topic name"),
    ]
    for options, message in bad:
        with pytest.raises(OptionError, match=message):
            parse_read_options({**base, **options})


def test_reader_handle_pickles_its_path_and_shares_one_reader(tmp_path: Any) -> None:
    with topics.open(str(tmp_path)) as db:
        db.write("t", [{"data": 1}])
    handle = ReaderHandle(str(tmp_path))
    clone = pickle.loads(pickle.dumps(handle))
    assert clone == handle
    assert clone.get() is handle.get()
    assert handle.get().head_seq("t") == 1
    with topics.open(str(tmp_path)) as db:
        db.write("t", [{"data": 2}])
    assert handle.get().head_seq("t") == 1  # a snapshot until refreshed
    assert handle.fresh().head_seq("t") == 2
    handle.close()


class WantSource(FakeSource):
    """Records which columns each page was asked for."""

    def __init__(self) -> None:
        super().__init__([1, 2, 3])
        self.wants: list[int] = []

    def page(self, topic: str, from_seq: int, hi: int, want: int, where: object = None) -> Page:
        self.wants.append(want)
        return super().page(topic, from_seq, hi, want)


def test_a_pruned_schema_never_asks_for_data() -> None:
    from topics._core.columns import WANT_DATA, WANT_TAG

    source = WantSource()
    schema = pa.schema([("seq", pa.int64()), ("tag", pa.string())])
    rows = [r for b in RangeReader(source, schema, "fail").read("t", 0, 3) for r in b.to_pylist()]
    assert [r["seq"] for r in rows] == [1, 2, 3]
    assert set(source.wants) == {WANT_TAG}
    typed = pa.schema([("seq", pa.int64()), ("s", pa.int64())])
    rows = [r for b in RangeReader(source, typed, "fail").read("t", 0, 3) for r in b.to_pylist()]
    assert rows[0] == {"seq": 1, "s": 1}
    assert source.wants[-1] & WANT_DATA


def test_reader_handle_refreshes_only_when_the_directory_changed(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path)
    with topics.open(path) as db:
        db.write("t", [{"data": 1}])
    handle = ReaderHandle(path)
    assert handle.get().head_seq("t") == 1
    calls: list[int] = []
    real = topics.Reader.refresh
    monkeypatch.setattr(topics.Reader, "refresh", lambda self: calls.append(1) or real(self))
    handle.fresh()
    assert calls == []  # nothing changed: no recovery
    with topics.open(path) as db:
        db.write("t", [{"data": 2}])
    assert handle.fresh().head_seq("t") == 2
    assert calls == [1]
    handle.close()


def test_an_available_now_stream_from_latest_starts_at_the_heads_it_capped(tmp_path: Any) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from topics.spark._read import TopicsStreamReader

    path = str(tmp_path)
    with topics.open(path) as db:
        db.write("t", [{"data": i} for i in range(5)])
    schema = StructType([StructField("topic", StringType()), StructField("seq", LongType())])
    opts = parse_read_options({"path": path, "topic": "t", "from_seq": "latest"})
    reader = TopicsStreamReader(opts, schema)
    reader.prepareForTriggerAvailableNow()  # the query's snapshot: head 5
    with topics.open(path) as db:  # records arrive while the query starts
        db.write("t", [{"data": i} for i in range(3)])
    start = reader.initialOffset()
    assert start == {"t": 5} == reader.initialOffset()  # Spark asks twice
    end = reader.latestOffset(start, ReadAllAvailable())
    # A start above the capped head would read as a recreated topic (a gap row).
    assert end == {"t": 5}
    assert reader.partitions(start, end) == []
    reader.stop()

    later = TopicsStreamReader(parse_read_options({"path": path, "topic": "t"}), schema)
    assert later.latestOffset({"t": 5}, ReadAllAvailable()) == {"t": 8}
    with topics.open(path) as db:  # a change after the reader's last look is seen
        db.write("t", [{"data": 9}])
    assert later.latestOffset({"t": 8}, ReadAllAvailable()) == {"t": 9}
    later.stop()


def test_an_available_now_stream_reads_no_heads_once_at_its_snapshot(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    from pyspark.sql.types import LongType, StructField, StructType

    import topics.spark._sources as sources
    from topics.spark._read import TopicsStreamReader

    path = str(tmp_path)
    with topics.open(path) as db:
        db.write("t", [{"data": i} for i in range(5)])
    schema = StructType([StructField("seq", LongType())])
    reader = TopicsStreamReader(parse_read_options({"path": path, "topic": "t"}), schema)
    reader.prepareForTriggerAvailableNow()
    end = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert end == {"t": 5}
    scans: list[str] = []
    real = sources.directory_state
    monkeypatch.setattr(sources, "directory_state", lambda p: scans.append(p) or real(p))
    with topics.open(path) as db:
        db.write("t", [{"data": 9}])
    assert reader.latestOffset(end, ReadAllAvailable()) == end  # the query is done
    assert scans == []
    reader.stop()


def test_planning_uses_a_current_view_without_refreshing_an_older_reader(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess
    import sys

    from topics._core.columns import WANT_DATA
    from topics.spark._sources import PathSource

    path = str(tmp_path)
    with topics.open(path) as db:
        db.write("t", [{"data": 1}])
    source = PathSource(path)
    assert source.page("t", 0, 1, WANT_DATA).count == 1  # this process's Reader is open
    with topics.open(path) as db:
        db.write("t", [{"data": 2}])
    plan = "from topics.spark._sources import PathSource as P; import sys; P(sys.argv[1]).head_seq('t')"
    subprocess.run([sys.executable, "-c", plan, path], check=True)  # another planner's view
    calls: list[int] = []
    real = topics.Reader.refresh
    monkeypatch.setattr(topics.Reader, "refresh", lambda self: calls.append(1) or real(self))
    source.refresh()
    assert source.head_seq("t") == 2
    assert calls == []  # planned from the view file: no recovery
    assert source.page("t", 1, 2, WANT_DATA).count == 1  # a read refreshes the Reader first
    assert calls == [1]
