"""Issue 18 on the engine: from_ts/to_ts/to_seq, where predicates, CloudEvents
(docs/SEMANTICS.md rules 29-32)."""

from __future__ import annotations

from typing import Any

import pytest
import ujson

from topics._clock import ManualClock
from topics.engine import Engine
from topics.errors import InvalidRequestError

from ._support import START_MS


async def write_at(engine: Engine, clock: ManualClock, ms: int, *datas: Any, **kw: Any) -> None:
    """Write one record per data at ``START_MS + ms`` (``$ts`` then equals that)."""
    clock.set(START_MS + ms)
    await engine.write("t", [{"data": d, **kw} for d in datas])


async def three_times(engine: Engine, clock: ManualClock) -> None:
    await write_at(engine, clock, 0, 1, 2)  # seqs 1, 2 at +0
    await write_at(engine, clock, 100, 3)  # seq 3 at +100
    await write_at(engine, clock, 200, 4, 5)  # seqs 4, 5 at +200


def seqs(res: Any) -> list[int]:
    return [r.seq for r in res.records]


# -- from_ts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offset", "from_seq", "expected"),
    [
        (-5, 0, [1, 2, 3, 4, 5]),  # before everything: from the start
        (0, 0, [1, 2, 3, 4, 5]),  # exactly the first ts: from the start
        (1, 2, [3, 4, 5]),
        (100, 2, [3, 4, 5]),  # >= : the record stamped exactly then is included
        (150, 3, [4, 5]),
        (200, 3, [4, 5]),
        (201, 5, []),  # after everything: at the head, caught up
    ],
)
async def test_from_ts_starts_at_the_first_record_at_or_after_it(
    engine: Engine, clock: ManualClock, offset: int, from_seq: int, expected: list[int]
) -> None:
    await three_times(engine, clock)
    res = await engine.diff("t", from_ts=START_MS + offset)
    assert res.from_seq == from_seq
    assert seqs(res) == expected
    assert res.caught_up
    assert res.next_from_seq == 5
    assert res.end_reached is None


async def test_from_ts_is_binary_searched_across_segments(
    engine: Engine, clock: ManualClock
) -> None:
    big = "x" * 600_000  # two per ~1 MiB segment
    for i in range(6):
        await write_at(engine, clock, i * 10, big)
    log = engine._registry.get("t")
    assert log is not None
    assert len(log.segments) >= 3
    for i in range(6):
        res = await engine.diff("t", from_ts=START_MS + i * 10, include_data=False)
        assert res.from_seq == i
        assert seqs(res) == list(range(i + 1, 7))


async def test_from_ts_older_than_retained_behaves_like_from_seq_zero(
    engine: Engine, clock: ManualClock
) -> None:
    await engine.put_topic("t", {"cap_records": 2})
    await three_times(engine, clock)  # seqs 1-3 evicted, 4 and 5 kept
    old = await engine.diff("t", from_seq=0)
    for offset in (-10, 0, 150, 200):
        res = await engine.diff("t", from_ts=START_MS + offset)
        assert res.from_seq == 0
        assert res.tombstone == old.tombstone
        assert res.tombstone is not None
        assert seqs(res) == seqs(old) == [4, 5]
    # A from_ts after the oldest live record is exact: no tombstone.
    res = await engine.diff("t", from_ts=START_MS + 201)
    assert res.from_seq == 5
    assert res.tombstone is None


async def test_from_ts_skips_deleted_records_silently(engine: Engine, clock: ManualClock) -> None:
    await three_times(engine, clock)
    await engine.delete_records("t", before_seq=4)
    res = await engine.diff("t", from_ts=START_MS + 50)
    assert seqs(res) == [4, 5]
    assert res.tombstone is None


async def test_from_ts_and_from_seq_together_are_refused(
    engine: Engine, clock: ManualClock
) -> None:
    await three_times(engine, clock)
    with pytest.raises(InvalidRequestError, match="from_ts"):
        await engine.diff("t", from_seq=1, from_ts=START_MS)
    with pytest.raises(InvalidRequestError, match="from_ts"):
        await engine.diff("t", from_ts=-1)


async def test_from_ts_long_poll_waits_from_the_resolved_seq(
    engine: Engine, clock: ManualClock
) -> None:
    import trio

    await three_times(engine, clock)
    async with trio.open_nursery() as n:
        got: list[Any] = []

        async def read() -> None:
            got.append(await engine.diff("t", from_ts=START_MS + 10_000, wait_ms=5000))

        n.start_soon(read)
        await trio.testing.wait_all_tasks_blocked()
        await write_at(engine, clock, 20_000, 6)
    assert got[0].from_seq == 5
    assert seqs(got[0]) == [6]


