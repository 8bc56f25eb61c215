"""Topics (contract §1, §0.10 config, §0.8 idempotent PUT; SEMANTICS.md rules 1, 17, 21-24)."""

from __future__ import annotations

from typing import Any

import pytest

from topics._clock import ManualClock
from topics.config import TopicConfig
from topics.errors import (
    InvalidRequestError,
    ThrottledError,
    TopicExistsIncompatibleError,
    TopicNotEmptyError,
    TopicNotFoundError,
)

from ._support import DEFAULT_CONFIG, START_MS, frame_size, recs, seqs_of, with_limits

# ---------------------------------------------------------------------------------
# PUT: create / identical no-op / changed diff
# ---------------------------------------------------------------------------------


async def test_put_absent_topic_creates_it_with_default_config(engine):
    res = await engine.put_topic("jobs")
    assert res.topic == "jobs"
    assert res.created is True
    assert res.config == TopicConfig()
    assert res.config.to_dict() == DEFAULT_CONFIG


async def test_put_with_empty_body_creates_all_default_topic(engine):
    res = await engine.put_topic("jobs", {})
    assert res.created is True
    assert res.config.to_dict() == DEFAULT_CONFIG


async def test_put_merges_given_fields_over_defaults_on_create(engine):
    res = await engine.put_topic(
        "jobs",
        {
            "ttl_ms": 60000,
            "cap_records": 1000000,
            "discard": "old",
            "durable": True,
            "priority": 10,
        },
    )
    assert res.created is True
    assert res.config.to_dict() == DEFAULT_CONFIG | {
        "ttl_ms": 60000,
        "cap_records": 1000000,
        "durable": True,
        "durability": "fsync",
        "priority": 10,
    }


async def test_fresh_topic_state_is_empty_with_null_recency_clocks(engine):
    await engine.put_topic("jobs")
    st = await engine.get_topic("jobs", touch=False)
    assert st.topic == "jobs"
    assert st.type == "log"
    assert (st.head_seq, st.earliest_seq, st.next_seq, st.count, st.bytes) == (0, 1, 1, 0, 0)
    assert st.last_write_ts is None
    assert st.last_read_ts is None
    assert st.queue is None
    assert st.config == TopicConfig()
    assert st.effective_priority == 0


async def test_identical_put_is_a_noop_and_reports_not_created(engine):
    cfg = {"ttl_ms": 60000, "cap_records": 1000, "priority": 10}
    first = await engine.put_topic("jobs", cfg)
    await engine.write("jobs", recs(1, 2))
    second = await engine.put_topic("jobs", cfg)
    assert second.created is False
    assert second.config == first.config
    st = await engine.get_topic("jobs", touch=False)
    assert (st.head_seq, st.count) == (2, 2)
    assert st.config == first.config


async def test_put_with_empty_body_on_existing_topic_keeps_its_config(engine):
    first = await engine.put_topic("jobs", {"ttl_ms": 5000, "discard": "reject", "priority": -3})
    again = await engine.put_topic("jobs", {})
    assert again.created is False
    assert again.config == first.config
    also = await engine.put_topic("jobs")
    assert also.created is False
    assert also.config == first.config


async def test_changed_put_applies_only_named_fields_over_current_config(engine):
    await engine.put_topic("jobs", {"ttl_ms": 5000, "cap_records": 10, "priority": 3})
    res = await engine.put_topic("jobs", {"cap_records": 20})
    assert res.created is False
    assert res.config.to_dict() == DEFAULT_CONFIG | {
        "ttl_ms": 5000,
        "cap_records": 20,
        "priority": 3,
    }
    st = await engine.get_topic("jobs", touch=False)
    assert st.config == res.config


async def test_changed_put_never_rewrites_records_and_seqs_continue(engine):
    await engine.write("jobs", recs("a", "b", "c"))
    await engine.put_topic("jobs", {"cap_bytes": 10_000, "auto_priority": False})
    st = await engine.get_topic("jobs", touch=False)
    assert (st.head_seq, st.earliest_seq, st.count) == (3, 1, 3)
    res = await engine.write("jobs", recs("d"))
    assert res.seqs == [4]


