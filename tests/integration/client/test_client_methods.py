"""Every /v0 method of ``topics.Client`` against the real server: results in the in-process
types, raw bytes kept verbatim, errors mapped per ``error.code`` with the request id."""

from __future__ import annotations

import httpx
import pytest

import topics
from topics.client import ClientConnectionError, RetryPolicy, request_id_of
from topics.config import TopicConfig
from topics.queue_types import AckResult, ClaimResult, ExtendResult, Job, NackResult
from topics.router_types import RouterConfig

from .conftest import FaultyTransport, ServerProcess, error_response, unique


def test_topic_lifecycle(client: topics.Client) -> None:
    name = unique("life")
    res = client.put_topic(name, {"cap_records": 10, "durability": "memory"})
    assert res == topics.PutTopicResult(
        name, True, TopicConfig(cap_records=10, durability="memory")
    )
    again = client.put_topic(name, {"cap_records": 10, "durability": "memory"})
    assert not again.created
    state = client.get_topic(name, touch=False)
    assert isinstance(state, topics.TopicState)
    assert (state.head_seq, state.earliest_seq, state.next_seq, state.count) == (0, 1, 1, 0)
    assert state.config.cap_records == 10
    assert state.last_read_ts is None  # touch=False was honoured
    assert state.queue is None
    page = client.list_topics(prefix=name)
    assert [t.topic for t in page.topics] == [name]
    assert page.next_cursor is None
    assert isinstance(page.topics[0], topics.TopicSummary)
    deleted = client.delete_topic(name)
    assert deleted == topics.DeleteTopicResult(name, True, [])
    assert client.delete_topic(name) == topics.DeleteTopicResult(name, False, [])


def test_list_pages_and_iter_topics(client: topics.Client) -> None:
    prefix = unique("page")
    for i in range(5):
        client.put_topic(f"{prefix}.{i}")
    first = client.list_topics(prefix=prefix, page_size=2)
    assert len(first.topics) == 2
    assert first.next_cursor is not None
    second = client.list_topics(prefix=prefix, page_size=2, cursor=first.next_cursor)
    assert [t.topic for t in second.topics] == [f"{prefix}.2", f"{prefix}.3"]
    assert [t.topic for t in client.iter_topics(prefix=prefix, page_size=2)] == [
        f"{prefix}.{i}" for i in range(5)
    ]


def test_write_splices_bytes_verbatim_and_diff_keeps_them(client: topics.Client) -> None:
    name = unique("raw")
    res = client.write(
        name,
        [
            {"data": b'{"price":1.50,"n":[1e3]}', "tag": "t:1", "meta": b'{"m":2.0}'},
            {"data": {"k": "v"}, "node": "n1"},
            {"data": None},
        ],
    )
    assert isinstance(res, topics.WriteResult)
    assert (res.first_seq, res.last_seq, res.seqs, res.count) == (1, 3, [1, 2, 3], 3)
    assert res.created
    assert not res.deduped
    page = client.diff(name, from_seq=0, include_tags=True)
    assert isinstance(page, topics.DiffResult)
    assert b'"data":{"price":1.50,"n":[1e3]}' in page.records_json
    assert b'"meta":{"m":2.0}' in page.records_json
    assert page.record_count == 3
    first, second, third = page.records
    assert first == topics.Record(
        1, first.ts, {"price": 1.5, "n": [1000.0]}, None, "t:1", {"m": 2.0}
    )
    assert (second.data, second.node) == ({"k": "v"}, "n1")
    assert third.data is None
    assert (page.next_from_seq, page.head_seq, page.caught_up, page.lag) == (3, 3, True, 0)
    assert page.tombstone is None
    assert page.records_scanned == 3


def test_write_options(client: topics.Client) -> None:
    name = unique("opts")
    res = client.write(name, [{"data": 1}], return_seqs=False, config={"cap_records": 7})
    assert res.seqs is None
    assert client.get_topic(name).config.cap_records == 7
    with pytest.raises(topics.TopicNotFoundError):
        client.write(unique("absent"), [{"data": 1}], create=False)
    a = client.write(name, [{"data": 2}], idempotency_key="k-1")
    b = client.write(name, [{"data": 2}], idempotency_key="k-1")
    assert b.deduped
    assert (b.first_seq, b.last_seq) == (a.first_seq, a.last_seq)
    assert client.write(name, [{"data": 3}], disable_backpressure=True).count == 1


