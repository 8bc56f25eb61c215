"""Engine bugs found by the engine-vs-model property test, each as the smallest sequence
that shows it, kept as regression tests once fixed. Every test states the rule it checks
(contract section or docs/SEMANTICS.md rule number).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import topics
from topics._clock import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def db(clock: ManualClock) -> Iterator[topics.SyncEngine]:
    with topics.open(None, clock=clock) as engine:
        yield engine


def test_queue_topic_state_has_queue_counters(db: topics.SyncEngine) -> None:
    # §1.2: "A queue topic additionally returns a queue sub-object (§10.7)".
    db.put_topic("q", {"type": "queue"})
    state = db.get_topic("q", touch=False)
    assert state.queue == {
        "ready": 0,
        "in_flight": 0,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }


def test_put_topic_does_not_resurrect_expired_records(
    db: topics.SyncEngine, clock: ManualClock
) -> None:
    # SEMANTICS.md rule 6: expiry is applied at the start of every operation, so every answer
    # is exact for the clock. Record 1 expired under ttl_ms=1000 before the PUT that raises
    # the TTL; the PUT must not bring it back (a GET just before the PUT says it is gone).
    db.put_topic("t", {"ttl_ms": 1000})
    db.write("t", [{"data": 1}])
    clock.advance(5000)
    db.put_topic("t", {"ttl_ms": 0})
    state = db.get_topic("t", touch=False)
    assert (state.count, state.earliest_seq) == (0, 2)
    assert db.diff("t").tombstone is not None


def test_expired_idempotency_key_stays_expired_when_the_window_grows(
    db: topics.SyncEngine, clock: ManualClock
) -> None:
    # SEMANTICS.md rule 19 (+ rule 6's "exact for the clock at the time of the call"): at
    # T+1500 the key k1 (window 1000) has expired; a GET at that moment would not dedupe
    # it. Raising the window afterwards must not revive it, or the answer depends on
    # whether some other keyed write happened to prune it in between (then it is gone).
    db.put_topic("t", {"idempotency_window_ms": 1000})
    db.write("t", [{"data": 1}], idempotency_key="k1")
    clock.advance(1500)
    db.write("t", [{"data": 2}])  # an unkeyed write prunes nothing
    db.put_topic("t", {"idempotency_window_ms": 120_000})
    again = db.write("t", [{"data": 3}], idempotency_key="k1")
    assert (again.deduped, again.first_seq) == (False, 3)


def test_expired_idempotency_key_stays_expired_when_the_clock_steps_back(
    db: topics.SyncEngine, clock: ManualClock
) -> None:
    # The same rule under a wall clock stepping back (NTP): k1 expired at T+1001 and must
    # not come back when the clock returns to T+900.
    db.put_topic("t", {"idempotency_window_ms": 1000})
    db.write("t", [{"data": 1}], idempotency_key="k1")
    clock.advance(1001)
    db.get_topic("t")  # an operation at a moment when k1 has expired
    clock.set(clock.now_ms() - 101)
    again = db.write("t", [{"data": 2}], idempotency_key="k1")
    assert (again.deduped, again.first_seq) == (False, 2)


def test_expired_key_is_forgotten_even_when_written_after_a_clock_step_back(
    db: topics.SyncEngine, clock: ManualClock
) -> None:
    # Rule 19 again, found by the heavy machine in CI: after the clock steps back, write order
    # is no longer written_at order. k2 (written after the step) expires first while k1 (older
    # in write order) is still live; the prune must not stop at k1, or k2 survives and a
    # larger window revives it.
    db.put_topic("t", {"idempotency_window_ms": 1000})
    clock.set(10_000)
    db.write("t", [{"data": 1}], idempotency_key="k1")
    clock.set(9_500)
    db.write("t", [{"data": 2}], idempotency_key="k2")
    clock.set(10_600)  # k2 (9,500) has expired, k1 (10,000) has not
    db.get_topic("t")
    db.put_topic("t", {"idempotency_window_ms": 120_000})
    again = db.write("t", [{"data": 3}], idempotency_key="k2")
    assert (again.deduped, again.first_seq) == (False, 3)
    assert db.write("t", [{"data": 4}], idempotency_key="k1").deduped
