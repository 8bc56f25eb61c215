"""The Python client of a topics server (the /v0 HTTP API): sync and async.

:class:`Client` (blocking) and :class:`AsyncClient` (trio or asyncio) have the method
names, arguments and result types of the in-process API, so the same code runs embedded
(``topics.open(...)``) or remote (``topics.Client(url)``). Beyond the request/response
calls they offer the live parts of the API:

- ``client.watch(topics, ...)``: the SSE watch as an iterator of values that reconnects,
  resumes and can save its cursors (:class:`FileCursorStore`) across the consumer's own
  restarts (``docs/CLIENT.md``);
- ``client.work(queue, node=...)``: leased jobs with lease heartbeats, ack on success and
  nack with backoff on failure;
- ``client.ws()``: the JSON WebSocket data plane (publish/subscribe on one connection).

Errors are the :mod:`topics.errors` classes of the answer's ``error.code`` with the
request id as ``exc.request_id``; a server that cannot be reached is
:class:`ClientConnectionError`.
"""

from __future__ import annotations

from ._async import AsyncClient as AsyncClient
from ._aworker import AsyncLeasedJob as AsyncLeasedJob
from ._aworker import AsyncWorkIterator as AsyncWorkIterator
from ._cursor_store import CursorStore as CursorStore
from ._cursor_store import FileCursorStore as FileCursorStore
from ._cursor_store import MemoryCursorStore as MemoryCursorStore
from ._group import ConsumeStats as ConsumeStats
from ._group import ServerCursorStore as ServerCursorStore
from ._retry import RetryPolicy as RetryPolicy
from ._sync import Client as Client
from ._transport import ClientConnectionError as ClientConnectionError
from ._transport import request_id_of as request_id_of
from ._watch import AsyncWatchIterator as AsyncWatchIterator
from ._watch import WatchIterator as WatchIterator
from ._watch_state import WatchEventValue as WatchEventValue
from ._watch_state import WatchRecord as WatchRecord
from ._worker import LeasedJob as LeasedJob
from ._worker import WorkIterator as WorkIterator
from ._ws import AsyncWebSocket as AsyncWebSocket
from ._ws import WebSocket as WebSocket
from ._ws_types import Subscribed as Subscribed
from ._ws_types import Unsubscribed as Unsubscribed

__all__ = [
    "AsyncClient",
    "AsyncLeasedJob",
    "AsyncWatchIterator",
    "AsyncWebSocket",
    "AsyncWorkIterator",
    "Client",
    "ClientConnectionError",
    "ConsumeStats",
    "CursorStore",
    "FileCursorStore",
    "LeasedJob",
    "MemoryCursorStore",
    "RetryPolicy",
    "ServerCursorStore",
    "WatchEventValue",
    "WatchIterator",
    "WatchRecord",
    "Subscribed",
    "Unsubscribed",
    "WebSocket",
    "WorkIterator",
    "request_id_of",
]