async def test_put_can_set_priority_back_to_null(engine):
    await engine.put_topic("jobs", {"priority": 9})
    res = await engine.put_topic("jobs", {"priority": None})
    assert res.config.priority is None


async def test_tightened_ttl_via_put_expires_existing_records_lazily(engine, clock: ManualClock):
    await engine.write("jobs", recs(1, 2, 3))
    clock.advance(5000)
    await engine.put_topic("jobs", {"ttl_ms": 1000})
    st = await engine.get_topic("jobs", touch=False)
    assert (st.head_seq, st.earliest_seq, st.count, st.bytes) == (3, 4, 0, 0)


# ---------------------------------------------------------------------------------
# Config fields: values, types, clamps, unknown fields
# ---------------------------------------------------------------------------------

VALID_FIELD_VALUES = [
    ("type", "queue"),
    ("type", "log"),
    ("ttl_ms", 60000),
    ("ttl_ms", (1 << 64) - 1),
    ("cap_records", 5),
    ("cap_bytes", 4096),
    ("discard", "reject"),
    ("discard", "old"),
    ("priority", 7),
    ("priority", -7),
    ("priority", 0),
    ("auto_priority", False),
    ("auto_create", False),
    ("idempotency_window_ms", 0),
    ("idempotency_window_ms", 5000),
    ("dedupe_node", False),
    ("lease_ms", 1000),
    ("claim_jitter_ms", 250),
    ("max_deliveries", 5),
    ("dead_letter", "jobs.dlq"),
    ("leases_durable", True),
]


@pytest.mark.parametrize(("field", "value"), VALID_FIELD_VALUES)
async def test_put_accepts_and_echoes_each_config_field(engine, field, value):
    res = await engine.put_topic("jobs", {field: value})
    assert res.config.to_dict() == DEFAULT_CONFIG | {field: value}
    st = await engine.get_topic("jobs", touch=False)
    assert st.config.to_dict() == DEFAULT_CONFIG | {field: value}


@pytest.mark.parametrize(
    ("field", "value"), [fv for fv in VALID_FIELD_VALUES if fv != ("type", "queue")]
)
async def test_put_updates_each_config_field_on_existing_topic(engine, field, value):
    await engine.put_topic("jobs")
    res = await engine.put_topic("jobs", {field: value})
    assert res.created is False
    assert res.config.to_dict() == DEFAULT_CONFIG | {field: value}


INVALID_FIELD_VALUES = [
    ("type", "stream"),
    ("type", None),
    ("type", 1),
    ("ttl_ms", -1),
    ("ttl_ms", "60000"),
    ("ttl_ms", 1.5),
    ("ttl_ms", True),
    ("ttl_ms", 1 << 64),
    ("cap_records", -1),
    ("cap_records", "5"),
    ("cap_bytes", 2.0),
    ("cap_bytes", False),
    ("discard", "new"),
    ("discard", None),
    ("durable", "yes"),
    ("durable", 1),
    ("durability", "tape"),
    ("durability", True),
    ("priority", "high"),
    ("priority", 1.5),
    ("priority", True),
    ("auto_priority", 1),
    ("auto_priority", "true"),
    ("auto_create", None),
    ("idempotency_window_ms", -5),
    ("idempotency_window_ms", "5"),
    ("dedupe_node", "no"),
    ("lease_ms", "30000"),
    ("lease_ms", 1.5),
    ("claim_jitter_ms", "0"),
    ("max_deliveries", -1),
    ("max_deliveries", 2.5),
    ("dead_letter", 5),
    ("dead_letter", "bad name"),
    ("dead_letter", ""),
    ("dead_letter", "-dlq"),
    ("leases_durable", "false"),
]


@pytest.mark.parametrize(("field", "value"), INVALID_FIELD_VALUES)
async def test_put_with_bad_field_value_is_rejected_and_creates_nothing(engine, field, value):
    with pytest.raises(InvalidRequestError) as err:
        await engine.put_topic("jobs", {field: value})
    assert err.value.code == "invalid_request"
    assert err.value.status == 400
    with pytest.raises(TopicNotFoundError):
        await engine.get_topic("jobs", touch=False)


