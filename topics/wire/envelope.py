"""The error envelope (contract §0.5) and the performance object (§0.9), as bytes.

Pure functions from values to JSON bytes: frontends map every error through
:func:`error_body` and never build an error body themselves (STYLE §6).

Rules:
1. An error body is exactly ``{"error": {"code", "message", "detail"?, "request_id"?},
   "performance"?}``; ``detail`` is omitted when the error has none. The request id is
   repeated inside ``error`` so a client that only sees the body can quote it
   (CONTRACT-NOTES 5).
2. Only errors of a known class are described to the client; anything else becomes the
   generic ``internal`` body (:func:`internal_error_body`), so no stack trace, path or
   secret ever reaches a response.
3. ``Retry-After`` is whole seconds, at least 1 (RFC 9110 delay-seconds), derived from the
   error's ``retry_after`` (seconds, possibly fractional).
4. The performance object carries only the fields given (clients tolerate any subset);
   times are milliseconds rounded to microseconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import ujson

from topics.errors import TopicsError

__all__ = [
    "error_body",
    "error_object",
    "internal_error_body",
    "json_bytes",
    "performance",
    "retry_after_seconds",
]

INTERNAL_MESSAGE = "internal error; the server logged the details (quote the request_id)"


def json_bytes(value: Any) -> bytes:
    """Encode ``value`` as compact UTF-8 JSON (non-ASCII kept, ``/`` not escaped)."""
    return ujson.dumps(value, ensure_ascii=False, escape_forward_slashes=False).encode()


def performance(
    server_total_ms: float,
    *,
    wal_append_ms: float | None = None,
    fsync_ms: float | None = None,
    records_scanned: int | None = None,
    throttle_wait_ms: float | None = None,
) -> dict[str, float | int]:
    """The ``performance`` object (§0.9) holding only the fields given."""
    out: dict[str, float | int] = {"server_total_ms": round(server_total_ms, 3)}
    if wal_append_ms is not None:
        out["wal_append_ms"] = round(wal_append_ms, 3)
    if fsync_ms is not None:
        out["fsync_ms"] = round(fsync_ms, 3)
    if records_scanned is not None:
        out["records_scanned"] = records_scanned
    if throttle_wait_ms is not None:
        out["throttle_wait_ms"] = round(throttle_wait_ms, 3)
    return out


def error_object(exc: TopicsError, request_id: str | None = None) -> dict[str, Any]:
    """The ``error`` member of the envelope for ``exc``."""
    out: dict[str, Any] = {"code": exc.code, "message": exc.message}
    if exc.detail is not None:
        out["detail"] = exc.detail
    if request_id is not None:
        out["request_id"] = request_id
    return out


def error_body(
    exc: TopicsError,
    request_id: str | None = None,
    perf: Mapping[str, float | int] | None = None,
) -> bytes:
    """The full error envelope for ``exc`` as JSON bytes.

    Example::

        error_body(TopicNotFoundError.for_topic("jobs"), "r1", performance(0.1))
        # {"error":{"code":"topic_not_found","message":"topic \"jobs\" does not exist",
        #  "detail":{"topic":"jobs"},"request_id":"r1"},"performance":{"server_total_ms":0.1}}
    """
    body: dict[str, Any] = {"error": error_object(exc, request_id)}
    if perf is not None:
        body["performance"] = dict(perf)
    try:
        return json_bytes(body)
    except (TypeError, ValueError, OverflowError):
        # A detail that cannot be encoded must not turn one error into another: drop it.
        body["error"].pop("detail", None)
        return json_bytes(body)


def internal_error_body(
    request_id: str | None = None, perf: Mapping[str, float | int] | None = None
) -> bytes:
    """The generic ``500 internal`` body used for any unexpected exception (rule 2)."""
    error: dict[str, Any] = {"code": "internal", "message": INTERNAL_MESSAGE}
    if request_id is not None:
        error["request_id"] = request_id
    body: dict[str, Any] = {"error": error}
    if perf is not None:
        body["performance"] = dict(perf)
    return json_bytes(body)


def retry_after_seconds(exc: TopicsError) -> int | None:
    """The ``Retry-After`` value (whole seconds, >= 1) for ``exc``, or None.

    429 and 503 always carry one (§0.6): 1 second when the error names no delay.
    """
    if exc.retry_after is None:
        return 1 if exc.status in (429, 503) else None
    if not math.isfinite(exc.retry_after):
        return 1
    return max(1, math.ceil(exc.retry_after))
