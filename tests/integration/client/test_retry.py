"""Retries: 429/503 and broken connections, honouring Retry-After and
``error.detail.retry_after_ms``, only where a repeat is safe; a retried write never
appends twice (its idempotency key travels with every attempt)."""

from __future__ import annotations

import time

import httpx
import pytest

import topics
from topics.client import ClientConnectionError, RetryPolicy, request_id_of
from topics.client._retry import server_delay_s

from .conftest import FakeTime, FaultyTransport, ServerProcess, error_response, raises, unique

FAST = RetryPolicy(max_attempts=4, base_delay_s=0.001, max_delay_s=0.01, timeout_s=10)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record the client's waits instead of sleeping them (only the client's ``time``)."""
    fake = FakeTime()
    monkeypatch.setattr("topics.client._sync.time", fake)
    return fake.sleeps


def _client(server: ServerProcess, transport: FaultyTransport, **kw: object) -> topics.Client:
    return topics.Client(server.base_url, transport=transport, retry=kw.pop("retry", FAST), **kw)  # type: ignore[arg-type]


def test_429_with_retry_after_ms_is_retried_after_that_long(
    server: ServerProcess, sleeps: list[float]
) -> None:
    throttled = error_response(429, "throttled", {"Retry-After": "1"}, {"retry_after_ms": 250})
    transport = FaultyTransport([throttled, throttled])
    with _client(server, transport) as c:
        assert c.health()["status"] == "ok"
    assert len(transport.requests) == 3
    assert all(0.25 <= s <= 0.25 * 1.1 for s in sleeps), sleeps
    ids = {r.headers["x-request-id"] for r in transport.requests}
    assert len(ids) == 1  # one logical call, one request id on every attempt


def test_503_retry_after_header_in_seconds(server: ServerProcess, sleeps: list[float]) -> None:
    transport = FaultyTransport([error_response(503, "not_ready", {"Retry-After": "2"})])
    with _client(server, transport) as c:
        c.list_topics()
    assert len(sleeps) == 1
    assert 2.0 <= sleeps[0] <= 2.2


def test_gives_up_with_the_last_error_and_its_request_id(
    server: ServerProcess, sleeps: list[float]
) -> None:
    transport = FaultyTransport([error_response(429, "throttled")] * 4)
    with _client(server, transport) as c, pytest.raises(topics.ThrottledError) as err:
        c.get_topic("x")
    assert len(transport.requests) == FAST.max_attempts
    assert request_id_of(err.value) == transport.requests[-1].headers["x-request-id"]
    assert err.value.retry_after is None or err.value.retry_after >= 0


def test_a_restarting_server_is_waited_for_past_max_attempts(
    server: ServerProcess, sleeps: list[float]
) -> None:
    """Refused connections, then 503 while the server replays its log (issue 34): not a
    count of attempts but the call's deadline decides (_retry rule 5)."""
    down = [raises(httpx.ConnectError)] * 6 + [error_response(503, "not_ready")] * 4
    transport = FaultyTransport([*down, error_response(503, "shutting_down")])
    with _client(server, transport) as c:
        assert c.health()["status"] == "ok"
    assert len(transport.requests) == 12 > FAST.max_attempts
    assert all(s <= FAST.max_delay_s for s in sleeps)


def test_an_absent_server_is_given_up_at_the_calls_deadline(server: ServerProcess) -> None:
    """Real sleeps: a client with ``timeout_s=0.5`` stops retrying a refused connection
    about half a second after its first attempt, with the connection error."""
    transport = FaultyTransport([raises(httpx.ConnectError)] * 10_000)
    started = time.monotonic()
    with _client(server, transport, timeout_s=0.5) as c, pytest.raises(ClientConnectionError):
        c.write(unique("never"), [{"data": 1}])
    elapsed = time.monotonic() - started
    assert 0.4 <= elapsed < 2.0, elapsed
    assert len(transport.requests) > FAST.max_attempts


def test_non_idempotent_claim_is_not_retried_on_429(
    server: ServerProcess, sleeps: list[float]
) -> None:
    transport = FaultyTransport([error_response(429, "throttled")])
    with _client(server, transport) as c, pytest.raises(topics.ThrottledError):
        c.claim("anything", node="w")
    assert len(transport.requests) == 1
    assert sleeps == []


def test_connect_failure_is_retried_even_for_claim(
    server: ServerProcess, sleeps: list[float]
) -> None:
    q = unique("q")
    with topics.Client(server.base_url) as plain:
        plain.put_topic(q, {"type": "queue"})
        plain.write(q, [{"data": 1}])
    transport = FaultyTransport([raises(httpx.ConnectError)])
    with _client(server, transport) as c:
        assert c.claim(q, node="w").count == 1  # nothing was sent the first time
    assert len(transport.requests) == 2


def test_lost_answer_of_claim_is_not_retried(server: ServerProcess, sleeps: list[float]) -> None:
    q = unique("q")
    with topics.Client(server.base_url) as plain:
        plain.put_topic(q, {"type": "queue"})
    transport = FaultyTransport(after=[raises(httpx.ReadError)])
    with _client(server, transport) as c, pytest.raises(ClientConnectionError) as err:
        c.claim(q, node="w")
    assert err.value.sent is True
    assert len(transport.requests) == 1