@pytest.mark.parametrize(("field", "value"), INVALID_FIELD_VALUES)
async def test_put_with_bad_field_value_leaves_existing_config_unchanged(engine, field, value):
    before = await engine.put_topic("jobs", {"ttl_ms": 777})
    with pytest.raises(InvalidRequestError):
        await engine.put_topic("jobs", {"cap_records": 9, field: value})
    st = await engine.get_topic("jobs", touch=False)
    assert st.config == before.config


@pytest.mark.parametrize(
    "body", [{"ttl": 5}, {"TTL_MS": 5}, {"ttl_ms": 5, "bogus": True}, {"queue": {}}]
)
async def test_put_with_unknown_config_field_is_rejected(engine, body):
    with pytest.raises(InvalidRequestError):
        await engine.put_topic("jobs", body)
    with pytest.raises(TopicNotFoundError):
        await engine.get_topic("jobs", touch=False)
    before = await engine.put_topic("jobs", {"ttl_ms": 1})
    with pytest.raises(InvalidRequestError):
        await engine.put_topic("jobs", body)
    assert (await engine.get_topic("jobs", touch=False)).config == before.config


@pytest.mark.parametrize("body", [["ttl_ms", 5], "ttl_ms=5", 5])
async def test_put_with_non_object_config_is_rejected(engine, body):
    with pytest.raises(InvalidRequestError):
        await engine.put_topic("jobs", body)


@pytest.mark.parametrize(
    ("field", "given", "stored"),
    [
        ("priority", 5000, 1000),
        ("priority", 1001, 1000),
        ("priority", 1000, 1000),
        ("priority", -1000, -1000),
        ("priority", -1001, -1000),
        ("priority", -(1 << 40), -1000),
        ("lease_ms", 0, 100),
        ("lease_ms", 99, 100),
        ("lease_ms", 100, 100),
        ("lease_ms", 86_400_000, 86_400_000),
        ("lease_ms", 86_400_001, 86_400_000),
        ("claim_jitter_ms", 0, 0),
        ("claim_jitter_ms", 5000, 5000),
        ("claim_jitter_ms", 5001, 5000),
        ("claim_jitter_ms", 10**9, 5000),
    ],
)
async def test_put_clamps_ranged_fields(engine, field, given, stored):
    res = await engine.put_topic("jobs", {field: given})
    assert getattr(res.config, field) == stored
    assert (await engine.get_topic("jobs", touch=False)).config.to_dict()[field] == stored


# ---------------------------------------------------------------------------------
# durable <-> durability
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "durability", "durable"),
    [
        ({}, "disk", False),
        ({"durable": True}, "fsync", True),
        ({"durable": False}, "disk", False),
        ({"durability": "ephemeral"}, "ephemeral", False),
        ({"durability": "memory"}, "memory", False),
        ({"durability": "disk"}, "disk", False),
        ({"durability": "fsync"}, "fsync", True),
        ({"durable": True, "durability": "memory"}, "memory", False),
        ({"durable": True, "durability": "disk"}, "disk", False),
        ({"durable": False, "durability": "fsync"}, "fsync", True),
    ],
)
async def test_durability_resolution_on_create(engine, body, durability, durable):
    res = await engine.put_topic("jobs", body)
    assert res.config.durability == durability
    assert res.config.durable is durable
    cfg = res.config.to_dict()
    assert (cfg["durability"], cfg["durable"]) == (durability, durable)
    page = await engine.list_topics()
    (summary,) = page.topics
    assert (summary.durability, summary.durable) == (durability, durable)


@pytest.mark.parametrize(
    ("initial", "update", "durability"),
    [
        ({"durability": "memory"}, {"durable": True}, "fsync"),
        ({"durability": "memory"}, {"durable": False}, "disk"),
        ({"durable": True}, {"durable": False}, "disk"),
        ({"durable": False}, {"durable": True}, "fsync"),
        ({"durable": True}, {"durability": "ephemeral"}, "ephemeral"),
        ({"durability": "ephemeral"}, {"ttl_ms": 5}, "ephemeral"),
        ({"durability": "fsync"}, {"priority": 1}, "fsync"),
        ({"durability": "disk"}, {"durable": True, "durability": "memory"}, "memory"),
    ],
)
async def test_durability_resolution_on_update(engine, initial, update, durability):
    await engine.put_topic("jobs", initial)
    res = await engine.put_topic("jobs", update)
    assert res.created is False
    assert res.config.durability == durability
    assert res.config.durable is (durability == "fsync")
    st = await engine.get_topic("jobs", touch=False)
    assert st.config.durability == durability