def test_diff_options_tombstone_and_long_poll(client: topics.Client) -> None:
    name = unique("diff")
    client.put_topic(name, {"cap_records": 3})
    client.write(name, [{"data": i, "node": "me" if i % 2 else "other"} for i in range(6)])
    page = client.diff(name, from_seq=0, limit=2)
    assert page.tombstone == topics.Tombstone(1, 3, "cap", 3, 4, 6)
    assert [r.seq for r in page.records] == [4, 5]
    assert not page.caught_up
    mine = client.diff(name, from_seq=3, node="me", include_data=False, include_meta=False)
    assert [r.seq for r in mine.records] == [5]  # 4 and 6 were written by "me"
    assert all(r.data is None for r in mine.records)
    assert client.diff(name, from_seq=6, wait_ms=50).records == []  # waited, nothing came
    assert client.diff(name, from_seq=0, max_bytes=1).record_count == 1


def test_delete_records(client: topics.Client) -> None:
    name = unique("del")
    client.write(name, [{"data": i, "tag": f"user-{i % 2}:x"} for i in range(6)])
    res = client.delete_records(name, before_seq=3)
    assert res == topics.DeleteRecordsResult(name, 2, 3, 6, 4, res.bytes)
    assert client.delete_records(name, match=("tag", "Glob", "user-1:*")).deleted == 2
    assert client.delete_records(name, match="user-0:x").deleted == 2
    with pytest.raises(topics.InvalidRequestError):
        client.delete_records(name)


def test_routers(client: topics.Client) -> None:
    src, dst = unique("src"), unique("dst")
    name = f"{src}->{dst}"
    client.put_topic(src)
    res = client.put_router(name, {"source": src, "dest": dst, "filter": ["tag", "Eq", "x"]})
    assert res == topics.PutRouterResult(
        name, True, RouterConfig(src, dst, filter=("tag", "Eq", "x"))
    )
    info = client.get_router(name)
    assert isinstance(info, topics.RouterInfo)
    assert info.config.source == src
    page = client.list_routers(source=src)
    assert [r.router for r in page.routers] == [name]
    assert isinstance(page.routers[0], topics.RouterSummary)
    assert client.delete_router(name) == topics.DeleteRouterResult(name, True)
    assert not client.delete_router(name).deleted
    with pytest.raises(topics.RouterNotFoundError) as err:
        client.get_router(name)
    assert err.value.detail == {"router": name}


def test_queue_calls(client: topics.Client) -> None:
    q = unique("q")
    client.put_topic(q, {"type": "queue"})
    client.write(q, [{"data": {"job": i}, "tag": f"j{i}"} for i in range(3)])
    claim = client.claim(q, node="w", max=2, lease_ms=5000)
    assert isinstance(claim, ClaimResult)
    assert claim.count == 2
    assert claim.ready == 1
    assert claim.seqs == (1, 2)
    job = claim.claimed[0]
    assert isinstance(job, Job)
    assert (job.data, job.tag, job.deliveries) == ({"job": 0}, "j0", 1)
    ext = client.extend(q, node="w", seqs=[1], lease_ms=9000, lease_ids=[claim.lease_ids[0]])
    assert isinstance(ext, ExtendResult)
    assert ext.extended == 1
    assert 1 in ext.deadlines
    ack = client.ack(q, node="w", seqs=[1], lease_ids=[claim.lease_ids[0]])
    assert ack == AckResult(q, 1, [], 1, 1, ack.fsync_ms)
    nack = client.nack(q, node="w", seqs=[2, 3], delay_ms=0)
    assert isinstance(nack, NackResult)
    assert nack.nacked == 1
    assert nack.skipped == [3]
    assert client.get_topic(q).queue == {
        "ready": 2,
        "in_flight": 0,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }
    with pytest.raises(topics.NotAQueueError):
        client.claim(_log_topic(client), node="w")


