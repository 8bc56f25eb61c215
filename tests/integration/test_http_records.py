"""Record routes over the real server: write, diff, delete records."""

from __future__ import annotations

import json

import httpx
import pytest
import trio
import trio.testing

from .conftest import InProc, ServerProcess


@pytest.fixture(scope="module")
def server(server_in_every_mode: ServerProcess) -> ServerProcess:
    """This suite runs once per way the server can carry it (tests.support.server.SERVER_MODES)."""
    return server_in_every_mode


JSON = {"content-type": "application/json"}


def _write(
    http: httpx.Client, topic: str, body: bytes | dict[str, object], **kw: object
) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {**JSON, **kw.pop("headers", {})}  # type: ignore[dict-item]
    return http.post(f"/v0/topics/{topic}", content=content, headers=headers, **kw)  # type: ignore[arg-type]


def test_write_creates_topic_and_returns_seqs(http: httpx.Client) -> None:
    r = _write(http, "w-basic", {"records": [{"data": {"a": 1}}, {"data": "x"}, {"data": None}]})
    assert r.status_code == 201
    body = r.json()
    assert body["topic"] == "w-basic"
    assert (body["first_seq"], body["last_seq"], body["seqs"]) == (1, 3, [1, 2, 3])
    assert (body["head_seq"], body["count"], body["created"], body["deduped"]) == (
        3,
        3,
        True,
        False,
    )
    assert set(body["performance"]) >= {"server_total_ms", "wal_append_ms", "fsync_ms"}
    r = _write(http, "w-basic", {"records": [{"data": 4}]})
    assert r.status_code == 200
    assert r.json()["first_seq"] == 4
    assert r.json()["created"] is False


def test_data_and_meta_are_stored_and_returned_byte_verbatim(http: httpx.Client) -> None:
    raw = (
        b'{"records":[{"data":{"price":1.50,"big":12345678901234567890123,"s":"\\u00e9\\n"},'
        b'"meta":{"trace" : "z9"},"tag":"t:1","node":"n1"}, {"data" : [ 1 , 2 ]}]}'
    )
    assert _write(http, "w-verbatim", raw).status_code == 201
    r = http.post("/v0/topics/w-verbatim/diff", json={"include_tags": True})
    assert r.status_code == 200
    text = r.content
    assert b'"data":{"price":1.50,"big":12345678901234567890123,"s":"\\u00e9\\n"}' in text
    assert b'"meta":{"trace" : "z9"}' in text
    assert b'"data":[ 1 , 2 ]' in text
    first = r.json()["records"][0]
    assert first["$seq"] == 1
    assert first["$tag"] == "t:1"
    assert first["$node"] == "n1"


def test_return_seqs_false(http: httpx.Client) -> None:
    r = _write(
        http, "w-noseqs", {"records": [{"data": 1}, {"data": 2}]}, params={"return_seqs": "false"}
    )
    body = r.json()
    assert "seqs" not in body
    assert (body["first_seq"], body["last_seq"]) == (1, 2)


def test_idempotency_key_in_body_and_header(http: httpx.Client) -> None:
    body = {"records": [{"data": 1}], "idempotency_key": "batch-1"}
    first = _write(http, "w-idem", body).json()
    again = _write(http, "w-idem", body).json()
    assert again["deduped"] is True
    assert again["seqs"] == first["seqs"]
    h1 = _write(
        http, "w-idem", {"records": [{"data": 2}]}, headers={"Idempotency-Key": "hdr-1"}
    ).json()
    h2 = _write(
        http, "w-idem", {"records": [{"data": 2}]}, headers={"Idempotency-Key": "hdr-1"}
    ).json()
    assert h2["deduped"] is True
    assert h2["seqs"] == h1["seqs"]
    # the body field wins over the header
    b = _write(http, "w-idem", body, headers={"Idempotency-Key": "hdr-1"}).json()
    assert b["seqs"] == first["seqs"]


def test_create_false_on_absent_topic_is_404(http: httpx.Client) -> None:
    r = _write(http, "w-nocreate", {"records": [{"data": 1}], "create": False})
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "topic_not_found"


def test_inline_config_applies_on_create(http: httpx.Client) -> None:
    r = _write(http, "w-cfg", {"records": [{"data": 1}], "config": {"cap_records": 5}})
    assert r.status_code == 201
    assert http.get("/v0/topics/w-cfg").json()["config"]["cap_records"] == 5


def test_write_invalid_requests(http: httpx.Client) -> None:
    cases: list[bytes] = [
        b'{"records":[{"data":1}',  # truncated JSON
        b'{"records":[{"data":tru}]}',
        b"[]",
        b'{"records":{}}',
        b'{"records":[]}',
        b"{}",
        b'{"records":[{"nodata":1}]}',
        b'{"records":[{"data":1}],"idempotencyKey":"typo"}',
        b'{"records":[{"data":1,"meta":[1]}]}',
        b'{"records":[{"data":1,"tag":""}]}',
        b'{"records":[{"data":1}],"disable_backpressure":"yes"}',
    ]
    for raw in cases:
        r = _write(http, "w-invalid", raw)
        assert r.status_code == 400, raw
        assert r.json()["error"]["code"] == "invalid_request", raw
    r = _write(http, "w-invalid", b'{"records":[{"data":1},{"data":tru}]}')
    assert r.json()["error"]["detail"]["path"] == "$.records[1].data"


