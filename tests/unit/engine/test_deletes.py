"""Record deletes (contract §5, §3.3 silence; SEMANTICS.md rules 9, 12, 25-27)."""

from __future__ import annotations

from typing import Any

import pytest

from topics._clock import ManualClock
from topics.errors import InvalidRequestError, TopicNotFoundError

from ._support import record_size, recs, seqs_of, snapshot

TAGGED: list[dict[str, Any]] = [
    {"data": 1, "tag": "a"},
    {"data": 2, "tag": "b"},
    {"data": 3, "tag": "a"},
    {"data": 4},
    {"data": 5, "tag": "ab"},
    {"data": 6, "tag": "a*"},
    {"data": 7, "tag": "A"},
]


def bytes_of(datas: list[int]) -> int:
    return sum(record_size(r) for r in TAGGED if r["data"] in datas)


async def remaining(engine, topic: str = "t") -> list[Any]:
    return [r.data for r in (await engine.diff(topic, from_seq=0, limit=1000)).records]


async def assert_state(
    engine, result, *, deleted: int, earliest: int, head: int, count: int, nbytes: int
) -> None:
    assert (result.deleted, result.earliest_seq, result.head_seq, result.count, result.bytes) == (
        deleted,
        earliest,
        head,
        count,
        nbytes,
    )
    st = await engine.get_topic(result.topic, touch=False)
    assert (st.earliest_seq, st.head_seq, st.count, st.bytes) == (earliest, head, count, nbytes)


# ---------------------------------------------------------------------------------
# before_seq
# ---------------------------------------------------------------------------------


async def test_before_seq_deletes_every_record_below_it(engine):
    await engine.write("t", TAGGED)
    res = await engine.delete_records("t", before_seq=3)
    assert res.topic == "t"
    assert res.to_dict() == {
        "topic": "t",
        "deleted": 2,
        "earliest_seq": 3,
        "head_seq": 7,
        "count": 5,
        "bytes": bytes_of([3, 4, 5, 6, 7]),
    }
    await assert_state(
        engine, res, deleted=2, earliest=3, head=7, count=5, nbytes=bytes_of([3, 4, 5, 6, 7])
    )
    assert await remaining(engine) == [3, 4, 5, 6, 7]


@pytest.mark.parametrize("before_seq", [0, 1])
async def test_before_seq_at_or_below_first_seq_deletes_nothing(engine, before_seq):
    await engine.write("t", TAGGED)
    before = await snapshot(engine, "t")
    res = await engine.delete_records("t", before_seq=before_seq)
    assert (res.deleted, res.earliest_seq, res.count) == (0, 1, 7)
    assert await snapshot(engine, "t") == before


async def test_before_seq_beyond_head_deletes_only_present_records(engine):
    await engine.write("t", recs(1, 2, 3, 4, 5))
    res = await engine.delete_records("t", before_seq=100)
    assert (res.deleted, res.earliest_seq, res.head_seq, res.count, res.bytes) == (5, 6, 5, 0, 0)
    await engine.write("t", recs(6, 7))
    assert await remaining(engine) == [6, 7]
    st = await engine.get_topic("t", touch=False)
    assert (st.earliest_seq, st.count) == (6, 2)


async def test_deleting_again_deletes_nothing_more(engine):
    await engine.write("t", recs(1, 2, 3))
    assert (await engine.delete_records("t", before_seq=3)).deleted == 2
    again = await engine.delete_records("t", before_seq=3)
    assert (again.deleted, again.earliest_seq, again.count) == (0, 3, 1)


async def test_delete_on_empty_topic_deletes_nothing(engine):
    await engine.put_topic("t")
    res = await engine.delete_records("t", before_seq=10)
    assert (res.deleted, res.earliest_seq, res.head_seq, res.count, res.bytes) == (0, 1, 0, 0, 0)


