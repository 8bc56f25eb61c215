"""Routers (contract §6, §1.4 cascade, §3.3 source_trim, §4.5 node filter, §11 max_routers;
docs/ROUTERS.md).

Workers run in the engine's nursery; ``settle()`` (``wait_all_tasks_blocked``) lets them
catch up, since a memory-only engine's write never yields. Backoff tests run on trio's
``autojump_clock``.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
import ujson

import topics
from topics import _args
from topics.config import TopicConfig
from topics.engine import Engine
from topics.errors import (
    InvalidRequestError,
    RouterCycleError,
    RouterNotFoundError,
    ThrottledError,
    TopicExistsIncompatibleError,
    TopicNotFoundError,
)
from topics.log.reads import read_diff
from topics.log.topic_log import TopicLog
from topics.router_types import RouterConfig
from topics.routers.worker import HOP_CAP, join_stamp, split_stamp
from topics.types import Tombstone

from ._support import recs, rendered, seqs_of, with_limits


async def settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


def route(source: str, dest: str, **fields: Any) -> dict[str, Any]:
    return {"source": source, "dest": dest, **fields}


async def read_all(engine: Engine, topic: str, **options: Any) -> list[dict[str, Any]]:
    """Every record of ``topic`` from the start (following the cursor; tombstones skipped)."""
    out: list[dict[str, Any]] = []
    cursor = 0
    while True:
        page = await engine.diff(topic, from_seq=cursor, limit=1000, **options)
        out += rendered(page)
        cursor = page.next_from_seq
        if page.caught_up:
            return out


def datas(records: list[dict[str, Any]]) -> list[Any]:
    return [r["data"] for r in records]


# ---------------------------------------------------------------------------------
# PUT: validation, 404s, defaults, idempotence
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"dest": "b"}, "source"),
        ({"source": "a"}, "dest"),
        ({}, "source"),
        ({"source": "a", "dest": "a"}, "dest"),
        ({"source": 5, "dest": "b"}, "source"),
        ({"source": "a", "dest": "no/slash"}, "dest"),
        ({"source": "a", "dest": "b", "preserve_node": "yes"}, "preserve_node"),
        ({"source": "a", "dest": "b", "preserve_tag": 1}, "preserve_tag"),
        ({"source": "a", "dest": "b", "create_dest": None}, "create_dest"),
        ({"source": "a", "dest": "b", "allow_cycle": "true"}, "allow_cycle"),
        ({"source": "a", "dest": "b", "guarantee": "at_most_once"}, "guarantee"),
        ({"source": "a", "dest": "b", "filter": ["tag", "Glob", "x"]}, "filter"),
        ({"source": "a", "dest": "b", "filter": ["node", "Eq", "x"]}, "filter"),
        ({"source": "a", "dest": "b", "filter": ["tag", "Re", "x"]}, "filter"),
        ({"source": "a", "dest": "b", "filter": 7}, "filter"),
        ({"source": "a", "dest": "b", "filters": None}, "filters"),
    ],
)
async def test_put_rejects_bad_bodies_with_the_field(engine, body, field):
    await engine.put_topic("a")
    with pytest.raises(InvalidRequestError) as info:
        await engine.put_router("r", body)
    assert info.value.detail == {"field": field}
    assert (await engine.list_routers()).routers == []
    assert (await engine.list_topics()).topics[0].topic == "a"  # no dest was created


@pytest.mark.parametrize("name", ["", "-r", "a/b", "a b", "x" * 256, 5, None])
async def test_put_rejects_bad_router_names(engine, name):
    await engine.put_topic("a")
    with pytest.raises(InvalidRequestError) as info:
        await engine.put_router(name, route("a", "b"))
    assert info.value.detail == {"field": "router"}


async def test_put_rejects_a_body_that_is_not_an_object(engine):
    with pytest.raises(InvalidRequestError):
        await engine.put_router("r", ["a", "b"])  # type: ignore[arg-type]


async def test_router_names_take_the_arrow(engine):
    await engine.put_topic("orders")
    res = await engine.put_router("orders->audit", route("orders", "audit"))
    assert res.router == "orders->audit"


async def test_absent_source_and_dest_are_auto_created_and_forward(engine):
    res = await engine.put_router("r", route("src", "dst"))
    assert res.created is True
    assert [t.topic for t in (await engine.list_topics()).topics] == ["dst", "src"]
    assert (await engine.get_topic("src")).config == TopicConfig()
    await engine.write("src", recs("x"))
    await settle()
    assert datas(await read_all(engine, "dst")) == ["x"]


async def test_absent_source_is_auto_created_even_without_create_dest(engine):
    await engine.put_topic("b")
    await engine.put_router("r", route("a", "b", create_dest=False))
    assert [t.topic for t in (await engine.list_topics()).topics] == ["a", "b"]


async def test_absent_dest_without_create_dest_creates_no_source_either(engine):
    with pytest.raises(TopicNotFoundError) as info:
        await engine.put_router("r", route("a", "b", create_dest=False))
    assert info.value.detail == {"topic": "b", "field": "dest"}
    assert (await engine.list_topics()).topics == []


async def test_absent_dest_without_create_dest_is_topic_not_found(engine):
    await engine.put_topic("a")
    with pytest.raises(TopicNotFoundError) as info:
        await engine.put_router("r", route("a", "b", create_dest=False))
    assert info.value.detail == {"topic": "b", "field": "dest"}
    assert [t.topic for t in (await engine.list_topics()).topics] == ["a"]


async def test_put_creates_the_dest_and_echoes_the_definition(engine):
    await engine.put_topic("a")
    res = await engine.put_router("a->b", route("a", "b"))
    assert res.to_dict() == {
        "router": "a->b",
        "created": True,
        "source": "a",
        "dest": "b",
        "preserve_node": True,
        "preserve_tag": True,
        "create_dest": True,
        "filter": None,
        "allow_cycle": False,
        "guarantee": "at_least_once",
    }
    dest = await engine.get_topic("b")
    assert dest.config == TopicConfig()
    info = await engine.get_router("a->b")
    assert (info.cursor, info.forwarded_total, info.dropped_total, info.lag) == (0, 0, 0, 0)


async def test_identical_put_is_a_no_op_and_a_changed_put_applies(engine):
    await engine.put_topic("a")
    await engine.write("a", recs(1, 2))
    first = await engine.put_router("r", route("a", "b"))
    again = await engine.put_router("r", route("a", "b", preserve_node=True))
    assert (first.created, again.created) == (True, False)
    await engine.write("a", recs(3))
    await settle()
    changed = await engine.put_router("r", route("a", "b", preserve_tag=False))
    assert changed.created is False
    assert changed.config.preserve_tag is False
    info = await engine.get_router("r")
    assert (info.cursor, info.forwarded_total) == (3, 1)  # the cursor is kept
    assert info.config == RouterConfig("a", "b", preserve_tag=False)


async def test_a_new_router_starts_at_the_source_head(engine):
    await engine.write("a", recs("old1", "old2"))
    await engine.put_router("r", route("a", "b"))
    await engine.write("a", recs("new"))
    await settle()
    assert datas(await read_all(engine, "b")) == ["new"]


async def test_changing_the_source_restarts_at_the_new_source_head(engine):
    await engine.write("a", recs("a1"))
    await engine.write("c", recs("c1", "c2"))
    await engine.put_router("r", route("a", "b"))
    await engine.write("a", recs("a2"))
    await settle()
    await engine.put_router("r", route("c", "b"))
    assert (await engine.get_router("r")).cursor == 2
    await engine.write("a", recs("a3"))
    await engine.write("c", recs("c3"))
    await settle()
    assert datas(await read_all(engine, "b")) == ["a2", "c3"]
    assert (await engine.get_router("r")).forwarded_total == 2


async def test_changing_the_dest_keeps_the_cursor(engine):
    await engine.put_topic("a")
    await engine.put_router("r", route("a", "b"))
    await engine.write("a", recs(1))
    await settle()
    await engine.put_router("r", route("a", "c"))
    await engine.write("a", recs(2))
    await settle()
    assert datas(await read_all(engine, "b")) == [1]
    assert datas(await read_all(engine, "c")) == [2]


# ---------------------------------------------------------------------------------
# The graph: cycles, fan-in, max_routers
# ---------------------------------------------------------------------------------


async def test_a_two_topic_cycle_is_refused_with_the_cycle(engine):
    await engine.put_topic("A")
    await engine.put_router("A->B", route("A", "B"))
    with pytest.raises(RouterCycleError) as info:
        await engine.put_router("B->A", route("B", "A"))
    assert info.value.status == 409
    assert info.value.detail == {"router": "B->A", "cycle": ["B", "A", "B"]}
    assert [r.router for r in (await engine.list_routers()).routers] == ["A->B"]


async def test_a_longer_cycle_reports_every_topic_in_order(engine):
    await engine.put_topic("A")
    await engine.put_router("ab", route("A", "B"))
    await engine.put_router("bc", route("B", "C"))
    await engine.put_router("cd", route("C", "D"))
    with pytest.raises(RouterCycleError) as info:
        await engine.put_router("da", route("D", "A"))
    assert info.value.detail is not None
    assert info.value.detail["cycle"] == ["D", "A", "B", "C", "D"]


async def test_allow_cycle_permits_the_loop(engine):
    await engine.put_topic("A")
    await engine.put_router("A->B", route("A", "B"))
    res = await engine.put_router("B->A", route("B", "A", allow_cycle=True))
    assert res.created
    assert res.config.allow_cycle


async def test_a_put_that_reroutes_its_own_edge_is_not_a_cycle(engine):
    await engine.put_topic("A")
    await engine.put_topic("C")
    await engine.put_router("r", route("A", "B"))
    await engine.put_router("s", route("B", "C"))
    # r: A->B becomes C->B while s is B->C: a cycle only because of r's new edge
    with pytest.raises(RouterCycleError):
        await engine.put_router("r", route("C", "B"))
    await engine.put_router("r", route("A", "D"))  # r's old edge does not count
    assert (await engine.get_router("r")).config.dest == "D"


async def test_a_second_source_into_a_dest_is_fan_in(engine):
    await engine.put_topic("a")
    await engine.put_topic("x")
    await engine.put_router("a->d", route("a", "d"))
    with pytest.raises(TopicExistsIncompatibleError) as info:
        await engine.put_router("x->d", route("x", "d"))
    assert info.value.status == 409
    assert info.value.detail is not None
    assert info.value.detail["reason"] == "router_dest_fan_in"
    assert info.value.detail["router"] == "a->d"
    # a second router from the same source is not fan-in
    await engine.put_router("a->d.2", route("a", "d"))


async def test_fan_in_does_not_count_the_router_being_updated(engine):
    await engine.put_topic("a")
    await engine.put_topic("x")
    await engine.put_router("r", route("a", "d"))
    await engine.put_router("r", route("x", "d"))  # its own edge moves: no second source
    assert (await engine.get_router("r")).config.source == "x"


@with_limits(max_routers=1)
async def test_max_routers_is_checked_before_the_dest_is_created(engine):
    await engine.put_topic("a")
    await engine.put_router("r1", route("a", "b"))
    with pytest.raises(ThrottledError) as info:
        await engine.put_router("r2", route("a", "c"))
    assert info.value.detail == {"limit": "max_routers", "max": 1}
    assert info.value.retry_after is not None
    assert [t.topic for t in (await engine.list_topics()).topics] == ["a", "b"]
    # an update of an existing router is not a new one
    assert (await engine.put_router("r1", route("a", "b", preserve_tag=False))).created is False


@with_limits(max_routers=1)
async def test_max_routers_refuses_before_auto_creating_the_source(engine):
    await engine.put_router("r1", route("a", "b"))
    with pytest.raises(ThrottledError):
        await engine.put_router("r2", route("c", "d"))
    assert [t.topic for t in (await engine.list_topics()).topics] == ["a", "b"]


@with_limits(max_topics=1)
async def test_max_topics_counts_both_auto_created_topics(engine):
    with pytest.raises(ThrottledError) as info:
        await engine.put_router("r", route("a", "b"))
    assert info.value.detail == {"limit": "max_topics", "max": 1}
    assert (await engine.list_topics()).topics == []
    assert (await engine.list_routers()).routers == []


@with_limits(max_topics=1)
async def test_max_topics_applies_to_an_auto_created_dest(engine):
    await engine.put_topic("a")
    with pytest.raises(ThrottledError) as info:
        await engine.put_router("r", route("a", "b"))
    assert info.value.detail == {"limit": "max_topics", "max": 1}
    assert (await engine.list_routers()).routers == []


# ---------------------------------------------------------------------------------
# Forwarding: content, filter, preserve_*, stamps
# ---------------------------------------------------------------------------------


async def test_copies_keep_data_meta_node_tag_and_get_fresh_seqs(engine, clock):
    await engine.write("b", recs("direct"))  # dest has its own seqs
    await engine.put_topic("a")
    await engine.put_router("r", route("a", "b"))
    raw = b'{"b":1,"a":[1.50,2e3]}'
    await engine.write(
        "a",
        [
            {"data": raw, "meta": b'{"z": 1.50 ,"a":{}}', "tag": "t1", "node": "n1"},
            {"data": None},
        ],
    )
    clock.advance(5)
    await settle()
    page = await engine.diff("b", from_seq=1, include_tags=True)
    assert b'"data":{"b":1,"a":[1.50,2e3]},"meta":{"z": 1.50 ,"a":{}}' in page.records_json
    got = rendered(page)
    assert [r["$seq"] for r in got] == [2, 3]
    assert got[0]["$node"] == "n1"
    assert got[0]["$tag"] == "t1"
    assert got[1] == {"$seq": 3, "$ts": got[1]["$ts"], "data": None}
    assert (await engine.get_router("r")).forwarded_total == 2


async def test_preserve_node_and_tag_false_clear_them(engine):
    await engine.put_topic("a")
    await engine.put_router("r", route("a", "b", preserve_node=False, preserve_tag=False))
    await engine.write("a", [{"data": 1, "tag": "t", "node": "n"}])
    await settle()
    assert rendered(await engine.diff("b", include_tags=True))[0].keys() == {
        "$seq",
        "$ts",
        "data",
    }


@pytest.mark.parametrize(
    ("filter_", "expected"),
    [
        (["tag", "Glob", "public:*"], ["p1", "p2"]),
        (["tag", "Eq", "public:1"], ["p1"]),
        ("public:2", ["p2"]),
        (["tag", "Glob", "*"], ["p1", "p2", "x"]),
    ],
)
async def test_filter_forwards_only_matching_tags(engine, filter_, expected):
    await engine.put_topic("a")
    res = await engine.put_router("r", route("a", "b", filter=filter_))
    if isinstance(filter_, str):
        assert res.to_dict()["filter"] == ["tag", "Eq", filter_]
    await engine.write(
        "a",
        [
            {"data": "p1", "tag": "public:1"},
            {"data": "untagged"},  # never matches, not even "*"
            {"data": "p2", "tag": "public:2"},
            {"data": "x", "tag": "private"},
        ],
    )
    await settle()
    assert datas(await read_all(engine, "b")) == expected
    info = await engine.get_router("r")
    assert (info.cursor, info.forwarded_total, info.lag) == (4, len(expected), 0)


async def plug(engine: Engine, dest: str) -> None:
    """Make ``dest`` a full discard:"reject" topic: a router into it backs off."""
    await engine.write(dest, recs("plug"), config={"cap_records": 1, "discard": "reject"})


async def unplug(engine: Engine, dest: str) -> None:
    await engine.delete_records(dest, before_seq=2)


async def test_deleted_source_records_are_skipped_silently(engine, autojump_clock):
    await engine.put_topic("a")
    await plug(engine, "b")
    await engine.put_router("r", route("a", "b"))
    await engine.write("a", [{"data": "gone", "tag": "x"}, {"data": "kept"}])
    await trio.sleep(2)  # the router backs off: b is full
    await engine.delete_records("a", match="x")
    await unplug(engine, "b")
    await trio.sleep(5)
    page = await engine.diff("b")
    assert page.tombstone is None
    assert datas(rendered(page)) == ["kept"]
    assert (await engine.get_router("r")).cursor == 2


async def test_exactly_once_stamps_meta_and_keeps_user_keys_verbatim(engine):
    await engine.put_topic("a")
    await engine.put_router("r", route("a", "b", guarantee="exactly_once"))
    inc = engine._router_set.routers["r"].inc
    await engine.write(
        "a",
        [
            {"data": 1, "meta": b'{"z":1.50,"a":[1,2]}'},
            {"data": 2},
            {"data": 3, "meta": b" { } "},
        ],
    )
    await settle()
    page = await engine.diff("b")
    stamp = '{"router":"r","inc":%d,"src_seq":%d,"hops":0,"origin":"a"}'
    assert (
        b'"meta":{"_topics_router":' + (stamp % (inc, 1)).encode() + b',"z":1.50,"a":[1,2]}'
        in page.records_json
    )
    metas = [r["meta"] for r in rendered(page)]
    assert metas[1] == {"_topics_router": ujson.loads(stamp % (inc, 2))}
    assert metas[2] == {"_topics_router": ujson.loads(stamp % (inc, 3))}


def test_split_and_join_stamp_round_trip():
    meta = b'{"_topics_router":{"router":"r","inc":1,"src_seq":2,"hops":3,"origin":"a"},"k":1.50}'
    stamp, rest = split_stamp(meta)
    assert stamp == {"router": "r", "inc": 1, "src_seq": 2, "hops": 3, "origin": "a"}
    assert rest == b'{"k":1.50}'
    assert join_stamp(b"{}", rest) == b'{"_topics_router":{},"k":1.50}'
    assert split_stamp(b'{"_topics_router":{"hops":1}}') == ({"hops": 1}, None)
    # a stamp somewhere else is found by parsing
    stamp, rest = split_stamp(b'{"k": 1, "_topics_router": {"hops": 4}}')
    assert (stamp, rest) == ({"hops": 4}, b'{"k":1}')
    assert split_stamp(b'{"k":"_topics_router"}') == (None, b'{"k":"_topics_router"}')
    assert join_stamp(b"{}", None) == b'{"_topics_router":{}}'
    assert join_stamp(b"{}", b" {  } ") == b'{"_topics_router":{}}'


@with_limits(max_meta_keys=2)
async def test_a_copy_without_room_for_the_stamp_goes_unstamped_off_a_loop(engine):
    await engine.put_topic("a")
    await engine.put_router("r", route("a", "b", guarantee="exactly_once"))
    await engine.write("a", [{"data": 1, "meta": {"x": 1, "y": 2}}, {"data": 2, "meta": {"x": 1}}])
    await settle()
    metas = [r["meta"] for r in await read_all(engine, "b")]
    assert metas[0] == {"x": 1, "y": 2}
    assert set(metas[1]) == {"_topics_router", "x"}
    assert (await engine.get_router("r")).forwarded_total == 2


@with_limits(max_meta_bytes=20)
async def test_a_meta_limit_below_the_stamp_forwards_unstamped_copies(engine):
    await engine.put_topic("a")
    await engine.put_router("r", route("a", "b", guarantee="exactly_once"))
    await engine.write("a", recs(1))
    await settle()
    got = await read_all(engine, "b")
    assert [(r["data"], "meta" in r) for r in got] == [(1, False)]


@with_limits(max_meta_keys=1)
async def test_a_copy_on_a_loop_without_room_for_the_stamp_is_dropped(engine):
    await engine.put_topic("A")
    await engine.put_router("A->B", route("A", "B"))
    await engine.put_router("B->A", route("B", "A", allow_cycle=True))
    await engine.write("A", [{"data": 1, "meta": {"x": 1}}, {"data": 2}])
    await settle()
    assert datas(await read_all(engine, "B")) == [2]
    assert (await engine.get_router("A->B")).dropped_total == 1


# ---------------------------------------------------------------------------------
# Dest config governs: evicting dest, reject backpressure
# ---------------------------------------------------------------------------------


async def test_an_evicting_dest_keeps_its_cap(engine):
    await engine.put_topic("a")
    await engine.put_topic("b", {"cap_records": 3})
    await engine.put_router("r", route("a", "b"))
    await engine.write("a", recs(*range(10)))
    await settle()
    page = await engine.diff("b")
    assert datas(rendered(page)) == [7, 8, 9]
    assert page.tombstone is not None
    assert page.tombstone.reason == "cap"
    assert (await engine.get_router("r")).forwarded_total == 10


async def test_a_full_reject_dest_holds_the_cursor_and_retries(engine, autojump_clock):
    await engine.put_topic("a")
    await engine.put_topic("b", {"cap_records": 3, "discard": "reject"})
    await engine.put_router("r", route("a", "b"))
    await engine.write("a", recs(*range(10)))
    await trio.sleep(5)
    assert datas(await read_all(engine, "b")) == [0, 1, 2]
    info = await engine.get_router("r")
    assert (info.cursor, info.forwarded_total, info.lag) == (3, 3, 7)
    await engine.delete_records("b", before_seq=3)  # room for two more
    await trio.sleep(5)  # the backoff is capped, so the worker retries within a second
    assert datas(await read_all(engine, "b")) == [2, 3, 4]
    assert (await engine.get_router("r")).cursor == 5
    await engine.put_topic("b", {"cap_records": 0})  # lift the cap: the rest flows
    await trio.sleep(5)
    assert datas(await read_all(engine, "b")) == [2, *range(3, 10)]
    assert (await engine.get_router("r")).lag == 0


async def test_a_record_that_can_never_fit_a_reject_dest_is_dropped(engine, autojump_clock):
    await engine.put_topic("a")
    await engine.put_topic("b", {"cap_bytes": 60, "discard": "reject"})
    await engine.put_router("r", route("a", "b"))
    await engine.write("a", [{"data": "x" * 100}, {"data": 1}])
    await trio.sleep(5)
    assert datas(await read_all(engine, "b")) == [1]
    info = await engine.get_router("r")
    assert (info.cursor, info.forwarded_total, info.dropped_total) == (2, 1, 1)


@with_limits(max_total_bytes=2000)
async def test_the_total_bytes_quota_backs_the_router_off(engine, autojump_clock):
    await engine.put_topic("a")
    await engine.put_router("r", route("a", "b"))
    await engine.write("a", [{"data": "x" * 550} for _ in range(2)])  # ~1.2 KB
    await trio.sleep(5)
    info = await engine.get_router("r")
    assert (info.cursor, info.forwarded_total) == (1, 1)  # no room for the second copy
    await engine.delete_records("b", before_seq=2)  # free the quota
    await trio.sleep(5)
    info = await engine.get_router("r")
    assert (info.cursor, info.forwarded_total) == (2, 2)


# ---------------------------------------------------------------------------------
# source_trim: the source lost records the router had not forwarded
# ---------------------------------------------------------------------------------


def trim(gap: int, missed: int, earliest: int, head: int) -> Tombstone:
    return Tombstone(gap, gap, "source_trim", missed, earliest, head)


async def test_source_trim_leaves_a_tombstone_in_dest(engine):
    await engine.put_topic("a", {"cap_records": 3})
    await engine.put_router("r", route("a", "b"))
    await engine.write("a", recs(1, 2))
    await settle()
    await engine.write("a", recs(*range(3, 11)))  # 3..10: the source keeps 8..10 only
    await settle()
    first = await engine.diff("b")
    assert datas(rendered(first)) == [1, 2]
    assert (first.next_from_seq, first.caught_up, first.tombstone) == (2, False, None)
    second = await engine.diff("b", from_seq=first.next_from_seq)
    assert second.tombstone == trim(3, 5, 1, 6)  # source seqs 3..7 were lost
    assert datas(rendered(second)) == [8, 9, 10]
    assert seqs_of(second) == [4, 5, 6]
    assert (second.next_from_seq, second.caught_up) == (6, True)
    info = await engine.get_router("r")
    assert (info.cursor, info.forwarded_total) == (10, 5)
    # a reader past the marker sees nothing of it
    assert (await engine.diff("b", from_seq=3)).tombstone is None


async def test_source_trim_into_an_empty_dest(engine):
    await engine.put_topic("a", {"cap_records": 2})
    await engine.put_router("r", route("a", "b"))
    await engine.write("a", recs(1, 2, 3, 4, 5))
    await settle()
    page = await engine.diff("b")
    assert page.tombstone == trim(1, 3, 2, 3)
    assert datas(rendered(page)) == [4, 5]
    # a trim with nothing after it: head is the marker, earliest is past it
    await engine.put_topic("c", {"cap_records": 1})
    await engine.put_router("r2", route("c", "d", filter="never"))
    await engine.write("c", recs(1, 2))
    await settle()
    page = await engine.diff("d")
    assert page.tombstone == trim(1, 1, 2, 1)
    assert (page.next_from_seq, page.caught_up, page.record_count) == (1, True, 0)


async def test_source_trim_by_ttl(engine, clock, autojump_clock):
    await engine.put_topic("a", {"ttl_ms": 1000})
    await plug(engine, "b")
    await engine.put_router("r", route("a", "b"))
    await engine.write("a", recs("lost"))
    await trio.sleep(2)  # the router backs off: b is full
    clock.advance(2000)  # "lost" expires in the source before it was forwarded
    await engine.write("a", recs("kept"))
    await unplug(engine, "b")
    await trio.sleep(5)
    page = await engine.diff("b")  # b: 1 deleted (silent), 2 the marker, 3 the copy
    assert page.tombstone == trim(2, 1, 3, 3)
    assert datas(rendered(page)) == ["kept"]


async def test_a_cap_tombstone_covers_an_evicted_marker(engine):
    await engine.put_topic("a", {"cap_records": 1})
    await engine.put_topic("b", {"cap_records": 2})
    await engine.put_router("r", route("a", "b"))
    await engine.write("a", recs(1, 2))
    await settle()
    await engine.write("a", recs(3, 4, 5))  # marker at 3, copy of 5 at 4
    await settle()
    await engine.write("a", recs(6))
    await settle()
    await engine.write("a", recs(7))
    await settle()  # b now holds 6, 7: the marker is below the cap floor
    page = await engine.diff("b")
    assert page.tombstone is not None
    assert page.tombstone.reason == "cap"
    assert datas(rendered(page)) == [6, 7]
    assert engine._registry.get("b").gaps == []


# ---------------------------------------------------------------------------------
# Gap markers in the log itself (rule 6 of _log, rule 28 of SEMANTICS)
# ---------------------------------------------------------------------------------


def _log_with(records: list[int], gaps_after: list[int]) -> TopicLog:
    """A log holding ``records`` (data = seq order) with a gap marker after each index."""
    from topics._core import encode_batch
    from topics.settings import Limits

    log = TopicLog("t", 1, TopicConfig())
    for i, value in enumerate(records):
        seg = log.writable_segment()
        frames, tags = encode_batch(
            [{"data": value}], log.head + 1, 0, None, seg.salt, Limits().encode_limits, ujson.dumps
        )
        log.append(frames, 1, tags, 0)
        if i in gaps_after:
            log.add_gap("source_trim", 5, 100 + i, 104 + i)
    return log


def _read(log: TopicLog, from_seq: int, limit: int = 100) -> Any:
    from topics._core import RENDER_DATA

    return read_diff(log, from_seq, limit, None, RENDER_DATA, 1 << 20)


def test_a_window_stops_before_a_marker_and_resumes_after_it():
    log = _log_with([10, 20, 30], gaps_after=[1])  # seqs 1, 2, marker 3, 4
    assert [g.seq for g in log.gaps] == [3]
    res = _read(log, 0)
    assert datas(rendered(res)) == [10, 20]
    assert (res.next_from_seq, res.caught_up, res.lag, res.tombstone) == (2, False, 2, None)
    res = _read(log, 2)
    assert res.tombstone == Tombstone(3, 3, "source_trim", 5, 1, 4)
    assert datas(rendered(res)) == [30]
    assert (res.next_from_seq, res.caught_up) == (4, True)
    assert _read(log, 3).tombstone is None  # past the marker
    # a limit that ends the window before the marker still ends it on a record
    res = _read(log, 0, limit=1)
    assert (datas(rendered(res)), res.next_from_seq) == ([10], 1)


def test_adjacent_markers_are_read_one_at_a_time():
    log = _log_with([10], gaps_after=[0])
    log.add_gap("source_trim", 1, 200, 200)  # seqs: 1, marker 2, marker 3
    seen = []
    cursor = 0
    for _ in range(5):
        res = _read(log, cursor)
        seen.append((res.tombstone.gap_from if res.tombstone else None, datas(rendered(res))))
        cursor = res.next_from_seq
        if res.caught_up:
            break
    assert seen == [(None, [10]), (2, []), (3, [])]
    assert cursor == 3


def test_markers_below_the_evict_floor_are_forgotten_and_restored_markers_checked():
    log = _log_with([10, 20, 30], gaps_after=[0])  # 1, marker 2, 3, 4
    log.config = TopicConfig(cap_records=1)
    log.evict_to_caps()
    assert log.evict_floor == 4
    res = _read(log, 0)
    assert res.tombstone is not None
    assert res.tombstone.reason == "cap"
    assert log.gaps == []
    fresh = _log_with([10, 20], gaps_after=[])
    from topics.log.gap_markers import GapMarker

    fresh.restore_gaps([GapMarker(9, "source_trim", 1, 1, 1), GapMarker(2, "source_trim", 1, 1, 1)])
    assert [g.seq for g in fresh.gaps] == [2]  # seq 9 is past the head


async def test_a_long_poll_diff_wakes_on_a_marker(engine, autojump_clock):
    await engine.put_topic("a", {"cap_records": 1})
    await engine.put_router("r", route("a", "b"))
    results = []

    async def poll():
        results.append(await engine.diff("b", from_seq=0, wait_ms=10_000))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll)
        await trio.sleep(1)
        await engine.write("a", recs(1, 2))
    assert results[0].tombstone == trim(1, 1, 2, 2)
    assert datas(rendered(results[0])) == [2]


# ---------------------------------------------------------------------------------
# Lifecycle: delete, cascade, statistics
# ---------------------------------------------------------------------------------


async def test_delete_router_stops_forwarding_at_once(engine):
    await engine.put_topic("a")
    await engine.put_router("r", route("a", "b"))
    await engine.write("a", recs(1))
    await settle()
    res = await engine.delete_router("r")
    assert res.to_dict() == {"router": "r", "deleted": True}
    await engine.write("a", recs(2))
    await settle()
    assert datas(await read_all(engine, "b")) == [1]  # copies stay; nothing new
    assert (await engine.delete_router("r")).deleted is False
    with pytest.raises(RouterNotFoundError) as info:
        await engine.get_router("r")
    assert info.value.detail == {"router": "r"}


async def test_delete_router_while_records_wait_to_be_forwarded(engine, autojump_clock):
    await engine.put_topic("a")
    await plug(engine, "b")
    await engine.put_router("r", route("a", "b"))
    await engine.write("a", recs(1))
    await trio.sleep(2)  # backing off
    await engine.delete_router("r")
    await unplug(engine, "b")
    await trio.sleep(5)
    assert await read_all(engine, "b") == []


async def test_deleting_a_topic_removes_its_routers(engine):
    await engine.put_topic("a")
    await engine.put_topic("x")
    await engine.put_router("a->b", route("a", "b"))
    await engine.put_router("b->c", route("b", "c"))
    await engine.put_router("x->y", route("x", "y"))
    res = await engine.delete_topic("b")
    assert res.routers_removed == ["a->b", "b->c"]
    assert [r.router for r in (await engine.list_routers()).routers] == ["x->y"]
    assert engine.statistics().routers == 1
    await engine.write("a", recs(1))  # the old route is gone: no auto-created "b"
    await settle()
    assert [t.topic for t in (await engine.list_topics()).topics] == ["a", "c", "x", "y"]
    assert (await engine.delete_topic("zzz")).routers_removed == []


async def test_deleting_a_backed_off_dest_ends_its_worker(engine, autojump_clock):
    await engine.put_topic("a")
    await engine.put_topic("b", {"cap_records": 1, "discard": "reject"})
    await engine.put_router("r", route("a", "b"))
    await engine.write("a", recs(1, 2, 3))
    await trio.sleep(3)
    assert (await engine.delete_topic("b")).routers_removed == ["r"]
    await trio.sleep(3)
    assert engine._registry.get("b") is None


async def test_router_count_in_statistics(engine):
    await engine.put_topic("a")
    assert engine.statistics().routers == 0
    await engine.put_router("r1", route("a", "b"))
    await engine.put_router("r2", route("a", "c"))
    assert engine.statistics().routers == engine.router_count == 2


# ---------------------------------------------------------------------------------
# Listing
# ---------------------------------------------------------------------------------


async def test_list_pages_in_name_order_with_filters(engine):
    await engine.put_topic("a")
    await engine.put_topic("x")
    for name, src, dst in [
        ("t1.r3", "a", "d3"),
        ("t1.r1", "a", "d1"),
        ("t2.r1", "x", "d4"),
        ("t1.r2", "x", "d2"),
    ]:
        await engine.put_router(name, route(src, dst, guarantee="exactly_once"))
    page = await engine.list_routers(page_size=2)
    assert [r.router for r in page.routers] == ["t1.r1", "t1.r2"]
    assert page.next_cursor is not None
    page2 = await engine.list_routers(page_size=2, cursor=page.next_cursor)
    assert [r.router for r in page2.routers] == ["t1.r3", "t2.r1"]
    assert page2.next_cursor is None
    assert page2.routers[0].to_dict() == {
        "router": "t1.r3",
        "source": "a",
        "dest": "d3",
        "guarantee": "exactly_once",
        "forwarded_total": 0,
    }
    assert [r.router for r in (await engine.list_routers(prefix="t1.")).routers] == [
        "t1.r1",
        "t1.r2",
        "t1.r3",
    ]
    assert [r.router for r in (await engine.list_routers(source="x")).routers] == [
        "t1.r2",
        "t2.r1",
    ]
    assert [r.router for r in (await engine.list_routers(dest="d1")).routers] == ["t1.r1"]
    filtered = await engine.list_routers(source="a", page_size=1)
    assert [r.router for r in filtered.routers] == ["t1.r1"]
    rest = await engine.list_routers(source="a", page_size=1, cursor=filtered.next_cursor)
    assert ([r.router for r in rest.routers], rest.next_cursor) == (["t1.r3"], None)
    assert "next_cursor" not in (await engine.list_routers()).to_dict()


@pytest.mark.parametrize(
    "kwargs",
    [{"page_size": 0}, {"page_size": -1}, {"cursor": "nope"}, {"prefix": 5}, {"source": 1}],
)
async def test_list_rejects_bad_arguments(engine, kwargs):
    with pytest.raises(InvalidRequestError):
        await engine.list_routers(**kwargs)


# ---------------------------------------------------------------------------------
# exactly_once evidence; loops, hop cap and multi-master
# ---------------------------------------------------------------------------------


async def _rewind_and_restart(engine: Engine, name: str) -> None:
    """Move the router's cursor back to 0 and restart its worker (as a stale cursor after a
    crash would): a changed PUT keeps the cursor and the incarnation."""
    engine._router_set.routers[name].cursor = 0
    cfg = (await engine.get_router(name)).config
    await engine.put_router(name, {**cfg.to_dict(), "preserve_tag": not cfg.preserve_tag})
    await settle()


async def test_exactly_once_skips_copies_still_in_dest(engine):
    await engine.put_topic("a")
    await engine.put_router("r", route("a", "b", guarantee="exactly_once"))
    await engine.write("a", recs(*range(5)))
    await settle()
    await _rewind_and_restart(engine, "r")
    assert datas(await read_all(engine, "b")) == [0, 1, 2, 3, 4]
    assert (await engine.get_router("r")).cursor == 5


async def test_exactly_once_forwards_again_what_dest_no_longer_holds(engine):
    await engine.put_topic("a")
    await engine.put_router("r", route("a", "b", guarantee="exactly_once"))
    await engine.write("a", recs(*range(5)))
    await settle()
    await engine.delete_records("b", before_seq=4)  # the evidence of 1..3 is gone; 4, 5 stay
    await _rewind_and_restart(engine, "r")
    assert datas(await read_all(engine, "b")) == [3, 4]  # src 5 is still there: cursor 5


async def test_at_least_once_duplicates_after_a_rewind(engine):
    await engine.put_topic("a")
    await engine.put_router("r", route("a", "b"))
    await engine.write("a", recs(1, 2))
    await settle()
    await _rewind_and_restart(engine, "r")
    assert datas(await read_all(engine, "b")) == [1, 2, 1, 2]


async def test_a_two_way_route_delivers_once_each_way(engine):
    await engine.put_topic("A")
    await engine.put_topic("B")
    await engine.put_router("A->B", route("A", "B", allow_cycle=True))
    await engine.put_router("B->A", route("B", "A", allow_cycle=True))
    await engine.write("A", recs("a1"), node="na")
    await engine.write("B", recs("b1"), node="nb")
    await settle()
    assert sorted(datas(await read_all(engine, "A"))) == ["a1", "b1"]
    assert sorted(datas(await read_all(engine, "B"))) == ["a1", "b1"]
    assert (await engine.get_router("A->B")).dropped_total == 1  # b1 did not come back


async def test_the_hop_cap_truncates_a_ring_longer_than_it(engine):
    ring = [f"R{i}" for i in range(HOP_CAP + 2)]  # 10 topics: 9 hops to go round
    for t in ring:
        await engine.put_topic(t)
    for i, t in enumerate(ring):
        nxt = ring[(i + 1) % len(ring)]
        await engine.put_router(f"{t}->{nxt}", route(t, nxt, allow_cycle=True))
    await engine.write("R0", recs("x"))
    await settle()
    for i, t in enumerate(ring[1:], start=1):
        got = await read_all(engine, t)
        if i <= HOP_CAP:
            assert [r["meta"]["_topics_router"]["hops"] for r in got] == [i]
        else:
            assert got == []
    assert (await engine.get_router(f"R{HOP_CAP}->R{HOP_CAP + 1}")).dropped_total == 1


async def test_a_stamp_written_by_a_client_cannot_extend_a_loop(engine):
    await engine.put_topic("A")
    await engine.put_router("A->B", route("A", "B"))
    await engine.put_router("B->C", route("B", "C"))
    await engine.put_router("C->A", route("C", "A", allow_cycle=True))
    forged = b'{"_topics_router":{"router":"x","inc":1,"src_seq":1,"hops":7,"origin":"nowhere"}}'
    await engine.write("A", [{"data": "f", "meta": forged}])
    await settle()
    assert datas(await read_all(engine, "B")) == ["f"]  # hops 8
    assert await read_all(engine, "C") == []  # hops 9: over the cap
    meta = (await read_all(engine, "B"))[0]["meta"]["_topics_router"]
    assert (meta["hops"], meta["origin"]) == (HOP_CAP, "A")  # an unknown origin is reset


async def test_three_node_multi_master_sees_each_record_once_without_echo(engine):
    """Three nodes, each writing to and reading its own topic, joined in a ring of routers
    with allow_cycle: every node sees every other node's records exactly once and never
    its own (node filter §4.5 + loop breaking)."""
    nodes = ["n1", "n2", "n3"]
    for n in nodes:
        await engine.put_topic(f"mm.{n}")
    for i, n in enumerate(nodes):
        nxt = nodes[(i + 1) % 3]
        body = route(f"mm.{n}", f"mm.{nxt}", allow_cycle=True)
        if i < 2:
            body.pop("allow_cycle")  # only the router that closes the ring needs it
        await engine.put_router(f"{n}->{nxt}", body)
    for round_ in range(3):
        for n in nodes:
            await engine.write(f"mm.{n}", recs(f"{n}-{round_}"), node=n)
        await settle()
    for n in nodes:
        seen = await read_all(engine, f"mm.{n}", node=n)
        want = sorted(f"{o}-{r}" for o in nodes if o != n for r in range(3))
        assert sorted(datas(seen)) == want, n
        assert all(rec["$node"] != n for rec in seen)
        everything = await read_all(engine, f"mm.{n}")
        assert len(everything) == 9  # each record exactly once per topic, own ones included
    assert all(r.on_cycle for r in engine._router_set.routers.values())


def test_match_arg_and_filter_share_one_language():
    assert _args.match_arg(["tag", "Glob", "a*"]) == ("Glob", b"a")


def test_the_sync_facade_manages_routers():
    with topics.open(None) as db:
        db.put_topic("a")
        res = db.put_router("r", {"source": "a", "dest": "b"})
        assert isinstance(res, topics.PutRouterResult)
        assert res.created
        db.write("a", [{"data": 1}])
        page = db.diff("b", wait_ms=10_000)  # the worker runs on the engine thread
        assert [r.data for r in page.records] == [1]
        assert isinstance(db.get_router("r"), topics.RouterInfo)
        assert [r.router for r in db.list_routers(source="a").routers] == ["r"]
        assert db.delete_router("r").deleted
        with pytest.raises(RouterNotFoundError):
            db.get_router("r")