def _log_topic(client: topics.Client) -> str:
    name = unique("log")
    client.put_topic(name)
    return name


def test_probes(client: topics.Client) -> None:
    assert client.health()["status"] == "ok"
    assert client.ready()["status"] == "ready"
    assert "topics_topics" in client.metrics()


def test_error_carries_code_detail_and_request_id(client: topics.Client) -> None:
    with pytest.raises(topics.TopicNotFoundError) as err:
        client.get_topic(unique("missing"))
    exc = err.value
    assert exc.code == "topic_not_found"
    assert isinstance(exc, topics.NotFoundError)
    rid = request_id_of(exc)
    assert rid is not None
    assert len(rid) == 36
    assert exc.request_id == rid  # type: ignore[attr-defined]
    assert exc.http_status == 404  # type: ignore[attr-defined]


def test_an_unknown_record_field_is_the_servers_400_naming_it(client: topics.Client) -> None:
    name = unique("typo")
    client.write(name, [{"data": 0}])
    with pytest.raises(topics.InvalidRequestError) as err:
        client.write(name, [{"data": 1, "tga": "x"}])
    assert err.value.detail == {"field": "records[0].tga"}
    assert client.get_topic(name, touch=False).head_seq == 1


def test_bad_names_fail_like_the_engine_before_sending(client: topics.Client) -> None:
    with pytest.raises(topics.InvalidRequestError) as err:
        client.write("no/slash", [{"data": 1}])
    assert err.value.detail == {"field": "topic"}
    with pytest.raises(topics.InvalidRequestError):
        client.write(unique("nan"), [{"data": float("nan")}])


def test_unknown_code_maps_to_base_class_keeping_the_code(server: ServerProcess) -> None:
    transport = FaultyTransport([error_response(418, "teapot_overflow")])
    with (
        topics.Client(server.base_url, transport=transport) as c,
        pytest.raises(topics.TopicsError) as err,
    ):
        c.health()
    assert type(err.value) is topics.TopicsError
    assert err.value.code == "teapot_overflow"
    assert request_id_of(err.value) == transport.requests[0].headers["x-request-id"]


def test_non_envelope_error_maps_by_status(server: ServerProcess) -> None:
    def proxy_page(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, text="<html>nope</html>")

    with (
        topics.Client(server.base_url, transport=FaultyTransport([proxy_page])) as c,
        pytest.raises(topics.NotFoundError, match="HTTP 404"),
    ):
        c.health()


def test_unreachable_server_is_a_connection_error() -> None:
    policy = RetryPolicy(max_attempts=2, base_delay_s=0.01)
    with (
        topics.Client("http://127.0.0.1:9", retry=policy, timeout_s=2) as c,
        pytest.raises(ClientConnectionError) as err,
    ):
        c.health()
    assert err.value.sent is False
    assert isinstance(err.value, topics.TopicsError)
    assert request_id_of(err.value)


def test_write_conditions_and_their_errors(client: topics.Client) -> None:
    """expected_head_seq and producer_id + epoch through write() and a WebSocket publish."""
    name = unique("cond")
    assert client.write(name, [{"data": 1}], expected_head_seq=0).seqs == [1]
    with pytest.raises(topics.HeadMismatchError) as mismatch:
        client.write(name, [{"data": 2}], expected_head_seq=0)
    assert mismatch.value.detail == {"topic": name, "expected_head_seq": 0, "head_seq": 1}
    assert client.write(name, [{"data": 2}], producer_id="p", epoch=5).seqs == [2]
    with pytest.raises(topics.ProducerFencedError) as fenced:
        client.write(name, [{"data": 3}], producer_id="p", epoch=4)
    assert fenced.value.detail["current_epoch"] == 5
    with client.ws() as ws:
        ok = ws.publish(name, [{"data": 3}], expected_head_seq=2, producer_id="p", epoch=5)
        assert ok.last_seq == 3
        with pytest.raises(topics.ProducerFencedError):
            ws.publish(name, [{"data": 4}], producer_id="p", epoch=1)
        with pytest.raises(topics.HeadMismatchError):
            ws.publish(name, [{"data": 4}], expected_head_seq=2)
    assert client.get_topic(name).head_seq == 3
