"""The contract model on its own: the contract's worked examples, pinned.

If one of these fails, the model (tests/support/model.py) is wrong, whatever the engine does.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.model import ContractModel
from topics._clock import ManualClock
from topics.errors import (
    BatchTooLargeError,
    InvalidRequestError,
    RecordTooLargeError,
    ThrottledError,
    TopicExistsIncompatibleError,
    TopicFullError,
    TopicNotEmptyError,
    TopicNotFoundError,
    TopicsError,
)
from topics.settings import Limits
from topics.types import Tombstone

T0 = 1_700_000_000_000


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def model(clock: ManualClock) -> ContractModel:
    return ContractModel(clock)


def recs(n: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"data": {"i": i}, **extra} for i in range(n)]


def seqs_of(model: ContractModel, name: str, **kw: Any) -> list[int]:
    return [r.seq for r in model.diff(name, **kw).records]


# -- seqs, ts, sizes ----------------------------------------------------------------


def test_fresh_topic_watermarks(model: ContractModel) -> None:
    assert model.put_topic("t").created
    state = model.get_topic("t", touch=False)
    assert (state.head_seq, state.earliest_seq, state.next_seq, state.count) == (0, 1, 1, 0)
    assert state.last_write_ts is None
    assert state.last_read_ts is None


def test_write_assigns_contiguous_seqs_and_creates(model: ContractModel) -> None:
    first = model.write("t", recs(3))
    assert (first.first_seq, first.last_seq, first.seqs, first.count) == (1, 3, [1, 2, 3], 3)
    assert (first.created, first.deduped) == (True, False)
    second = model.write("t", recs(2), return_seqs=False)
    assert (second.first_seq, second.last_seq, second.seqs, second.created) == (4, 5, None, False)


def test_frame_size_counts_node_tag_meta_and_ujson_data(model: ContractModel) -> None:
    # data "a/b" -> ujson '"a\/b"' (6 bytes); meta {"k":1} (7); tag 2 bytes ("é"); node 2.
    model.write("t", [{"data": "a/b", "meta": {"k": 1}, "tag": "é", "node": "n1"}])
    assert model.get_topic("t").bytes == 41 + 2 + 2 + 7 + 6
    model.write("u", [{"data": b" [1, 2] "}])  # raw bytes are stored verbatim
    assert model.get_topic("u").bytes == 41 + 8
    assert model.diff("u").to_dict()["records"][0]["data"] == [1, 2]


def test_rendering_omits_absent_fields_and_honours_include_flags(model: ContractModel) -> None:
    model.write("t", [{"data": None}, {"data": 1, "tag": "g", "node": "n", "meta": {"m": 2}}])
    plain = model.diff("t").to_dict()["records"]  # the Python API's default: tags too
    assert plain[0] == {"$seq": 1, "$ts": T0, "data": None}
    assert plain[1] == {
        "$seq": 2,
        "$ts": T0,
        "$node": "n",
        "$tag": "g",
        "data": 1,
        "meta": {"m": 2},
    }
    untagged = model.diff("t", include_tags=False).to_dict()["records"]
    assert untagged[1] == {"$seq": 2, "$ts": T0, "$node": "n", "data": 1, "meta": {"m": 2}}
    full = model.diff("t", include_tags=True, include_meta=False, include_data=False)
    assert full.to_dict()["records"][1] == {"$seq": 2, "$ts": T0, "$node": "n", "$tag": "g"}


# -- tombstones (§3.3, S9-S12) ------------------------------------------------------


def test_cap_eviction_tombstone_like_the_contract_example(model: ContractModel) -> None:
    # §3.3 scaled down: cap 5, ten writes, a reader at from_seq=2 lost 3..5.
    model.put_topic("jobs", {"cap_records": 5})
    for _ in range(10):
        model.write("jobs", recs(1))
    result = model.diff("jobs", from_seq=2)
    assert result.tombstone == Tombstone(
        gap_from=3, gap_to=5, reason="cap", missed_estimate=3, earliest_seq=6, head_seq=10
    )
    assert [r.seq for r in result.records] == [6, 7, 8, 9, 10]
    assert (result.next_from_seq, result.caught_up, result.lag) == (10, True, 0)


def test_cursor_at_the_floor_gets_no_tombstone(model: ContractModel) -> None:
    model.put_topic("t", {"cap_records": 2})
    model.write("t", recs(5))  # evicts 1..3 at once: cap_floor 4
    assert model.diff("t", from_seq=3).tombstone is None
    assert model.diff("t", from_seq=2).tombstone is not None
    assert model.diff("t", from_seq=0).tombstone == Tombstone(1, 3, "cap", 3, 4, 5)


def test_deleted_gap_reads_silently(model: ContractModel) -> None:
    model.write("t", recs(10))
    deleted = model.delete_records("t", before_seq=6)
    assert (deleted.deleted, deleted.earliest_seq, deleted.count) == (5, 6, 5)
    result = model.diff("t", from_seq=2)
    assert result.tombstone is None
    assert [r.seq for r in result.records] == [6, 7, 8, 9, 10]


def test_delete_below_the_evict_floor_does_not_move_it(model: ContractModel) -> None:
    model.put_topic("t", {"cap_records": 4})
    model.write("t", recs(6))  # evicts 1, 2
    model.delete_records("t", before_seq=5)  # deletes 3, 4
    state = model.get_topic("t")
    assert state.earliest_seq == 5
    tomb = model.diff("t", from_seq=0).tombstone
    assert tomb == Tombstone(1, 4, "cap", 4, 5, 6)  # the gap runs to earliest - 1
    assert model.diff("t", from_seq=2).tombstone is None  # 3, 4 were deleted, not lost


def test_ttl_tombstone_and_expiry_is_exact_for_the_clock(
    model: ContractModel, clock: ManualClock
) -> None:
    model.put_topic("t", {"ttl_ms": 1000})
    model.write("t", recs(2))
    clock.advance(500)
    model.write("t", recs(1))
    clock.advance(500)
    assert model.get_topic("t").count == 3  # now - ts == ttl is not yet expired
    clock.advance(1)
    state = model.get_topic("t")
    assert (state.count, state.earliest_seq) == (1, 3)
    assert model.diff("t").tombstone == Tombstone(1, 2, "ttl", 2, 3, 3)


def test_mixed_tombstone_needs_both_floors_above_the_cursor(
    model: ContractModel, clock: ManualClock
) -> None:
    model.put_topic("t", {"cap_records": 3, "ttl_ms": 1000})
    model.write("t", recs(5))  # cap evicts 1, 2: cap_floor 3
    clock.advance(1001)  # ttl expires 3, 4, 5: ttl_floor 6
    model.write("t", recs(1))
    assert model.diff("t", from_seq=0).tombstone == Tombstone(1, 5, "mixed", 5, 6, 6)
    assert model.diff("t", from_seq=2).tombstone == Tombstone(3, 5, "ttl", 3, 6, 6)


def test_recreated_topic_cursor_from_the_future(model: ContractModel) -> None:
    model.write("t", recs(5))
    model.delete_topic("t")
    model.write("t", recs(2))
    result = model.diff("t", from_seq=5)
    assert result.tombstone == Tombstone(1, 0, "recreated", 0, 1, 2)
    assert [r.seq for r in result.records] == [1, 2]


# -- the read window (S13-S15) ------------------------------------------------------


def test_node_filtered_records_advance_next_from_seq(model: ContractModel) -> None:
    model.write("t", [{"data": 1, "node": "a"}, {"data": 2, "node": "b"}, {"data": 3}], node="a")
    # seq 3 takes the batch node "a"
    result = model.diff("t", node="a")
    assert [r.seq for r in result.records] == [2]
    assert (result.next_from_seq, result.caught_up, result.records_scanned) == (3, True, 3)
    first = model.diff("t", node="a", limit=1)
    assert (first.record_count, first.next_from_seq, first.caught_up, first.lag) == (0, 1, False, 2)
    assert seqs_of(model, "t", node=["a", "b"]) == []


def test_node_filter_is_off_when_dedupe_node_is_false(model: ContractModel) -> None:
    model.put_topic("t", {"dedupe_node": False})
    model.write("t", recs(2), node="a")
    assert seqs_of(model, "t", node="a") == [1, 2]


def test_limit_zero_means_default_and_is_clamped(model: ContractModel) -> None:
    model.write("t", recs(300))
    assert len(seqs_of(model, "t")) == 256
    model.write("t", [{"data": i} for i in range(900)])
    result = model.diff("t", limit=5000)
    assert (result.record_count, result.next_from_seq) == (1000, 1000)


def test_window_stop_before_trailing_deleted_records(model: ContractModel) -> None:
    model.write("t", recs(5))
    model.write("t", [{"data": 0, "tag": "x"}] * 3)
    model.delete_records("t", match="x")
    result = model.diff("t", from_seq=4, limit=1)
    assert (result.next_from_seq, result.caught_up) == (5, False)
    result = model.diff("t", from_seq=5)
    assert (result.record_count, result.next_from_seq, result.caught_up) == (0, 8, True)


def test_byte_budget_returns_at_least_one_record(clock: ManualClock) -> None:
    model = ContractModel(clock)
    big = "x" * 700_000
    model.write("t", [{"data": big}, {"data": big}, {"data": 1}])
    first = model.diff("t")
    assert (first.record_count, first.next_from_seq, first.records_scanned) == (2, 2, 2)
    assert model.diff("t", from_seq=2).record_count == 1


# -- writes (S8, S18-S20) -----------------------------------------------------------


def test_discard_reject_caps(model: ContractModel) -> None:
    model.put_topic("q", {"cap_records": 3, "discard": "reject"})
    with pytest.raises(RecordTooLargeError) as too_big:
        model.write("q", recs(4))
    assert too_big.value.status == 400
    model.write("q", recs(2))
    with pytest.raises(TopicFullError) as full:
        model.write("q", recs(2))
    assert full.value.status == 422
    assert model.get_topic("q").count == 2
    model.write("q", recs(1))
    assert model.get_topic("q").head_seq == 3


def test_discard_reject_cap_bytes(model: ContractModel) -> None:
    model.put_topic("q", {"cap_bytes": 100, "discard": "reject"})
    with pytest.raises(RecordTooLargeError):
        model.write("q", [{"data": "x" * 60}])  # 41 + 62 > 100
    model.write("q", [{"data": 1}])  # 42
    model.write("q", [{"data": 2}])  # 84
    with pytest.raises(TopicFullError):
        model.write("q", [{"data": 3}])


def test_cap_bytes_discard_old_evicts_oldest(model: ContractModel) -> None:
    model.put_topic("t", {"cap_bytes": 100})
    model.write("t", [{"data": 1}, {"data": 2}, {"data": 3}])  # 3 x 42 bytes
    state = model.get_topic("t")
    assert (state.count, state.bytes, state.earliest_seq) == (2, 84, 2)


def test_idempotency_window(model: ContractModel, clock: ManualClock) -> None:
    model.put_topic("t", {"idempotency_window_ms": 1000})
    first = model.write("t", recs(2), idempotency_key="k")
    model.write("t", recs(1))
    again = model.write("t", [{"data": "ignored"}], idempotency_key="k")
    assert (again.first_seq, again.last_seq, again.seqs, again.count) == (1, 2, [1, 2], 2)
    assert (again.head_seq, again.deduped, again.created) == (3, True, False)
    assert first.head_seq == 2
    clock.advance(1000)
    assert model.write("t", recs(1), idempotency_key="k").deduped
    clock.advance(1)
    fresh = model.write("t", recs(1), idempotency_key="k")
    assert (fresh.deduped, fresh.first_seq) == (False, 4)


def test_an_expired_key_stays_expired(model: ContractModel, clock: ManualClock) -> None:
    model.put_topic("t", {"idempotency_window_ms": 1000})
    model.write("t", recs(1), idempotency_key="k")
    clock.advance(1500)
    model.write("t", recs(1))
    model.put_topic("t", {"idempotency_window_ms": 120_000})
    assert not model.write("t", recs(1), idempotency_key="k").deduped
    assert model.write("t", recs(1), idempotency_key="k").deduped  # the new entry holds
    model.put_topic("t", {"idempotency_window_ms": 1000})
    clock.advance(1001)
    model.get_topic("t")
    clock.set(clock.now_ms() - 101)
    assert not model.write("t", recs(1), idempotency_key="k").deduped


def test_dedupe_hit_ignores_bad_records_but_not_bad_config(model: ContractModel) -> None:
    model.write("t", recs(1), idempotency_key="k")
    assert model.write("t", [{"nodata": 1}], idempotency_key="k").deduped
    with pytest.raises(InvalidRequestError):
        model.write("t", recs(1), idempotency_key="k", config={"ttl_ms": -1})


def test_delete_topic_forgets_dedupe_state(model: ContractModel) -> None:
    model.write("t", recs(1), idempotency_key="k")
    model.delete_topic("t")
    again = model.write("t", recs(1), idempotency_key="k")
    assert (again.deduped, again.created, again.first_seq) == (False, True, 1)


def test_write_existence_rules(model: ContractModel) -> None:
    with pytest.raises(TopicNotFoundError):
        model.write("t", recs(1), create=False)
    with pytest.raises(TopicNotFoundError):
        model.write("t", recs(1), config={"auto_create": False})
    assert model.write("t", recs(1), create=True, config={"auto_create": False}).created
    # the existing topic's auto_create does not matter once it exists
    assert not model.write("t", recs(1)).created
    # inline config is validated even when the topic exists, then ignored
    with pytest.raises(InvalidRequestError):
        model.write("t", recs(1), config={"nope": 1})
    model.write("t", recs(1), config={"ttl_ms": 5})
    assert model.get_topic("t").config.ttl_ms == 0


def test_bad_records_change_nothing(model: ContractModel) -> None:
    model.write("t", recs(1))
    bad_batches: list[tuple[list[Any], type[TopicsError]]] = [
        ([], InvalidRequestError),
        ([{"data": 1}, {"meta": 1}], InvalidRequestError),
        ([{"data": float("nan")}], InvalidRequestError),
        ([{"data": b"{bad"}], InvalidRequestError),
        ([{"data": {1, 2}}], InvalidRequestError),
        ([{"data": 1, "tag": ""}], InvalidRequestError),
        ([{"data": 1, "meta": [1]}], InvalidRequestError),
        ([{"data": "x" * (1 << 20)}], RecordTooLargeError),
        ([{"data": 1}] * 10_001, BatchTooLargeError),
    ]
    for batch, error in bad_batches:
        with pytest.raises(error):
            model.write("t", batch)
    assert model.get_topic("t").head_seq == 1


def test_resource_caps_throttle(clock: ManualClock) -> None:
    model = ContractModel(clock, Limits(max_topics=1, max_total_bytes=100))
    model.write("a", [{"data": 1}])
    with pytest.raises(ThrottledError):
        model.put_topic("b")
    with pytest.raises(ThrottledError):
        model.write("a", [{"data": "x" * 30}])
    model.write("a", [{"data": 2}])  # 84 <= 100


# -- topics (§1, S21-S24) -----------------------------------------------------------


def test_put_topic_merges_and_type_is_immutable(model: ContractModel) -> None:
    created = model.put_topic("t", {"ttl_ms": 5, "durable": True})
    assert created.created
    assert (created.config.durability, created.config.durable) == ("fsync", True)
    updated = model.put_topic("t", {"cap_records": 3, "durability": "memory", "durable": True})
    assert not updated.created
    assert (updated.config.ttl_ms, updated.config.cap_records) == (5, 3)
    assert updated.config.durability == "memory"
    with pytest.raises(TopicExistsIncompatibleError):
        model.put_topic("t", {"type": "queue"})
    with pytest.raises(InvalidRequestError):
        model.put_topic("t", {"dead_letter": "t"})


def test_effective_priority(model: ContractModel, clock: ManualClock) -> None:
    model.put_topic("t")
    assert model.get_topic("t", touch=False).effective_priority == 0
    assert model.get_topic("t").effective_priority == 500
    clock.advance(30_000)
    assert model.get_topic("t", touch=False).effective_priority == 250
    clock.advance(270_000)
    assert model.get_topic("t", touch=False).effective_priority == 0
    model.put_topic("t", {"priority": 5000})
    assert model.get_topic("t").effective_priority == 1000


def test_list_topics_pages_in_name_order(model: ContractModel) -> None:
    for name in ["b", "a", "c:2", "c:1", "C"]:
        model.put_topic(name)
    page = model.list_topics(page_size=2)
    assert [t.topic for t in page.topics] == ["C", "a"]
    assert page.next_cursor is not None
    page = model.list_topics(page_size=2, cursor=page.next_cursor)
    assert [t.topic for t in page.topics] == ["b", "c:1"]
    page = model.list_topics(page_size=2, cursor=page.next_cursor)
    assert ([t.topic for t in page.topics], page.next_cursor) == (["c:2"], None)
    assert [t.topic for t in model.list_topics(prefix="c:").topics] == ["c:1", "c:2"]
    with pytest.raises(InvalidRequestError):
        model.list_topics(cursor="not a cursor!")
    with pytest.raises(InvalidRequestError):
        model.list_topics(page_size=0)


def test_list_touch_bumps_last_read(model: ContractModel) -> None:
    model.put_topic("t")
    model.list_topics()
    assert model.get_topic("t", touch=False).last_read_ts is None
    model.list_topics(touch=True)
    assert model.get_topic("t", touch=False).last_read_ts == T0


def test_delete_topic(model: ContractModel) -> None:
    assert not model.delete_topic("t").deleted
    model.write("t", recs(1))
    with pytest.raises(TopicNotEmptyError):
        model.delete_topic("t", if_empty=True)
    model.delete_records("t", before_seq=2)
    assert model.delete_topic("t", if_empty=True).deleted
    with pytest.raises(TopicNotFoundError):
        model.get_topic("t")
    with pytest.raises(TopicNotFoundError):
        model.diff("t")


# -- deletes (§5, S25-S27) ----------------------------------------------------------


def test_delete_by_tag_eq_glob_and_bound(model: ContractModel) -> None:
    tags = ["chat-42:a", "chat-42:b", "chat-4", None, "msg-1", "msg-1"]
    model.write("t", [{"data": i, "tag": tag} for i, tag in enumerate(tags)])
    assert model.delete_records("t", match=["tag", "Glob", "chat-42:*"]).deleted == 2
    assert model.delete_records("t", match="msg-1", before_seq=6).deleted == 1
    assert seqs_of(model, "t") == [3, 4, 6]
    assert model.delete_records("t", match=["tag", "Glob", "*"]).deleted == 2
    assert seqs_of(model, "t") == [4]
    assert model.delete_records("t", before_seq=10**6).deleted == 1
    model.write("t", recs(1))
    assert seqs_of(model, "t") == [7]


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"match": ["tag", "Glob", "x"]},
        {"match": ["tag", "Glob", "*x*"]},
        {"match": ["tag", "Regex", "x"]},
        {"match": ["node", "Eq", "x"]},
        {"match": ["tag", "Eq"]},
        {"match": 5},
        {"before_seq": -1},
        {"before_seq": True},
    ],
)
def test_bad_deletes_are_invalid(model: ContractModel, kwargs: dict[str, Any]) -> None:
    model.write("t", recs(1))
    with pytest.raises(InvalidRequestError):
        model.delete_records("t", **kwargs)


def test_put_applies_a_tightened_cap_at_once_and_never_resurrects(
    model: ContractModel, clock: ManualClock
) -> None:
    model.write("t", recs(4))
    model.put_topic("t", {"cap_records": 2})
    assert model.get_topic("t").earliest_seq == 3
    model.put_topic("t", {"ttl_ms": 1000})
    clock.advance(1001)
    model.put_topic("t", {"ttl_ms": 0})
    state = model.get_topic("t")
    assert (state.count, state.earliest_seq) == (0, 5)
