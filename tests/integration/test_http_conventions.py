"""Conventions every route shares, over the real server: request ids, the error envelope,
the performance object, unknown routes and methods, media types, body limits, gzip, caps."""

from __future__ import annotations

import gzip
import json
import re
import uuid
from collections.abc import Callable, Iterator

import httpx
import pytest

from .conftest import ServerProcess

JSON = {"content-type": "application/json"}
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


@pytest.fixture(scope="module")
def small(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    """A server with tight batching limits."""
    return start_server(
        {
            "TOPICS_MAX_BODY_BYTES": "4096",
            "TOPICS_MAX_BATCH_RECORDS": "5",
            "TOPICS_MAX_RECORD_BYTES": "100",
        }
    )


@pytest.fixture(scope="module")
def capped(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    """A server with tiny resource caps (§11)."""
    return start_server({"TOPICS_MAX_TOPICS": "2", "TOPICS_MAX_TOTAL_BYTES": "1000"})


@pytest.fixture
def small_http(small: ServerProcess) -> Iterator[httpx.Client]:
    with small.client() as client:
        yield client


def _assert_envelope(r: httpx.Response, status: int, code: str) -> dict[str, object]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) <= {"error", "performance"}
    error = body["error"]
    assert error["code"] == code
    assert isinstance(error["message"], str)
    assert error["message"]
    assert error["request_id"] == r.headers["x-request-id"]
    assert body["performance"]["server_total_ms"] >= 0
    return error  # type: ignore[no-any-return]


# -- request ids -----------------------------------------------------------------------


def test_every_response_has_a_fresh_uuid_request_id(http: httpx.Client) -> None:
    responses = [
        http.get("/v0/health"),
        http.get("/v0/topics"),
        http.post("/v0/topics/rid/diff"),  # 404 from the fast path
        http.get("/v0/metrics"),
        http.get("/nope"),
    ]
    ids = [r.headers["x-request-id"] for r in responses]
    assert all(UUID.match(i) for i in ids), ids
    assert len(set(ids)) == len(ids)


def test_a_well_formed_client_request_id_is_echoed(http: httpx.Client) -> None:
    rid = "client.req-42_A"
    r = http.get("/v0/topics/no-such", headers={"X-Request-ID": rid})
    assert r.headers["x-request-id"] == rid
    assert r.json()["error"]["request_id"] == rid
    r = http.post(
        "/v0/topics/rid-w", json={"records": [{"data": 1}]}, headers={"X-Request-ID": rid}
    )
    assert r.headers["x-request-id"] == rid


@pytest.mark.parametrize("bad", ["has space", "x" * 129, "semi;colon", "ü"])
def test_a_malformed_client_request_id_is_replaced(http: httpx.Client, bad: str) -> None:
    r = http.get("/v0/health", headers={"X-Request-ID": bad.encode("utf-8")})  # type: ignore[dict-item]
    assert r.headers["x-request-id"] != bad
    assert UUID.match(r.headers["x-request-id"])


# -- envelope, performance, routing ---------------------------------------------------


def test_success_bodies_are_bare_with_performance(http: httpx.Client) -> None:
    r = http.put("/v0/topics/perf", json={})
    body = r.json()
    assert "error" not in body
    assert "status" not in body
    assert isinstance(body["performance"]["server_total_ms"], float)
    r = http.post("/v0/topics/perf", json={"records": [{"data": 1}]})
    perf = r.json()["performance"]
    assert perf["fsync_ms"] == 0.0
    assert perf["wal_append_ms"] >= 0.0
    assert http.post("/v0/topics/perf/diff").json()["performance"]["records_scanned"] == 1


def test_unknown_route_is_404_not_found(http: httpx.Client) -> None:
    for path in ("/", "/v1/topics", "/v0/topics/a/b/c", "/v0/topics/", "/v0/nothing"):
        _assert_envelope(http.get(path), 404, "not_found")


def test_wrong_method_is_405_with_allow(http: httpx.Client) -> None:
    r = http.patch("/v0/topics/x", json={})
    _assert_envelope(r, 405, "method_not_allowed")
    assert r.headers["allow"] == "DELETE, GET, POST, PUT"
    r = http.get("/v0/topics/x/diff")
    _assert_envelope(r, 405, "method_not_allowed")
    assert r.headers["allow"] == "POST"
    _assert_envelope(http.post("/v0/health"), 405, "method_not_allowed")


# -- media types ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"content-type": "text/plain"},
        {"content-type": "application/x-www-form-urlencoded"},
        {"content-type": "application/json; charset=latin-1"},
    ],
)
def test_body_without_json_content_type_is_415(http: httpx.Client, headers: dict[str, str]) -> None:
    body = b'{"records":[{"data":1}]}'
    _assert_envelope(
        http.post("/v0/topics/mt", content=body, headers=headers), 415, "unsupported_media_type"
    )
    _assert_envelope(
        http.put("/v0/topics/mt", content=b"{}", headers=headers), 415, "unsupported_media_type"
    )
    _assert_envelope(
        http.post("/v0/topics/mt/diff", content=b"{}", headers=headers),
        415,
        "unsupported_media_type",
    )


def test_json_content_type_variants_are_accepted(http: httpx.Client) -> None:
    for ct in (
        "application/json",
        "Application/JSON",
        "application/json; charset=utf-8",
        'application/json;charset="UTF-8"',
    ):
        r = http.post(
            "/v0/topics/mt-ok", content=b'{"records":[{"data":1}]}', headers={"content-type": ct}
        )
        assert r.status_code in (200, 201), (ct, r.text)