# ---------------------------------------------------------------------------------
# type is immutable; dead_letter != self
# ---------------------------------------------------------------------------------


async def test_put_changing_type_log_to_queue_is_409_and_changes_nothing(engine):
    before = await engine.put_topic("jobs")
    with pytest.raises(TopicExistsIncompatibleError) as err:
        await engine.put_topic("jobs", {"type": "queue", "ttl_ms": 5})
    assert err.value.code == "topic_exists_incompatible"
    assert err.value.status == 409
    st = await engine.get_topic("jobs", touch=False)
    assert st.type == "log"
    assert st.config == before.config


async def test_put_changing_type_queue_to_log_is_409(engine):
    await engine.put_topic("jobs", {"type": "queue"})
    with pytest.raises(TopicExistsIncompatibleError):
        await engine.put_topic("jobs", {"type": "log"})
    st = await engine.get_topic("jobs", touch=False)
    assert st.type == "queue"
    assert st.config.type == "queue"


async def test_put_repeating_same_type_is_allowed(engine):
    await engine.put_topic("jobs", {"type": "queue"})
    res = await engine.put_topic("jobs", {"type": "queue", "lease_ms": 5000})
    assert res.created is False
    assert (res.config.type, res.config.lease_ms) == ("queue", 5000)


async def test_put_without_type_on_queue_topic_keeps_it_a_queue(engine):
    await engine.put_topic("jobs", {"type": "queue"})
    res = await engine.put_topic("jobs", {"ttl_ms": 5})
    assert res.config.type == "queue"
    assert (await engine.get_topic("jobs", touch=False)).type == "queue"


async def test_dead_letter_naming_the_topic_itself_is_rejected_on_create(engine):
    with pytest.raises(InvalidRequestError):
        await engine.put_topic("jobs", {"type": "queue", "dead_letter": "jobs"})
    with pytest.raises(TopicNotFoundError):
        await engine.get_topic("jobs", touch=False)


async def test_dead_letter_naming_the_topic_itself_is_rejected_on_update(engine):
    before = await engine.put_topic("jobs", {"type": "queue", "dead_letter": "jobs.dlq"})
    with pytest.raises(InvalidRequestError):
        await engine.put_topic("jobs", {"dead_letter": "jobs"})
    assert (await engine.get_topic("jobs", touch=False)).config == before.config


async def test_dead_letter_naming_another_topic_is_accepted_without_creating_it(engine):
    res = await engine.put_topic("jobs", {"dead_letter": "jobs.dlq"})
    assert res.config.dead_letter == "jobs.dlq"
    with pytest.raises(TopicNotFoundError):
        await engine.get_topic("jobs.dlq", touch=False)


# ---------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------

VALID_NAMES = ["a", "A9._:-x", "x" * 255, "0", "render-queue:tenantA", "Z_"]
INVALID_NAMES = [
    "",
    "-a",
    ".a",
    "_a",
    ":a",
    "a" * 256,
    "a/b",
    "a b",
    "é",
    "aé",
    "a\n",
    "\na",
    "a\x00",
    "../a",
    "a*",
]


@pytest.mark.parametrize("name", VALID_NAMES, ids=lambda n: f"len{len(n)}:{n[:12]}")
async def test_valid_topic_names_are_accepted(engine, name):
    res = await engine.put_topic(name)
    assert (res.topic, res.created) == (name, True)
    st = await engine.get_topic(name, touch=False)
    assert st.topic == name
    w = await engine.write(name, recs(1))
    assert w.topic == name
    assert w.seqs == [1]
    assert [t.topic for t in (await engine.list_topics()).topics] == [name]


