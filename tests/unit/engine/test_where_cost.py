"""Issue 30 on the engine: a ``where`` plan's cost per record is known and bounded
(topics/query/where.py rule 7), and a filtered read or live delivery is bounded in time
(topics/log/reads.py rule 4), ending with what it has and a cursor as ``limit`` does."""

from __future__ import annotations

import json
from typing import Any

import pytest

from topics._clock import ManualClock
from topics.engine import Engine
from topics.errors import InvalidRequestError
from topics.query.plans import PlanCache
from topics.query.where import compile_where
from topics.settings import Limits

from ._support import START_MS, with_limits
from .test_watch_bounds import drain, seqs


class TickingClock(ManualClock):
    """A clock that moves 1 ms each time it is read: a read that asks it often enough
    runs out of any time budget, without sleeping."""

    def now_ms(self) -> int:
        self._now += 1
        return self._now


@pytest.fixture
def clock() -> ManualClock:
    return TickingClock(START_MS)


def terms(n: int) -> list[Any]:
    return ["and", [[f"data.k{i}", "Exists"] for i in range(n)]]


@with_limits(max_where_cost=10)
async def test_a_plan_over_the_budget_is_refused_naming_it(engine: Engine) -> None:
    await engine.write("t", [{"data": {"k0": 1}}])
    # nine tests and one decode (data): exactly the budget
    assert (await engine.diff("t", where=terms(9))).records_scanned == 1
    with pytest.raises(InvalidRequestError, match="TOPICS_MAX_WHERE_COST") as exc:
        await engine.diff("t", where=terms(10))
    assert "budget of 10" in exc.value.message
    assert exc.value.detail == {"field": "where", "cost": 11, "max_cost": 10}
    feed = engine.open_watch_feed()
    with pytest.raises(InvalidRequestError, match="TOPICS_MAX_WHERE_COST"):
        engine.watch_subscribe(feed, {"t": {}}, where=terms(10))
    feed.close()
    with pytest.raises(InvalidRequestError, match="TOPICS_MAX_WHERE_COST"):
        await engine.create_watch({"t": {}}, where=terms(10))


def test_an_in_costs_one_test_whatever_its_size() -> None:
    wide = compile_where(["or", [[f"data.k{t}", "In", list(range(256))] for t in range(63)]])
    assert wide is not None
    assert wide.cost == 64  # 63 lookups and one decode, not 63 * 256 scans


def test_the_default_budget_admits_every_shape_the_compile_limits_allow() -> None:
    widest = [
        "or",
        [
            [f"{p}.k{i}", "In", [str(v) for v in range(256)]]
            for i, p in enumerate(["data", "meta"] * 31 + ["data"])
        ],
    ]
    pred = compile_where(widest, max_cost=Limits().max_where_cost)
    assert pred is not None
    assert pred.cost == 65


@pytest.mark.parametrize(
    ("where", "place"),
    [
        ("\ud800", "where"),
        (["tag", "Eq", "a\udfff"], "where"),
        (["data.\ud800", "Exists"], "where[0]"),
        (["or", [["meta.src", "In", ["x", "\udc00"]]]], "where[1][0][2][1]"),
        (["node", "Glob", "\ud800*"], "where[2]"),
    ],
)
def test_a_lone_surrogate_is_invalid_request_naming_the_place(where: Any, place: str) -> None:
    with pytest.raises(InvalidRequestError, match="lone surrogate") as exc:
        compile_where(where)
    assert exc.value.detail == {"field": "where", "path": place}


async def test_in_is_json_equality(engine: Engine) -> None:
    values: list[Any] = [1, 1.0, True, False, None, "1", 2.5, {"x": 1}]
    await engine.write("t", [{"data": {"v": v}} for v in values])
    res = await engine.diff("t", where=["data.v", "In", [1, None, "1"]])
    assert [r.data["v"] for r in res.records] == [1, 1.0, None, "1"]
    res = await engine.diff("t", where=["data.v", "In", [True, 2.5]])
    assert [r.data["v"] for r in res.records] == [True, 2.5]


@with_limits(max_where_ms=5)
async def test_a_filtered_read_ends_on_its_time_budget_with_a_cursor(engine: Engine) -> None:
    await engine.write("t", [{"data": {"i": i}} for i in range(1000)])
    plain = await engine.diff("t", limit=1000)
    assert plain.record_count == 1000  # a plain read is bounded by limit and bytes only
    first = await engine.diff("t", limit=1000, where=["data.i", "Exists"])
    assert 0 < first.records_scanned < 1000
    assert first.record_count == first.records_scanned == first.next_from_seq
    assert not first.caught_up
    got, cursor = [r.seq for r in first.records], first.next_from_seq
    while cursor < 1000:
        res = await engine.diff("t", from_seq=cursor, limit=1000, where=["data.i", "Exists"])
        got += [r.seq for r in res.records]
        cursor = res.next_from_seq
    assert got == list(range(1, 1001))


@with_limits(max_where_ms=5)
async def test_a_live_delivery_ends_on_its_time_budget_and_the_feed_reads_on(
    engine: Engine,
) -> None:
    await engine.write("t", [{"data": {"i": i}} for i in range(1000)])
    feed = engine.open_watch_feed()
    engine.watch_subscribe(feed, {"t": {"from_seq": 0}}, where=["data.i", "Exists"])
    events = await drain(feed)
    assert seqs(events) == list(range(1, 1001))
    batches = [e for e in events if type(e).__name__ == "RecordBatch"]
    assert len(batches) > 1  # one read would have carried all 1000 (limit 1000, 60 KB)
    feed.close()


def test_a_repeated_where_is_compiled_once() -> None:
    where = ["or", [["data.k", "In", [f"v{i}" for i in range(256)]], ["tag", "Eq", "x"]]]
    first = compile_where(where)
    again = compile_where(json.loads(json.dumps(where)))
    assert first is not None
    assert again is not None
    assert again.program is first.program  # the cached plan, not a new compile
    assert again.source == first.source == where
    other_budget = compile_where(where, max_cost=50)
    assert other_budget is not None
    assert other_budget.program is not first.program
    with pytest.raises(InvalidRequestError):  # a refusal is never cached as a plan
        compile_where(where, max_cost=2)
    with pytest.raises(InvalidRequestError):
        compile_where(where, max_cost=2)


def test_kept_plans_are_bounded_by_their_weight() -> None:
    cache: PlanCache[str] = PlanCache(max_weight=10)
    cache.put(("a",), "A", 6)
    cache.put(("b",), "B", 3)
    assert cache.get(("a",)) == "A"  # now the most recently used
    cache.put(("c",), "C", 4)  # over 10: the least recently used (b) goes
    assert cache.get(("b",)) is None
    assert (cache.get(("a",)), cache.get(("c",))) == ("A", "C")
    assert cache.weight == 10
    cache.put(("huge",), "H", 11)  # heavier than the whole cache: not kept
    assert cache.get(("huge",)) is None
    assert len(cache) == 2
