"""Reads (contract §3, §3.3 tombstones, §4.5 node filter; SEMANTICS.md rules 6, 9-17)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from topics._clock import ManualClock
from topics.errors import InvalidRequestError, TopicNotFoundError
from topics.types import Tombstone

from ._support import START_MS, recs, rendered, seqs_of, with_limits


def tomb(
    gap_from: int, gap_to: int, reason: str, missed: int, earliest: int, head: int
) -> Tombstone:
    return Tombstone(
        gap_from=gap_from,
        gap_to=gap_to,
        reason=reason,  # type: ignore[arg-type]
        missed_estimate=missed,
        earliest_seq=earliest,
        head_seq=head,
    )


# ---------------------------------------------------------------------------------
# Cursor, limit, next_from_seq, caught_up, lag
# ---------------------------------------------------------------------------------


async def test_from_seq_is_an_exclusive_lower_bound(engine):
    await engine.write("t", recs("a", "b", "c", "d", "e"))
    res = await engine.diff("t", from_seq=2)
    assert seqs_of(res) == [3, 4, 5]
    assert [r.data for r in res.records] == ["c", "d", "e"]
    assert res.record_count == 3


async def test_from_seq_zero_reads_from_the_first_record(engine):
    await engine.write("t", recs("a", "b"))
    assert seqs_of(await engine.diff("t", from_seq=0)) == [1, 2]
    assert seqs_of(await engine.diff("t")) == [1, 2]


async def test_diff_of_empty_topic_is_caught_up_at_zero(engine):
    await engine.put_topic("t")
    res = await engine.diff("t")
    assert rendered(res) == []
    assert res.record_count == 0
    assert res.records == []
    assert (res.next_from_seq, res.head_seq, res.earliest_seq) == (0, 0, 1)
    assert (res.caught_up, res.lag, res.tombstone, res.records_scanned) == (True, 0, None, 0)


async def test_diff_from_head_returns_nothing_and_is_caught_up(engine):
    await engine.write("t", recs(1, 2, 3))
    res = await engine.diff("t", from_seq=3)
    assert rendered(res) == []
    assert (res.next_from_seq, res.head_seq, res.caught_up, res.lag, res.tombstone) == (
        3,
        3,
        True,
        0,
        None,
    )


async def test_diff_answer_has_contract_shape(engine):
    await engine.write("t", recs({"k": 1}, None))
    res = await engine.diff("t", from_seq=0)
    assert res.to_dict() == {
        "topic": "t",
        "records": [
            {"$seq": 1, "$ts": START_MS, "data": {"k": 1}},
            {"$seq": 2, "$ts": START_MS, "data": None},
        ],
        "next_from_seq": 2,
        "head_seq": 2,
        "earliest_seq": 1,
        "caught_up": True,
        "tombstone": None,
        "lag": 0,
    }
    assert res.records_scanned == 2


async def test_limit_bounds_the_batch_and_lag_counts_the_rest(engine):
    await engine.write("t", recs(*range(1, 11)))
    first = await engine.diff("t", from_seq=0, limit=4)
    assert seqs_of(first) == [1, 2, 3, 4]
    assert (first.next_from_seq, first.caught_up, first.lag, first.records_scanned) == (
        4,
        False,
        6,
        4,
    )
    second = await engine.diff("t", from_seq=first.next_from_seq, limit=4)
    assert seqs_of(second) == [5, 6, 7, 8]
    assert (second.next_from_seq, second.caught_up, second.lag) == (8, False, 2)
    third = await engine.diff("t", from_seq=second.next_from_seq, limit=4)
    assert seqs_of(third) == [9, 10]
    assert (third.next_from_seq, third.caught_up, third.lag) == (10, True, 0)


async def test_limit_ending_exactly_at_head_is_caught_up(engine):
    await engine.write("t", recs(1, 2, 3))
    res = await engine.diff("t", limit=3)
    assert seqs_of(res) == [1, 2, 3]
    assert (res.next_from_seq, res.caught_up, res.lag) == (3, True, 0)


@pytest.mark.parametrize("kwargs", [{}, {"limit": 0}], ids=["omitted", "zero"])
async def test_default_limit_is_256(engine, kwargs):
    await engine.write("t", recs(*range(300)))
    res = await engine.diff("t", from_seq=0, **kwargs)
    assert seqs_of(res) == list(range(1, 257))
    assert (res.next_from_seq, res.caught_up, res.lag) == (256, False, 44)


@pytest.mark.parametrize(
    ("limit", "returned"), [(999, 999), (1000, 1000), (1001, 1000), (5000, 1000)]
)
async def test_limit_is_clamped_to_1000(engine, limit, returned):
    await engine.write("t", recs(*range(1200)))
    res = await engine.diff("t", from_seq=0, limit=limit)
    assert res.record_count == returned
    assert seqs_of(res) == list(range(1, returned + 1))
    assert (res.next_from_seq, res.lag) == (returned, 1200 - returned)


@with_limits(max_limit=10)
async def test_limit_clamp_follows_max_limit(engine):
    await engine.write("t", recs(*range(20)))
    res = await engine.diff("t", limit=50)
    assert seqs_of(res) == list(range(1, 11))


async def test_deleted_seqs_are_skipped_for_free(engine):
    await engine.write(
        "t", [{"data": 1}, {"data": 2, "tag": "gone"}, {"data": 3, "tag": "gone"}, *recs(4, 5, 6)]
    )
    await engine.delete_records("t", match="gone")
    res = await engine.diff("t", from_seq=0, limit=2)
    assert seqs_of(res) == [1, 4]
    assert (res.next_from_seq, res.records_scanned, res.caught_up, res.lag) == (4, 2, False, 2)


async def test_scan_reaching_head_over_deleted_tail_ends_at_head(engine):
    await engine.write(
        "t", [*recs(1, 2, 3), {"data": 4, "tag": "gone"}, {"data": 5, "tag": "gone"}]
    )
    await engine.delete_records("t", match="gone")
    res = await engine.diff("t", from_seq=0)
    assert seqs_of(res) == [1, 2, 3]
    assert (res.next_from_seq, res.head_seq, res.caught_up, res.lag, res.records_scanned) == (
        5,
        5,
        True,
        0,
        3,
    )


async def test_diff_stops_at_the_one_mib_byte_budget(engine):
    big = "x" * 400_000
    await engine.write("t", recs(big, big, big, big, big))
    res = await engine.diff("t", from_seq=0)
    assert seqs_of(res) == [1, 2, 3]
    assert (res.next_from_seq, res.caught_up, res.lag) == (3, False, 2)
    rest = await engine.diff("t", from_seq=3)
    assert seqs_of(rest) == [4, 5]
    assert rest.caught_up is True


@with_limits(max_record_bytes=2 << 20)
async def test_diff_always_returns_at_least_one_record_over_the_budget(engine):
    await engine.write("t", recs("x" * 1_500_000, "small"))
    res = await engine.diff("t", from_seq=0)
    assert seqs_of(res) == [1]
    assert (res.next_from_seq, res.caught_up) == (1, False)
    assert seqs_of(await engine.diff("t", from_seq=1)) == [2]


# ---------------------------------------------------------------------------------
# include_* flags
# ---------------------------------------------------------------------------------

FLAG_BATCH = [{"data": 1, "tag": "t1", "meta": {"m": 1}, "node": "n1"}, {"data": 2}]


async def test_default_render_is_what_was_written(engine):
    """The Python API's default: tag included (issue 34; the HTTP wire's default is the
    contract's, no tag: tests/integration/client/test_tags_default.py)."""
    await engine.write("t", FLAG_BATCH)
    assert rendered(await engine.diff("t")) == [
        {"$seq": 1, "$ts": START_MS, "$node": "n1", "$tag": "t1", "data": 1, "meta": {"m": 1}},
        {"$seq": 2, "$ts": START_MS, "data": 2},
    ]
    (first, _) = (await engine.diff("t")).records
    assert first.tag == "t1"