@pytest.mark.parametrize("name", INVALID_NAMES, ids=repr)
async def test_invalid_topic_names_are_rejected_by_every_operation(engine, name):
    with pytest.raises(InvalidRequestError):
        await engine.put_topic(name)
    with pytest.raises(InvalidRequestError):
        await engine.write(name, recs(1))
    with pytest.raises(InvalidRequestError):
        await engine.get_topic(name)
    with pytest.raises(InvalidRequestError):
        await engine.diff(name)
    with pytest.raises(InvalidRequestError):
        await engine.delete_topic(name)
    with pytest.raises(InvalidRequestError):
        await engine.delete_records(name, before_seq=1)
    assert (await engine.list_topics()).topics == []


@pytest.mark.parametrize("name", [None, 5, b"jobs", ["jobs"]], ids=repr)
async def test_non_string_topic_names_are_rejected(engine, name):
    with pytest.raises(InvalidRequestError):
        await engine.put_topic(name)
    with pytest.raises(InvalidRequestError):
        await engine.write(name, recs(1))


async def test_topic_names_are_case_sensitive(engine):
    await engine.write("jobs", recs(1))
    await engine.write("Jobs", recs(1, 2))
    assert (await engine.get_topic("jobs", touch=False)).head_seq == 1
    assert (await engine.get_topic("Jobs", touch=False)).head_seq == 2
    assert [t.topic for t in (await engine.list_topics()).topics] == ["Jobs", "jobs"]


# ---------------------------------------------------------------------------------
# get_topic
# ---------------------------------------------------------------------------------


async def test_get_absent_topic_is_404_and_never_creates_it(engine):
    with pytest.raises(TopicNotFoundError) as err:
        await engine.get_topic("ghost")
    assert err.value.code == "topic_not_found"
    assert err.value.status == 404
    assert (await engine.list_topics()).topics == []


async def test_topic_state_tracks_head_earliest_next_count_bytes_and_write_time(
    engine, clock: ManualClock
):
    await engine.put_topic("jobs")
    clock.advance(1000)
    batch = [
        {"data": {"type": "resize", "w": 256}, "tag": "tenant42:job-9001", "node": "worker-eu-1"},
        {"data": "raw", "meta": {"trace": "abc123"}},
        {"data": None},
    ]
    await engine.write("jobs", batch)
    st = await engine.get_topic("jobs", touch=False)
    expected_bytes = (
        frame_size({"type": "resize", "w": 256}, node="worker-eu-1", tag="tenant42:job-9001")
        + frame_size("raw", meta={"trace": "abc123"})
        + frame_size(None)
    )
    assert (st.head_seq, st.earliest_seq, st.next_seq, st.count) == (3, 1, 4, 3)
    assert st.bytes == expected_bytes
    assert st.last_write_ts == START_MS + 1000
    assert st.last_read_ts is None


async def test_last_write_ts_follows_the_latest_write(engine, clock: ManualClock):
    await engine.write("jobs", recs(1))
    clock.advance(2500)
    await engine.write("jobs", recs(2))
    assert (await engine.get_topic("jobs", touch=False)).last_write_ts == START_MS + 2500


async def test_get_topic_with_touch_sets_last_read_ts(engine, clock: ManualClock):
    await engine.put_topic("jobs")
    clock.advance(500)
    await engine.get_topic("jobs")
    clock.advance(700)
    st = await engine.get_topic("jobs", touch=False)
    assert st.last_read_ts == START_MS + 500


async def test_get_topic_with_touch_false_leaves_last_read_ts_unset(engine, clock: ManualClock):
    await engine.write("jobs", recs(1))
    clock.advance(500)
    await engine.get_topic("jobs", touch=False)
    await engine.get_topic("jobs", touch=False)
    assert (await engine.get_topic("jobs", touch=False)).last_read_ts is None


async def test_diff_sets_last_read_ts(engine, clock: ManualClock):
    await engine.write("jobs", recs(1))
    clock.advance(1234)
    await engine.diff("jobs", from_seq=0)
    clock.advance(1)
    assert (await engine.get_topic("jobs", touch=False)).last_read_ts == START_MS + 1234


