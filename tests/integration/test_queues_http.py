"""Queue routes over HTTP (contract §10.2-§10.7): the real server for every endpoint and
error code, the in-process app (ManualClock) where lease time has to move."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from .conftest import InProc, ServerProcess, settings_with


@pytest.fixture(scope="module")
def server(server_in_every_mode: ServerProcess) -> ServerProcess:
    """This suite runs once per way the server can carry it (tests.support.server.SERVER_MODES)."""
    return server_in_every_mode


ENDPOINTS = ("claim", "ack", "nack", "extend")


def _error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"]["code"] == code, body
    return body["error"]


def _queue(http: httpx.Client, name: str, n: int = 0, **config: Any) -> None:
    r = http.put(f"/v0/topics/{name}", json={"type": "queue", **config})
    assert r.status_code in (200, 201), r.text
    if n:
        r = http.post(
            f"/v0/topics/{name}", json={"records": [{"data": i} for i in range(1, n + 1)]}
        )
        assert r.status_code == 200, r.text


def _body(op: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"node": "w"}
    if op != "claim":
        body["seqs"] = [1]
    if op == "extend":
        body["lease_ms"] = 1000
    body.update(extra)
    return body


# -- the real server --------------------------------------------------------------------


def test_claim_over_http(http: httpx.Client) -> None:
    _queue(http, "hq-claim")
    raw = (
        b'{"records":[{"data":{"type":"resize","url":"s3://b/x.png"},"tag":"t:1","meta":{"z":9}},'
        b'{"data":1.50},{"data":3}]}'
    )
    r = http.post("/v0/topics/hq-claim", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    r = http.post("/v0/topics/hq-claim/claim", json={"node": "worker-eu-1", "max": 2})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers["x-request-id"]
    assert b'"data":1.50' in r.content  # payloads are spliced verbatim
    body = r.json()
    assert body["topic"] == "hq-claim"
    assert body["count"] == 2
    assert body["ready"] == 1
    first, second = body["claimed"]
    assert first["$seq"] == 1
    assert second["$seq"] == 2
    assert first["$tag"] == "t:1"
    assert first["meta"] == {"z": 9}
    assert first["data"] == {"type": "resize", "url": "s3://b/x.png"}
    assert "$tag" not in second
    assert "meta" not in second
    for job in (first, second):
        assert re.fullmatch(r"lease_[0-9a-f]+", job["lease_id"])
        assert job["deliveries"] == 1
        assert job["deadline"] >= job["$ts"] + 30000  # claimed at or after $ts
    perf = body["performance"]
    assert perf["server_total_ms"] >= 0
    assert "throttle_wait_ms" in perf


def test_claim_with_an_empty_body_is_invalid(http: httpx.Client) -> None:
    _queue(http, "hq-empty", n=1)
    _error(http.post("/v0/topics/hq-empty/claim"), 400, "invalid_request")


def test_ack_nack_extend_over_http(http: httpx.Client) -> None:
    _queue(http, "hq-life", n=3)
    claimed = http.post("/v0/topics/hq-life/claim", json={"node": "w", "max": 3}).json()["claimed"]
    ids = {job["$seq"]: job["lease_id"] for job in claimed}

    r = http.post(
        "/v0/topics/hq-life/extend",
        json={"node": "w", "seqs": [1, 9], "lease_ms": 60000, "lease_ids": [ids[1], "lease_0"]},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["extended"] == 1
    assert body["skipped"] == [9]
    assert list(body["deadlines"]) == ["1"]
    assert body["deadlines"]["1"] > 0
    assert "server_total_ms" in body["performance"]

    r = http.post("/v0/topics/hq-life/nack", json={"node": "w", "seqs": [2], "delay_ms": 0})
    assert r.status_code == 200, r.text
    assert {k: v for k, v in r.json().items() if k != "performance"} == {
        "topic": "hq-life",
        "nacked": 1,
        "skipped": [],
        "ready": 1,
        "in_flight": 2,
    }

    r = http.post(
        "/v0/topics/hq-life/ack",
        json={"node": "w", "seqs": [1, 3, 2], "lease_ids": [ids[1], ids[3], ids[2]]},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["acked"], body["skipped"], body["ready"], body["in_flight"]) == (2, [2], 1, 0)
    assert body["performance"]["fsync_ms"] == 0.0
    state = http.get("/v0/topics/hq-life").json()
    assert state["type"] == "queue"
    assert state["queue"] == {
        "ready": 1,
        "in_flight": 0,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }
    assert state["count"] == 1


@pytest.mark.parametrize("op", ENDPOINTS)
def test_queue_endpoints_on_a_log_topic_are_409_not_a_queue(http: httpx.Client, op: str) -> None:
    http.put("/v0/topics/hq-log", json={})
    _error(http.post(f"/v0/topics/hq-log/{op}", json=_body(op)), 409, "not_a_queue")


@pytest.mark.parametrize("op", ENDPOINTS)
def test_queue_endpoints_on_an_absent_topic_are_404_and_create_nothing(
    http: httpx.Client, op: str
) -> None:
    _error(http.post(f"/v0/topics/hq-absent/{op}", json=_body(op)), 404, "topic_not_found")
    assert http.get("/v0/topics/hq-absent").status_code == 404


@pytest.mark.parametrize("op", ENDPOINTS)
@pytest.mark.parametrize(
    "change",
    [
        {"node": None},
        {"node": ""},
        {"node": 5},
        {"nodes": "w"},  # unknown member
    ],
)
def test_bad_node_or_unknown_member_is_400(
    http: httpx.Client, op: str, change: dict[str, Any]
) -> None:
    _queue(http, "hq-bad", n=1)
    body = {k: v for k, v in _body(op, **change).items() if v is not None}
    if "nodes" in change:
        body["node"] = "w"
    _error(http.post(f"/v0/topics/hq-bad/{op}", json=body), 400, "invalid_request")


@pytest.mark.parametrize(
    ("op", "change"),
    [
        ("claim", {"max": "3"}),
        ("claim", {"max": 0}),
        ("claim", {"lease_ms": "x"}),
        ("ack", {"seqs": None}),
        ("ack", {"seqs": ["1"]}),
        ("ack", {"seqs": []}),
        ("ack", {"lease_ids": ["a", "b"]}),
        ("nack", {"delay_ms": -1}),
        ("nack", {"seqs": 1}),
        ("extend", {"lease_ms": None}),
        ("extend", {"lease_ms": "1000"}),
    ],
)
def test_bad_field_types_are_400(http: httpx.Client, op: str, change: dict[str, Any]) -> None:
    _queue(http, "hq-types", n=1)
    body = {k: v for k, v in _body(op, **change).items() if v is not None}
    _error(http.post(f"/v0/topics/hq-types/{op}", json=body), 400, "invalid_request")


@pytest.mark.parametrize("op", ["ack", "nack", "extend"])
def test_seqs_over_max_claim_is_400_batch_too_large(http: httpx.Client, op: str) -> None:
    _queue(http, "hq-big", n=1)
    body = _body(op, seqs=list(range(1, 1002)))
    err = _error(http.post(f"/v0/topics/hq-big/{op}", json=body), 400, "batch_too_large")
    assert err["detail"]["max"] == 1000


def test_claim_max_is_clamped_to_max_claim_over_http(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server({"TOPICS_MAX_CLAIM": "3"})
    with server.client() as c:
        _queue(c, "hq-clamp", n=5)
        r = c.post("/v0/topics/hq-clamp/claim", json={"node": "w", "max": 100})
        assert r.json()["count"] == 3
        r = c.post("/v0/topics/hq-clamp/ack", json={"node": "w", "seqs": [1, 2, 3, 4]})
        _error(r, 400, "batch_too_large")


def test_queue_routes_need_the_contract_scopes(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server({"TOPICS_API_KEYS": "admin,reader:read,writer:write,rw:rw"})
    with server.client("admin") as c:
        _queue(c, "hq-auth", n=2)
    with server.client() as anon:
        _error(anon.post("/v0/topics/hq-auth/claim", json=_body("claim")), 401, "unauthorized")
    for key in ("reader", "writer"):  # claim needs read AND write
        with server.client(key) as c:
            _error(c.post("/v0/topics/hq-auth/claim", json=_body("claim")), 403, "forbidden")
    with server.client("reader") as c:
        for op in ("ack", "nack", "extend"):
            _error(c.post(f"/v0/topics/hq-auth/{op}", json=_body(op)), 403, "forbidden")
    with server.client("rw") as c:
        assert c.post("/v0/topics/hq-auth/claim", json=_body("claim")).status_code == 200
    with server.client("writer") as c:
        for op in ("ack", "nack", "extend"):
            assert c.post(f"/v0/topics/hq-auth/{op}", json=_body(op)).status_code == 200


def test_metrics_report_queue_gauges(http: httpx.Client) -> None:
    _queue(http, "hq-metrics", n=3)
    http.post("/v0/topics/hq-metrics/claim", json={"node": "w", "max": 2})
    text = http.get("/v0/metrics").text
    assert 'topics_topic_queue_ready{topic="hq-metrics"} 1' in text
    assert 'topics_topic_queue_in_flight{topic="hq-metrics"} 2' in text
    leases = re.search(r"^topics_queue_leases_in_flight (\d+)$", text, re.M)
    assert leases is not None
    assert int(leases.group(1)) >= 2
    topics = re.search(r"^topics_queue_topics (\d+)$", text, re.M)
    assert topics is not None
    assert int(topics.group(1)) >= 1


def test_a_durable_queue_acks_with_fsync_and_keeps_acks_across_restarts(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> None:
    data = str(tmp_path_factory.mktemp("qdata"))
    server = start_server({}, "--data-dir", data)
    with server.client() as c:
        _queue(c, "hq-dur", n=3, durable=True)
        c.post("/v0/topics/hq-dur/claim", json={"node": "w", "max": 3})
        r = c.post("/v0/topics/hq-dur/ack", json={"node": "w", "seqs": [1]})
        assert r.json()["acked"] == 1
        assert r.json()["performance"]["fsync_ms"] > 0
    assert server.stop() == 0
    again = start_server({}, "--data-dir", data)
    with again.client() as c:
        state = c.get("/v0/topics/hq-dur").json()
        assert state["count"] == 2
        # leases were not durable: both in-flight jobs are claimable again
        assert state["queue"] == {
            "ready": 2,
            "in_flight": 0,
            "dead_lettered": 0,
            "scheduled": 0,
            "backoff": 0,
        }


# -- in-process, with a ManualClock ----------------------------------------------------------


async def test_expiry_reclaim_and_dead_letter_over_http(inproc: InProc) -> None:
    async with inproc.client() as c:
        r = await c.put(
            "/v0/topics/q",
            json={"type": "queue", "lease_ms": 1000, "max_deliveries": 2, "dead_letter": "q.dlq"},
        )
        assert r.status_code == 201
        await c.post("/v0/topics/q", json={"records": [{"data": {"n": 1}, "tag": "job-1"}]})
        for delivery in (1, 2):
            r = await c.post("/v0/topics/q/claim", json={"node": "w"})
            job = r.json()["claimed"][0]
            assert job["deliveries"] == delivery
            assert job["deadline"] == inproc.clock.now_ms() + 1000
            inproc.clock.advance(1001)
        r = await c.post("/v0/topics/q/claim", json={"node": "w"})
        assert r.json()["count"] == 0
        state = (await c.get("/v0/topics/q")).json()
        assert state["queue"] == {
            "ready": 0,
            "in_flight": 0,
            "dead_lettered": 1,
            "scheduled": 0,
            "backoff": 0,
        }
        dlq = (await c.post("/v0/topics/q.dlq/diff", json={"include_tags": True})).json()
        (moved,) = dlq["records"]
        assert moved["$tag"] == "job-1"
        assert moved["meta"]["$dead_letter_from"] == "q"
        assert moved["meta"]["$dead_letter_src_seq"] == 1


async def test_a_job_in_backoff_is_counted_and_its_last_nack_dead_letters_it(
    inproc: InProc,
) -> None:
    async with inproc.client() as c:
        config = {"type": "queue", "max_deliveries": 2, "dead_letter": "b.dlq"}
        assert (await c.put("/v0/topics/b", json=config)).status_code == 201
        await c.post("/v0/topics/b", json={"records": [{"data": 1}]})
        for delivery in (1, 2):
            job = (await c.post("/v0/topics/b/claim", json={"node": "w"})).json()["claimed"][0]
            assert job["deliveries"] == delivery
            r = await c.post("/v0/topics/b/nack", json={"node": "w", "seqs": [1], "delay_ms": 500})
            assert r.json()["nacked"] == 1
            state = (await c.get("/v0/topics/b")).json()
            if delivery == 1:  # waiting out its delay: counted as backoff, nowhere else
                assert state["count"] == 1
                assert state["queue"] == {
                    "ready": 0,
                    "in_flight": 0,
                    "dead_lettered": 0,
                    "scheduled": 0,
                    "backoff": 1,
                }
                inproc.clock.advance(500)
        # the last delivery's nack moved it before answering: no claim was needed
        assert state["count"] == 0
        assert state["queue"]["dead_lettered"] == 1
        assert state["queue"]["backoff"] == 0
        assert (await c.get("/v0/topics/b.dlq")).json()["count"] == 1


async def test_delayed_nack_over_http(inproc: InProc) -> None:
    async with inproc.client() as c:
        await c.put("/v0/topics/q", json={"type": "queue"})
        await c.post("/v0/topics/q", json={"records": [{"data": 1}]})
        lease = (await c.post("/v0/topics/q/claim", json={"node": "w"})).json()["claimed"][0]
        r = await c.post(
            "/v0/topics/q/nack",
            json={"node": "w", "seqs": [1], "delay_ms": 250, "lease_ids": [lease["lease_id"]]},
        )
        assert (r.json()["nacked"], r.json()["ready"], r.json()["in_flight"]) == (1, 0, 0)
        assert (await c.post("/v0/topics/q/claim", json={"node": "w"})).json()["count"] == 0
        inproc.clock.advance(250)
        r = await c.post("/v0/topics/q/claim", json={"node": "w"})
        assert r.json()["claimed"][0]["deliveries"] == 2


@pytest.mark.parametrize("http_settings", [settings_with("", throttle_lag_ms=1.0)])
async def test_claims_are_shed_under_pressure_but_acks_are_not(inproc: InProc) -> None:
    await inproc.engine.put_topic("q", {"type": "queue"})
    await inproc.engine.write("q", [{"data": 1}])
    res = await inproc.engine.claim("q", node="w")
    inproc.app.state.pressure.inject(500.0)
    async with inproc.client() as c:
        r = await c.post("/v0/topics/q/claim", json={"node": "w"})
        _error(r, 429, "throttled")
        r = await c.post(
            "/v0/topics/q/ack", json={"node": "w", "seqs": [1], "lease_ids": list(res.lease_ids)}
        )
        assert r.status_code == 200
        assert r.json()["acked"] == 1


# -- the /work stream (§10.8) ----------------------------------------------------------------

SSE = {"accept": "text/event-stream"}


class _Stream:
    """Reads a /work stream through one iterator (leaving an ``iter_bytes`` loop would
    close the response, which the server rightly treats as a disconnect)."""

    def __init__(self, response: httpx.Response) -> None:
        from topics.wire.sse import SSEDecoder

        self.chunks = response.iter_bytes()
        self.decoder = SSEDecoder()
        self.items: list[Any] = []

    def jobs(self, n: int) -> list[dict[str, Any]]:
        from topics.wire.sse import Event

        jobs: list[dict[str, Any]] = []
        while len(jobs) < n:
            for item in self.decoder.feed(next(self.chunks)):
                self.items.append(item)
                if isinstance(item, Event) and item.event == "job":
                    job = json.loads(item.data)
                    assert item.id == str(job["$seq"])
                    jobs.append(job)
        return jobs

    def check_opening(self) -> None:
        from topics.wire.sse import Comment, Retry

        assert isinstance(self.items[0], Retry)
        assert self.items[0].ms == 2000
        assert isinstance(self.items[1], Comment)
        assert self.items[1].is_heartbeat


def _eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait for the server to notice something (a disconnect) that the client cannot see."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "the server did not get there in time"
        time.sleep(0.01)


def test_work_stream_pushes_up_to_max_and_refills_on_ack(http: httpx.Client) -> None:
    _queue(http, "hq-work", n=4)
    with http.stream("GET", "/v0/topics/hq-work/work?node=w&max=2", headers=SSE) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["cache-control"] == "no-store"
        assert r.headers["x-accel-buffering"] == "no"
        stream = _Stream(r)
        first = stream.jobs(2)
        stream.check_opening()
        assert [j["$seq"] for j in first] == [1, 2]
        assert all(j["topic"] == "hq-work" and j["deliveries"] == 1 for j in first)
        assert http.get("/v0/topics/hq-work").json()["queue"]["in_flight"] == 2
        ack = {"node": "w", "seqs": [1], "lease_ids": [first[0]["lease_id"]]}
        assert http.post("/v0/topics/hq-work/ack", json=ack).json()["acked"] == 1
        assert [j["$seq"] for j in stream.jobs(1)] == [3]


def test_work_stream_disconnect_releases_its_leases_at_once(http: httpx.Client) -> None:
    _queue(http, "hq-drop", n=3, lease_ms=600000)
    polled = http.post("/v0/topics/hq-drop/claim", json={"node": "w"}).json()["claimed"]
    with http.stream("GET", "/v0/topics/hq-drop/work?node=w&max=5", headers=SSE) as r:
        assert [j["$seq"] for j in _Stream(r).jobs(2)] == [2, 3]
    # the stream's two leases come back long before their 10-minute expiry; the polled
    # claim of the same node is untouched
    _eventually(
        lambda: (
            http.get("/v0/topics/hq-drop").json()["queue"]
            == {
                "ready": 2,
                "in_flight": 1,
                "dead_lettered": 0,
                "scheduled": 0,
                "backoff": 0,
            }
        )
    )
    again = http.post("/v0/topics/hq-drop/claim", json={"node": "x", "max": 5}).json()
    assert [(j["$seq"], j["deliveries"]) for j in again["claimed"]] == [(2, 2), (3, 2)]
    ack = {"node": "w", "seqs": [1], "lease_ids": [polled[0]["lease_id"]]}
    assert http.post("/v0/topics/hq-drop/ack", json=ack).json()["acked"] == 1


def test_work_stream_establishment_errors(http: httpx.Client) -> None:
    _queue(http, "hq-werr", n=1)
    http.put("/v0/topics/hq-wlog", json={})
    _error(http.get("/v0/topics/hq-werr/work?node=w"), 406, "not_acceptable")
    _error(http.get("/v0/topics/hq-werr/work", headers=SSE), 400, "invalid_request")
    _error(http.get("/v0/topics/hq-werr/work?node=w&max=0", headers=SSE), 400, "invalid_request")
    _error(http.get("/v0/topics/hq-werr/work?node=w&max=x", headers=SSE), 400, "invalid_request")
    _error(http.get("/v0/topics/hq-wnone/work?node=w", headers=SSE), 404, "topic_not_found")
    _error(http.get("/v0/topics/hq-wlog/work?node=w", headers=SSE), 409, "not_a_queue")
    assert http.get("/v0/topics/hq-werr").json()["queue"]["in_flight"] == 0


def test_work_stream_ends_with_an_error_frame_when_the_queue_is_deleted(
    http: httpx.Client,
) -> None:
    from topics.wire.sse import Event, SSEDecoder

    _queue(http, "hq-wdel")
    with http.stream("GET", "/v0/topics/hq-wdel/work?node=w", headers=SSE) as r:
        decoder = SSEDecoder()
        chunks = r.iter_bytes()
        decoder.feed(next(chunks))  # retry + heartbeat: the session is open
        assert http.delete("/v0/topics/hq-wdel").json()["deleted"] is True
        events = [i for chunk in chunks for i in decoder.feed(chunk) if isinstance(i, Event)]
    assert [e.event for e in events] == ["error"]
    payload = json.loads(events[0].data)
    assert (payload["code"], payload["error_code"]) == (404, "topic_not_found")


# The real server writes /work frames to the socket itself and has no task at work while a
# stream waits (queue_fast rule 5): every way a stream can get more jobs has to reach it.


def test_work_stream_below_its_bound_gets_appends(http: httpx.Client) -> None:
    _queue(http, "hq-wapp", n=1)
    with http.stream("GET", "/v0/topics/hq-wapp/work?node=w&max=8", headers=SSE) as r:
        stream = _Stream(r)
        assert [j["$seq"] for j in stream.jobs(1)] == [1]
        http.post("/v0/topics/hq-wapp", json={"records": [{"data": 2}, {"data": 3}]})
        assert [j["$seq"] for j in stream.jobs(2)] == [2, 3]


def test_work_stream_redelivers_a_delayed_nack_and_an_expired_lease(http: httpx.Client) -> None:
    _queue(http, "hq-wtime", n=2, lease_ms=300)
    with http.stream("GET", "/v0/topics/hq-wtime/work?node=w&max=1", headers=SSE) as r:
        stream = _Stream(r)
        first = stream.jobs(1)[0]
        assert first["$seq"] == 1
        nack = {"node": "w", "seqs": [1], "lease_ids": [first["lease_id"]], "delay_ms": 200}
        assert http.post("/v0/topics/hq-wtime/nack", json=nack).json()["nacked"] == 1
        # job 2 at once; job 1 again only after its delay, and again after job 2's lease
        # (never acked) and then its own run out: nothing but the clock wakes the stream
        got = [(j["$seq"], j["deliveries"]) for j in stream.jobs(3)]
        assert got == [(2, 1), (1, 2), (2, 2)]


def test_work_stream_delivers_a_batch_larger_than_the_socket_takes(http: httpx.Client) -> None:
    _queue(http, "hq-wbig")
    pad = "x" * 200_000
    records = [{"data": {"i": i, "pad": pad}} for i in range(1, 17)]
    assert http.post("/v0/topics/hq-wbig", json={"records": records}).status_code == 200
    with http.stream("GET", "/v0/topics/hq-wbig/work?node=w&max=16", headers=SSE) as r:
        time.sleep(0.3)  # let the server's write fill the socket before reading anything
        stream = _Stream(r)
        jobs = stream.jobs(16)
        assert [j["data"]["i"] for j in jobs] == list(range(1, 17))
        assert all(j["data"]["pad"] == pad for j in jobs)
        ack = {"node": "w", "seqs": [1], "lease_ids": [jobs[0]["lease_id"]]}
        assert http.post("/v0/topics/hq-wbig/ack", json=ack).json()["acked"] == 1