# -- to_seq / to_ts -------------------------------------------------------------------


async def test_to_seq_ends_the_read_inclusively(engine: Engine, clock: ManualClock) -> None:
    await three_times(engine, clock)
    res = await engine.diff("t", to_seq=3, limit=2)
    assert seqs(res) == [1, 2]
    assert not res.caught_up
    assert res.end_reached is False
    assert res.lag == 1
    assert res.head_seq == 5
    res = await engine.diff("t", from_seq=res.next_from_seq, to_seq=3)
    assert seqs(res) == [3]
    assert res.caught_up
    assert res.end_reached is True
    assert res.next_from_seq == 3
    assert res.lag == 0
    res = await engine.diff("t", from_seq=3, to_seq=3)
    assert seqs(res) == []
    assert res.end_reached
    assert res.next_from_seq == 3


async def test_to_seq_above_the_head_is_not_reached_yet(engine: Engine, clock: ManualClock) -> None:
    await three_times(engine, clock)
    res = await engine.diff("t", to_seq=9)
    assert seqs(res) == [1, 2, 3, 4, 5]
    assert res.caught_up
    assert res.end_reached is False


async def test_to_ts_ends_at_the_last_record_at_or_before_it(
    engine: Engine, clock: ManualClock
) -> None:
    await three_times(engine, clock)
    res = await engine.diff("t", to_ts=START_MS + 150)
    assert seqs(res) == [1, 2, 3]
    assert res.end_reached
    assert res.caught_up
    res = await engine.diff("t", from_ts=START_MS + 100, to_ts=START_MS + 100)
    assert res.from_seq == 2
    assert seqs(res) == [3]
    assert res.end_reached


async def test_to_ts_in_the_future_is_not_reached_until_the_clock_passes_it(
    engine: Engine, clock: ManualClock
) -> None:
    await three_times(engine, clock)
    res = await engine.diff("t", to_ts=START_MS + 500)
    assert seqs(res) == [1, 2, 3, 4, 5]
    assert res.end_reached is False
    clock.set(START_MS + 501)  # any later write is stamped after to_ts
    res = await engine.diff("t", to_ts=START_MS + 500)
    assert res.end_reached is True
    assert res.next_from_seq == 5


async def test_a_read_at_its_end_does_not_long_poll(engine: Engine, clock: ManualClock) -> None:
    await three_times(engine, clock)
    res = await engine.diff("t", from_seq=3, to_seq=3, wait_ms=30_000)  # returns at once
    assert res.end_reached


# -- where ----------------------------------------------------------------------------


async def filtered(engine: Engine, where: object, **kw: Any) -> list[int]:
    res = await engine.diff("t", where=where, **kw)
    return seqs(res)


async def test_where_filters_like_a_node_filter(engine: Engine, clock: ManualClock) -> None:
    await engine.write(
        "t",
        [
            {"data": {"kind": "refund", "amount": 5}, "tag": "a:1", "meta": {"src": "web"}},
            {"data": {"kind": "sale", "amount": 50}, "tag": "b:1"},
            {"data": {"kind": "refund", "amount": 500}, "meta": {"src": "pos"}},
            {"data": [1, 2]},
            {"data": {"kind": "re\\u0066und"}},  # an escaped spelling of "refund"? no: literal
            {"data": b'{"kind":"re\\u0066und","amount":1.5}'},  # escaped: it IS "refund"
        ],
    )
    assert await filtered(engine, ["data.kind", "Eq", "refund"]) == [1, 3, 6]
    assert await filtered(engine, ["data.kind", "Ne", "refund"]) == [2, 4, 5]
    assert await filtered(engine, ["data.amount", "Gt", 5]) == [2, 3]
    assert await filtered(engine, ["data.amount", "Le", 5]) == [1, 6]
    assert await filtered(engine, ["data.amount", "In", [5, 500]]) == [1, 3]
    assert await filtered(engine, ["meta.src", "Exists"]) == [1, 3]
    assert await filtered(engine, ["meta.src", "Exists", False]) == [2, 4, 5, 6]
    assert await filtered(engine, ["tag", "Glob", "a:*"]) == [1]
    assert await filtered(engine, "b:1") == [2]
    assert await filtered(
        engine, ["and", [["data.kind", "Eq", "refund"], ["not", ["meta.src", "Eq", "web"]]]]
    ) == [3, 6]
    assert await filtered(engine, ["or", [["tag", "Eq", "b:1"], ["data.amount", "Ge", 500]]]) == [
        2,
        3,
    ]
    res = await engine.diff("t", where=["data.kind", "Eq", "refund"], limit=4)
    # Refused records are examined: the cursor moves past them exactly.
    assert seqs(res) == [1, 3]
    assert res.next_from_seq == 4
    assert res.records_scanned == 4
    assert not res.caught_up


