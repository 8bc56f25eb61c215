"""The synchronous HTTP client: :class:`topics.Client`.

Method names, arguments and result types are those of the in-process API
(``topics.open(...)`` / :class:`topics.SyncEngine`), so moving between embedded and
remote use is one line::

    db = topics.open("./data")                      # embedded
    db = topics.Client("http://127.0.0.1:4000")     # remote, same calls

Each method builds one :class:`~topics.client._protocol.Call` and :meth:`Client._run`
sends it: retries per :mod:`topics.client._retry`, errors per
:mod:`topics.client._transport`. One ``httpx.Client`` (a keep-alive pool) per client; it is
safe to share a client between threads.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

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
from ._retry import NO_RETRY, RETRY_STATUSES, RetryPolicy
from ._transport import (
    DEFAULT_URL,
    Settings,
    connection_error,
    error_from_response,
    new_request_id,
)

if TYPE_CHECKING:
    from ._cursor_store import CursorStore
    from ._group import ConsumeStats
    from ._watch import WatchIterator, WatchTopics
    from ._worker import WorkIterator
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


def write_options(
    settings: Settings,
    *,
    node: str | None,
    idempotency_key: str | None,
    create: bool | None,
    config: Mapping[str, Any] | None,
    return_seqs: bool,
    disable_backpressure: bool,
    dedupe: str | None = None,
    dedupe_ms: int | None = None,
    replace: bool | None = None,
    expected_head_seq: int | None = None,
    producer_id: str | None = None,
    epoch: int | None = None,
) -> dict[str, object]:
    """The write body's options; a fresh idempotency key unless one was given (or the
    client was told not to): one key per logical append, reused by its retries (so a
    retried compare-and-append whose first try did append answers ``deduped``, not
    ``head_mismatch``)."""
    if idempotency_key is None and settings.auto_idempotency_key:
        idempotency_key = uuid.uuid4().hex
    return {
        "node": node,
        "idempotency_key": idempotency_key,
        "create": create,
        "config": dict(config) if config is not None else None,
        "return_seqs": None if return_seqs else False,
        "disable_backpressure": True if disable_backpressure else None,
        "dedupe": dedupe,
        "dedupe_ms": dedupe_ms,
        "replace": replace,
        "expected_head_seq": expected_head_seq,
        "producer_id": producer_id,
        "epoch": epoch,
    }


def diff_args(
    from_seq: int,
    limit: int,
    node: str | Sequence[str] | None,
    include_tags: bool,
    include_meta: bool,
    include_data: bool,
    wait_ms: int,
    max_bytes: int,
) -> dict[str, object]:
    """The diff body: only what differs from the server's defaults."""
    args: dict[str, object] = {"from_seq": from_seq}
    if limit:
        args["limit"] = limit
    if node is not None:
        args["node"] = node if isinstance(node, str) else list(node)
    if include_tags:
        args["include_tags"] = True
    if not include_meta:
        args["include_meta"] = False
    if not include_data:
        args["include_data"] = False
    if wait_ms:
        args["wait_ms"] = wait_ms
    if max_bytes != DIFF_BYTE_BUDGET:
        args["max_batch_bytes"] = max_bytes
    return args


def bound_args(
    args: dict[str, object],
    from_ts: object,
    to_ts: object,
    to_seq: object,
    where: object,
    format: object,
    ce_type_field: object,
) -> None:
    """Issue 18's diff options, sent only when given (``from_ts`` replaces ``from_seq`` 0)."""
    if from_ts is not None:
        if args.get("from_seq") == 0:
            del args["from_seq"]
        args["from_ts"] = from_ts
    for name, value in (("to_ts", to_ts), ("to_seq", to_seq), ("where", where)):
        if value is not None:
            args[name] = list(value) if isinstance(value, tuple) else value
    if format != "records":
        args["format"] = format
    if ce_type_field is not None:
        args["ce_type_field"] = ce_type_field


def cursor_args(args: dict[str, object], cursor: str | None, commit: bool) -> None:
    """A diff from a named cursor: ``cursor`` replaces ``from_seq`` (0 is the default)."""
    if cursor is not None:
        if args.get("from_seq") == 0:
            del args["from_seq"]
        args["cursor"] = cursor
    if commit:
        args["commit"] = True


def parse_reply(call: p.Call[T], status: int, body: bytes, request_id: str | None) -> T:
    try:
        return call.parse(p.Reply(status, body, request_id))
    except (ValueError, KeyError, TypeError) as exc:
        err = TopicsError(f"malformed answer to {call.method} {call.path}: {exc!r}")
        err.__dict__["request_id"] = request_id
        raise err from None


