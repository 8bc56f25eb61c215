"""topics.wire.envelope: error bodies, Retry-After and the performance object, bytes in/out."""

from __future__ import annotations

import json

import pytest

from topics.errors import (
    InvalidRequestError,
    NotReadyError,
    ThrottledError,
    TopicNotFoundError,
    TopicsError,
)
from topics.wire.envelope import (
    error_body,
    error_object,
    internal_error_body,
    json_bytes,
    performance,
    retry_after_seconds,
)


def test_error_body_has_exactly_the_contract_shape() -> None:
    body = json.loads(error_body(TopicNotFoundError.for_topic("jobs"), "req-1"))
    assert body == {
        "error": {
            "code": "topic_not_found",
            "message": 'topic "jobs" does not exist',
            "detail": {"topic": "jobs"},
            "request_id": "req-1",
        }
    }


def test_error_body_omits_absent_detail_and_request_id() -> None:
    body = json.loads(error_body(InvalidRequestError("bad")))
    assert body == {"error": {"code": "invalid_request", "message": "bad"}}
    assert error_object(InvalidRequestError("bad")) == {"code": "invalid_request", "message": "bad"}


def test_error_body_carries_performance_beside_error() -> None:
    body = json.loads(error_body(InvalidRequestError("bad"), "r", performance(1.23456)))
    assert body["performance"] == {"server_total_ms": 1.235}
    assert set(body) == {"error", "performance"}


def test_unencodable_detail_is_dropped_not_turned_into_another_error() -> None:
    exc = InvalidRequestError("bad", detail={"obj": object()})
    body = json.loads(error_body(exc, "r"))
    assert body["error"] == {"code": "invalid_request", "message": "bad", "request_id": "r"}


def test_internal_body_is_generic() -> None:
    body = json.loads(internal_error_body("r9", performance(0.5)))
    assert body["error"]["code"] == "internal"
    assert body["error"]["request_id"] == "r9"
    assert "Traceback" not in body["error"]["message"]
    assert body["performance"] == {"server_total_ms": 0.5}


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (TopicNotFoundError("x"), None),
        (ThrottledError("x"), 1),
        (NotReadyError("x"), 1),
        (ThrottledError("x", retry_after=0.1), 1),
        (ThrottledError("x", retry_after=1.2), 2),
        (ThrottledError("x", retry_after=5), 5),
        (ThrottledError("x", retry_after=float("inf")), 1),
        (TopicsError("x", retry_after=3), 3),
    ],
)
def test_retry_after_seconds(exc: TopicsError, expected: int | None) -> None:
    assert retry_after_seconds(exc) == expected


def test_performance_holds_only_given_fields_rounded() -> None:
    assert performance(0.1234567) == {"server_total_ms": 0.123}
    perf = performance(
        2.0, wal_append_ms=0.00049, fsync_ms=1.5, records_scanned=7, throttle_wait_ms=0.0
    )
    assert perf == {
        "server_total_ms": 2.0,
        "wal_append_ms": 0.0,
        "fsync_ms": 1.5,
        "records_scanned": 7,
        "throttle_wait_ms": 0.0,
    }


def test_json_bytes_is_compact_utf8() -> None:
    assert json_bytes({"a": "é/x", "b": [1, 2]}) == '{"a":"é/x","b":[1,2]}'.encode()