# ---------------------------------------------------------------------------------
# match
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("match", "gone"),
    [
        ("a", [1, 3]),
        (["tag", "Eq", "a"], [1, 3]),
        (["tag", "Eq", "a*"], [6]),
        (["tag", "Eq", "A"], [7]),
        (["tag", "Eq", "zzz"], []),
        (["tag", "Glob", "a*"], [1, 3, 5, 6]),
        (["tag", "Glob", "ab*"], [5]),
        (["tag", "Glob", "A*"], [7]),
        (["tag", "Glob", "*"], [1, 2, 3, 5, 6, 7]),
        (["tag", "Glob", "abc*"], []),
        ("zzz", []),
    ],
    ids=repr,
)
async def test_match_deletes_exactly_the_matching_tags(engine, match, gone):
    await engine.write("t", TAGGED)
    res = await engine.delete_records("t", match=match)
    kept = [r["data"] for r in TAGGED if r["data"] not in gone]
    await assert_state(
        engine,
        res,
        deleted=len(gone),
        earliest=kept[0],
        head=7,
        count=len(kept),
        nbytes=bytes_of(kept),
    )
    assert await remaining(engine) == kept


async def test_bare_string_match_is_shorthand_for_eq(engine):
    await engine.write("a", TAGGED)
    await engine.write("b", TAGGED)
    one = await engine.delete_records("a", match="tenant42:job-9001")
    two = await engine.delete_records("b", match=["tag", "Eq", "tenant42:job-9001"])
    assert one.deleted == two.deleted == 0
    await engine.write("a", [{"data": 8, "tag": "tenant42:job-9001"}])
    await engine.write("b", [{"data": 8, "tag": "tenant42:job-9001"}])
    assert (await engine.delete_records("a", match="tenant42:job-9001")).deleted == 1
    assert (await engine.delete_records("b", match=["tag", "Eq", "tenant42:job-9001"])).deleted == 1
    assert await remaining(engine, "a") == await remaining(engine, "b") == [1, 2, 3, 4, 5, 6, 7]


async def test_untagged_records_are_never_matched(engine):
    await engine.write("t", [*recs(1, 2), {"data": 3, "tag": "x"}, *recs(4)])
    res = await engine.delete_records("t", match=["tag", "Glob", "*"])
    assert res.deleted == 1
    assert await remaining(engine) == [1, 2, 4]


async def test_match_and_before_seq_are_anded(engine):
    await engine.write(
        "t",
        [
            {"data": "v1", "tag": "msg-123"},
            {"data": "other", "tag": "msg-999"},
            {"data": "v2", "tag": "msg-123"},
        ],
    )
    res = await engine.delete_records("t", match=["tag", "Eq", "msg-123"], before_seq=3)
    assert (res.deleted, res.earliest_seq, res.count) == (1, 2, 2)
    assert await remaining(engine) == ["other", "v2"]


async def test_glob_and_before_seq_are_anded(engine):
    await engine.write(
        "t",
        [
            {"data": 1, "tag": "chat-42:a"},
            {"data": 2, "tag": "chat-42:b"},
            {"data": 3, "tag": "chat-43"},
            {"data": 4, "tag": "chat-42:c"},
        ],
    )
    res = await engine.delete_records("t", match=["tag", "Glob", "chat-42:*"], before_seq=4)
    assert (res.deleted, res.earliest_seq, res.count) == (2, 3, 2)
    assert await remaining(engine) == [3, 4]


async def test_match_delete_is_point_in_time(engine):
    await engine.write("t", [{"data": 1, "tag": "chat-42:u"}, {"data": 2, "tag": "chat-42:v"}])
    assert (await engine.delete_records("t", match=["tag", "Glob", "chat-42:*"])).deleted == 2
    await engine.write("t", [{"data": 3, "tag": "chat-42:u"}, {"data": 4, "tag": "chat-42:w"}])
    assert await remaining(engine) == [3, 4]
    st = await engine.get_topic("t", touch=False)
    assert (st.earliest_seq, st.count) == (3, 2)


async def test_deleting_middle_records_keeps_earliest_seq(engine):
    await engine.write("t", TAGGED)
    res = await engine.delete_records("t", match="b")
    await assert_state(
        engine, res, deleted=1, earliest=1, head=7, count=6, nbytes=bytes_of([1, 3, 4, 5, 6, 7])
    )


