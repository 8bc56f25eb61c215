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
from typing import TYPE_CHECKING, BinaryIO, TypeVar

import httpx

from . import _protocol as p
from ._api import ClientAPI
from ._backup import download_backup
from ._retry import RetryPolicy
from ._transport import Exchange, make_settings

if TYPE_CHECKING:
    from ._ws import WebSocket

__all__ = ["Client"]

T = TypeVar("T")


class Client(ClientAPI, driver="sync"):
    """A synchronous client of a topics server (the /v0 HTTP API).

    Args:
        url: the server, e.g. ``http://127.0.0.1:4000`` (the default).
        api_key: sent as ``Authorization: Bearer <key>``.
        timeout_s: timeout of one request; a long-poll diff adds its ``wait_ms``. Also
            each call's deadline while the server is not there (refused connections,
            503 during a restart): such a call is retried until then, not given up
            after ``retry.max_attempts``.
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
        exchange = Exchange(call, self.settings)
        while True:
            failure: httpx.Response | httpx.TransportError
            try:
                resp = self._http.request(call.method, call.path, **exchange.request)
            except httpx.TransportError as exc:
                failure = exc
            else:
                if resp.is_success:
                    return exchange.result(resp)
                failure = resp
            time.sleep(exchange.wait_s(failure))

    def backup(self, file: str | BinaryIO) -> int:
        """Save an online backup of the server's data directory (``GET /v0/backup``, admin)
        to ``file``, a path (written as ``<path>.tmp``, then renamed) or a binary file;
        returns its length. Restore it with ``topics restore`` (docs/OPERATIONS.md).
        Not retried."""
        return download_backup(self._http, self.settings, file)

    def ws(self) -> WebSocket:
        """Open the JSON WebSocket data plane (``/v0/ws``); see :class:`topics.client.WebSocket`."""
        from ._ws import WebSocket

        return WebSocket.connect(self.settings)
