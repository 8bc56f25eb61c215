"""Writes (contract §2, §0.8 idempotency, §0.10 caps/discard, §11 quotas; SEMANTICS.md 1-9, 18-20)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from topics._clock import ManualClock
from topics.errors import (
    BatchTooLargeError,
    InvalidRequestError,
    RecordTooLargeError,
    ThrottledError,
    TopicFullError,
    TopicNotFoundError,
)

from ._support import (
    START_MS,
    frame_size,
    record_size,
    recs,
    rendered,
    seqs_of,
    snapshot,
    with_limits,
)

# The contract does not say which 400 code an over-long tag/node or an oversized meta gets
# (its error list for §2 is "invalid_request / batch_too_large / record_too_large"); both
# of these are accepted there, nothing else is.
SIZE_LIMIT_ERRORS = (InvalidRequestError, RecordTooLargeError)


async def assert_nothing_appended(engine, topic: str, before: tuple[Any, ...] | None) -> None:
    """``before`` is the snapshot taken before the failed write, or None if it was absent."""
    if before is None:
        with pytest.raises(TopicNotFoundError):
            await engine.get_topic(topic, touch=False)
    else:
        assert await snapshot(engine, topic) == before


# ---------------------------------------------------------------------------------
# Seqs, answer, $ts
# ---------------------------------------------------------------------------------


async def test_first_write_creates_topic_and_returns_exact_answer(engine):
    res = await engine.write("orders", recs({"id": 1}, {"id": 2}, {"id": 3}))
    assert res.to_dict() == {
        "topic": "orders",
        "first_seq": 1,
        "last_seq": 3,
        "seqs": [1, 2, 3],
        "head_seq": 3,
        "count": 3,
        "created": True,
        "deduped": False,
    }


async def test_seqs_are_contiguous_across_batches(engine):
    a = await engine.write("orders", recs(1, 2, 3))
    b = await engine.write("orders", recs(4))
    c = await engine.write("orders", recs(5, 6, 7, 8))
    assert (a.seqs, b.seqs, c.seqs) == ([1, 2, 3], [4], [5, 6, 7, 8])
    assert (b.first_seq, b.last_seq, b.head_seq, b.count, b.created) == (4, 4, 4, 1, False)
    assert (c.first_seq, c.last_seq, c.head_seq, c.count) == (5, 8, 8, 4)
    diff = await engine.diff("orders", from_seq=0)
    assert seqs_of(diff) == list(range(1, 9))
    assert [r.data for r in diff.records] == list(range(1, 9))


async def test_records_carry_the_clock_time_of_their_write(engine, clock: ManualClock):
    clock.advance(250)
    await engine.write("orders", recs(1, 2))
    clock.advance(750)
    await engine.write("orders", recs(3))
    diff = await engine.diff("orders")
    assert [r.ts for r in diff.records] == [START_MS + 250, START_MS + 250, START_MS + 1000]


async def test_ts_never_decreases_when_the_clock_goes_back(engine, clock: ManualClock):
    clock.advance(5000)
    await engine.write("orders", recs(1))
    clock.set(START_MS + 1000)
    await engine.write("orders", recs(2))
    clock.set(START_MS + 7000)
    await engine.write("orders", recs(3))
    diff = await engine.diff("orders")
    assert [r.ts for r in diff.records] == [START_MS + 5000, START_MS + 5000, START_MS + 7000]


async def test_return_seqs_false_omits_seqs_but_keeps_first_and_last(engine):
    await engine.write("orders", recs(1))
    res = await engine.write("orders", recs(2, 3, 4), return_seqs=False)
    assert res.seqs is None
    assert (res.first_seq, res.last_seq, res.head_seq, res.count) == (2, 4, 4, 3)
    assert "seqs" not in res.to_dict()


# ---------------------------------------------------------------------------------
# Atomicity
# ---------------------------------------------------------------------------------

BAD_RECORDS = [
    {"data": 1, "tag": 5},
    {"tag": "no-data"},
    {"data": float("nan")},
    {"data": 1, "meta": "not-an-object"},
    "not-a-record",
    {"data": b"{bad json"},
    {"data": 1, "node": ""},
    {"data": 1, "tga": "typo"},
]


@pytest.mark.parametrize("bad", BAD_RECORDS, ids=repr)
async def test_bad_record_at_index_5_appends_nothing_and_creates_no_topic(engine, bad):
    batch = [*recs(0, 1, 2, 3, 4), bad, *recs(6)]
    with pytest.raises(InvalidRequestError):
        await engine.write("orders", batch)
    await assert_nothing_appended(engine, "orders", None)


@pytest.mark.parametrize("bad", BAD_RECORDS, ids=repr)
async def test_bad_record_at_index_5_appends_nothing_to_existing_topic(engine, bad):
    await engine.write("orders", recs("a", "b"))
    before = await snapshot(engine, "orders")
    with pytest.raises(InvalidRequestError):
        await engine.write("orders", [*recs(0, 1, 2, 3, 4), bad, *recs(6)])
    await assert_nothing_appended(engine, "orders", before)
    assert (await engine.write("orders", recs("c"))).seqs == [3]


async def test_an_unknown_record_field_is_named_and_nothing_is_stored(engine):
    await engine.write("orders", recs("a"))
    before = await snapshot(engine, "orders")
    with pytest.raises(InvalidRequestError) as info:
        await engine.write("orders", [{"data": 1}, {"data": 2, "tga": "x", "zz": 1}])
    assert info.value.detail == {"field": "records[1].tga"}
    assert "records[1].tga: is not a record field (one of data, meta, node, tag)" in str(info.value)
    await assert_nothing_appended(engine, "orders", before)


async def test_an_earlier_records_error_wins_over_a_later_unknown_field(engine):
    with pytest.raises(InvalidRequestError) as info:
        await engine.write("orders", [{"data": 1}, {"tag": 5, "data": 1}, {"data": 1, "x": 1}])
    assert info.value.detail["field"] == "records[1].tag"
    with pytest.raises(InvalidRequestError) as info:
        await engine.write("orders", [{"data": 1, "x": 1}, {"tag": 5, "data": 1}])
    assert info.value.detail["field"] == "records[0].x"


async def test_the_four_base_record_fields_are_declared_and_accepted(engine):
    from topics.record_fields import RECORD_FIELDS

    record = {"data": 1, "tag": "t", "node": "n", "meta": {"k": "v"}}
    assert set(record) <= RECORD_FIELDS
    assert (await engine.write("orders", [record])).seqs == [1]


# ---------------------------------------------------------------------------------
# Lazy create, inline config, create flag
# ---------------------------------------------------------------------------------


async def test_lazy_create_applies_inline_config(engine):
    res = await engine.write("orders", recs(1), config={"ttl_ms": 60000, "cap_records": 10})
    assert res.created is True
    st = await engine.get_topic("orders", touch=False)
    assert (st.config.ttl_ms, st.config.cap_records) == (60000, 10)


async def test_inline_config_is_ignored_when_topic_exists(engine):
    await engine.put_topic("orders", {"ttl_ms": 5000})
    res = await engine.write(
        "orders", recs(1), config={"ttl_ms": 1, "type": "queue", "cap_records": 3}
    )
    assert res.created is False
    st = await engine.get_topic("orders", touch=False)
    assert (st.config.ttl_ms, st.config.type, st.config.cap_records) == (5000, "log", 0)


async def test_inline_config_is_validated_even_when_topic_exists(engine):
    await engine.write("orders", recs(1))
    before = await snapshot(engine, "orders")
    with pytest.raises(InvalidRequestError):
        await engine.write("orders", recs(2), config={"bogus": 1})
    with pytest.raises(InvalidRequestError):
        await engine.write("orders", recs(2), config={"ttl_ms": -1})
    await assert_nothing_appended(engine, "orders", before)


async def test_invalid_inline_config_creates_nothing(engine):
    with pytest.raises(InvalidRequestError):
        await engine.write("orders", recs(1), config={"discard": "sometimes"})
    with pytest.raises(InvalidRequestError):
        await engine.write("orders", recs(1), config={"dead_letter": "orders"})
    await assert_nothing_appended(engine, "orders", None)


async def test_create_false_on_absent_topic_is_not_found(engine):
    with pytest.raises(TopicNotFoundError) as err:
        await engine.write("typo", recs(1), create=False)
    assert err.value.code == "topic_not_found"
    assert err.value.status == 404
    await assert_nothing_appended(engine, "typo", None)


async def test_create_false_on_existing_topic_appends(engine):
    await engine.put_topic("orders")
    res = await engine.write("orders", recs(1), create=False)
    assert (res.seqs, res.created) == ([1], False)


async def test_inline_auto_create_false_prevents_lazy_create(engine):
    with pytest.raises(TopicNotFoundError):
        await engine.write("orders", recs(1), config={"auto_create": False})
    await assert_nothing_appended(engine, "orders", None)


async def test_create_true_overrides_auto_create_false(engine):
    res = await engine.write("orders", recs(1), create=True, config={"auto_create": False})
    assert res.created is True
    st = await engine.get_topic("orders", touch=False)
    assert st.config.auto_create is False
    again = await engine.write("orders", recs(2))
    assert (again.seqs, again.created) == ([2], False)


async def test_topic_with_auto_create_false_still_accepts_writes(engine):
    await engine.put_topic("orders", {"auto_create": False})
    res = await engine.write("orders", recs(1))
    assert (res.seqs, res.created) == ([1], False)


async def test_create_true_on_existing_topic_reports_not_created(engine):
    await engine.write("orders", recs(1))
    res = await engine.write("orders", recs(2), create=True)
    assert (res.seqs, res.created) == ([2], False)


@pytest.mark.parametrize("create", ["yes", 1])
async def test_create_flag_of_wrong_type_is_invalid(engine, create):
    with pytest.raises(InvalidRequestError):
        await engine.write("orders", recs(1), create=create)
    await assert_nothing_appended(engine, "orders", None)


async def test_create_false_is_checked_before_the_records(engine):
    with pytest.raises(TopicNotFoundError):
        await engine.write("orders", [{"data": float("nan")}], create=False)


# ---------------------------------------------------------------------------------
# data / node / tag / meta
# ---------------------------------------------------------------------------------


async def test_raw_bytes_data_is_returned_byte_verbatim(engine):
    raw = b'{"b":1,"a":[1.50,2e3]}'
    await engine.write("orders", [{"data": raw}])
    diff = await engine.diff("orders")
    assert raw in diff.records_json
    assert rendered(diff)[0]["data"] == {"b": 1, "a": [1.5, 2000.0]}
    assert (await engine.get_topic("orders", touch=False)).bytes == 41 + len(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'"\\u00e9\\/x"',
        '"é☃"'.encode(),
        b"1E+2",
        b"[1.0,-0,1e-7]",
        b'{"":{"":[]}}',
        b'{"a" : [1 ,2]}',
    ],
    ids=repr,
)
async def test_raw_bytes_data_keeps_its_exact_spelling(engine, raw):
    await engine.write("orders", [{"data": raw}])
    diff = await engine.diff("orders")
    assert raw in diff.records_json


JSON_VALUES = [
    None,
    True,
    False,
    0,
    -1,
    (1 << 63) - 1,
    1.5,
    -2.25e-5,
    "",
    "text",
    "é ☃ 😀",
    'quote " and \\ backslash\nnewline',
    [],
    [1, "a", None, [True]],
    {},
    {"nested": {"list": [1, 2, {"x": None}]}},
]


async def test_every_json_type_round_trips_as_data(engine):
    await engine.write("orders", recs(*JSON_VALUES))
    diff = await engine.diff("orders")
    objs = rendered(diff)
    assert len(objs) == len(JSON_VALUES)
    for obj, value in zip(objs, JSON_VALUES, strict=True):
        assert "data" in obj
        assert obj["data"] == value
    assert [r.data for r in diff.records] == JSON_VALUES
    st = await engine.get_topic("orders", touch=False)
    assert st.bytes == sum(frame_size(v) for v in JSON_VALUES)


async def test_batch_node_applies_where_record_node_is_absent(engine):
    batch = [
        {"data": 1},
        {"data": 2, "node": "rec-node"},
        {"data": 3, "tag": "t", "meta": {"k": "v"}},
        {"data": 4, "node": None},
    ]
    await engine.write("orders", batch, node="batch-node")
    objs = rendered(await engine.diff("orders", include_tags=True))
    assert objs == [
        {"$seq": 1, "$ts": START_MS, "$node": "batch-node", "data": 1},
        {"$seq": 2, "$ts": START_MS, "$node": "rec-node", "data": 2},
        {
            "$seq": 3,
            "$ts": START_MS,
            "$node": "batch-node",
            "$tag": "t",
            "data": 3,
            "meta": {"k": "v"},
        },
        {"$seq": 4, "$ts": START_MS, "$node": "batch-node", "data": 4},
    ]
    st = await engine.get_topic("orders", touch=False)
    assert st.bytes == sum(record_size(r, "batch-node") for r in batch)


async def test_records_without_any_node_have_no_node_key(engine):
    await engine.write("orders", [{"data": 1, "tag": None, "meta": None}, {"data": 2, "node": "n"}])
    objs = rendered(await engine.diff("orders", include_tags=True))
    assert objs == [
        {"$seq": 1, "$ts": START_MS, "data": 1},
        {"$seq": 2, "$ts": START_MS, "$node": "n", "data": 2},
    ]
    assert (await engine.get_topic("orders", touch=False)).bytes == frame_size(1) + frame_size(
        2, node="n"
    )


async def test_meta_is_returned_verbatim(engine):
    meta = {"trace": "abc123", "n": [1, 2], "deep": {"x": None}}
    await engine.write("orders", [{"data": "p", "meta": meta}])
    (record,) = (await engine.diff("orders")).records
    assert record.meta == meta


@pytest.mark.parametrize(
    "bad",
    [
        {"data": 1, "tag": ""},
        {"data": 1, "node": ""},
        {"data": 1, "tag": 5},
        {"data": 1, "tag": ["a"]},
        {"data": 1, "node": 5},
        {"data": 1, "meta": "x"},
        {"data": 1, "meta": [1]},
        {"data": 1, "meta": 5},
        {"data": object()},
        {"data": {1, 2}},
        {"data": {"k": object()}},
        {"data": float("nan")},
        {"data": float("inf")},
        {"data": float("-inf")},
        {"data": {"x": [float("nan")]}},
        {"data": b"NaN"},
        {"data": b"Infinity"},
        {"data": b"-Infinity"},
        {"data": b"{"},
        {"data": b""},
        {"data": b"1 2"},
        {"data": b"{'a':1}"},
        {"data": b'"\xff"'},
        {"data": 1, "meta": {"x": float("nan")}},
        {"no_data": 1},
        None,
        ["data", 1],
    ],
    # Without the addresses of the object() cases: every xdist worker must collect the
    # same test ids.
    ids=lambda bad: re.sub(r" at 0x[0-9a-f]+", "", repr(bad)),
)
async def test_malformed_record_is_invalid_request(engine, bad):
    with pytest.raises(InvalidRequestError) as err:
        await engine.write("orders", [bad])
    assert err.value.code == "invalid_request"
    assert err.value.status == 400
    await assert_nothing_appended(engine, "orders", None)


@pytest.mark.parametrize("records", ["x", {"data": 1}, None, 5])
async def test_records_must_be_a_list(engine, records):
    with pytest.raises(InvalidRequestError):
        await engine.write("orders", records)
    await assert_nothing_appended(engine, "orders", None)


@pytest.mark.parametrize("node", ["", 5, ["n"]])
async def test_bad_batch_level_node_is_invalid(engine, node):
    with pytest.raises(InvalidRequestError):
        await engine.write("orders", recs(1), node=node)
    await assert_nothing_appended(engine, "orders", None)


# ---------------------------------------------------------------------------------
# Batching limits
# ---------------------------------------------------------------------------------


async def test_empty_batch_is_invalid_request_not_batch_too_large(engine):
    with pytest.raises(InvalidRequestError) as err:
        await engine.write("orders", [])
    assert err.value.code == "invalid_request"
    await assert_nothing_appended(engine, "orders", None)


@with_limits(max_batch_records=5)
async def test_batch_at_max_batch_records_is_accepted(engine):
    res = await engine.write("orders", recs(1, 2, 3, 4, 5))
    assert res.seqs == [1, 2, 3, 4, 5]


@with_limits(max_batch_records=5)
async def test_batch_over_max_batch_records_is_batch_too_large(engine):
    with pytest.raises(BatchTooLargeError) as err:
        await engine.write("orders", recs(1, 2, 3, 4, 5, 6))
    assert err.value.code == "batch_too_large"
    assert err.value.status == 400
    await assert_nothing_appended(engine, "orders", None)


async def test_default_max_batch_records_is_10000(engine):
    with pytest.raises(BatchTooLargeError):
        await engine.write("orders", [{"data": i} for i in range(10_001)])
    await assert_nothing_appended(engine, "orders", None)
    res = await engine.write("orders", [{"data": i} for i in range(10_000)])
    assert (res.first_seq, res.last_seq) == (1, 10_000)


@with_limits(max_record_bytes=100)
async def test_record_data_plus_meta_at_max_record_bytes_is_accepted(engine):
    res = await engine.write(
        "orders",
        [{"data": "x" * 98}, {"data": "y" * 89, "meta": {"k": "v"}}, {"data": b"7" * 100}],
    )
    assert res.seqs == [1, 2, 3]


@with_limits(max_record_bytes=100)
@pytest.mark.parametrize(
    "bad",
    [{"data": "x" * 99}, {"data": "y" * 90, "meta": {"k": "v"}}, {"data": b"7" * 101}],
    ids=["data", "data+meta", "raw"],
)
async def test_record_over_max_record_bytes_is_record_too_large(engine, bad):
    await engine.write("orders", recs(1))
    before = await snapshot(engine, "orders")
    with pytest.raises(RecordTooLargeError) as err:
        await engine.write("orders", [*recs(2), bad])
    assert err.value.code == "record_too_large"
    assert err.value.status == 400
    await assert_nothing_appended(engine, "orders", before)


async def test_default_max_record_bytes_is_one_mib(engine):
    limit = 1 << 20
    res = await engine.write("orders", [{"data": "x" * (limit - 2)}])
    assert res.seqs == [1]
    with pytest.raises(RecordTooLargeError):
        await engine.write("orders", [{"data": "x" * (limit - 1)}])
    assert (await engine.get_topic("orders", touch=False)).head_seq == 1


@with_limits(max_meta_bytes=20)
async def test_meta_at_max_meta_bytes_is_accepted_and_over_is_rejected(engine):
    ok = {"k": "x" * 12}  # {"k":"xxxxxxxxxxxx"} = 20 bytes
    assert (await engine.write("orders", [{"data": 1, "meta": ok}])).seqs == [1]
    before = await snapshot(engine, "orders")
    with pytest.raises(SIZE_LIMIT_ERRORS) as err:
        await engine.write("orders", [{"data": 1, "meta": {"k": "x" * 13}}])
    assert err.value.status == 400
    await assert_nothing_appended(engine, "orders", before)


async def test_meta_with_64_keys_is_accepted_and_65_rejected(engine):
    ok = {f"k{i}": i for i in range(64)}
    assert (await engine.write("orders", [{"data": 1, "meta": ok}])).seqs == [1]
    before = await snapshot(engine, "orders")
    with pytest.raises(SIZE_LIMIT_ERRORS) as err:
        await engine.write("orders", [{"data": 1, "meta": {f"k{i}": i for i in range(65)}}])
    assert err.value.status == 400
    await assert_nothing_appended(engine, "orders", before)


@with_limits(max_meta_keys=3)
async def test_meta_key_count_follows_max_meta_keys(engine):
    assert (await engine.write("orders", [{"data": 1, "meta": {"a": 1, "b": 2, "c": 3}}])).seqs == [
        1
    ]
    with pytest.raises(SIZE_LIMIT_ERRORS):
        await engine.write("orders", [{"data": 1, "meta": {"a": 1, "b": 2, "c": 3, "d": 4}}])


async def test_default_max_meta_bytes_is_16_kib(engine):
    ok = {"k": "x" * (16384 - 8)}
    assert (await engine.write("orders", [{"data": 1, "meta": ok}])).seqs == [1]
    with pytest.raises(SIZE_LIMIT_ERRORS):
        await engine.write("orders", [{"data": 1, "meta": {"k": "x" * (16384 - 7)}}])


async def test_tag_up_to_256_bytes_is_accepted_and_longer_rejected(engine):
    res = await engine.write(
        "orders", [{"data": 1, "tag": "t" * 256}, {"data": 2, "tag": "é" * 128}]
    )
    assert res.seqs == [1, 2]
    before = await snapshot(engine, "orders")
    with pytest.raises(SIZE_LIMIT_ERRORS) as err:
        await engine.write("orders", [{"data": 3, "tag": "t" * 257}])
    assert err.value.status == 400
    with pytest.raises(SIZE_LIMIT_ERRORS):
        await engine.write("orders", [{"data": 3, "tag": "é" * 129}])
    await assert_nothing_appended(engine, "orders", before)


async def test_node_up_to_128_bytes_is_accepted_and_longer_rejected(engine):
    res = await engine.write(
        "orders", [{"data": 1, "node": "n" * 128}, {"data": 2, "node": "é" * 64}]
    )
    assert res.seqs == [1, 2]
    assert (await engine.write("orders", recs(3), node="b" * 128)).seqs == [3]
    before = await snapshot(engine, "orders")
    with pytest.raises(SIZE_LIMIT_ERRORS) as err:
        await engine.write("orders", [{"data": 4, "node": "n" * 129}])
    assert err.value.status == 400
    with pytest.raises(SIZE_LIMIT_ERRORS):
        await engine.write("orders", [{"data": 4, "node": "é" * 65}])
    with pytest.raises(SIZE_LIMIT_ERRORS):
        await engine.write("orders", recs(4), node="b" * 129)
    await assert_nothing_appended(engine, "orders", before)


# ---------------------------------------------------------------------------------
# Idempotency (§0.8, rule 19)
# ---------------------------------------------------------------------------------


async def test_retry_within_window_returns_original_seqs_without_appending(
    engine, clock: ManualClock
):
    first = await engine.write("orders", recs(1, 2), idempotency_key="batch-7f3a")
    assert (first.seqs, first.created, first.deduped) == ([1, 2], True, False)
    clock.advance(1000)
    retry = await engine.write("orders", recs(1, 2), idempotency_key="batch-7f3a")
    assert retry.to_dict() == {
        "topic": "orders",
        "first_seq": 1,
        "last_seq": 2,
        "seqs": [1, 2],
        "head_seq": 2,
        "count": 2,
        "created": False,
        "deduped": True,
    }
    st = await engine.get_topic("orders", touch=False)
    assert (st.head_seq, st.count) == (2, 2)


async def test_deduped_answer_reports_the_current_head(engine):
    await engine.write("orders", recs(1, 2, 3), idempotency_key="k")
    await engine.write("orders", recs(4, 5))
    retry = await engine.write("orders", recs(1), idempotency_key="k")
    assert (retry.first_seq, retry.last_seq, retry.seqs, retry.count) == (1, 3, [1, 2, 3], 3)
    assert (retry.head_seq, retry.deduped, retry.created) == (5, True, False)


async def test_idempotency_entry_lives_exactly_the_window(engine, clock: ManualClock):
    await engine.put_topic("orders", {"idempotency_window_ms": 1000})
    await engine.write("orders", recs("a"), idempotency_key="k")
    clock.advance(1000)
    at_edge = await engine.write("orders", recs("a"), idempotency_key="k")
    assert (at_edge.seqs, at_edge.deduped) == ([1], True)
    clock.advance(1)
    after = await engine.write("orders", recs("a"), idempotency_key="k")
    assert (after.seqs, after.deduped, after.head_seq) == ([2], False, 2)
    again = await engine.write("orders", recs("a"), idempotency_key="k")
    assert (again.seqs, again.deduped) == ([2], True)


async def test_default_idempotency_window_is_120_seconds(engine, clock: ManualClock):
    await engine.write("orders", recs("a"), idempotency_key="k")
    clock.advance(120_000)
    assert (await engine.write("orders", recs("a"), idempotency_key="k")).deduped is True
    clock.advance(1)
    res = await engine.write("orders", recs("a"), idempotency_key="k")
    assert (res.deduped, res.seqs) == (False, [2])


async def test_zero_idempotency_window_dedupes_only_in_the_same_millisecond(
    engine, clock: ManualClock
):
    await engine.put_topic("orders", {"idempotency_window_ms": 0})
    await engine.write("orders", recs("a"), idempotency_key="k")
    assert (await engine.write("orders", recs("a"), idempotency_key="k")).deduped is True
    clock.advance(1)
    assert (await engine.write("orders", recs("a"), idempotency_key="k")).seqs == [2]


async def test_idempotency_keys_are_scoped_per_topic(engine):
    await engine.write("a", recs(1), idempotency_key="k")
    res = await engine.write("b", recs(1), idempotency_key="k")
    assert (res.seqs, res.deduped, res.created) == ([1], False, True)


async def test_different_keys_do_not_dedupe(engine):
    await engine.write("orders", recs(1), idempotency_key="k1")
    res = await engine.write("orders", recs(1), idempotency_key="k2")
    assert (res.seqs, res.deduped) == ([2], False)


async def test_writes_without_a_key_never_dedupe(engine):
    await engine.write("orders", recs(1))
    res = await engine.write("orders", recs(1))
    assert (res.seqs, res.deduped) == ([2], False)


async def test_idempotent_hit_is_answered_without_looking_at_the_records(engine):
    await engine.write("orders", recs(1, 2), idempotency_key="k")
    retry = await engine.write(
        "orders", [{"data": float("nan")}, {"tag": "no-data"}], idempotency_key="k"
    )
    assert (retry.seqs, retry.deduped) == ([1, 2], True)
    assert (await engine.get_topic("orders", touch=False)).head_seq == 2


async def test_inline_config_is_validated_before_the_idempotency_window(engine):
    await engine.write("orders", recs(1), idempotency_key="k")
    with pytest.raises(InvalidRequestError):
        await engine.write("orders", recs(1), idempotency_key="k", config={"bogus": 1})


async def test_deleting_the_topic_forgets_its_idempotency_keys(engine):
    await engine.write("orders", recs(1, 2), idempotency_key="k")
    await engine.delete_topic("orders")
    res = await engine.write("orders", recs("new"), idempotency_key="k")
    assert (res.seqs, res.deduped, res.created) == ([1], False, True)


async def test_failed_write_does_not_remember_its_key(engine):
    await engine.put_topic("orders", {"cap_records": 1, "discard": "reject"})
    await engine.write("orders", recs(1))
    with pytest.raises(TopicFullError):
        await engine.write("orders", recs(2), idempotency_key="k")
    await engine.delete_records("orders", before_seq=2)
    res = await engine.write("orders", recs(2), idempotency_key="k")
    assert (res.seqs, res.deduped) == ([2], False)


async def test_idempotency_key_of_256_chars_is_accepted(engine):
    key = "k" * 256
    await engine.write("orders", recs(1), idempotency_key=key)
    assert (await engine.write("orders", recs(1), idempotency_key=key)).deduped is True


@pytest.mark.parametrize("key", ["k" * 257, "", 5, ["k"]], ids=["257chars", "empty", "int", "list"])
async def test_bad_idempotency_key_is_invalid(engine, key):
    with pytest.raises(InvalidRequestError):
        await engine.write("orders", recs(1), idempotency_key=key)
    await assert_nothing_appended(engine, "orders", None)


# ---------------------------------------------------------------------------------
# discard: "reject" (rule 8)
# ---------------------------------------------------------------------------------


async def test_reject_topic_over_cap_records_is_topic_full_and_appends_nothing(engine):
    await engine.put_topic("q", {"cap_records": 3, "discard": "reject"})
    await engine.write("q", recs(1, 2))
    before = await snapshot(engine, "q")
    with pytest.raises(TopicFullError) as err:
        await engine.write("q", recs(3, 4))
    assert err.value.code == "topic_full"
    assert err.value.status == 422
    await assert_nothing_appended(engine, "q", before)
    assert (await engine.write("q", recs(3))).seqs == [3]
    with pytest.raises(TopicFullError):
        await engine.write("q", recs(4))


async def test_reject_topic_over_cap_bytes_is_topic_full(engine):
    size = frame_size("x")
    await engine.put_topic("q", {"cap_bytes": 2 * size, "discard": "reject"})
    await engine.write("q", recs("x"))
    assert (await engine.write("q", recs("y"))).seqs == [2]
    before = await snapshot(engine, "q")
    with pytest.raises(TopicFullError):
        await engine.write("q", recs("z"))
    await assert_nothing_appended(engine, "q", before)
    assert before[4] == 2 * size


async def test_reject_batch_larger_than_cap_records_is_record_too_large(engine):
    await engine.put_topic("q", {"cap_records": 3, "discard": "reject"})
    with pytest.raises(RecordTooLargeError):
        await engine.write("q", recs(1, 2, 3, 4))
    await engine.write("q", recs(1, 2, 3))
    before = await snapshot(engine, "q")
    with pytest.raises(RecordTooLargeError):
        await engine.write("q", recs(1, 2, 3, 4))
    await assert_nothing_appended(engine, "q", before)


async def test_reject_batch_larger_than_cap_bytes_is_record_too_large(engine):
    size = frame_size("x")
    await engine.put_topic("q", {"cap_bytes": 2 * size, "discard": "reject"})
    before = await snapshot(engine, "q")
    with pytest.raises(RecordTooLargeError):
        await engine.write("q", recs("x", "y", "z"))
    assert frame_size("x" * 50) > 2 * size
    with pytest.raises(RecordTooLargeError):
        await engine.write("q", recs("x" * 50))
    await assert_nothing_appended(engine, "q", before)


async def test_reject_caps_apply_to_the_creating_write(engine):
    cfg = {"cap_records": 3, "discard": "reject"}
    with pytest.raises(RecordTooLargeError):
        await engine.write("q", recs(1, 2, 3, 4, 5), config=cfg)
    await assert_nothing_appended(engine, "q", None)


async def test_reject_topic_accepts_again_once_ttl_frees_room(engine, clock: ManualClock):
    await engine.put_topic("q", {"cap_records": 2, "discard": "reject", "ttl_ms": 1000})
    await engine.write("q", recs(1, 2))
    clock.advance(1000)
    with pytest.raises(TopicFullError):
        await engine.write("q", recs(3))
    clock.advance(1)
    assert (await engine.write("q", recs(3))).seqs == [3]


async def test_reject_topic_accepts_again_after_delete(engine):
    await engine.put_topic("q", {"cap_records": 2, "discard": "reject"})
    await engine.write("q", recs(1, 2))
    await engine.delete_records("q", before_seq=2)
    assert (await engine.write("q", recs(3))).seqs == [3]


# ---------------------------------------------------------------------------------
# discard: "old" (rule 7)
# ---------------------------------------------------------------------------------


async def test_discard_old_evicts_oldest_to_keep_cap_records(engine):
    await engine.put_topic("t", {"cap_records": 3})
    for i in range(1, 6):
        assert (await engine.write("t", recs(i))).seqs == [i]
    st = await engine.get_topic("t", touch=False)
    assert (st.head_seq, st.earliest_seq, st.count, st.bytes) == (5, 3, 3, 3 * frame_size(1))
    assert [r.data for r in (await engine.diff("t", from_seq=2)).records] == [3, 4, 5]


async def test_discard_old_batch_larger_than_cap_keeps_the_newest(engine):
    await engine.put_topic("t", {"cap_records": 3})
    res = await engine.write("t", recs(1, 2, 3, 4, 5))
    assert (res.seqs, res.head_seq, res.count) == ([1, 2, 3, 4, 5], 5, 5)
    st = await engine.get_topic("t", touch=False)
    assert (st.earliest_seq, st.count) == (3, 3)


async def test_discard_old_evicts_oldest_to_keep_cap_bytes(engine):
    sizes = [frame_size(v) for v in ("a" * 10, "b" * 20, "c" * 30, "d" * 5, "")]
    assert sizes == [53, 63, 73, 48, 43]
    cap = 63 + 73 + 48
    await engine.put_topic("t", {"cap_bytes": cap})
    for v in ("a" * 10, "b" * 20, "c" * 30, "d" * 5):
        await engine.write("t", recs(v))
    st = await engine.get_topic("t", touch=False)
    assert (st.earliest_seq, st.count, st.bytes) == (2, 3, cap)
    await engine.write("t", recs(""))
    st = await engine.get_topic("t", touch=False)
    assert (st.earliest_seq, st.count, st.bytes) == (3, 3, 73 + 48 + 43)


async def test_discard_old_bytes_cap_bites_before_records_cap(engine):
    size = frame_size(1)
    await engine.put_topic("t", {"cap_records": 3, "cap_bytes": 2 * size + size // 2})
    await engine.write("t", recs(1, 2, 3))
    st = await engine.get_topic("t", touch=False)
    assert (st.earliest_seq, st.count, st.bytes) == (2, 2, 2 * size)


async def test_tightened_cap_evicts_on_the_next_write(engine):
    await engine.write("t", recs(1, 2, 3, 4, 5))
    await engine.put_topic("t", {"cap_records": 2})
    await engine.write("t", recs(6))
    st = await engine.get_topic("t", touch=False)
    assert (st.head_seq, st.earliest_seq, st.count) == (6, 5, 2)


# ---------------------------------------------------------------------------------
# TOPICS_MAX_TOTAL_BYTES (§11)
# ---------------------------------------------------------------------------------


@with_limits(max_total_bytes=3 * 44)
async def test_write_over_max_total_bytes_is_throttled(engine):
    assert frame_size("x") == 44
    await engine.write("a", recs("x", "x"))
    await engine.write("b", recs("x"))
    before = await snapshot(engine, "b")
    with pytest.raises(ThrottledError) as err:
        await engine.write("b", recs("x"))
    assert err.value.code == "throttled"
    assert err.value.status == 429
    assert err.value.detail is not None
    assert err.value.detail["limit"] == "max_total_bytes"
    assert err.value.detail["max"] == 3 * 44
    await assert_nothing_appended(engine, "b", before)
    with pytest.raises(ThrottledError):
        await engine.write("c", recs("x"))
    await assert_nothing_appended(engine, "c", None)


@with_limits(max_total_bytes=3 * 44)
async def test_deleted_records_free_max_total_bytes(engine):
    await engine.write("a", recs("x", "x", "x"))
    await engine.delete_records("a", before_seq=2)
    assert (await engine.write("b", recs("x"))).seqs == [1]
    await engine.delete_topic("a")
    assert (await engine.write("b", recs("x", "x"))).seqs == [2, 3]


# ---------------------------------------------------------------------------------
# Order of checks (rule 18)
# ---------------------------------------------------------------------------------


async def test_bad_record_is_reported_before_topic_full(engine):
    await engine.put_topic("q", {"cap_records": 1, "discard": "reject"})
    await engine.write("q", recs(1))
    with pytest.raises(InvalidRequestError):
        await engine.write("q", [{"data": float("nan")}])


@with_limits(max_batch_records=2)
async def test_batch_too_large_is_reported_before_topic_full(engine):
    await engine.put_topic("q", {"cap_records": 1, "discard": "reject"})
    await engine.write("q", recs(1))
    with pytest.raises(BatchTooLargeError):
        await engine.write("q", recs(1, 2, 3))


@with_limits(max_total_bytes=2 * 44)
async def test_topic_full_is_reported_before_max_total_bytes(engine):
    await engine.put_topic("q", {"cap_records": 1, "discard": "reject"})
    await engine.write("q", recs("x"))
    with pytest.raises(TopicFullError):
        await engine.write("q", recs("x" * 100))


@with_limits(max_topics=1, max_total_bytes=100)
async def test_max_total_bytes_is_reported_before_max_topics(engine):
    await engine.write("a", recs("x"))
    with pytest.raises(ThrottledError) as err:
        await engine.write("b", recs("y" * 60))
    assert err.value.detail is not None
    assert err.value.detail["limit"] == "max_total_bytes"
    with pytest.raises(ThrottledError) as err:
        await engine.write("b", recs("y"))
    assert err.value.detail is not None
    assert err.value.detail["limit"] == "max_topics"


async def test_node_and_tag_with_json_special_characters_round_trip(engine):
    node = 'n"o\\d\te\u00e9\u2603'
    tag = 't"a\\g\n\x01\u00e9'
    await engine.write("orders", [{"data": 1, "node": node, "tag": tag}])
    diff = await engine.diff("orders", include_tags=True)
    (obj,) = rendered(diff)
    assert (obj["$node"], obj["$tag"]) == (node, tag)
    assert (await engine.get_topic("orders", touch=False)).bytes == frame_size(
        1, node=node, tag=tag
    )
    assert (await engine.delete_records("orders", match=tag)).deleted == 1


# ---------------------------------------------------------------------------------
# Many records: retention stays exact per record across internal segment boundaries
# ---------------------------------------------------------------------------------


async def test_cap_records_eviction_is_exact_across_many_records(engine):
    await engine.put_topic("t", {"cap_records": 25_000})
    for _ in range(6):
        await engine.write("t", [{"data": "x"} for _ in range(10_000)])
    st = await engine.get_topic("t", touch=False)
    assert (st.head_seq, st.earliest_seq, st.count, st.bytes) == (
        60_000,
        35_001,
        25_000,
        25_000 * frame_size("x"),
    )
    res = await engine.diff("t", from_seq=0, limit=1)
    assert res.tombstone is not None
    assert (res.tombstone.gap_from, res.tombstone.gap_to, res.tombstone.reason) == (
        1,
        35_000,
        "cap",
    )
    assert res.tombstone.missed_estimate == 35_000
    assert seqs_of(res) == [35_001]


async def test_cap_bytes_eviction_is_exact_across_many_records(engine):
    size = frame_size("x")
    await engine.put_topic("t", {"cap_bytes": 25_000 * size + size - 1})
    for _ in range(90):
        await engine.write("t", [{"data": "x"} for _ in range(1000)])
    st = await engine.get_topic("t", touch=False)
    assert (st.earliest_seq, st.count, st.bytes) == (65_001, 25_000, 25_000 * size)


async def test_eviction_of_large_records_keeps_exact_count(engine):
    big = "x" * 200_000
    await engine.put_topic("t", {"cap_records": 7})
    for i in range(1, 21):
        res = await engine.write("t", recs(big))
        assert res.seqs == [i]
        st = await engine.get_topic("t", touch=False)
        assert (st.count, st.earliest_seq, st.bytes) == (
            min(i, 7),
            max(1, i - 6),
            min(i, 7) * frame_size(big),
        )


async def test_discard_old_record_larger_than_cap_bytes_is_evicted_at_once(engine):
    await engine.put_topic("t", {"cap_bytes": 100})
    await engine.write("t", recs("small"))
    res = await engine.write("t", recs("x" * 200))
    assert (res.seqs, res.head_seq) == ([2], 2)
    st = await engine.get_topic("t", touch=False)
    assert (st.count, st.bytes, st.earliest_seq, st.head_seq) == (0, 0, 3, 2)
    diff = await engine.diff("t", from_seq=0)
    assert diff.tombstone is not None
    assert (diff.tombstone.gap_from, diff.tombstone.gap_to, diff.tombstone.reason) == (1, 2, "cap")


@with_limits(max_total_bytes=3 * 44)
async def test_self_trimming_topic_at_its_cap_stays_writable_at_max_total_bytes(engine):
    # §11: "a write that would push the live total over the cap" is throttled; a write to
    # a discard:"old" topic at its own cap evicts as much as it adds, so the live total
    # after the write is unchanged and the write must be admitted.
    await engine.put_topic("t", {"cap_records": 3})
    await engine.write("t", recs("x", "x", "x"))
    res = await engine.write("t", recs("y"))
    assert res.seqs == [4]
    st = await engine.get_topic("t", touch=False)
    assert (st.count, st.bytes, st.earliest_seq) == (3, 3 * 44, 2)