async def test_list_topics_touches_only_when_asked(engine, clock: ManualClock):
    await engine.write("jobs", recs(1))
    clock.advance(100)
    await engine.list_topics()
    assert (await engine.get_topic("jobs", touch=False)).last_read_ts is None
    clock.advance(100)
    await engine.list_topics(touch=True)
    assert (await engine.get_topic("jobs", touch=False)).last_read_ts == START_MS + 200


# ---------------------------------------------------------------------------------
# effective_priority
# ---------------------------------------------------------------------------------


async def test_manual_priority_wins_even_when_never_read(engine):
    await engine.put_topic("jobs", {"priority": 42})
    assert (await engine.get_topic("jobs", touch=False)).effective_priority == 42


async def test_manual_priority_wins_over_recent_read(engine):
    await engine.put_topic("jobs", {"priority": -7})
    await engine.diff("jobs")
    assert (await engine.get_topic("jobs", touch=False)).effective_priority == -7


async def test_auto_priority_is_zero_when_never_read(engine):
    await engine.write("jobs", recs(1, 2))
    assert (await engine.get_topic("jobs", touch=False)).effective_priority == 0


@pytest.mark.parametrize(
    ("idle_ms", "expected"),
    [
        (0, 500),
        (15_000, 354),
        (30_000, 250),
        (45_000, 177),
        (60_000, 125),
        (285_000, 1),
        (300_000, 0),
        (3_600_000, 0),
    ],
)
async def test_auto_priority_decays_with_read_idleness(
    engine, clock: ManualClock, idle_ms, expected
):
    await engine.put_topic("jobs")
    await engine.diff("jobs")
    clock.advance(idle_ms)
    assert (await engine.get_topic("jobs", touch=False)).effective_priority == expected
    (summary,) = (await engine.list_topics()).topics
    assert summary.effective_priority == expected


async def test_auto_priority_false_means_zero_even_after_a_read(engine):
    await engine.put_topic("jobs", {"auto_priority": False})
    await engine.diff("jobs")
    assert (await engine.get_topic("jobs", touch=False)).effective_priority == 0


async def test_clearing_manual_priority_returns_to_auto_priority(engine, clock: ManualClock):
    await engine.put_topic("jobs", {"priority": 9})
    await engine.diff("jobs")
    clock.advance(30_000)
    await engine.put_topic("jobs", {"priority": None})
    assert (await engine.get_topic("jobs", touch=False)).effective_priority == 250


# ---------------------------------------------------------------------------------
# list_topics
# ---------------------------------------------------------------------------------


async def test_list_on_empty_engine_is_empty_without_cursor(engine):
    page = await engine.list_topics()
    assert page.topics == []
    assert page.next_cursor is None


async def test_list_topics_in_byte_order(engine):
    names = ["b", "a", "B", "a.1", "a:2", "a-3", "a_4", "A", "0", "a0"]
    for name in names:
        await engine.put_topic(name)
    page = await engine.list_topics()
    assert [t.topic for t in page.topics] == sorted(names, key=str.encode)
    assert page.next_cursor is None


async def test_list_topics_filters_by_prefix(engine):
    for name in ["a", "a-3", "a.1", "ab", "b", "ba", "A"]:
        await engine.put_topic(name)
    page = await engine.list_topics(prefix="a")
    assert [t.topic for t in page.topics] == ["a", "a-3", "a.1", "ab"]
    assert page.next_cursor is None
    page = await engine.list_topics(prefix="zz")
    assert page.topics == []
    assert page.next_cursor is None


async def test_list_summary_has_contract_fields(engine):
    await engine.put_topic("jobs", {"durable": True})
    await engine.write("jobs", recs("a", "bb"))
    (summary,) = (await engine.list_topics()).topics
    assert summary.to_dict() == {
        "topic": "jobs",
        "type": "log",
        "head_seq": 2,
        "earliest_seq": 1,
        "count": 2,
        "bytes": frame_size("a") + frame_size("bb"),
        "durable": True,
        "durability": "fsync",
        "effective_priority": 0,
    }