async def test_include_tags_false_drops_tag(engine):
    await engine.write("t", FLAG_BATCH)
    assert rendered(await engine.diff("t", include_tags=False)) == [
        {"$seq": 1, "$ts": START_MS, "$node": "n1", "data": 1, "meta": {"m": 1}},
        {"$seq": 2, "$ts": START_MS, "data": 2},
    ]
    (first, _) = (await engine.diff("t", include_tags=False)).records
    assert first.tag is None


async def test_include_meta_false_drops_meta(engine):
    await engine.write("t", FLAG_BATCH)
    assert rendered(await engine.diff("t", include_meta=False, include_tags=False)) == [
        {"$seq": 1, "$ts": START_MS, "$node": "n1", "data": 1},
        {"$seq": 2, "$ts": START_MS, "data": 2},
    ]


async def test_include_data_false_drops_data(engine):
    await engine.write("t", FLAG_BATCH)
    assert rendered(
        await engine.diff("t", include_data=False, include_tags=True, include_meta=False)
    ) == [
        {"$seq": 1, "$ts": START_MS, "$node": "n1", "$tag": "t1"},
        {"$seq": 2, "$ts": START_MS},
    ]


# ---------------------------------------------------------------------------------
# Node filter (§4.5)
# ---------------------------------------------------------------------------------

