"""The synchronous facade ``topics.open(None)``: same operations, same results, same errors.

These are plain (non-async) tests; the facade runs the engine on its own trio thread.
Calls that could hang on a broken facade run in a helper thread with a deadline.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

import topics
from topics._clock import ManualClock
from topics.engine import open_engine
from topics.errors import (
    InvalidRequestError,
    TopicExistsIncompatibleError,
    TopicFullError,
    TopicNotFoundError,
    TopicsError,
)
from topics.types import (
    DeleteRecordsResult,
    DeleteTopicResult,
    DiffResult,
    PutTopicResult,
    TopicPage,
    TopicState,
    WriteResult,
)

from ._support import START_MS, frame_size, recs, seqs_of

DEADLINE_S = 10.0


def run_with_deadline(fn: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """Run ``fn`` on a helper thread; fail the test if it does not return in time."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(DEADLINE_S)
    assert not thread.is_alive(), "the facade call hung"
    return box.get("result"), box.get("error")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START_MS)


@pytest.fixture
def db(clock: ManualClock):
    handle = topics.open(None, clock=clock)
    yield handle
    handle.close()


def test_open_engine_is_reexported_from_the_package():
    assert topics.open_engine is open_engine


def test_write_diff_and_get_topic_work_synchronously(db, clock: ManualClock):
    clock.advance(10)
    res = db.write("orders", recs({"id": 1}, {"id": 2}))
    assert isinstance(res, WriteResult)
    assert (res.seqs, res.head_seq, res.count, res.created, res.deduped) == (
        [1, 2],
        2,
        2,
        True,
        False,
    )
    diff = db.diff("orders", from_seq=0)
    assert isinstance(diff, DiffResult)
    assert seqs_of(diff) == [1, 2]
    assert [r.data for r in diff.records] == [{"id": 1}, {"id": 2}]
    assert [r.ts for r in diff.records] == [START_MS + 10, START_MS + 10]
    assert (diff.next_from_seq, diff.caught_up, diff.tombstone) == (2, True, None)
    st = db.get_topic("orders", touch=False)
    assert isinstance(st, TopicState)
    assert (st.head_seq, st.earliest_seq, st.count, st.bytes) == (
        2,
        1,
        2,
        2 * frame_size({"id": 1}),
    )
    assert st.last_write_ts == START_MS + 10
    assert st.last_read_ts == START_MS + 10


def test_every_operation_is_available(db):
    put = db.put_topic("jobs", {"ttl_ms": 60000})
    assert isinstance(put, PutTopicResult)
    assert (put.created, put.config.ttl_ms) == (True, 60000)
    db.write("jobs", [{"data": 1, "tag": "x"}, {"data": 2}])
    page = db.list_topics()
    assert isinstance(page, TopicPage)
    assert [t.topic for t in page.topics] == ["jobs"]
    deleted = db.delete_records("jobs", match="x")
    assert isinstance(deleted, DeleteRecordsResult)
    assert (deleted.deleted, deleted.earliest_seq, deleted.count) == (1, 2, 1)
    gone = db.delete_topic("jobs")
    assert isinstance(gone, DeleteTopicResult)
    assert gone.deleted is True
    assert db.list_topics().topics == []


def test_manual_clock_drives_retention_through_the_facade(db, clock: ManualClock):
    db.put_topic("t", {"ttl_ms": 1000})
    db.write("t", recs(1, 2))
    clock.advance(1001)
    diff = db.diff("t", from_seq=0)
    assert diff.tombstone is not None
    assert (diff.tombstone.gap_from, diff.tombstone.gap_to, diff.tombstone.reason) == (1, 2, "ttl")
    assert diff.records == []


def test_errors_propagate_as_the_same_exception_classes(db):
    with pytest.raises(TopicNotFoundError) as err:
        db.get_topic("ghost")
    assert (err.value.code, err.value.status) == ("topic_not_found", 404)
    with pytest.raises(InvalidRequestError):
        db.write("bad name", recs(1))
    with pytest.raises(InvalidRequestError):
        db.write("orders", [{"data": float("nan")}])
    db.put_topic("q", {"cap_records": 1, "discard": "reject"})
    db.write("q", recs(1))
    with pytest.raises(TopicFullError) as full:
        db.write("q", recs(2))
    assert full.value.status == 422
    with pytest.raises(TopicExistsIncompatibleError):
        db.put_topic("q", {"type": "queue"})
    with pytest.raises(TopicNotFoundError):
        db.diff("ghost")
    assert (db.get_topic("q", touch=False).head_seq, db.list_topics().topics[0].topic) == (1, "q")


def test_facade_is_a_context_manager(clock: ManualClock):
    with topics.open(None, clock=clock) as db:
        assert db.write("t", recs(1)).seqs == [1]
        assert seqs_of(db.diff("t")) == [1]
    _, error = run_with_deadline(lambda: db.write("t", recs(2)))
    assert error is not None
    assert "closed" in str(error).lower()


def test_exception_inside_context_manager_propagates_unchanged(clock: ManualClock):
    with pytest.raises(TopicNotFoundError), topics.open(None, clock=clock) as db:
        db.get_topic("ghost")


@pytest.mark.parametrize(
    "call",
    [
        lambda db: db.write("t", recs(1)),
        lambda db: db.diff("t"),
        lambda db: db.get_topic("t"),
        lambda db: db.put_topic("u"),
        lambda db: db.list_topics(),
    ],
    ids=["write", "diff", "get_topic", "put_topic", "list_topics"],
)
def test_calling_after_close_raises_a_clear_error(clock: ManualClock, call):
    db = topics.open(None, clock=clock)
    db.write("t", recs(1))
    db.close()
    result, error = run_with_deadline(lambda: call(db))
    assert result is None
    assert error is not None
    assert not isinstance(error, TopicNotFoundError)
    assert "closed" in str(error).lower()


def test_engine_errors_are_topics_errors(db):
    with pytest.raises(TopicsError) as err:
        db.delete_records("ghost", before_seq=1)
    assert isinstance(err.value, TopicNotFoundError)