async def _collect_pages(engine, **kwargs: Any) -> list[list[str]]:
    pages: list[list[str]] = []
    cursor = None
    for _ in range(100):
        page = await engine.list_topics(cursor=cursor, **kwargs)
        pages.append([t.topic for t in page.topics])
        cursor = page.next_cursor
        if cursor is None:
            return pages
    raise AssertionError("list_topics never stopped returning a cursor")


async def test_list_pagination_follows_cursors_through_all_pages(engine):
    names = [f"t{i}" for i in range(7)]
    for name in reversed(names):
        await engine.put_topic(name)
    pages = await _collect_pages(engine, page_size=3)
    assert pages == [["t0", "t1", "t2"], ["t3", "t4", "t5"], ["t6"]]


async def test_list_pagination_with_prefix(engine):
    for name in ["a1", "t.1", "t.2", "t.3", "t.4", "t.5", "u1", "t"]:
        await engine.put_topic(name)
    pages = await _collect_pages(engine, prefix="t.", page_size=2)
    assert pages == [["t.1", "t.2"], ["t.3", "t.4"], ["t.5"]]


async def test_list_last_full_page_has_no_cursor(engine):
    for name in ["a", "b", "c", "d"]:
        await engine.put_topic(name)
    first = await engine.list_topics(page_size=2)
    assert [t.topic for t in first.topics] == ["a", "b"]
    assert first.next_cursor is not None
    second = await engine.list_topics(page_size=2, cursor=first.next_cursor)
    assert [t.topic for t in second.topics] == ["c", "d"]
    assert second.next_cursor is None


async def test_list_page_size_defaults_to_100(engine):
    names = [f"t{i:03d}" for i in range(101)]
    for name in names:
        await engine.put_topic(name)
    first = await engine.list_topics()
    assert [t.topic for t in first.topics] == names[:100]
    assert first.next_cursor is not None
    second = await engine.list_topics(cursor=first.next_cursor)
    assert [t.topic for t in second.topics] == names[100:]
    assert second.next_cursor is None


async def test_list_page_size_is_clamped_to_1000(engine):
    names = [f"t{i:04d}" for i in range(1001)]
    for name in names:
        await engine.put_topic(name)
    page = await engine.list_topics(page_size=5000)
    assert len(page.topics) == 1000
    assert page.next_cursor is not None
    rest = await engine.list_topics(page_size=5000, cursor=page.next_cursor)
    assert [t.topic for t in rest.topics] == ["t1000"]


@pytest.mark.parametrize("page_size", [0, -1, "2", 1.5, True])
async def test_list_with_bad_page_size_is_invalid(engine, page_size):
    await engine.put_topic("jobs")
    with pytest.raises(InvalidRequestError):
        await engine.list_topics(page_size=page_size)


@pytest.mark.parametrize("cursor", ["%%%not-a-cursor%%%", "eyJ", "!!", 5])
async def test_list_with_bad_cursor_is_invalid(engine, cursor):
    for name in ["a", "b", "c"]:
        await engine.put_topic(name)
    with pytest.raises(InvalidRequestError) as err:
        await engine.list_topics(cursor=cursor)
    assert err.value.code == "invalid_request"


# ---------------------------------------------------------------------------------
# delete_topic
# ---------------------------------------------------------------------------------


async def test_delete_existing_topic_removes_it(engine):
    await engine.write("jobs", recs(1, 2))
    res = await engine.delete_topic("jobs")
    assert (res.topic, res.deleted, res.routers_removed) == ("jobs", True, [])
    with pytest.raises(TopicNotFoundError):
        await engine.get_topic("jobs")
    with pytest.raises(TopicNotFoundError):
        await engine.diff("jobs")
    assert (await engine.list_topics()).topics == []


async def test_delete_absent_topic_reports_deleted_false(engine):
    res = await engine.delete_topic("ghost")
    assert (res.topic, res.deleted, res.routers_removed) == ("ghost", False, [])
    await engine.put_topic("jobs")
    assert (await engine.delete_topic("jobs")).deleted is True
    assert (await engine.delete_topic("jobs")).deleted is False