NODE_BATCH = [
    {"data": "a1", "node": "A"},
    {"data": "b2", "node": "B"},
    {"data": "x3"},
    {"data": "a4", "node": "A"},
    {"data": "c5", "node": "C"},
]


@pytest.mark.parametrize(
    ("node", "kept"),
    [
        ("A", ["b2", "x3", "c5"]),
        (["A"], ["b2", "x3", "c5"]),
        (["A", "C"], ["b2", "x3"]),
        (["B", "C", "A"], ["x3"]),
        ("a", ["a1", "b2", "x3", "a4", "c5"]),
        ("A ", ["a1", "b2", "x3", "a4", "c5"]),
        ([], ["a1", "b2", "x3", "a4", "c5"]),
        (None, ["a1", "b2", "x3", "a4", "c5"]),
    ],
)
async def test_node_filter_drops_own_records_and_still_advances(engine, node, kept):
    await engine.write("t", NODE_BATCH)
    res = await engine.diff("t", from_seq=0, node=node)
    assert [r.data for r in res.records] == kept
    assert (res.next_from_seq, res.caught_up, res.lag, res.records_scanned, res.tombstone) == (
        5,
        True,
        0,
        5,
        None,
    )


async def test_node_filter_is_exact_not_prefix(engine):
    await engine.write("t", [{"data": 1, "node": "worker-1"}, {"data": 2, "node": "worker"}])
    res = await engine.diff("t", node="worker")
    assert [r.data for r in res.records] == [1]


async def test_node_filter_matches_batch_level_node(engine):
    await engine.write("t", recs(1, 2), node="me")
    await engine.write("t", recs(3), node="other")
    res = await engine.diff("t", node="me")
    assert [r.data for r in res.records] == [3]
    assert res.next_from_seq == 3


async def test_filtered_records_count_toward_the_window(engine):
    await engine.write(
        "t",
        [*[{"data": i, "node": "A"} for i in range(1, 5)], {"data": 5, "node": "B"}, {"data": 6}],
    )
    first = await engine.diff("t", from_seq=0, node="A", limit=3)
    assert rendered(first) == []
    assert first.record_count == 0
    assert (first.next_from_seq, first.caught_up, first.lag, first.records_scanned) == (
        3,
        False,
        3,
        3,
    )
    second = await engine.diff("t", from_seq=first.next_from_seq, node="A", limit=3)
    assert [r.data for r in second.records] == [5, 6]
    assert (second.next_from_seq, second.caught_up, second.records_scanned) == (6, True, 3)


async def test_all_filtered_read_is_empty_but_caught_up(engine):
    await engine.write("t", recs(1, 2, 3), node="A")
    res = await engine.diff("t", node="A")
    assert rendered(res) == []
    assert (res.next_from_seq, res.caught_up, res.lag, res.records_scanned) == (3, True, 0, 3)


async def test_dedupe_node_false_disables_node_filtering(engine):
    await engine.put_topic("t", {"dedupe_node": False})
    await engine.write("t", NODE_BATCH)
    res = await engine.diff("t", node=["A", "B", "C"])
    assert [r.data for r in res.records] == ["a1", "b2", "x3", "a4", "c5"]


@pytest.mark.parametrize("node", [5, [5], ["A", None], {"node": "A"}, b"A"], ids=repr)
async def test_node_filter_of_wrong_type_is_invalid(engine, node):
    await engine.write("t", recs(1))
    with pytest.raises(InvalidRequestError):
        await engine.diff("t", node=node)


