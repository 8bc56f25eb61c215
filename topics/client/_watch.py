"""``client.watch(...)``: the SSE watch stream as a (sync or async) iterator of values.

The decisions live in :mod:`topics.client._watch_state`; this module only moves bytes:
POST /v0/watch, GET the stream, feed chunks, hand items to the consumer, save commits,
sleep between attempts. The loop reconnects for as long as the consumer iterates: across
dropped connections, watchdog expiries and server restarts (re-creating the session when
it is gone). It ends only when every watched topic was deleted, or with an error that no
retry can fix (a 4xx such as ``topic_not_found`` or ``unauthorized``). With
``wait_for_topic=True`` a named topic that does not exist yet is waited for first
(:mod:`topics.client._topic_wait`) instead of ending it with ``topic_not_found``.

Example::

    store = FileCursorStore("orders.cursor")
    with client.watch(["orders"], cursor_store=store) as events:
        for ev in events:
            if isinstance(ev, WatchRecord):
                handle(ev.record)
            elif isinstance(ev, TombstoneEvent):
                resync(ev.tombstone)          # records were lost: never silent
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import httpx

from topics.consumer import adrive, drive
from topics.errors import TopicsError

from ._cursor_store import CursorStore, MemoryCursorStore
from ._group import ServerCursorStore
from ._retry import RETRY_STATUSES
from ._topic_wait import wait_for_topics
from ._transport import error_from_response
from ._watch_state import Commit, WatchEventValue, WatchSpec, WatchState, WatchTopics

if TYPE_CHECKING:
    from ._client_like import AsyncClientLike, ClientLike

__all__ = ["AsyncWatchIterator", "WatchIterator", "WatchPlan", "WatchSpec", "WatchTopics"]

_GONE = (404, 410)


def _retryable(exc: TopicsError) -> bool:
    return getattr(exc, "http_status", exc.status) in RETRY_STATUSES or exc.status == 0


def _stream_timeout(client_timeout_s: float, watchdog_s: float) -> httpx.Timeout:
    return httpx.Timeout(client_timeout_s, read=watchdog_s)


class _Base:
    def __init__(self, spec: WatchSpec, store: CursorStore | None) -> None:
        self._store = store
        self._state = WatchState(spec, store.load() if store is not None else None)

    @property
    def cursors(self) -> dict[str, int]:
        """The committed per-topic cursors (what the consumer has fully taken)."""
        return dict(self._state.committed)

    @property
    def wid(self) -> str | None:
        """The current watch session id (None between sessions)."""
        return self._state.wid

    def _failed_status(self, resp: httpx.Response, body: bytes) -> bool:
        """Decide about a stream GET that did not open: True to retry, else raise."""
        if resp.status_code in _GONE:
            self._state.session_gone()
            return True
        err = error_from_response(resp.status_code, resp.headers, body)
        if resp.status_code not in RETRY_STATUSES:
            raise err
        self._state.pause_s = max(self._state.pause_s, err.retry_after or 0.0)
        return True


class WatchIterator(_Base):
    """Iterator over a watch (sync). Yields :class:`WatchRecord`,
    :class:`~topics.watch_types.TombstoneEvent`, :class:`~topics.watch_types.CaughtUpEvent`,
    :class:`~topics.watch_types.TopicDeletedEvent`, and for prefix watches and
    ``max_backlog`` :class:`~topics.watch_types.TopicAddedEvent` and
    :class:`~topics.watch_types.BacklogExceededEvent` values; close it (or use ``with``)
    to end the stream."""

    def __init__(self, client: ClientLike, spec: WatchSpec, store: CursorStore | None) -> None:
        super().__init__(spec, store)
        self._client = client
        self._gen = self._run()

    def __iter__(self) -> Iterator[WatchEventValue]:
        return self

    def __next__(self) -> WatchEventValue:
        return next(self._gen)

    def close(self) -> None:
        self._gen.close()

    def __enter__(self) -> WatchIterator:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _commit(self, marker: Commit) -> None:
        cursors = self._state.commit(marker)
        if self._store is not None:
            self._store.save(cursors)

    def _create(self) -> bool:
        try:
            answer = self._client._run(self._state.create_call())
        except TopicsError as exc:
            if not _retryable(exc):
                raise
            return False
        self._state.on_created(answer)
        return True

    def _run(self) -> Generator[WatchEventValue, None, None]:
        state = self._state
        if state.spec.wait_for_topic:  # _watch_state rule 8
            state.spec.appeared(drive(self._client, wait_for_topics(state.spec.starts)))
        http = self._client.http
        timeout = _stream_timeout(self._client.settings.timeout_s, state.watchdog_s)
        while state.active:
            fresh = state.wid is None
            if fresh and not self._create():
                time.sleep(state.reconnect_delay_s(failed=True))
                continue
            if not state.active or state.stream_path is None:
                return
            opened = False
            try:
                with http.stream(
                    "GET", state.stream_path, headers=state.stream_headers(), timeout=timeout
                ) as resp:
                    if not resp.is_success:
                        self._failed_status(resp, resp.read())
                        if state.wid is None and not fresh:
                            continue  # the session is gone: re-create it at once
                    else:
                        state.stream_opened()
                        opened = True
                        for chunk in resp.iter_bytes():
                            for item in state.feed(chunk):
                                if isinstance(item, Commit):
                                    self._commit(item)
                                else:
                                    yield item
                            if state.wid is None or not state.active:
                                break
            except httpx.TransportError:
                pass  # dropped, refused, or the watchdog fired: reconnect
            if not state.active or (state.wid is None and opened):
                continue  # all topics gone, or an in-stream 410: re-create at once
            time.sleep(state.reconnect_delay_s(failed=not opened))


class AsyncWatchIterator(_Base):
    """Async iterator over a watch (trio or asyncio); the same values as
    :class:`WatchIterator`. Use ``async with`` (or call :meth:`aclose`) to end it."""

    def __init__(self, client: AsyncClientLike, spec: WatchSpec, store: CursorStore | None) -> None:
        super().__init__(spec, store)
        self._client = client
        self._gen = self._run()

    def __aiter__(self) -> AsyncIterator[WatchEventValue]:
        return self

    async def __anext__(self) -> WatchEventValue:
        return await self._gen.__anext__()

    async def aclose(self) -> None:
        await self._gen.aclose()

    async def __aenter__(self) -> AsyncWatchIterator:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    async def _commit(self, marker: Commit) -> None:
        cursors = self._state.commit(marker)
        if isinstance(self._store, MemoryCursorStore):
            self._store.save(cursors)
        elif self._store is not None:
            # A file store fsyncs: keep that off the event loop.
            await anyio.to_thread.run_sync(self._store.save, cursors)

    async def _create(self) -> bool:
        try:
            answer = await self._client._run(self._state.create_call())
        except TopicsError as exc:
            if not _retryable(exc):
                raise
            return False
        self._state.on_created(answer)
        return True

    async def _run(self) -> AsyncGenerator[WatchEventValue, None]:
        state = self._state
        if state.spec.wait_for_topic:
            state.spec.appeared(await adrive(self._client, wait_for_topics(state.spec.starts)))
        http = self._client.http
        timeout = _stream_timeout(self._client.settings.timeout_s, state.watchdog_s)
        while state.active:
            fresh = state.wid is None
            if fresh and not await self._create():
                await anyio.sleep(state.reconnect_delay_s(failed=True))
                continue
            if not state.active or state.stream_path is None:
                return
            opened = False
            try:
                async with http.stream(
                    "GET", state.stream_path, headers=state.stream_headers(), timeout=timeout
                ) as resp:
                    if not resp.is_success:
                        self._failed_status(resp, await resp.aread())
                        if state.wid is None and not fresh:
                            continue
                    else:
                        state.stream_opened()
                        opened = True
                        async for chunk in resp.aiter_bytes():
                            for item in state.feed(chunk):
                                if isinstance(item, Commit):
                                    await self._commit(item)
                                else:
                                    yield item
                            if state.wid is None or not state.active:
                                break
            except httpx.TransportError:
                pass
            if not state.active or (state.wid is None and opened):
                continue
            await anyio.sleep(state.reconnect_delay_s(failed=not opened))


@dataclass(frozen=True, slots=True)
class WatchPlan:
    """``client.watch(...)``'s plan: the spec and where its cursors are kept (a group's
    named cursors on the server, or ``store``)."""

    spec: WatchSpec
    store: CursorStore | None
    group: str | None

    def sync(self, client: ClientLike) -> WatchIterator:
        return WatchIterator(client, self.spec, self._store(client))

    def aio(self, client: AsyncClientLike) -> AsyncWatchIterator:
        store = self.store
        if self.group is not None:
            # The async watch saves in a thread, through a synchronous twin of the client.
            store = self._store(client.sync_twin())
        return AsyncWatchIterator(client, self.spec, store)

    def _store(self, client: ClientLike) -> CursorStore | None:
        if self.group is None:
            return self.store
        return ServerCursorStore(client, self.group, self.spec.starts)