def test_write_whose_answer_was_lost_is_retried_without_duplicating(
    server: ServerProcess, sleeps: list[float]
) -> None:
    name = unique("lost")
    transport = FaultyTransport(after=[raises(httpx.ReadError), raises(httpx.RemoteProtocolError)])
    with _client(server, transport) as c:
        res = c.write(name, [{"data": "once"}, {"data": "twice?"}])
        assert res.deduped  # the first attempt landed; the third was answered from the window
        assert (res.first_seq, res.last_seq) == (1, 2)
        assert c.get_topic(name).head_seq == 2
        assert [r.data for r in c.diff(name).records] == ["once", "twice?"]
    bodies = {
        r.content for r in transport.requests if r.method == "POST" and r.url.path.endswith(name)
    }
    assert len(bodies) == 1  # the same body, so the same idempotency key, every time
    assert b'"idempotency_key":"' in bodies.pop()


def test_write_on_429_is_retried_under_its_key(server: ServerProcess, sleeps: list[float]) -> None:
    name = unique("w429")
    transport = FaultyTransport([error_response(429, "throttled", detail={"retry_after_ms": 5})])
    with _client(server, transport) as c:
        res = c.write(name, [{"data": 1}])
    assert not res.deduped
    assert res.count == 1
    assert len(transport.requests) == 2


def test_write_without_a_key_is_not_retried(server: ServerProcess, sleeps: list[float]) -> None:
    transport = FaultyTransport(after=[raises(httpx.ReadError)])
    with _client(server, transport, auto_idempotency_key=False) as c:
        with pytest.raises(ClientConnectionError):
            c.write(unique("nokey"), [{"data": 1}])
        assert b"idempotency_key" not in transport.requests[0].content
    assert len(transport.requests) == 1


def test_retry_false_never_retries(server: ServerProcess, sleeps: list[float]) -> None:
    transport = FaultyTransport([error_response(503, "not_ready")])
    with _client(server, transport, retry=False) as c, pytest.raises(topics.NotReadyError):
        c.health()
    assert len(transport.requests) == 1


@pytest.mark.slow
def test_real_server_throttle_is_retried(start_server, sleeps: list[float]) -> None:  # type: ignore[no-untyped-def]
    """A real resource cap (429 max_topics, Retry-After) goes through the same path."""
    server = start_server({"TOPICS_MAX_TOPICS": "1"})
    with topics.Client(server.base_url, retry=FAST) as c:
        c.put_topic("only")
        with pytest.raises(topics.ThrottledError) as err:
            c.put_topic("second")
    assert err.value.detail == {"limit": "max_topics", "max": 1}
    assert len(sleeps) == FAST.max_attempts - 1
    assert all(s >= 1.0 for s in sleeps)


# -- the policy itself ----------------------------------------------------------------------


def test_backoff_is_jittered_exponential_and_capped() -> None:
    policy = RetryPolicy(max_attempts=10, base_delay_s=0.1, max_delay_s=1.0, timeout_s=100)
    now = time.monotonic()
    for attempt, step in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (9, 1.0)]:
        delays = [policy.delay_s(attempt, now, None) for _ in range(50)]
        assert all(d is not None and step / 2 <= d <= step for d in delays)
    assert policy.delay_s(10, now, None) is None  # attempts used up


def test_an_unreachable_server_is_retried_until_the_deadline_in_short_steps() -> None:
    policy = RetryPolicy(max_attempts=3, base_delay_s=0.1, max_delay_s=5.0, timeout_s=100)
    now = time.monotonic()
    delays = [policy.delay_s(40, now, None, unreachable_until=now + 60) for _ in range(50)]
    assert all(d is not None and 0.5 <= d <= 1.0 for d in delays)  # reconnect_delay_s caps
    assert policy.delay_s(40, now, None) is None  # counted attempts end at max_attempts
    assert policy.delay_s(1, now, None, unreachable_until=now) is None  # the deadline
    assert RetryPolicy(max_attempts=1).delay_s(1, now, None, unreachable_until=now + 60) is None


def test_server_hint_wins_and_the_deadline_caps() -> None:
    policy = RetryPolicy(max_attempts=10, base_delay_s=0.1, timeout_s=5)
    now = time.monotonic()
    delay = policy.delay_s(1, now, 3.0)
    assert delay is not None
    assert 3.0 <= delay <= 3.3
    assert policy.delay_s(1, now, 10.0) is None  # would end past the deadline


def test_server_delay_sources() -> None:
    assert server_delay_s({"retry-after": "3"}, None) == 3.0
    assert server_delay_s({"retry-after": "3"}, {"detail": {"retry_after_ms": 1500}}) == 1.5
    assert server_delay_s({}, {"detail": {"limit": "max_topics"}}) is None
    assert server_delay_s({"retry-after": "garbage"}, None) is None
    http_date = server_delay_s({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, None)
    assert http_date == 0.0


def test_a_compare_and_append_whose_answer_was_lost_is_deduped_not_refused(
    server: ServerProcess, sleeps: list[float]
) -> None:
    """The retry carries the first attempt's idempotency key, so the head it moved itself is
    no head_mismatch (issue 19)."""
    name = unique("lostcas")
    transport = FaultyTransport(after=[raises(httpx.ReadError)])
    with _client(server, transport) as c:
        res = c.write(name, [{"data": 1}], expected_head_seq=0, producer_id="p", epoch=1)
        assert (res.deduped, res.seqs) == (True, [1])
        assert len(transport.requests) == 2
        with pytest.raises(topics.HeadMismatchError) as err:
            c.write(name, [{"data": 2}], expected_head_seq=0)
        assert err.value.detail["head_seq"] == 1
        assert len(transport.requests) == 3  # a 409 is not retried