# ---------------------------------------------------------------------------------
# Tombstones (§3.3, rules 9-12)
# ---------------------------------------------------------------------------------


async def test_cap_eviction_past_cursor_emits_tombstone(engine):
    await engine.put_topic("t", {"cap_records": 3})
    for i in range(1, 6):
        await engine.write("t", recs(i))
    res = await engine.diff("t", from_seq=1)
    assert res.tombstone == tomb(2, 2, "cap", 1, 3, 5)
    assert seqs_of(res) == [3, 4, 5]
    assert (res.next_from_seq, res.earliest_seq, res.head_seq, res.caught_up) == (5, 3, 5, True)
    assert res.to_dict()["tombstone"] == {
        "gap_from": 2,
        "gap_to": 2,
        "reason": "cap",
        "missed_estimate": 1,
        "earliest_seq": 3,
        "head_seq": 5,
    }


async def test_cap_tombstone_from_seq_zero_covers_everything_evicted(engine):
    await engine.put_topic("t", {"cap_records": 3})
    await engine.write("t", recs(1, 2, 3, 4, 5))
    res = await engine.diff("t", from_seq=0)
    assert res.tombstone == tomb(1, 2, "cap", 2, 3, 5)
    assert seqs_of(res) == [3, 4, 5]


async def test_cursor_at_the_cap_floor_gets_no_tombstone(engine):
    await engine.put_topic("t", {"cap_records": 3})
    await engine.write("t", recs(1, 2, 3, 4, 5))
    res = await engine.diff("t", from_seq=2)
    assert res.tombstone is None
    assert seqs_of(res) == [3, 4, 5]


async def test_tombstone_read_continues_normally_with_limit(engine):
    await engine.put_topic("t", {"cap_records": 3})
    await engine.write("t", recs(1, 2, 3, 4, 5))
    res = await engine.diff("t", from_seq=0, limit=2)
    assert res.tombstone == tomb(1, 2, "cap", 2, 3, 5)
    assert seqs_of(res) == [3, 4]
    assert (res.next_from_seq, res.caught_up, res.lag) == (4, False, 1)
    after = await engine.diff("t", from_seq=res.next_from_seq)
    assert after.tombstone is None
    assert seqs_of(after) == [5]


async def test_ttl_expiry_past_cursor_emits_tombstone(engine, clock: ManualClock):
    await engine.put_topic("t", {"ttl_ms": 1000})
    await engine.write("t", recs(1, 2, 3))
    clock.advance(500)
    await engine.write("t", recs(4, 5))
    clock.advance(501)
    res = await engine.diff("t", from_seq=1)
    assert res.tombstone == tomb(2, 3, "ttl", 2, 4, 5)
    assert seqs_of(res) == [4, 5]
    assert (res.earliest_seq, res.next_from_seq, res.caught_up) == (4, 5, True)
    assert (await engine.diff("t", from_seq=0)).tombstone == tomb(1, 3, "ttl", 3, 4, 5)
    assert (await engine.diff("t", from_seq=3)).tombstone is None


async def test_ttl_expiry_of_everything_leaves_an_empty_caught_up_read(engine, clock: ManualClock):
    await engine.put_topic("t", {"ttl_ms": 1000})
    await engine.write("t", recs(1, 2, 3))
    clock.advance(1001)
    res = await engine.diff("t", from_seq=1)
    assert res.tombstone == tomb(2, 3, "ttl", 2, 4, 3)
    assert rendered(res) == []
    assert (res.next_from_seq, res.earliest_seq, res.head_seq, res.caught_up, res.lag) == (
        3,
        4,
        3,
        True,
        0,
    )


async def test_ttl_boundary_record_is_live_at_exactly_ttl(engine, clock: ManualClock):
    await engine.put_topic("t", {"ttl_ms": 1000})
    await engine.write("t", recs("a", "b"))
    clock.advance(1000)
    live = await engine.diff("t", from_seq=0)
    assert seqs_of(live) == [1, 2]
    assert live.tombstone is None
    st = await engine.get_topic("t", touch=False)
    assert (st.count, st.earliest_seq) == (2, 1)
    clock.advance(1)
    gone = await engine.diff("t", from_seq=0)
    assert rendered(gone) == []
    assert gone.tombstone == tomb(1, 2, "ttl", 2, 3, 2)
    st = await engine.get_topic("t", touch=False)
    assert (st.count, st.bytes, st.earliest_seq, st.head_seq) == (0, 0, 3, 2)