def test_an_unknown_record_field_is_400_naming_it_and_stores_nothing(http: httpx.Client) -> None:
    """A typo must not be stored with the field dropped (in every server mode: the fast lane
    and hypercorn carry the same write route)."""
    assert _write(http, "w-typo", {"records": [{"data": 0}]}).status_code == 201
    r = _write(http, "w-typo", b'{"records":[{"data":1,"tag":"ok"},{"data":1,"tga":"x"}]}')
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "invalid_request"
    assert err["detail"] == {"field": "records[1].tga"}
    assert "records[1].tga" in err["message"]
    assert http.get("/v0/topics/w-typo").json()["head_seq"] == 1  # nothing appended


def test_full_reject_topic_is_422(http: httpx.Client) -> None:
    http.put("/v0/topics/w-full", json={"cap_records": 2, "discard": "reject"})
    assert _write(http, "w-full", {"records": [{"data": 1}, {"data": 2}]}).status_code == 200
    r = _write(http, "w-full", {"records": [{"data": 3}]})
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "topic_full"
    r = _write(http, "w-full", {"records": [{"data": i} for i in range(3)]})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "record_too_large"


def test_diff_windows_and_cursor(http: httpx.Client) -> None:
    _write(http, "d-win", {"records": [{"data": i} for i in range(10)]})
    r = http.post("/v0/topics/d-win/diff", json={"from_seq": 0, "limit": 4})
    body = r.json()
    assert [rec["$seq"] for rec in body["records"]] == [1, 2, 3, 4]
    assert body["next_from_seq"] == 4
    assert body["caught_up"] is False
    assert body["lag"] == 6
    assert body["head_seq"] == 10
    assert body["earliest_seq"] == 1
    assert body["tombstone"] is None
    assert body["performance"]["records_scanned"] == 4
    assert "$tag" not in body["records"][0]
    r = http.post("/v0/topics/d-win/diff", json={"from_seq": 4, "limit": 100})
    assert r.json()["caught_up"] is True
    assert r.json()["next_from_seq"] == 10
    # empty body: all defaults, no Content-Type needed
    r = http.post("/v0/topics/d-win/diff")
    assert r.status_code == 200
    assert len(r.json()["records"]) == 10


def test_diff_node_filter_and_projection(http: httpx.Client) -> None:
    _write(http, "d-node", {"records": [{"data": 1, "meta": {"m": 1}}, {"data": 2, "node": "me"}]})
    body = http.post("/v0/topics/d-node/diff", json={"node": "me", "include_meta": False}).json()
    assert [r["$seq"] for r in body["records"]] == [1]
    assert "meta" not in body["records"][0]
    assert body["next_from_seq"] == 2
    assert body["caught_up"] is True
    body = http.post(
        "/v0/topics/d-node/diff", json={"node": ["x", "me"], "include_data": False}
    ).json()
    assert [r["$seq"] for r in body["records"]] == [1]


def test_diff_tombstone_after_cap_eviction(http: httpx.Client) -> None:
    http.put("/v0/topics/d-tomb", json={"cap_records": 3})
    _write(http, "d-tomb", {"records": [{"data": i} for i in range(10)]})
    body = http.post("/v0/topics/d-tomb/diff", json={"from_seq": 2}).json()
    assert body["tombstone"]["reason"] == "cap"
    assert (body["tombstone"]["gap_from"], body["tombstone"]["gap_to"]) == (3, 7)
    assert [r["$seq"] for r in body["records"]] == [8, 9, 10]


def test_diff_errors(http: httpx.Client) -> None:
    r = http.post("/v0/topics/d-missing/diff", json={})
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "topic_not_found"
    _write(http, "d-err", {"records": [{"data": 1}]})
    for body in ({"from_seq": -1}, {"limit": "many"}, {"bogus": 1}, {"max_batch_bytes": 0}):
        r = http.post("/v0/topics/d-err/diff", json=body)
        assert r.status_code == 400, body
    r = http.post("/v0/topics/d-err/diff", content=b"{not json", headers=JSON)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_request"
    # over-limit values are clamped, not errors
    assert http.post("/v0/topics/d-err/diff", json={"limit": 100000}).status_code == 200


async def test_diff_long_poll_wakes_on_write(inproc: InProc) -> None:
    await inproc.engine.write("d-poll", [{"data": 1}])
    results: list[httpx.Response] = []
    async with inproc.client() as c:

        async def poll() -> None:
            body = {"from_seq": 1, "wait_ms": 20000}
            results.append(await c.post("/v0/topics/d-poll/diff", json=body))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            await trio.testing.wait_all_tasks_blocked()
            assert not results  # parked, not polling
            r = await c.post("/v0/topics/d-poll", json={"records": [{"data": 2}]})
            assert r.status_code == 200
    assert [rec["$seq"] for rec in results[0].json()["records"]] == [2]


