"""A small blocking HTTP client for the ``/v0`` routes Spark tasks need.

Role: url-mode reads (``POST /v0/topics/:t/diff``, ``GET /v0/topics[/:t]``) and writes
(``POST /v0/topics/:t``) from the driver and from executors, with nothing beyond the
standard library: one keep-alive ``http.client`` connection per client.

Rules:
1. Every call is safe to retry: reads are read-only, and every write this package sends
   carries an ``idempotency_key`` (contract §0.8). So a dropped connection, ``429
   throttled`` and ``503 not_ready``/``shutting_down`` are retried (honouring
   ``Retry-After``) until ``retry_timeout_s`` has passed.
2. Any other non-2xx answer raises the ``topics`` error class registered for the
   envelope's ``error.code`` (``errors.error_class_for_code``), with its message and detail.
3. Bodies come back as bytes: callers split them with ``topics._core.scan`` so record
   ``data``/``meta`` stay the exact JSON text the server sent.
4. A write may ask not to be retried on a lost connection (``retry_lost=False``): the
   server may have appended it before it went away, and a server that restarted has
   forgotten the idempotency key, so the caller first looks for it (``_write`` rule 5).
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from typing import Any

from ..errors import TopicsError, error_class_for_code

__all__ = ["HttpClient"]

_RETRY_STATUSES = frozenset({429, 503})
_MAX_BACKOFF_S = 2.0


class HttpClient:
    """Blocking ``/v0`` client over one keep-alive connection (not thread-safe).

    Args:
        base_url: ``http://host:port`` of a topics-server (a path prefix is kept).
        api_key: sent as ``Authorization: Bearer <key>`` when given.
        timeout_s: socket timeout of one request.
        retry_timeout_s: how long retryable failures are retried (rule 1).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        retry_timeout_s: float = 60.0,
    ) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"url: expected http://host:port, got {base_url!r}")
        self._host = parts.hostname
        self._port = parts.port or 80
        self._prefix = parts.path.rstrip("/")
        self._timeout_s = timeout_s
        self._retry_timeout_s = retry_timeout_s
        self._headers = {"Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._conn: http.client.HTTPConnection | None = None
        #: the Content-Type of the last 2xx answer
        self.content_type = ""

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- the routes ------------------------------------------------------------------

    def diff(self, topic: str, body: dict[str, Any], accept: str | None = None) -> bytes:
        """POST /v0/topics/:topic/diff; the raw response body (``content_type`` says
        which format the server chose when ``accept`` asks for another)."""
        return self.request("POST", f"/v0/topics/{_quote(topic)}/diff", json_body(body), accept)

    def write(self, topic: str, body: bytes, retry_lost: bool = True) -> dict[str, Any]:
        """POST /v0/topics/:topic with an already-encoded body; the decoded answer.
        With ``retry_lost=False`` a lost connection raises ``OSError`` (rule 4)."""
        answer: dict[str, Any] = json.loads(
            self.request("POST", f"/v0/topics/{_quote(topic)}", body, retry_lost=retry_lost)
        )
        return answer

    def topic_state(self, topic: str) -> dict[str, Any]:
        """GET /v0/topics/:topic (without bumping its read recency)."""
        state: dict[str, Any] = json.loads(
            self.request("GET", f"/v0/topics/{_quote(topic)}?touch=false")
        )
        return state

    def list_topics(self, prefix: str | None) -> list[str]:
        """Every topic name (optionally under ``prefix``), following ``next_cursor``."""
        names: list[str] = []
        cursor: str | None = None
        while True:
            query = {"page_size": "1000"}
            if prefix:
                query["prefix"] = prefix
            if cursor:
                query["cursor"] = cursor
            page = json.loads(self.request("GET", "/v0/topics?" + urllib.parse.urlencode(query)))
            names.extend(t["topic"] for t in page["topics"])
            cursor = page.get("next_cursor")
            if not cursor:
                return names

    # -- transport -------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        accept: str | None = None,
        *,
        retry_lost: bool = True,
    ) -> bytes:
        """One request with the retries of rule 1; the 2xx body, else raise (rule 2)."""
        deadline = time.monotonic() + self._retry_timeout_s
        attempt = 0
        while True:
            attempt += 1
            try:
                status, headers, data = self._once(method, self._prefix + path, body, accept)
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                if not retry_lost:
                    raise ConnectionError(f"{method} {path}: connection lost ({exc})") from exc
                if time.monotonic() >= deadline:
                    raise
                time.sleep(min(_MAX_BACKOFF_S, 0.05 * 2**attempt))
                continue
            if 200 <= status < 300:
                self.content_type = headers.get("Content-Type", "")
                return data
            if status in _RETRY_STATUSES and time.monotonic() < deadline:
                time.sleep(min(_retry_after(headers), max(0.0, deadline - time.monotonic())))
                continue
            raise _error(status, data)

    def _once(
        self, method: str, path: str, body: bytes | None, accept: str | None
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)
        headers = dict(self._headers)
        if accept is not None:
            headers["Accept"] = accept
        if body is not None:
            headers["Content-Type"] = "application/json"
        self._conn.request(method, path, body=body, headers=headers)
        resp = self._conn.getresponse()
        data = resp.read()
        if resp.will_close:
            self.close()
        return resp.status, resp.headers, data


def json_body(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _quote(topic: str) -> str:
    return urllib.parse.quote(topic, safe="")


def _retry_after(headers: http.client.HTTPMessage) -> float:
    try:
        return max(0.05, min(float(headers.get("Retry-After", "1")), 30.0))
    except ValueError:
        return 1.0


def _error(status: int, data: bytes) -> TopicsError:
    try:
        err = json.loads(data)["error"]
        cls = error_class_for_code(str(err.get("code", "internal")))
        return cls(
            f"HTTP {status}: {err.get('message', '')}".rstrip(": "), detail=err.get("detail")
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return TopicsError(f"HTTP {status}: {data[:200]!r}")