async def _mixed_topic(engine, clock: ManualClock) -> None:
    """cap_floor = 3 (seqs 1-2 evicted), then ttl_floor = 4 (seq 3 expired)."""
    await engine.put_topic("t", {"cap_records": 4, "ttl_ms": 1000})
    await engine.write("t", recs(1, 2, 3))
    clock.advance(500)
    await engine.write("t", recs(4, 5, 6))
    clock.advance(501)


@pytest.mark.parametrize(
    ("from_seq", "expected"),
    [
        (0, tomb(1, 3, "mixed", 3, 4, 6)),
        (1, tomb(2, 3, "mixed", 2, 4, 6)),
        (2, tomb(3, 3, "ttl", 1, 4, 6)),
        (3, None),
    ],
)
async def test_cap_then_ttl_loss_reasons(engine, clock: ManualClock, from_seq, expected):
    await _mixed_topic(engine, clock)
    res = await engine.diff("t", from_seq=from_seq)
    assert res.tombstone == expected
    assert seqs_of(res) == [4, 5, 6]
    assert res.earliest_seq == 4


@pytest.mark.parametrize(
    ("from_seq", "expected"),
    [
        (0, tomb(1, 3, "mixed", 3, 4, 5)),
        (1, tomb(2, 3, "mixed", 2, 4, 5)),
        (2, tomb(3, 3, "cap", 1, 4, 5)),
        (3, None),
    ],
)
async def test_ttl_then_cap_loss_reasons(engine, clock: ManualClock, from_seq, expected):
    # ttl_floor = 3 (seqs 1-2 expired), then cap_floor = 4 (seq 3 evicted).
    await engine.put_topic("t", {"cap_records": 2, "ttl_ms": 1000})
    await engine.write("t", recs(1, 2))
    clock.advance(1001)
    await engine.write("t", recs(3, 4, 5))
    res = await engine.diff("t", from_seq=from_seq)
    assert res.tombstone == expected
    assert seqs_of(res) == [4, 5]


async def test_a_response_carries_at_most_one_tombstone(engine, clock: ManualClock):
    await _mixed_topic(engine, clock)
    res = await engine.diff("t", from_seq=0)
    assert isinstance(res.tombstone, Tombstone)
    assert res.tombstone.reason == "mixed"
    follow = await engine.diff("t", from_seq=res.next_from_seq)
    assert follow.tombstone is None


async def test_purely_deleted_gap_reads_silently(engine):
    await engine.write("t", recs(1, 2, 3, 4, 5))
    await engine.delete_records("t", before_seq=3)
    res = await engine.diff("t", from_seq=0)
    assert res.tombstone is None
    assert seqs_of(res) == [3, 4, 5]
    assert (res.earliest_seq, res.next_from_seq) == (3, 5)


async def test_tombstone_gap_runs_to_earliest_even_across_deleted_seqs(engine):
    await engine.put_topic("t", {"cap_records": 3})
    await engine.write("t", recs(1, 2, 3, 4, 5))
    await engine.delete_records("t", before_seq=5)
    res = await engine.diff("t", from_seq=0)
    assert res.tombstone == tomb(1, 4, "cap", 4, 5, 5)
    assert seqs_of(res) == [5]
    silent = await engine.diff("t", from_seq=2)
    assert silent.tombstone is None
    assert seqs_of(silent) == [5]


async def test_cap_eviction_after_deletes_sets_floor_past_evicted_live_record(engine):
    await engine.put_topic("t", {"cap_records": 3})
    await engine.write("t", recs(1, 2, 3))
    await engine.delete_records("t", before_seq=3)
    await engine.write("t", recs(4, 5))
    assert (await engine.diff("t", from_seq=0)).tombstone is None
    await engine.write("t", recs(6))
    res = await engine.diff("t", from_seq=0)
    assert res.tombstone == tomb(1, 3, "cap", 3, 4, 6)
    assert seqs_of(res) == [4, 5, 6]


