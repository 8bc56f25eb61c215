"""Scheduled jobs, dedupe keys and redrive over HTTP and WebSocket (issue 19): the real
server in every mode, a keyed server for the redrive's admin scope and allowlist, the
in-process app (ManualClock) where time has to move."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from .conftest import InProc, ServerProcess
from .test_queues_http import SSE, _Stream
from .test_ws import ws_client


@pytest.fixture(scope="module")
def server(server_in_every_mode: ServerProcess) -> ServerProcess:
    return server_in_every_mode


def _queue(http: httpx.Client, name: str, **config: Any) -> None:
    r = http.put(f"/v0/topics/{name}", json={"type": "queue", **config})
    assert r.status_code in (200, 201), r.text


def _error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"]["code"] == code, body
    return body["error"]  # type: ignore[no-any-return]


def _dead_letter(http: httpx.Client, queue: str, dlq: str, n: int) -> None:
    """``n`` jobs that each used up max_deliveries=1: nacked, then moved at the next claim."""
    _queue(http, queue, max_deliveries=1, dead_letter=dlq)
    records = [{"data": i, "tag": f"t{i}"} for i in range(n)]
    assert http.post(f"/v0/topics/{queue}", json={"records": records}).status_code == 200
    claim = http.post(f"/v0/topics/{queue}/claim", json={"node": "w", "max": n}).json()
    seqs = [j["$seq"] for j in claim["claimed"]]
    assert (
        http.post(f"/v0/topics/{queue}/nack", json={"node": "w", "seqs": seqs}).status_code == 200
    )
    again = http.post(f"/v0/topics/{queue}/claim", json={"node": "w", "max": n}).json()
    assert again["count"] == 0
    state = http.get(f"/v0/topics/{queue}").json()["queue"]
    assert state["dead_lettered"] == n


# -- the real server --------------------------------------------------------------------


def test_a_scheduled_job_is_stored_counted_and_not_claimable(http: httpx.Client) -> None:
    _queue(http, "hj-sched")
    body = {"records": [{"data": "later", "delay_ms": 3_600_000}, {"data": "now"}]}
    r = http.post("/v0/topics/hj-sched", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["seqs"] == [1, 2]
    assert "dedupe" not in r.json()
    assert http.get("/v0/topics/hj-sched").json()["queue"] == {
        "ready": 1,
        "in_flight": 0,
        "dead_lettered": 0,
        "scheduled": 1,
        "backoff": 0,
    }
    claim = http.post("/v0/topics/hj-sched/claim", json={"node": "w", "max": 5}).json()
    assert [j["$seq"] for j in claim["claimed"]] == [2]
    records = http.post("/v0/topics/hj-sched/diff", json={"from_seq": 0}).json()["records"]
    assert "$deliver_at" in records[0]["meta"]


def test_a_work_stream_wakes_when_a_scheduled_job_comes_due(http: httpx.Client) -> None:
    _queue(http, "hj-swake")
    body = {"records": [{"data": "soon", "delay_ms": 200}, {"data": "now"}]}
    assert http.post("/v0/topics/hj-swake", json=body).status_code == 200
    with http.stream("GET", "/v0/topics/hj-swake/work?node=w&max=8", headers=SSE) as r:
        stream = _Stream(r)
        # seq 2 at once; seq 1 only once its time came: nothing but the clock wakes it
        assert [j["$seq"] for j in stream.jobs(2)] == [2, 1]


def test_dedupe_keys_over_http(http: httpx.Client) -> None:
    _queue(http, "hj-dedupe")
    first = http.post("/v0/topics/hj-dedupe", json={"records": [{"data": 1, "dedupe_key": "k"}]})
    assert first.json()["dedupe"] == []
    again = http.post(
        "/v0/topics/hj-dedupe",
        json={"records": [{"data": 2, "dedupe_key": "k"}, {"data": 3, "dedupe_key": "j"}]},
    ).json()
    assert (again["count"], again["seqs"]) == (1, [2])
    assert again["dedupe"] == [{"index": 0, "dedupe_key": "k", "seq": 1, "outcome": "duplicate"}]
    swap = http.post(
        "/v0/topics/hj-dedupe",
        json={"records": [{"data": 4, "dedupe_key": "k"}], "replace": True},
    ).json()
    assert swap["dedupe"] == [
        {"index": 0, "dedupe_key": "k", "seq": 3, "outcome": "replaced", "replaced_seq": 1}
    ]
    window = http.post(
        "/v0/topics/hj-dedupe",
        json={"records": [{"data": 5, "dedupe_key": "w"}], "dedupe": "window", "dedupe_ms": 60_000},
    ).json()
    assert window["seqs"] == [4]
    live = http.post("/v0/topics/hj-dedupe/diff", json={"from_seq": 0}).json()["records"]
    assert [r["data"] for r in live] == [3, 4, 5]


def test_bad_job_options_are_400_and_store_nothing(http: httpx.Client) -> None:
    _queue(http, "hj-bad")
    http.post("/v0/topics/hj-log", json={"records": [{"data": 0}]})
    bad = [
        ("hj-bad", {"records": [{"data": 1, "delay_ms": -5}]}, "records[0].delay_ms"),
        (
            "hj-bad",
            {"records": [{"data": 1, "deliver_at": 1, "delay_ms": 1}]},
            "records[0].delay_ms",
        ),
        ("hj-bad", {"records": [{"data": 1, "dedupe_key": "k"}], "dedupe": "x"}, "dedupe"),
        ("hj-bad", {"records": [{"data": 1}], "dedupe": "window"}, "dedupe_ms"),
        ("hj-bad", {"records": [{"data": 1}], "replace": 1}, "replace"),
        ("hj-log", {"records": [{"data": 1}], "dedupe": "until_ack"}, "dedupe"),
        ("hj-log", {"records": [{"data": 1, "delay_ms": 5}]}, "records[0].delay_ms"),
    ]
    for topic, body, field in bad:
        error = _error(http.post(f"/v0/topics/{topic}", json=body), 400, "invalid_request")
        assert error["detail"]["field"] == field, (body, error)
    assert http.get("/v0/topics/hj-bad").json()["head_seq"] == 0
    assert http.get("/v0/topics/hj-log").json()["head_seq"] == 1


def test_redrive_over_http(http: httpx.Client) -> None:
    _dead_letter(http, "hj-rq", "hj-rdlq", 3)
    _queue(http, "hj-rother")
    one = http.post("/v0/topics/hj-rdlq/redrive", json={"max": 1})
    assert one.status_code == 200, one.text
    body = one.json()
    assert {k: body[k] for k in ("topic", "moved", "skipped", "remaining")} == {
        "topic": "hj-rdlq",
        "moved": 1,
        "skipped": 0,
        "remaining": 2,
    }
    assert body["batches"] == [{"to": "hj-rq", "count": 1, "first_seq": 4, "last_seq": 4}]
    rest = http.post(
        "/v0/topics/hj-rdlq/redrive",
        json={"to": "hj-rother", "where": {"match": ["tag", "Eq", "t2"]}},
    ).json()
    assert (rest["moved"], rest["remaining"]) == (1, 1)
    job = http.post("/v0/topics/hj-rq/claim", json={"node": "w"}).json()["claimed"][0]
    assert (job["$seq"], job["deliveries"], job["meta"]["$redrive_from"]) == (4, 1, "hj-rdlq")
    assert job["meta"]["$redrive_origin"] == "hj-rq"
    _error(http.post("/v0/topics/hj-nope/redrive", json={}), 404, "topic_not_found")
    _error(http.post("/v0/topics/hj-rdlq/redrive", json={"to": "hj-nope"}), 404, "topic_not_found")
    _error(http.post("/v0/topics/hj-rdlq/redrive", json={"mx": 1}), 400, "invalid_request")
    http.post("/v0/topics/hj-rlog", json={"records": [{"data": 0}]})
    _error(http.post("/v0/topics/hj-rdlq/redrive", json={"to": "hj-rlog"}), 409, "not_a_queue")


# -- auth ---------------------------------------------------------------------------------

KEYS = "admin-key,writer:rw,tenant:rw+a+d:t1.,narrow:a:t1.dlq"


@pytest.fixture(scope="module")
def authed(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    return start_server({"TOPICS_API_KEYS": KEYS})


def test_redrive_needs_admin_and_the_allowlist_covers_every_target(authed: ServerProcess) -> None:
    with authed.client("admin-key") as admin:
        _dead_letter(admin, "t1.q", "t1.dlq", 2)
        _queue(admin, "t2.q")
    with authed.client("writer") as writer:
        _error(writer.post("/v0/topics/t1.dlq/redrive", json={}), 403, "forbidden")
    with authed.client("tenant") as tenant:
        error = _error(
            tenant.post("/v0/topics/t1.dlq/redrive", json={"to": "t2.q"}), 403, "forbidden"
        )
        assert error["detail"] == {"to": "t2.q"}
    with authed.client("narrow") as narrow:  # may touch the dead-letter topic, not t1.q
        error = _error(narrow.post("/v0/topics/t1.dlq/redrive", json={}), 403, "forbidden")
        assert error["detail"] == {"to": "t1.q"}
    with authed.client("tenant") as tenant:
        r = tenant.post("/v0/topics/t1.dlq/redrive", json={})
        assert r.status_code == 200, r.text
        assert r.json()["moved"] == 2


# -- in-process: the clock moves, and WebSocket publish -------------------------------------


async def test_scheduled_jobs_come_due_on_the_engine_clock(inproc: InProc) -> None:
    async with inproc.client() as c:
        await c.put("/v0/topics/q", json={"type": "queue"})
        at = inproc.clock.now_ms() + 5000
        r = await c.post("/v0/topics/q", json={"records": [{"data": 1, "deliver_at": at}]})
        assert r.status_code == 200, r.text
        claim = (await c.post("/v0/topics/q/claim", json={"node": "w"})).json()
        assert claim["count"] == 0
        inproc.clock.advance(5000)
        state = (await c.get("/v0/topics/q")).json()["queue"]
        assert (state["ready"], state["scheduled"]) == (1, 0)
        claim = (await c.post("/v0/topics/q/claim", json={"node": "w"})).json()
        assert [j["$seq"] for j in claim["claimed"]] == [1]


async def test_websocket_publish_takes_the_job_options(inproc: InProc) -> None:
    await inproc.engine.put_topic("q", {"type": "queue"})
    async with ws_client(inproc) as ws:
        publish = {
            "op": "publish",
            "request_id": "p1",
            "topic": "q",
            "records": [{"data": 1, "dedupe_key": "k", "delay_ms": 1000}],
            "dedupe": "window",
            "dedupe_ms": 10_000,
        }
        await ws.send(publish)
        first = await ws.recv()
        assert (first["op"], first["seqs"], first["dedupe"]) == ("ack", [1], [])
        await ws.send(publish | {"request_id": "p2", "replace": True})
        second = await ws.recv()
        assert second["dedupe"] == [
            {"index": 0, "dedupe_key": "k", "seq": 2, "outcome": "replaced", "replaced_seq": 1}
        ]
        await ws.send(publish | {"request_id": "p3", "dedupe": "sometimes"})
        error = await ws.recv()
        assert (error["op"], error["code"]) == ("error", "invalid_request")
    state = await inproc.engine.get_topic("q")
    assert state.queue == {
        "ready": 0,
        "in_flight": 0,
        "dead_lettered": 0,
        "scheduled": 1,
        "backoff": 0,
    }
