"""One body, two backends: the same code runs on ``topics.open(None)`` (embedded) and on
``topics.Client(url)`` (remote), with the same results and the same exceptions. Changing
the one line that opens the handle is all it takes to move."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import topics

from .conftest import ServerProcess, unique


@pytest.fixture(params=["embedded", "remote"])
def db(request: pytest.FixtureRequest, server: ServerProcess) -> Iterator[Any]:
    if request.param == "embedded":
        handle: Any = topics.open(None)
    else:
        handle = topics.Client(server.base_url)
    with handle:
        yield handle


def _without_ts(value: Any) -> Any:
    return [(r.seq, r.data, r.node, r.tag, r.meta) for r in value]


def test_same_code_same_results(db: Any) -> None:
    orders = unique("orders")
    put = db.put_topic(orders, {"cap_records": 100, "durability": "memory"})
    assert isinstance(put, topics.PutTopicResult)
    assert put.created
    w = db.write(orders, [{"data": {"sku": "A1"}, "tag": "c-7"}, {"data": b"[1.50]"}], node="n1")
    assert isinstance(w, topics.WriteResult)
    assert (w.first_seq, w.last_seq, w.seqs, w.head_seq, w.count) == (1, 2, [1, 2], 2, 2)
    page = db.diff(orders, from_seq=0, include_tags=True)
    assert isinstance(page, topics.DiffResult)
    assert _without_ts(page.records) == [
        (1, {"sku": "A1"}, "n1", "c-7", None),
        (2, [1.5], "n1", None, None),
    ]
    assert page.records_json.count(b"1.50") == 1  # verbatim both ways
    assert (page.next_from_seq, page.caught_up, page.tombstone) == (2, True, None)
    assert db.diff(orders, from_seq=0, node="n1").records == []  # own records filtered
    state = db.get_topic(orders)
    assert isinstance(state, topics.TopicState)
    assert (state.head_seq, state.count, state.config.cap_records) == (2, 2, 100)
    listed = db.list_topics(prefix=orders)
    assert [t.topic for t in listed.topics] == [orders]
    assert db.delete_records(orders, match="c-7").deleted == 1

    jobs = unique("jobs")
    db.put_topic(jobs, {"type": "queue"})
    db.write(jobs, [{"data": i} for i in range(3)])
    claim = db.claim(jobs, node="w", max=2)
    assert isinstance(claim, topics.ClaimResult)
    assert [j.data for j in claim.claimed] == [0, 1]
    ext = db.extend(
        jobs, node="w", seqs=list(claim.seqs), lease_ms=10_000, lease_ids=list(claim.lease_ids)
    )
    assert isinstance(ext, topics.ExtendResult)
    assert ext.extended == 2
    ack = db.ack(jobs, node="w", seqs=[claim.seqs[0]], lease_ids=[claim.lease_ids[0]])
    assert isinstance(ack, topics.AckResult)
    assert (ack.acked, ack.skipped) == (1, [])
    nack = db.nack(jobs, node="w", seqs=[claim.seqs[1]], lease_ids=[claim.lease_ids[1]])
    assert isinstance(nack, topics.NackResult)
    assert nack.nacked == 1
    assert db.get_topic(jobs).queue == {
        "ready": 2,
        "in_flight": 0,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }

    audit = unique("audit")
    router = db.put_router(f"{orders}->{audit}", {"source": orders, "dest": audit})
    assert isinstance(router, topics.PutRouterResult)
    assert router.config.dest == audit
    assert isinstance(db.get_router(router.router), topics.RouterInfo)
    assert [r.router for r in db.list_routers(source=orders).routers] == [router.router]
    gone = db.delete_topic(orders)
    assert gone == topics.DeleteTopicResult(orders, True, [router.router])


def test_same_code_same_errors(db: Any) -> None:
    missing = unique("missing")
    with pytest.raises(topics.TopicNotFoundError) as err:
        db.get_topic(missing)
    assert err.value.detail == {"topic": missing}
    with pytest.raises(topics.TopicNotFoundError):
        db.diff(missing)
    with pytest.raises(topics.InvalidRequestError):
        db.write("bad name", [{"data": 1}])
    with pytest.raises(topics.InvalidRequestError):
        db.write(unique("empty"), [])
    log = unique("log")
    db.put_topic(log)
    with pytest.raises(topics.NotAQueueError):
        db.claim(log, node="w")
    with pytest.raises(topics.TopicExistsIncompatibleError):
        db.put_topic(log, {"type": "queue"})
    with pytest.raises(topics.RouterNotFoundError):
        db.get_router(unique("r"))
    db.write(log, [{"data": 1}])
    with pytest.raises(topics.TopicNotEmptyError):
        db.delete_topic(log, if_empty=True)