async def test_expiry_of_already_deleted_records_moves_no_floor(engine, clock: ManualClock):
    await engine.put_topic("t", {"ttl_ms": 1000})
    await engine.write("t", recs(1, 2, 3))
    await engine.delete_records("t", before_seq=4)
    clock.advance(500)
    await engine.write("t", recs(4))
    clock.advance(501)
    res = await engine.diff("t", from_seq=0)
    assert res.tombstone is None
    assert seqs_of(res) == [4]
    assert res.earliest_seq == 4


async def test_cursor_from_before_a_recreate_gets_recreated_tombstone(engine):
    await engine.write("t", recs(1, 2, 3, 4, 5))
    await engine.delete_topic("t")
    await engine.write("t", recs("x", "y"))
    res = await engine.diff("t", from_seq=5)
    assert res.tombstone == tomb(1, 0, "recreated", 0, 1, 2)
    assert [r.data for r in res.records] == ["x", "y"]
    assert (res.next_from_seq, res.caught_up, res.head_seq) == (2, True, 2)


async def test_recreated_tombstone_covers_records_already_lost_in_new_topic(engine):
    await engine.write("t", recs(*range(10)))
    await engine.delete_topic("t")
    await engine.put_topic("t", {"cap_records": 2})
    await engine.write("t", recs("a", "b", "c", "d"))
    res = await engine.diff("t", from_seq=10)
    assert res.tombstone == tomb(1, 2, "recreated", 2, 3, 4)
    assert seqs_of(res) == [3, 4]


async def test_cursor_beyond_head_of_empty_recreated_topic(engine):
    await engine.write("t", recs(1, 2, 3))
    await engine.delete_topic("t")
    await engine.put_topic("t")
    res = await engine.diff("t", from_seq=3)
    assert res.tombstone == tomb(1, 0, "recreated", 0, 1, 0)
    assert rendered(res) == []
    assert (res.next_from_seq, res.caught_up, res.lag) == (0, True, 0)


async def test_any_cursor_beyond_head_is_treated_as_recreated(engine):
    await engine.write("t", recs(1, 2, 3))
    res = await engine.diff("t", from_seq=7)
    assert res.tombstone == tomb(1, 0, "recreated", 0, 1, 3)
    assert seqs_of(res) == [1, 2, 3]


async def test_recreated_topic_starts_with_fresh_floors(engine):
    await engine.put_topic("t", {"cap_records": 2})
    await engine.write("t", recs(1, 2, 3, 4, 5))
    await engine.delete_topic("t")
    await engine.write("t", recs("a", "b"))
    res = await engine.diff("t", from_seq=0)
    assert res.tombstone is None
    assert seqs_of(res) == [1, 2]


# ---------------------------------------------------------------------------------
# Absent topics and argument errors
# ---------------------------------------------------------------------------------


async def test_diff_on_absent_topic_is_not_found_and_never_creates_it(engine):
    with pytest.raises(TopicNotFoundError) as err:
        await engine.diff("ghost", from_seq=0)
    assert err.value.code == "topic_not_found"
    assert err.value.status == 404
    with pytest.raises(TopicNotFoundError):
        await engine.get_topic("ghost", touch=False)
    assert (await engine.list_topics()).topics == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"from_seq": -1},
        {"from_seq": "0"},
        {"from_seq": 1.5},
        {"from_seq": True},
        {"limit": -1},
        {"limit": "5"},
        {"limit": 2.0},
        {"include_tags": "yes"},
        {"include_tags": 1},
        {"include_meta": "no"},
        {"include_data": 0},
        {"wait_ms": -1},
        {"wait_ms": "5"},
        {"wait_ms": 0.5},
    ],
    ids=repr,
)
async def test_diff_with_bad_argument_is_invalid_request(engine, kwargs):
    await engine.write("t", recs(1))
    with pytest.raises(InvalidRequestError) as err:
        await engine.diff("t", **kwargs)
    assert err.value.code == "invalid_request"
    assert err.value.status == 400


# ---------------------------------------------------------------------------------
# wait_ms long-poll (rule 16); trio's autojump clock keeps these instant
# ---------------------------------------------------------------------------------


async def test_long_poll_returns_record_written_while_waiting(engine, autojump_clock):
    await engine.put_topic("t")
    results = []

    async def reader() -> None:
        results.append(await engine.diff("t", from_seq=0, wait_ms=10_000))

    start = trio.current_time()
    with trio.fail_after(3600):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            assert results == []
            await engine.write("t", recs("hello"))
    (res,) = results
    assert trio.current_time() - start < 10.0
    assert [r.data for r in res.records] == ["hello"]
    assert (res.next_from_seq, res.head_seq, res.caught_up) == (1, 1, True)


