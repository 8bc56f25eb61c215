"""The synchronous HTTP client: :class:`topics.Client`.

Method names, arguments and result types are those of the in-process API
(``topics.open(...)`` / :class:`topics.SyncEngine`), so moving between embedded and
remote use is one line::

    db = topics.open("./data")                      # embedded
    db = topics.Client("http://127.0.0.1:4000")     # remote, same calls

The methods are declared once for both clients in :mod:`topics.client._api`; each
request is one :class:`~topics.client._protocol.Call` that :meth:`Client._run` sends:
retries per :mod:`topics.client._retry`, errors per :mod:`topics.client._transport`. One ``httpx.Client`` (a keep-alive pool) per client; it is
safe to share a client between threads.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

import httpx

from topics.errors import TopicsError

from . import _protocol as p
from ._api import ClientAPI
from ._retry import NO_RETRY, RETRY_STATUSES, RetryPolicy
from ._transport import (
    DEFAULT_URL,
    Settings,
    connection_error,
    error_from_response,
    new_request_id,
)

if TYPE_CHECKING:
    from ._ws import WebSocket

__all__ = ["Client"]

T = TypeVar("T")


def make_settings(
    url: str | None,
    api_key: str | None,
    timeout_s: float,
    retry: RetryPolicy | bool,
    auto_idempotency_key: bool,
) -> Settings:
    policy = retry if isinstance(retry, RetryPolicy) else RetryPolicy() if retry else NO_RETRY
    return Settings(url or DEFAULT_URL, api_key, timeout_s, policy, auto_idempotency_key)


def parse_reply(call: p.Call[T], status: int, body: bytes, request_id: str | None) -> T:
    try:
        return call.parse(p.Reply(status, body, request_id))
    except (ValueError, KeyError, TypeError) as exc:
        err = TopicsError(f"malformed answer to {call.method} {call.path}: {exc!r}")
        err.__dict__["request_id"] = request_id
        raise err from None


class Client(ClientAPI, driver="sync"):
    """A synchronous client of a topics server (the /v0 HTTP API).

    Args:
        url: the server, e.g. ``http://127.0.0.1:4000`` (the default).
        api_key: sent as ``Authorization: Bearer <key>``.
        timeout_s: timeout of one request; a long-poll diff adds its ``wait_ms``.
        retry: a :class:`RetryPolicy`, True for the default policy, False for none.
        auto_idempotency_key: give every ``write()`` a fresh idempotency key when it has
            none, so a retried write never appends twice (within the topic's
            ``idempotency_window_ms``).
        transport: an ``httpx.BaseTransport`` (tests inject faults with one).

    Errors: every method raises the :mod:`topics.errors` class of the answer's
    ``error.code`` (``exc.request_id`` holds the request id), or
    :class:`~topics.client.ClientConnectionError` when the server cannot be reached.

    Example::

        with topics.Client("http://127.0.0.1:4000") as db:
            db.write("orders", [{"data": {"sku": "A1"}}])
            page = db.diff("orders", from_seq=0)
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = 30.0,
        retry: RetryPolicy | bool = True,
        auto_idempotency_key: bool = True,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.settings = make_settings(url, api_key, timeout_s, retry, auto_idempotency_key)
        self._http = httpx.Client(
            base_url=self.settings.base_url(),
            headers=self.settings.headers(),
            timeout=self.settings.timeout(),
            transport=transport,
        )

    @property
    def http(self) -> httpx.Client:
        """The underlying httpx client (for the streaming helpers)."""
        return self._http

    def close(self) -> None:
        """Close the connection pool. Idempotent."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self, call: p.Call[T]) -> T:
        """Send ``call``, retrying per the policy; return its parsed result or raise."""
        request_id = new_request_id()
        headers = {"X-Request-ID": request_id, **(call.headers or {})}
        if call.body is not None:
            headers["Content-Type"] = "application/json"
        policy = self.settings.retry
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                resp = self._http.request(
                    call.method,
                    call.path,
                    params=call.params,
                    content=call.body,
                    headers=headers,
                    timeout=self.settings.timeout(call.wait_s),
                )
            except httpx.TransportError as exc:
                err: TopicsError = connection_error(exc, request_id, self.settings.url)
                retry = call.idempotent or not getattr(err, "sent", True)
                server_s = None
            else:
                if resp.is_success:
                    rid = resp.headers.get("x-request-id")
                    return parse_reply(call, resp.status_code, resp.content, rid)
                err = error_from_response(resp.status_code, resp.headers, resp.content)
                retry = call.idempotent and resp.status_code in RETRY_STATUSES
                server_s = err.retry_after
            delay = policy.delay_s(attempt, started, server_s) if retry else None
            if delay is None:
                raise err
            time.sleep(delay)

    def ws(self) -> WebSocket:
        """Open the JSON WebSocket data plane (``/v0/ws``); see :class:`topics.client.WebSocket`."""
        from ._ws import WebSocket

        return WebSocket.connect(self.settings)