def test_unsupported_content_encoding_is_415(http: httpx.Client) -> None:
    r = http.post("/v0/topics/ce", content=b"{}", headers={**JSON, "content-encoding": "br"})
    _assert_envelope(r, 415, "unsupported_media_type")


# -- gzip -----------------------------------------------------------------------------


def test_gzip_request_body(http: httpx.Client) -> None:
    raw = json.dumps({"records": [{"data": {"i": i, "pad": "x" * 50}} for i in range(50)]}).encode()
    r = http.post(
        "/v0/topics/gz-in", content=gzip.compress(raw), headers={**JSON, "content-encoding": "gzip"}
    )
    assert r.status_code == 201
    assert r.json()["count"] == 50
    r = http.post(
        "/v0/topics/gz-in",
        content=b"\x1f\x8b garbage",
        headers={**JSON, "content-encoding": "gzip"},
    )
    _assert_envelope(r, 400, "invalid_request")
    r = http.post(
        "/v0/topics/gz-in",
        content=gzip.compress(raw)[:-10],
        headers={**JSON, "content-encoding": "gzip"},
    )
    _assert_envelope(r, 400, "invalid_request")


def test_gzip_response_when_accepted(http: httpx.Client) -> None:
    http.post("/v0/topics/gz-out", json={"records": [{"data": "y" * 100} for _ in range(50)]})
    r = http.post("/v0/topics/gz-out/diff", headers={"accept-encoding": "gzip"})
    assert r.headers["content-encoding"] == "gzip"
    assert int(r.headers["content-length"]) < len(r.content)  # httpx decoded it
    assert len(r.json()["records"]) == 50
    r = http.post("/v0/topics/gz-out/diff", headers={"accept-encoding": "identity"})
    assert "content-encoding" not in r.headers
    r = http.post("/v0/topics/gz-out/diff", headers={"accept-encoding": "gzip;q=0"})
    assert "content-encoding" not in r.headers
    r = http.get("/v0/health", headers={"accept-encoding": "gzip"})  # small: not worth it
    assert "content-encoding" not in r.headers


# -- body and batch limits ---------------------------------------------------------


def test_content_length_over_the_limit_is_413_before_parsing(small_http: httpx.Client) -> None:
    body = b"{" + b" " * 5000 + b"this is not even JSON"
    r = small_http.post("/v0/topics/big", content=body, headers=JSON)
    error = _assert_envelope(r, 413, "payload_too_large")
    assert error["detail"] == {"max_body_bytes": 4096}


def test_chunked_body_over_the_limit_is_413(small_http: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        yield b"{" + b" " * 3000
        yield b" " * 3000

    r = small_http.post("/v0/topics/big", content=chunks(), headers=JSON)
    _assert_envelope(r, 413, "payload_too_large")


def test_gzip_bomb_is_413(small_http: httpx.Client) -> None:
    bomb = gzip.compress(b'{"records":[' + b" " * 100_000 + b"]}")
    assert len(bomb) < 4096
    r = small_http.post(
        "/v0/topics/big", content=bomb, headers={**JSON, "content-encoding": "gzip"}
    )
    _assert_envelope(r, 413, "payload_too_large")


def test_batch_and_record_limits_are_400(small_http: httpx.Client) -> None:
    r = small_http.post("/v0/topics/lim", json={"records": [{"data": i} for i in range(6)]})
    error = _assert_envelope(r, 400, "batch_too_large")
    assert error["detail"] == {"records": 6, "max": 5}
    r = small_http.post("/v0/topics/lim", json={"records": [{"data": "z" * 200}]})
    error = _assert_envelope(r, 400, "record_too_large")
    assert error["detail"]["field"] == "records[0].record"  # type: ignore[index]


# -- resource caps (§11) -------------------------------------------------------------


def test_resource_caps_are_429_with_limit_and_retry_after(capped: ServerProcess) -> None:
    with capped.client() as http:
        assert http.put("/v0/topics/c1", json={}).status_code == 201
        assert http.post("/v0/topics/c2", json={"records": [{"data": 1}]}).status_code == 201
        for r in (
            http.put("/v0/topics/c3", json={}),
            http.post("/v0/topics/c3", json={"records": [{"data": 1}]}),
        ):
            error = _assert_envelope(r, 429, "throttled")
            assert error["detail"] == {"limit": "max_topics", "max": 2}
            assert int(r.headers["retry-after"]) >= 1
        assert (
            http.put("/v0/topics/c1", json={"ttl_ms": 5}).status_code == 200
        )  # updates still work
        assert http.put("/v0/topics/c1", json={"ttl_ms": 0}).status_code == 200
        big = {"records": [{"data": "q" * 300} for _ in range(5)]}
        r = http.post("/v0/topics/c1", json=big)
        error = _assert_envelope(r, 429, "throttled")
        assert error["detail"]["limit"] == "max_total_bytes"  # type: ignore[index]
        assert r.headers["retry-after"]


def test_request_ids_are_unique_across_many_requests(http: httpx.Client) -> None:
    ids = {http.get("/v0/health").headers["x-request-id"] for _ in range(20)}
    assert len(ids) == 20
    assert all(uuid.UUID(i).version == 4 for i in ids)