async def test_long_poll_from_head_wakes_on_next_write(engine, autojump_clock):
    await engine.write("t", recs(1, 2))
    results = []

    async def reader() -> None:
        results.append(await engine.diff("t", from_seq=2, wait_ms=10_000))

    start = trio.current_time()
    with trio.fail_after(3600):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            assert results == []
            await engine.write("t", recs(3, 4))
    (res,) = results
    assert trio.current_time() - start < 10.0
    assert seqs_of(res) == [3, 4]


async def test_long_poll_times_out_empty_and_caught_up(engine, autojump_clock):
    await engine.write("t", recs(1))
    start = trio.current_time()
    with trio.fail_after(3600):
        res = await engine.diff("t", from_seq=1, wait_ms=2000)
    elapsed = trio.current_time() - start
    assert 2.0 - 1e-6 <= elapsed < 2.5
    assert rendered(res) == []
    assert (res.next_from_seq, res.caught_up, res.tombstone) == (1, True, None)


async def test_long_poll_wait_is_clamped_to_30_seconds(engine, autojump_clock):
    await engine.put_topic("t")
    start = trio.current_time()
    with trio.fail_after(3600):
        res = await engine.diff("t", wait_ms=10_000_000)
    elapsed = trio.current_time() - start
    assert 30.0 - 1e-6 <= elapsed < 30.5
    assert (res.record_count, res.caught_up) == (0, True)


async def test_long_poll_does_not_wait_when_records_are_available(engine, autojump_clock):
    await engine.write("t", recs(1, 2))
    start = trio.current_time()
    res = await engine.diff("t", from_seq=0, wait_ms=10_000)
    assert trio.current_time() == start
    assert seqs_of(res) == [1, 2]


async def test_long_poll_does_not_wait_when_not_caught_up(engine, autojump_clock):
    await engine.write("t", recs(1, 2, 3, 4, 5), node="A")
    start = trio.current_time()
    res = await engine.diff("t", from_seq=0, node="A", limit=2, wait_ms=10_000)
    assert trio.current_time() == start
    assert rendered(res) == []
    assert (res.next_from_seq, res.caught_up) == (2, False)


async def test_long_poll_ignores_writes_to_other_topics(engine, autojump_clock):
    await engine.put_topic("t")
    results = []

    async def reader() -> None:
        results.append(await engine.diff("t", from_seq=0, wait_ms=5000))

    start = trio.current_time()
    with trio.fail_after(3600):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            await engine.write("other", recs(1))
            await trio.testing.wait_all_tasks_blocked()
            assert results == []
    (res,) = results
    assert 5.0 - 1e-6 <= trio.current_time() - start < 5.5
    assert (res.record_count, res.next_from_seq) == (0, 0)


async def test_long_poll_woken_by_own_node_write_reads_once_and_returns(engine, autojump_clock):
    await engine.put_topic("t")
    results = []

    async def reader() -> None:
        results.append(await engine.diff("t", from_seq=0, node="A", wait_ms=10_000))

    start = trio.current_time()
    with trio.fail_after(3600):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            await engine.write("t", recs(1), node="A")
    (res,) = results
    assert trio.current_time() - start < 10.0
    assert rendered(res) == []
    assert (res.next_from_seq, res.caught_up, res.records_scanned) == (1, True, 1)


async def test_long_poll_on_topic_deleted_meanwhile_is_not_found(engine, autojump_clock):
    await engine.put_topic("t")
    outcomes: list[object] = []

    async def reader() -> None:
        try:
            outcomes.append(await engine.diff("t", from_seq=0, wait_ms=10_000))
        except TopicNotFoundError as exc:
            outcomes.append(exc)

    start = trio.current_time()
    with trio.fail_after(3600):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            await engine.delete_topic("t")
    (outcome,) = outcomes
    assert isinstance(outcome, TopicNotFoundError)
    assert trio.current_time() - start < 10.0


