"""The async HTTP client: :class:`topics.AsyncClient` (trio or asyncio, through httpx/anyio).

The twin of :class:`topics.Client` (``_sync.py``): the same calls from
:mod:`topics.client._protocol`, the same retries and errors, awaited. Method names,
arguments and result types are those of the in-process API.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import httpx

from topics._limits import DIFF_BYTE_BUDGET
from topics.cursor_types import CursorInfo, DeleteCursorResult
from topics.errors import TopicsError
from topics.queue_types import (
    AckResult,
    ClaimResult,
    ExtendResult,
    Job,
    NackResult,
    RedriveResult,
)
from topics.router_types import DeleteRouterResult, PutRouterResult, RouterInfo, RouterPage
from topics.types import (
    DeleteRecordsResult,
    DeleteTopicResult,
    DiffResult,
    PutTopicResult,
    Record,
    TopicPage,
    TopicState,
    TopicSummary,
    WriteResult,
)
from topics.worker import WorkerStats

from . import _protocol as p
from ._retry import RETRY_STATUSES, RetryPolicy
from ._sync import (
    bound_args,
    cursor_args,
    diff_args,
    make_settings,
    parse_reply,
    write_options,
)
from ._transport import connection_error, error_from_response, new_request_id

if TYPE_CHECKING:
    from ._aworker import AsyncWorkIterator
    from ._cursor_store import CursorStore
    from ._group import ConsumeStats
    from ._sync import Client
    from ._watch import AsyncWatchIterator, WatchTopics
    from ._ws import AsyncWebSocket

__all__ = ["AsyncClient"]

T = TypeVar("T")


class AsyncClient:
    """An async client of a topics server (the /v0 HTTP API), under trio or asyncio.

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

    async def _run(self, call: p.Call[T]) -> T:
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
                resp = await self._http.request(
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
            await anyio.sleep(delay)

    # -- topics (§1) ------------------------------------------------------------------

    async def put_topic(
        self, topic: str, config: Mapping[str, Any] | None = None
    ) -> PutTopicResult:
        """Create a topic or change its config (idempotent upsert, §1.1).

        Raises: invalid_request, topic_exists_incompatible, throttled (max_topics).
        """
        return await self._run(p.put_topic(topic, config))

    async def get_topic(self, topic: str, *, touch: bool = True) -> TopicState:
        """Topic state (§1.2). Raises: topic_not_found."""
        return await self._run(p.get_topic(topic, touch))

    async def list_topics(
        self,
        *,
        prefix: str | None = None,
        page_size: int = 100,
        cursor: str | None = None,
        touch: bool = False,
    ) -> TopicPage:
        """One page of topics in name order (§1.3); ``next_cursor`` when more follow."""
        return await self._run(p.list_topics(prefix, page_size, cursor, touch))

    async def iter_topics(
        self, *, prefix: str | None = None, page_size: int = 1000
    ) -> AsyncIterator[TopicSummary]:
        """Every topic summary, page after page (a convenience over :meth:`list_topics`)."""
        cursor: str | None = None
        while True:
            page = await self.list_topics(prefix=prefix, page_size=page_size, cursor=cursor)
            for summary in page.topics:
                yield summary
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def delete_topic(self, topic: str, *, if_empty: bool = False) -> DeleteTopicResult:
        """Delete a topic and everything in it (§1.4). Raises: topic_not_empty."""
        return await self._run(p.delete_topic(topic, if_empty))

    # -- records (§2, §3, §5) ---------------------------------------------------------

    async def write(
        self,
        topic: str,
        records: Sequence[Mapping[str, Any]],
        *,
        node: str | None = None,
        idempotency_key: str | None = None,
        create: bool | None = None,
        config: Mapping[str, Any] | None = None,
        return_seqs: bool = True,
        disable_backpressure: bool = False,
        dedupe: str | None = None,
        dedupe_ms: int | None = None,
        replace: bool | None = None,
        expected_head_seq: int | None = None,
        producer_id: str | None = None,
        epoch: int | None = None,
    ) -> WriteResult:
        """Append a batch atomically (§2). ``data``/``meta`` given as bytes are JSON text,
        sent verbatim. On a queue, a record may carry ``deliver_at``/``delay_ms`` (a
        scheduled job) and ``dedupe_key``; ``dedupe``/``dedupe_ms``/``replace`` say how
        the keys hold (docs/QUEUES.md; see also :meth:`schedule`).

        Retried (on 429/503 or a lost connection) under one idempotency key, so a retry
        never appends twice: ``deduped`` is then true and the seqs are the original ones.
        ``expected_head_seq`` appends only if the topic's head is exactly that
        (compare-and-append); ``producer_id`` + ``epoch`` fence older instances of a
        producer (docs/GUIDES.md, "Exactly-once producers").

        Raises: invalid_request, batch_too_large, record_too_large, topic_not_found,
        topic_full, payload_too_large, throttled, head_mismatch (``detail.head_seq``),
        producer_fenced (``detail.current_epoch``).
        """
        options = write_options(
            self.settings,
            node=node,
            idempotency_key=idempotency_key,
            create=create,
            config=config,
            return_seqs=return_seqs,
            disable_backpressure=disable_backpressure,
            dedupe=dedupe,
            dedupe_ms=dedupe_ms,
            replace=replace,
            expected_head_seq=expected_head_seq,
            producer_id=producer_id,
            epoch=epoch,
        )
        return await self._run(p.write(topic, records, options))

    async def diff(
        self,
        topic: str,
        *,
        from_seq: int = 0,
        limit: int = 0,
        node: str | Sequence[str] | None = None,
        include_tags: bool = False,
        include_meta: bool = True,
        include_data: bool = True,
        wait_ms: int = 0,
        max_bytes: int = DIFF_BYTE_BUDGET,
        cursor: str | None = None,
        commit: bool = False,
        from_ts: int | None = None,
        to_ts: int | None = None,
        to_seq: int | None = None,
        where: object = None,
        format: str = "records",
        ce_type_field: str | None = None,
    ) -> DiffResult:
        """Records after ``from_seq`` with any tombstone (§3); ``wait_ms`` long-polls.
        ``cursor`` reads after a named cursor instead; ``commit`` commits the answer's
        ``next_from_seq`` to it on the server (at most once: never retried).
        ``from_ts`` (ms; instead of ``from_seq``), ``to_ts``/``to_seq`` (inclusive ends),
        ``where`` (a predicate), ``format="cloudevents"``: see ``Engine.diff``.

        Raises: invalid_request, topic_not_found.
        """
        args = diff_args(
            from_seq, limit, node, include_tags, include_meta, include_data, wait_ms, max_bytes
        )
        cursor_args(args, cursor, commit)
        bound_args(args, from_ts, to_ts, to_seq, where, format, ce_type_field)
        return await self._run(p.diff(topic, args, wait_ms if isinstance(wait_ms, int) else 0))

    async def delete_records(
        self, topic: str, *, before_seq: int | None = None, match: object = None
    ) -> DeleteRecordsResult:
        """Delete records by seq bound and/or tag match (§5; silent, no tombstone).

        Raises: invalid_request, topic_not_found.
        """
        return await self._run(p.delete_records(topic, before_seq, match))

    # -- named cursors (consumer groups) ------------------------------------------------

    async def put_cursor(
        self, topic: str, cursor: str, seq: int, *, expect_seq: int | None = None
    ) -> CursorInfo:
        """Commit ``seq`` to the named cursor; ``expect_seq`` makes it a compare-and-set.

        Raises: invalid_request (seq above the head), topic_not_found, cursor_conflict.
        """
        return await self._run(p.put_cursor(topic, cursor, seq, expect_seq))

    async def get_cursor(self, topic: str, cursor: str) -> CursorInfo:
        """One cursor with its lag. Raises: topic_not_found, cursor_not_found."""
        return await self._run(p.get_cursor(topic, cursor))

    async def list_cursors(self, topic: str) -> list[CursorInfo]:
        """Every cursor of ``topic`` with its lag. Raises: topic_not_found."""
        return await self._run(p.list_cursors(topic))

    async def delete_cursor(self, topic: str, cursor: str) -> DeleteCursorResult:
        """Forget a cursor (absent: ``deleted`` false). Raises: topic_not_found."""
        return await self._run(p.delete_cursor(topic, cursor))

    async def consume(
        self,
        topic: str,
        group: str,
        handler: Callable[[Record], Any],
        *,
        limit: int = 0,
        wait_ms: int = 5000,
        until_caught_up: bool = False,
    ) -> ConsumeStats:
        """Run ``handler`` on every record after consumer group ``group``'s cursor,
        committing each batch once handled (at least once; topics.client._group)."""
        from ._group import aconsume

        return await aconsume(
            self, topic, group, handler,
            limit=limit, wait_ms=wait_ms, until_caught_up=until_caught_up,
        )  # fmt: skip

    # -- routers (§6) -----------------------------------------------------------------

    async def put_router(
        self, router: str, body: Mapping[str, Any] | None = None
    ) -> PutRouterResult:
        """Create or change a router (§6); an absent source (and dest, unless
        ``create_dest`` is false) is auto-created. Raises: invalid_request, topic_not_found
        (dest absent with create_dest false), router_cycle, topic_exists_incompatible,
        throttled."""
        return await self._run(p.put_router(router, body))

    async def get_router(self, router: str) -> RouterInfo:
        """A router's definition and forwarding state. Raises: router_not_found."""
        return await self._run(p.get_router(router))

    async def list_routers(
        self,
        *,
        prefix: str | None = None,
        source: str | None = None,
        dest: str | None = None,
        page_size: int = 100,
        cursor: str | None = None,
    ) -> RouterPage:
        """One page of routers in name order."""
        return await self._run(p.list_routers(prefix, source, dest, page_size, cursor))

    async def delete_router(self, router: str) -> DeleteRouterResult:
        """Stop and remove a router (copies already in dest stay)."""
        return await self._run(p.delete_router(router))

    # -- queues (§10) -----------------------------------------------------------------

    async def claim(
        self, topic: str, *, node: str, max: int = 1, lease_ms: int | None = None
    ) -> ClaimResult:
        """Lease up to ``max`` jobs to ``node`` (§10.2). Not retried after a lost answer.

        Raises: invalid_request, topic_not_found, not_a_queue, throttled.
        """
        return await self._run(p.claim(topic, node, max, lease_ms))

    async def ack(
        self,
        topic: str,
        *,
        node: str,
        seqs: Sequence[int],
        lease_ids: Sequence[str] | None = None,
    ) -> AckResult:
        """Complete (delete) jobs held by ``node`` (§10.4); others come back ``skipped``."""
        return await self._run(p.ack(topic, node, seqs, lease_ids))

    async def nack(
        self,
        topic: str,
        *,
        node: str,
        seqs: Sequence[int],
        delay_ms: int = 0,
        lease_ids: Sequence[str] | None = None,
    ) -> NackResult:
        """Release leases for reclaim after ``delay_ms`` (§10.5)."""
        return await self._run(p.nack(topic, node, seqs, delay_ms, lease_ids))

    async def extend(
        self,
        topic: str,
        *,
        node: str,
        seqs: Sequence[int],
        lease_ms: int,
        lease_ids: Sequence[str] | None = None,
    ) -> ExtendResult:
        """Set held leases to expire ``lease_ms`` from now (§10.6)."""
        return await self._run(p.extend(topic, node, seqs, lease_ms, lease_ids))

    async def schedule(
        self,
        queue: str,
        data: Any,
        *,
        deliver_at: int | None = None,
        delay_ms: int | None = None,
        dedupe_key: str | None = None,
        dedupe: str | None = None,
        dedupe_ms: int | None = None,
        replace: bool | None = None,
        tag: str | None = None,
        meta: Mapping[str, Any] | bytes | None = None,
    ) -> WriteResult:
        """Enqueue one job, claimable at ``deliver_at`` (epoch ms) or ``delay_ms`` from
        now (neither: at once), optionally under a ``dedupe_key``; a write of one record
        (retried under one idempotency key). ``result.dedupe`` names a holder that kept
        it out, or the job it replaced."""
        record = p.job_record(
            data,
            deliver_at=deliver_at,
            delay_ms=delay_ms,
            dedupe_key=dedupe_key,
            tag=tag,
            meta=meta,
        )
        return await self.write(
            queue, [record], dedupe=dedupe, dedupe_ms=dedupe_ms, replace=replace
        )

    async def redrive(
        self,
        topic: str,
        *,
        to: str | None = None,
        max: int | None = None,
        where: Mapping[str, Any] | None = None,
    ) -> RedriveResult:
        """Move dead-lettered jobs of ``topic`` back to their queue, or to ``to`` (admin).
        ``where``: ``{"origin": queue}`` and/or ``{"match": tag match}``. Not retried."""
        return await self._run(p.redrive(topic, to, max, where))

    # -- probes (§8) ------------------------------------------------------------------

    async def health(self) -> dict[str, Any]:
        """``GET /v0/health``: ``{"status": "ok", "version", "uptime_ms"}``."""
        return await self._run(p.probe("/v0/health"))

    async def ready(self) -> dict[str, Any]:
        """``GET /v0/ready``. Raises: not_ready, shutting_down (after retries)."""
        return await self._run(p.probe("/v0/ready"))

    async def metrics(self) -> dict[str, Any]:
        """``GET /v0/metrics`` as the JSON snapshot."""
        return await self._run(p.metrics())

    # -- streams ----------------------------------------------------------------------

    def _group_client(self) -> Client:
        """A synchronous twin for a group's cursor store (the watch saves in a thread)."""
        from ._sync import Client

        s = self.settings
        return Client(s.url, s.api_key, timeout_s=s.timeout_s, retry=s.retry)

    def watch(
        self,
        topics: WatchTopics,
        *,
        tail: bool = False,
        node: str | None = None,
        cursor_store: CursorStore | None = None,
        heartbeat_ms: int = 15_000,
        group: str | None = None,
        **options: Any,
    ) -> AsyncWatchIterator:
        """Iterate (``async for``) over live records and loss events of ``topics`` (§7); see
        :class:`topics.client.AsyncWatchIterator`."""
        from ._watch import AsyncWatchIterator, WatchSpec

        spec = WatchSpec.build(topics, tail, node, heartbeat_ms, options)
        if group is not None:  # the group's named cursors are the store (_group.py)
            from ._group import ServerCursorStore

            cursor_store = ServerCursorStore(self._group_client(), group, spec.starts)
        return AsyncWatchIterator(self, spec, cursor_store)

    def work(
        self,
        topic: str,
        *,
        node: str,
        max: int = 1,
        lease_ms: int | None = None,
        backoff_ms: int = 1000,
        max_backoff_ms: int = 60_000,
        stream: bool | None = None,
        until_empty: bool = False,
    ) -> AsyncWorkIterator:
        """Leased jobs of queue ``topic``: ``async with client.work(...) as jobs``; see
        :class:`topics.client.AsyncWorkIterator`."""
        from ._aworker import AsyncWorkIterator
        from ._worker import WorkSpec

        spec = WorkSpec(topic, node, max, lease_ms, backoff_ms, max_backoff_ms, stream, until_empty)
        return AsyncWorkIterator(self, spec)

    async def run_worker(
        self,
        topic: str,
        node: str,
        handler: Callable[[Job], Any],
        *,
        max: int = 1,
        lease_ms: int | None = None,
        until_empty: bool = False,
        backoff_ms: int = 1000,
        max_backoff_ms: int = 60_000,
    ) -> WorkerStats:
        """Run ``handler`` (a function or coroutine function) on every job of queue
        ``topic`` until cancelled (or, ``until_empty``, drained); the remote twin of
        :func:`topics.run_worker`. A handler that raises gets its job nacked with backoff."""
        work = self.work(
            topic, node=node, max=max, lease_ms=lease_ms, backoff_ms=backoff_ms,
            max_backoff_ms=max_backoff_ms, until_empty=until_empty,
        )  # fmt: skip
        async with work as jobs:
            async for job in jobs:
                async with job:
                    outcome = handler(job.job)
                    if inspect.isawaitable(outcome):
                        await outcome
        return work.stats

    async def ws(self) -> AsyncWebSocket:
        """Open the JSON WebSocket data plane (``/v0/ws``); see
        :class:`topics.client.AsyncWebSocket`."""
        from ._ws import AsyncWebSocket

        return await AsyncWebSocket.connect(self.settings)