def test_delete_records_by_seq_and_tag(http: httpx.Client) -> None:
    _write(
        http,
        "del-recs",
        {"records": [{"data": i, "tag": f"job-{i % 2}"} for i in range(6)]},
    )
    r = http.post("/v0/topics/del-recs/delete", json={"before_seq": 3})
    assert r.status_code == 200
    body = r.json()
    assert body["deleted"] == 2
    assert body["earliest_seq"] == 3
    assert body["count"] == 4
    assert "server_total_ms" in body["performance"]
    r = http.post("/v0/topics/del-recs/delete", json={"match": ["tag", "Glob", "job-1*"]})
    assert r.json()["deleted"] == 2
    r = http.post("/v0/topics/del-recs/delete", json={"match": "job-0"})
    assert r.json()["deleted"] == 2
    assert r.json()["count"] == 0
    diff = http.post("/v0/topics/del-recs/diff", json={}).json()
    assert diff["records"] == []
    assert diff["tombstone"] is None


def test_delete_records_errors(http: httpx.Client) -> None:
    _write(http, "del-err", {"records": [{"data": 1}]})
    for body in ({}, {"match": ["tag", "Regex", "x"]}, {"match": ["tag", "Glob", "x"]}, {"x": 1}):
        r = http.post("/v0/topics/del-err/delete", json=body)
        assert r.status_code == 400, body
        assert r.json()["error"]["code"] == "invalid_request", body
    r = http.post("/v0/topics/del-missing/delete", json={"before_seq": 1})
    assert r.status_code == 404


async def test_long_poll_ends_silently_when_the_client_goes_away(inproc: InProc) -> None:
    await inproc.engine.write("d-gone", [{"data": 1}])
    body = b'{"from_seq": 1, "wait_ms": 30000}'
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    left = trio.Event()
    sent: list[object] = []

    async def receive() -> dict[str, object]:
        if messages:
            return messages.pop()
        await left.wait()
        return {"type": "http.disconnect"}

    async def send(message: object) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v0/topics/d-gone/diff",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))],
    }
    async with trio.open_nursery() as nursery:
        nursery.start_soon(inproc.app, scope, receive, send)
        await trio.testing.wait_all_tasks_blocked()
        left.set()
    assert sent == []  # nobody to answer


# -- compare-and-append and producer fencing (issue 19) ------------------------------------


def test_expected_head_seq_appends_only_at_that_head(http: httpx.Client) -> None:
    r = _write(http, "w-cas", {"records": [{"data": 1}], "expected_head_seq": 0})
    assert (r.status_code, r.json()["seqs"]) == (201, [1])
    r = _write(http, "w-cas", {"records": [{"data": 2}], "expected_head_seq": 0})
    assert r.status_code == 409, r.text
    error = r.json()["error"]
    assert error["code"] == "head_mismatch"
    assert error["detail"] == {"topic": "w-cas", "expected_head_seq": 0, "head_seq": 1}
    assert http.get("/v0/topics/w-cas").json()["head_seq"] == 1  # nothing appended
    r = _write(http, "w-cas", {"records": [{"data": 2}], "expected_head_seq": 1})
    assert (r.status_code, r.json()["seqs"]) == (200, [2])
    r = _write(http, "w-cas", {"records": [{"data": 3}], "expected_head_seq": "2"})
    assert (r.status_code, r.json()["error"]["code"]) == (400, "invalid_request")
    r = _write(http, "w-cas-none", {"records": [{"data": 1}], "expected_head_seq": 4})
    assert r.status_code == 409
    assert http.get("/v0/topics/w-cas-none").status_code == 404  # not created either


def test_producer_epochs_fence_older_instances(http: httpx.Client) -> None:
    def write(epoch: int, key: str | None = None) -> httpx.Response:
        body: dict[str, object] = {
            "records": [{"data": epoch}],
            "producer_id": "loader",
            "epoch": epoch,
        }
        if key is not None:
            body["idempotency_key"] = key
        return _write(http, "w-fence", body)

    first = write(1, "batch-1")
    assert first.status_code == 201
    assert write(2).status_code == 200
    r = write(1, "batch-1")  # the old instance, even retrying its own batch
    assert r.status_code == 409, r.text
    error = r.json()["error"]
    assert error["code"] == "producer_fenced"
    assert error["detail"] == {
        "topic": "w-fence",
        "producer_id": "loader",
        "epoch": 1,
        "current_epoch": 2,
    }
    assert http.get("/v0/topics/w-fence").json()["head_seq"] == 2
    last = write(2, "batch-3")
    again = write(3, "batch-3")  # a restarted instance resends its predecessor's last batch
    assert (again.json()["deduped"], again.json()["seqs"]) == (True, last.json()["seqs"])
    r = _write(http, "w-fence", {"records": [{"data": 0}], "producer_id": "loader"})
    assert (r.status_code, r.json()["error"]["detail"]) == (400, {"field": "epoch"})