async def test_long_poll_on_topic_deleted_and_recreated_meanwhile_is_not_found(
    engine, autojump_clock
):
    await engine.put_topic("t")
    outcomes: list[object] = []

    async def reader() -> None:
        try:
            outcomes.append(await engine.diff("t", from_seq=0, wait_ms=10_000))
        except TopicNotFoundError as exc:
            outcomes.append(exc)

    with trio.fail_after(3600):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            await engine.delete_topic("t")
            await engine.write("t", recs("new instance"))
    (outcome,) = outcomes
    assert isinstance(outcome, TopicNotFoundError)


# ---------------------------------------------------------------------------------
# Many records / large records: reads stay exact across internal segment boundaries
# ---------------------------------------------------------------------------------


async def test_paging_through_many_records_returns_each_exactly_once(engine):
    for b in range(90):
        await engine.write("t", recs(*range(b * 1000, (b + 1) * 1000)))
    cursor, seen, pages = 0, [], 0
    while True:
        res = await engine.diff("t", from_seq=cursor, limit=1000)
        assert seqs_of(res) == list(range(cursor + 1, cursor + 1 + res.record_count))
        seen.extend(r.data for r in res.records)
        cursor = res.next_from_seq
        pages += 1
        if res.caught_up:
            break
        assert pages < 200
    assert seen == list(range(90_000))
    assert (pages, cursor) == (90, 90_000)


async def test_window_starting_at_any_seq_reads_contiguously(engine):
    for b in range(60):
        await engine.write("t", recs(*range(b * 1000 + 1, (b + 1) * 1000 + 1)))
    for start in (0, 1, 999, 1000, 23_456, 30_000, 44_999, 59_000, 59_999):
        res = await engine.diff("t", from_seq=start, limit=1000)
        expected = list(range(start + 1, min(start + 1000, 60_000) + 1))
        assert [r.data for r in res.records] == expected
        assert res.next_from_seq == expected[-1]


async def test_byte_budget_accumulates_across_the_whole_response(engine):
    big = "x" * 300_000
    for _ in range(12):
        await engine.write("t", recs(big))
    res = await engine.diff("t", from_seq=2)
    assert seqs_of(res) == [3, 4, 5, 6]
    assert (res.next_from_seq, res.caught_up) == (6, False)


async def test_ttl_expiry_is_exact_across_many_records(engine, clock: ManualClock):
    await engine.put_topic("t", {"ttl_ms": 1000})
    for _ in range(30):
        await engine.write("t", recs(*range(1000)))
    clock.advance(500)
    for _ in range(30):
        await engine.write("t", recs(*range(1000)))
    clock.advance(501)
    st = await engine.get_topic("t", touch=False)
    assert (st.head_seq, st.earliest_seq, st.count) == (60_000, 30_001, 30_000)
    res = await engine.diff("t", from_seq=0, limit=1)
    assert res.tombstone == tomb(1, 30_000, "ttl", 30_000, 30_001, 60_000)
    assert seqs_of(res) == [30_001]
    assert (await engine.diff("t", from_seq=30_000, limit=1)).tombstone is None


async def test_one_write_wakes_every_waiting_reader(engine, autojump_clock):
    await engine.put_topic("t")
    results: list[object] = []

    async def reader(node: str | None) -> None:
        results.append(await engine.diff("t", from_seq=0, node=node, wait_ms=10_000))

    start = trio.current_time()
    with trio.fail_after(3600):
        async with trio.open_nursery() as nursery:
            for node in (None, "B", "C"):
                nursery.start_soon(reader, node)
            await trio.testing.wait_all_tasks_blocked()
            assert results == []
            await engine.write("t", recs("hi"), node="A")
    assert trio.current_time() - start < 10.0
    assert len(results) == 3
    for res in results:
        assert [r.data for r in res.records] == ["hi"]


async def test_long_poll_is_not_woken_by_a_record_delete(engine, autojump_clock):
    await engine.write("t", recs(1, 2))
    results: list[object] = []

    async def reader() -> None:
        results.append(await engine.diff("t", from_seq=2, wait_ms=4000))

    start = trio.current_time()
    with trio.fail_after(3600):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            await engine.delete_records("t", before_seq=2)
            await trio.testing.wait_all_tasks_blocked()
            assert results == []
    assert 4.0 - 1e-6 <= trio.current_time() - start < 4.5
    (res,) = results
    assert (res.record_count, res.next_from_seq, res.caught_up) == (0, 2, True)