async def test_deleting_the_first_records_advances_earliest_past_deleted_prefix(engine):
    await engine.write("t", TAGGED)
    await engine.delete_records("t", match="b")
    res = await engine.delete_records("t", match="a")
    await assert_state(
        engine, res, deleted=2, earliest=4, head=7, count=4, nbytes=bytes_of([4, 5, 6, 7])
    )


# ---------------------------------------------------------------------------------
# Invalid forms change nothing
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"before_seq": None, "match": None},
        {"match": ["tag", "Regex", "x"]},
        {"match": ["tag", "Glob", "a"]},
        {"match": ["tag", "Glob", "a*b*"]},
        {"match": ["tag", "Glob", "a*b"]},
        {"match": ["tag", "Glob", "*a"]},
        {"match": ["tag", "Glob", "a**"]},
        {"match": ["tag", "Glob", ""]},
        {"match": ["tag", "eq", "a"]},
        {"match": ["tag", "Eq"]},
        {"match": ["tag", "Eq", "a", "b"]},
        {"match": ["tag"]},
        {"match": []},
        {"match": ["name", "Eq", "a"]},
        {"match": ["tag", "Eq", 5]},
        {"match": ["tag", "Glob", None]},
        {"match": 5},
        {"match": {"tag": "a"}},
        {"before_seq": -1},
        {"before_seq": 1.5},
        {"before_seq": "3"},
        {"before_seq": True},
        {"before_seq": 5, "match": ["tag", "Glob", "a"]},
        {"before_seq": -1, "match": "a"},
    ],
    ids=repr,
)
async def test_invalid_delete_is_rejected_and_changes_nothing(engine, kwargs):
    await engine.write("t", TAGGED)
    before = await snapshot(engine, "t")
    with pytest.raises(InvalidRequestError) as err:
        await engine.delete_records("t", **kwargs)
    assert err.value.code == "invalid_request"
    assert err.value.status == 400
    assert await snapshot(engine, "t") == before
    assert await remaining(engine) == [1, 2, 3, 4, 5, 6, 7]


async def test_delete_on_absent_topic_is_not_found_and_creates_nothing(engine):
    with pytest.raises(TopicNotFoundError) as err:
        await engine.delete_records("ghost", before_seq=10)
    assert err.value.code == "topic_not_found"
    assert err.value.status == 404
    with pytest.raises(TopicNotFoundError):
        await engine.delete_records("ghost", match="a")
    with pytest.raises(TopicNotFoundError):
        await engine.get_topic("ghost", touch=False)


# ---------------------------------------------------------------------------------
# Silence and interaction with retention
# ---------------------------------------------------------------------------------


async def test_delete_never_produces_a_tombstone(engine):
    await engine.write("t", TAGGED)
    await engine.delete_records("t", before_seq=4)
    for cursor in (0, 1, 2):
        res = await engine.diff("t", from_seq=cursor)
        assert res.tombstone is None
        assert seqs_of(res) == [4, 5, 6, 7]
        assert res.earliest_seq == 4


async def test_tag_delete_below_a_reader_cursor_is_silent(engine):
    await engine.write("t", TAGGED)
    await engine.delete_records("t", match=["tag", "Glob", "a*"])
    res = await engine.diff("t", from_seq=0)
    assert res.tombstone is None
    assert seqs_of(res) == [2, 4, 7]


async def test_delete_skips_records_already_expired(engine, clock: ManualClock):
    await engine.put_topic("t", {"ttl_ms": 1000})
    await engine.write("t", recs(1, 2, 3))
    clock.advance(1001)
    await engine.write("t", recs(4))
    res = await engine.delete_records("t", before_seq=10)
    assert (res.deleted, res.earliest_seq, res.count) == (1, 5, 0)


async def test_delete_does_not_hide_an_earlier_ttl_loss(engine, clock: ManualClock):
    await engine.put_topic("t", {"ttl_ms": 1000})
    await engine.write("t", recs(1, 2, 3))
    clock.advance(500)
    await engine.write("t", recs(4, 5))
    clock.advance(501)
    await engine.delete_records("t", before_seq=5)
    res = await engine.diff("t", from_seq=0)
    assert res.tombstone is not None
    assert (res.tombstone.gap_from, res.tombstone.gap_to, res.tombstone.reason) == (1, 4, "ttl")
    assert seqs_of(res) == [5]
    quiet = await engine.diff("t", from_seq=3)
    assert quiet.tombstone is None
    assert seqs_of(quiet) == [5]


