"""The async HTTP client: :class:`topics.AsyncClient` (trio or asyncio, through httpx/anyio).

The twin of :class:`topics.Client` (``_sync.py``): the same methods, declared once in
:mod:`topics.client._api`, the same retries and errors, awaited. Method names,
arguments and result types are those of the in-process API.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, BinaryIO, TypeVar

import anyio
import httpx

from . import _protocol as p
from ._api import ClientAPI
from ._backup import download_backup_async
from ._retry import RetryPolicy
from ._sync import Client
from ._transport import Exchange, make_settings

if TYPE_CHECKING:
    from ._ws import AsyncWebSocket

__all__ = ["AsyncClient"]

T = TypeVar("T")


class AsyncClient(ClientAPI, driver="async"):
    """An async client of a topics server (the /v0 HTTP API), under trio or asyncio.

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

        async with topics.AsyncClient("http://127.0.0.1:4000") as db:
            await db.write("orders", [{"data": {"sku": "A1"}}])
            page = await db.diff("orders", from_seq=0)
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = 30.0,
        retry: RetryPolicy | bool = True,
        auto_idempotency_key: bool = True,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = make_settings(url, api_key, timeout_s, retry, auto_idempotency_key)
        self._http = httpx.AsyncClient(
            base_url=self.settings.base_url(),
            headers=self.settings.headers(),
            timeout=self.settings.timeout(),
            transport=transport,
        )

    @property
    def http(self) -> httpx.AsyncClient:
        """The underlying httpx client (for the streaming helpers)."""
        return self._http

    def sync_twin(self) -> Client:
        """A synchronous :class:`Client` with this client's settings (a new connection
        pool): for work the async client hands to a thread, such as saving a consumer
        group's cursor while an async watch runs."""
        s = self.settings
        return Client(s.url, s.api_key, timeout_s=s.timeout_s, retry=s.retry)

    async def aclose(self) -> None:
        """Close the connection pool. Idempotent."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def backup(self, file: str | BinaryIO) -> int:
        """Save an online backup of the server's data directory (``GET /v0/backup``, admin)
        to ``file``, a path (written as ``<path>.tmp``, then renamed) or a binary file;
        returns its length. Restore it with ``topics restore`` (docs/OPERATIONS.md).
        Not retried."""
        return await download_backup_async(self._http, self.settings, file)

    async def _run(self, call: p.Call[T]) -> T:
        """Send ``call``, retrying per the policy; return its parsed result or raise."""
        exchange = Exchange(call, self.settings)
        while True:
            failure: httpx.Response | httpx.TransportError
            try:
                resp = await self._http.request(call.method, call.path, **exchange.request)
            except httpx.TransportError as exc:
                failure = exc
            else:
                if resp.is_success:
                    return exchange.result(resp)
                failure = resp
            await anyio.sleep(exchange.wait_s(failure))

    async def ws(self) -> AsyncWebSocket:
        """Open the JSON WebSocket data plane (``/v0/ws``); see
        :class:`topics.client.AsyncWebSocket`."""
        from ._ws import AsyncWebSocket

        return await AsyncWebSocket.connect(self.settings)