class Client:
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

    # -- topics (§1) ------------------------------------------------------------------

    def put_topic(self, topic: str, config: Mapping[str, Any] | None = None) -> PutTopicResult:
        """Create a topic or change its config (idempotent upsert, §1.1).

        Raises: invalid_request, topic_exists_incompatible, throttled (max_topics).
        """
        return self._run(p.put_topic(topic, config))

    def get_topic(self, topic: str, *, touch: bool = True) -> TopicState:
        """Topic state (§1.2). Raises: topic_not_found."""
        return self._run(p.get_topic(topic, touch))

    def list_topics(
        self,
        *,
        prefix: str | None = None,
        page_size: int = 100,
        cursor: str | None = None,
        touch: bool = False,
    ) -> TopicPage:
        """One page of topics in name order (§1.3); ``next_cursor`` when more follow."""
        return self._run(p.list_topics(prefix, page_size, cursor, touch))

    def iter_topics(
        self, *, prefix: str | None = None, page_size: int = 1000
    ) -> Iterator[TopicSummary]:
        """Every topic summary, page after page (a convenience over :meth:`list_topics`)."""
        cursor: str | None = None
        while True:
            page = self.list_topics(prefix=prefix, page_size=page_size, cursor=cursor)
            yield from page.topics
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def delete_topic(self, topic: str, *, if_empty: bool = False) -> DeleteTopicResult:
        """Delete a topic and everything in it (§1.4). Raises: topic_not_empty."""
        return self._run(p.delete_topic(topic, if_empty))

    # -- records (§2, §3, §5) ---------------------------------------------------------

    def write(
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
        return self._run(p.write(topic, records, options))

    def diff(
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
        return self._run(p.diff(topic, args, wait_ms if isinstance(wait_ms, int) else 0))

    def delete_records(
        self, topic: str, *, before_seq: int | None = None, match: object = None
    ) -> DeleteRecordsResult:
        """Delete records by seq bound and/or tag match (§5; silent, no tombstone).

        Raises: invalid_request, topic_not_found.
        """
        return self._run(p.delete_records(topic, before_seq, match))

    # -- named cursors (consumer groups) ------------------------------------------------

    def put_cursor(
        self, topic: str, cursor: str, seq: int, *, expect_seq: int | None = None
    ) -> CursorInfo:
        """Commit ``seq`` to the named cursor; ``expect_seq`` makes it a compare-and-set.

        Raises: invalid_request (seq above the head), topic_not_found, cursor_conflict.
        """
        return self._run(p.put_cursor(topic, cursor, seq, expect_seq))

    def get_cursor(self, topic: str, cursor: str) -> CursorInfo:
        """One cursor with its lag. Raises: topic_not_found, cursor_not_found."""
        return self._run(p.get_cursor(topic, cursor))

    def list_cursors(self, topic: str) -> list[CursorInfo]:
        """Every cursor of ``topic`` with its lag. Raises: topic_not_found."""
        return self._run(p.list_cursors(topic))

    def delete_cursor(self, topic: str, cursor: str) -> DeleteCursorResult:
        """Forget a cursor (absent: ``deleted`` false). Raises: topic_not_found."""
        return self._run(p.delete_cursor(topic, cursor))

    def consume(
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
        from ._group import consume

        return consume(
            self, topic, group, handler,
            limit=limit, wait_ms=wait_ms, until_caught_up=until_caught_up,
        )  # fmt: skip

    # -- routers (§6) -----------------------------------------------------------------

    def put_router(self, router: str, body: Mapping[str, Any] | None = None) -> PutRouterResult:
        """Create or change a router (§6); an absent source (and dest, unless
        ``create_dest`` is false) is auto-created. Raises: invalid_request, topic_not_found
        (dest absent with create_dest false), router_cycle, topic_exists_incompatible,
        throttled."""
        return self._run(p.put_router(router, body))

    def get_router(self, router: str) -> RouterInfo:
        """A router's definition and forwarding state. Raises: router_not_found."""
        return self._run(p.get_router(router))

    def list_routers(
        self,
        *,
        prefix: str | None = None,
        source: str | None = None,
        dest: str | None = None,
        page_size: int = 100,
        cursor: str | None = None,
    ) -> RouterPage:
        """One page of routers in name order."""
        return self._run(p.list_routers(prefix, source, dest, page_size, cursor))

    def delete_router(self, router: str) -> DeleteRouterResult:
        """Stop and remove a router (copies already in dest stay)."""
        return self._run(p.delete_router(router))

    # -- queues (§10) -----------------------------------------------------------------

    def claim(
        self, topic: str, *, node: str, max: int = 1, lease_ms: int | None = None
    ) -> ClaimResult:
        """Lease up to ``max`` jobs to ``node`` (§10.2). Not retried after a lost answer.

        Raises: invalid_request, topic_not_found, not_a_queue, throttled.
        """
        return self._run(p.claim(topic, node, max, lease_ms))

    def ack(
        self,
        topic: str,
        *,
        node: str,
        seqs: Sequence[int],
        lease_ids: Sequence[str] | None = None,
    ) -> AckResult:
        """Complete (delete) jobs held by ``node`` (§10.4); others come back ``skipped``."""
        return self._run(p.ack(topic, node, seqs, lease_ids))

    def nack(
        self,
        topic: str,
        *,
        node: str,
        seqs: Sequence[int],
        delay_ms: int = 0,
        lease_ids: Sequence[str] | None = None,
    ) -> NackResult:
        """Release leases for reclaim after ``delay_ms`` (§10.5)."""
        return self._run(p.nack(topic, node, seqs, delay_ms, lease_ids))

    def extend(
        self,
        topic: str,
        *,
        node: str,
        seqs: Sequence[int],
        lease_ms: int,
        lease_ids: Sequence[str] | None = None,
    ) -> ExtendResult:
        """Set held leases to expire ``lease_ms`` from now (§10.6)."""
        return self._run(p.extend(topic, node, seqs, lease_ms, lease_ids))

    def schedule(
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
        return self.write(queue, [record], dedupe=dedupe, dedupe_ms=dedupe_ms, replace=replace)

    def redrive(
        self,
        topic: str,
        *,
        to: str | None = None,
        max: int | None = None,
        where: Mapping[str, Any] | None = None,
    ) -> RedriveResult:
        """Move dead-lettered jobs of ``topic`` back to their queue, or to ``to`` (admin).
        ``where``: ``{"origin": queue}`` and/or ``{"match": tag match}``. Not retried."""
        return self._run(p.redrive(topic, to, max, where))

    # -- probes (§8) ------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``GET /v0/health``: ``{"status": "ok", "version", "uptime_ms"}``."""
        return self._run(p.probe("/v0/health"))

    def ready(self) -> dict[str, Any]:
        """``GET /v0/ready``. Raises: not_ready, shutting_down (after retries)."""
        return self._run(p.probe("/v0/ready"))

    def metrics(self) -> dict[str, Any]:
        """``GET /v0/metrics`` as the JSON snapshot."""
        return self._run(p.metrics())

    # -- streams ----------------------------------------------------------------------

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
    ) -> WatchIterator:
        """Iterate over live records and loss events of ``topics`` (§7); see
        :class:`topics.client.WatchIterator`."""
        from ._watch import WatchIterator, WatchSpec

        spec = WatchSpec.build(topics, tail, node, heartbeat_ms, options)
        if group is not None:  # the group's named cursors are the store (_group.py)
            from ._group import ServerCursorStore

            cursor_store = ServerCursorStore(self, group, spec.starts)
        return WatchIterator(self, spec, cursor_store)

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
    ) -> WorkIterator:
        """Iterate over leased jobs of queue ``topic``; see :class:`topics.client.WorkIterator`."""
        from ._worker import WorkIterator, WorkSpec

        spec = WorkSpec(topic, node, max, lease_ms, backoff_ms, max_backoff_ms, stream, until_empty)
        return WorkIterator(self, spec)

    def run_worker(
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
        """Run ``handler`` on every job of queue ``topic`` until interrupted (or,
        ``until_empty``, drained); the remote twin of :func:`topics.run_worker`. A handler
        that raises gets its job nacked with backoff.

        Example::

            stats = client.run_worker("jobs", "w1", print, max=8, until_empty=True)
        """
        work = self.work(
            topic, node=node, max=max, lease_ms=lease_ms, backoff_ms=backoff_ms,
            max_backoff_ms=max_backoff_ms, until_empty=until_empty,
        )  # fmt: skip
        with work as jobs:
            for job in jobs:
                with job:
                    handler(job.job)
        return work.stats

    def ws(self) -> WebSocket:
        """Open the JSON WebSocket data plane (``/v0/ws``); see :class:`topics.client.WebSocket`."""
        from ._ws import WebSocket

        return WebSocket.connect(self.settings)