async def test_delete_skips_records_already_evicted(engine):
    await engine.put_topic("t", {"cap_records": 3})
    await engine.write("t", recs(1, 2, 3, 4, 5))
    res = await engine.delete_records("t", before_seq=3)
    assert (res.deleted, res.earliest_seq, res.count) == (0, 3, 3)


# ---------------------------------------------------------------------------------
# Many records: deletes stay exact across internal segment boundaries
# ---------------------------------------------------------------------------------


def _numbered(first: int, n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for seq in range(first, first + n):
        rec: dict[str, Any] = {"data": seq}
        if 20_001 <= seq <= 70_000:
            rec["tag"] = "mid"
        elif seq == 85_000:
            rec["tag"] = "late"
        out.append(rec)
    return out


async def test_deletes_across_many_records_keep_reads_and_counters_exact(engine):
    written: list[dict[str, Any]] = []
    for b in range(90):
        batch = _numbered(b * 1000 + 1, 1000)
        written.extend(batch)
        await engine.write("t", batch)
    size = {r["data"]: record_size(r) for r in written}

    res = await engine.delete_records("t", match="mid")
    live = [s for s in range(1, 90_001) if not 20_001 <= s <= 70_000]
    assert (res.deleted, res.earliest_seq, res.count, res.bytes) == (
        50_000,
        1,
        40_000,
        sum(size[s] for s in live),
    )

    page = await engine.diff("t", from_seq=19_990, limit=20)
    assert [r.data for r in page.records] == [*range(19_991, 20_001), *range(70_001, 70_011)]
    assert page.next_from_seq == 70_010

    res = await engine.delete_records("t", before_seq=80_000)
    live = list(range(80_000, 90_001))
    assert (res.deleted, res.earliest_seq, res.count, res.bytes) == (
        29_999,
        80_000,
        10_001,
        sum(size[s] for s in live),
    )

    res = await engine.delete_records("t", match=["tag", "Glob", "la*"])
    assert (res.deleted, res.count) == (1, 10_000)
    tail = await engine.diff("t", from_seq=84_998, limit=3)
    assert [r.data for r in tail.records] == [84_999, 85_001, 85_002]
    quiet = await engine.diff("t", from_seq=0, limit=1)
    assert quiet.tombstone is None
    assert seqs_of(quiet) == [80_000]


async def test_match_counts_only_records_still_live_after_eviction(engine):
    await engine.put_topic("t", {"cap_records": 3})
    await engine.write("t", [{"data": i, "tag": "x"} for i in range(1, 6)])
    res = await engine.delete_records("t", match="x")
    assert (res.deleted, res.count, res.earliest_seq) == (3, 0, 6)


async def test_match_counts_only_records_still_live_after_expiry(engine, clock: ManualClock):
    await engine.put_topic("t", {"ttl_ms": 1000})
    await engine.write("t", [{"data": 1, "tag": "job:1"}, {"data": 2, "tag": "job:2"}])
    clock.advance(1001)
    await engine.write("t", [{"data": 3, "tag": "job:3"}])
    res = await engine.delete_records("t", match=["tag", "Glob", "job:*"])
    assert (res.deleted, res.count, res.earliest_seq) == (1, 0, 4)


async def test_recreated_topic_has_a_fresh_tag_index(engine):
    await engine.write("t", [{"data": 1, "tag": "x"}, {"data": 2, "tag": "x"}])
    await engine.delete_topic("t")
    await engine.write("t", [{"data": "new", "tag": "x"}, {"data": "other", "tag": "y"}])
    res = await engine.delete_records("t", match="x")
    assert (res.deleted, res.count, res.earliest_seq, res.head_seq) == (1, 1, 2, 2)
    assert await remaining(engine) == ["other"]