async def test_delete_if_empty_refuses_topic_with_records(engine):
    await engine.write("jobs", recs(1))
    with pytest.raises(TopicNotEmptyError) as err:
        await engine.delete_topic("jobs", if_empty=True)
    assert err.value.code == "topic_not_empty"
    assert err.value.status == 409
    st = await engine.get_topic("jobs", touch=False)
    assert (st.head_seq, st.count) == (1, 1)


async def test_delete_if_empty_deletes_topic_without_records(engine):
    await engine.put_topic("fresh")
    assert (await engine.delete_topic("fresh", if_empty=True)).deleted is True
    await engine.write("drained", recs(1, 2))
    await engine.delete_records("drained", before_seq=3)
    assert (await engine.delete_topic("drained", if_empty=True)).deleted is True
    assert (await engine.list_topics()).topics == []


async def test_delete_if_empty_counts_only_live_records(engine, clock: ManualClock):
    await engine.put_topic("jobs", {"ttl_ms": 1000})
    await engine.write("jobs", recs(1, 2))
    clock.advance(1001)
    assert (await engine.delete_topic("jobs", if_empty=True)).deleted is True


async def test_delete_if_empty_on_absent_topic_reports_deleted_false(engine):
    assert (await engine.delete_topic("ghost", if_empty=True)).deleted is False


async def test_recreated_topic_restarts_seqs_at_one(engine):
    await engine.write("jobs", recs(1, 2, 3))
    await engine.delete_topic("jobs")
    res = await engine.write("jobs", recs("x", "y"))
    assert res.created is True
    assert res.seqs == [1, 2]
    st = await engine.get_topic("jobs", touch=False)
    assert (st.head_seq, st.earliest_seq, st.next_seq, st.count) == (2, 1, 3, 2)
    diff = await engine.diff("jobs", from_seq=0)
    assert seqs_of(diff) == [1, 2]
    assert [r.data for r in diff.records] == ["x", "y"]
    assert diff.tombstone is None


async def test_recreated_topic_via_put_gets_default_config(engine):
    await engine.put_topic("jobs", {"ttl_ms": 5, "type": "queue"})
    await engine.delete_topic("jobs")
    res = await engine.put_topic("jobs")
    assert res.created is True
    assert res.config == TopicConfig()


# ---------------------------------------------------------------------------------
# max_topics (§11)
# ---------------------------------------------------------------------------------


@with_limits(max_topics=2)
async def test_put_creating_topic_beyond_max_topics_is_throttled(engine):
    await engine.put_topic("a")
    await engine.put_topic("b")
    with pytest.raises(ThrottledError) as err:
        await engine.put_topic("c")
    assert err.value.code == "throttled"
    assert err.value.status == 429
    assert err.value.detail is not None
    assert err.value.detail["limit"] == "max_topics"
    assert err.value.detail["max"] == 2
    with pytest.raises(TopicNotFoundError):
        await engine.get_topic("c", touch=False)


@with_limits(max_topics=2)
async def test_write_creating_topic_beyond_max_topics_is_throttled(engine):
    await engine.write("a", recs(1))
    await engine.write("b", recs(1))
    with pytest.raises(ThrottledError) as err:
        await engine.write("c", recs(1))
    assert err.value.detail is not None
    assert err.value.detail["limit"] == "max_topics"
    with pytest.raises(TopicNotFoundError):
        await engine.get_topic("c", touch=False)
    assert [t.topic for t in (await engine.list_topics()).topics] == ["a", "b"]


@with_limits(max_topics=2)
async def test_existing_topics_stay_writable_and_configurable_at_max_topics(engine):
    await engine.put_topic("a")
    await engine.put_topic("b")
    res = await engine.put_topic("a", {"ttl_ms": 9})
    assert (res.created, res.config.ttl_ms) == (False, 9)
    assert (await engine.put_topic("b")).created is False
    assert (await engine.write("a", recs(1))).seqs == [1]


@with_limits(max_topics=2)
async def test_deleting_a_topic_frees_a_max_topics_slot(engine):
    await engine.put_topic("a")
    await engine.put_topic("b")
    await engine.delete_topic("a")
    assert (await engine.put_topic("c")).created is True