async def test_where_equality_is_json_equality(engine: Engine) -> None:
    await engine.write("t", [{"data": {"v": True}}, {"data": {"v": 1}}, {"data": {"v": 1.0}}])
    assert await filtered(engine, ["data.v", "Eq", True]) == [1]
    assert await filtered(engine, ["data.v", "Eq", 1]) == [2, 3]
    assert await filtered(engine, ["data.v", "Gt", 0]) == [2, 3]  # a boolean is not a number


async def test_where_caught_up_is_exact_when_the_tail_is_filtered(engine: Engine) -> None:
    await engine.write("t", [{"data": {"k": 1}}, {"data": {"k": 2}}, {"data": {"k": 2}}])
    res = await engine.diff("t", where=["data.k", "Eq", 1])
    assert seqs(res) == [1]
    assert res.caught_up
    assert res.next_from_seq == 3


async def test_where_keeps_tombstones(engine: Engine) -> None:
    await engine.put_topic("t", {"cap_records": 1})
    await engine.write("t", [{"data": {"k": 1}}, {"data": {"k": 2}}])
    res = await engine.diff("t", where=["data.k", "Eq", 99])
    assert res.tombstone is not None
    assert res.tombstone.gap_to == 1
    assert seqs(res) == []


@pytest.mark.parametrize(
    ("where", "problem"),
    [
        (["data.k", "Like", "x"], "unknown operator"),
        (["data", "Eq", 1], "the field must be"),
        (["data.k", "Gt", "x"], "takes a number"),
        (["tag", "Gt", 1], "compares numbers"),
        (["data.k", "In", []], "In takes a list"),
        (["data.k", "Glob", "a*b*"], "trailing"),
        (["and", []], "non-empty list"),
        (["not", ["tag", "Eq", "a"], 3], "exactly one"),
        (["data.k", "Eq", {"a": 1}], "string, number, boolean or null"),
        (["data.k", "Exists", 1], "true or false"),
        (["data.k", "Eq"], "takes a value"),
        (7, "must be a tag string"),
    ],
)
async def test_bad_where_is_invalid_request_naming_the_place(
    engine: Engine, where: object, problem: str
) -> None:
    await engine.write("t", [{"data": 1}])
    with pytest.raises(InvalidRequestError, match=problem) as exc:
        await engine.diff("t", where=where)
    assert exc.value.detail is not None
    assert exc.value.detail["field"] == "where"


# -- cloudevents ----------------------------------------------------------------------


async def test_cloudevents_format(engine: Engine, clock: ManualClock) -> None:
    clock.set(1_764_090_564_123)  # 2025-11-25T17:09:24.123Z
    await engine.write(
        "t",
        [
            {"data": b'{"amount": 1.50}', "meta": {"type": "refund.created"}, "tag": "c:7"},
            {"data": [1], "node": "n1"},
        ],
    )
    res = await engine.diff("t", format="cloudevents")
    assert res.format == "cloudevents"
    ev = res.events
    assert ev[0] == {
        "specversion": "1.0",
        "id": "t@1",
        "source": "/v0/topics/t",
        "type": "refund.created",
        "time": "2025-11-25T17:09:24.123Z",
        "datacontenttype": "application/json",
        "subject": "c:7",
        "topicsseq": 1,
        "data": {"amount": 1.5},
    }
    assert b'"data":{"amount": 1.50}' in res.records_json  # verbatim
    assert ev[1]["type"] == "topics.record"
    assert ev[1]["topicsnode"] == "n1"
    res = await engine.diff("t", format="cloudevents", ce_type_field="kind")
    assert res.events[0]["type"] == "topics.record"
    with pytest.raises(TypeError):
        _ = res.records
    assert ujson.loads(res.records_json) == res.events


async def test_bad_format_is_refused(engine: Engine) -> None:
    await engine.write("t", [{"data": 1}])
    with pytest.raises(InvalidRequestError, match="format"):
        await engine.diff("t", format="avro")
    with pytest.raises(InvalidRequestError, match="ce_type_field"):
        await engine.diff("t", format="cloudevents", ce_type_field="")
