"""The methods of :class:`topics.Client` and :class:`topics.AsyncClient`, declared once.

Method names, arguments and result types are those of the in-process API
(``topics.open(...)`` / :class:`topics.SyncEngine`). Each method here is written once, with
its signature and docstring, and returns a plan (:mod:`topics.client._twin`): one
:class:`~topics.client._protocol.Call` for a request, steps for what takes several
(:mod:`topics.consumer`), or a :class:`~topics.client._twin.Plan` for the live helpers.
The sync client runs the plan, the async one awaits it.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from operator import methodcaller
from typing import TYPE_CHECKING, Any

from topics._limits import DIFF_BYTE_BUDGET
from topics.consumer import Emit, consume_steps
from topics.cursor_types import CursorInfo, DeleteCursorResult
from topics.queue_types import (
    AckResult,
    ClaimResult,
    ExtendResult,
    Job,
    NackResult,
    RedriveResult,
    job_record,
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
from ._aworker import RunWorker, WorkPlan
from ._group import ConsumeStats
from ._options import bound_args, cursor_args, diff_args, write_options
from ._protocol import Call
from ._transport import Settings
from ._twin import Plan, Steps, Stream, Twin, plan, request, steps, stream
from ._watch import WatchPlan
from ._watch_state import WatchSpec
from ._worker import WorkSpec

if TYPE_CHECKING:
    from ._aworker import AsyncWorkIterator
    from ._cursor_store import CursorStore
    from ._watch import AsyncWatchIterator, WatchIterator, WatchTopics
    from ._worker import WorkIterator

__all__ = ["ClientAPI"]


def topic_summaries(prefix: str | None, page_size: int) -> Stream[TopicSummary]:
    """Every topic summary, page after page (``iter_topics``)."""
    cursor: str | None = None
    while True:
        page = yield methodcaller("list_topics", prefix=prefix, page_size=page_size, cursor=cursor)
        for summary in page.topics:
            yield Emit(summary)
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


class ClientAPI:
    """The /v0 methods both clients have (module docstring); a subclass says which driver
    it is: ``class Client(ClientAPI, driver="sync")``."""

    settings: Settings

    def __init_subclass__(cls, *, driver: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if driver not in ("sync", "async"):
            raise ValueError(f"driver must be 'sync' or 'async', not {driver!r}")
        for name, member in vars(ClientAPI).items():
            if isinstance(member, Twin):
                setattr(cls, name, member.method(cls, name, driver == "async"))

    # -- topics (§1) ------------------------------------------------------------------

    @request
    def put_topic(
        self, topic: str, config: Mapping[str, Any] | None = None
    ) -> Call[PutTopicResult]:
        """Create a topic or change its config (idempotent upsert, §1.1).

        Raises: invalid_request, topic_exists_incompatible, throttled (max_topics).
        """
        return p.put_topic(topic, config)

    @request
    def get_topic(self, topic: str, *, touch: bool = True) -> Call[TopicState]:
        """Topic state (§1.2). Raises: topic_not_found."""
        return p.get_topic(topic, touch)

    @request
    def list_topics(
        self,
        *,
        prefix: str | None = None,
        page_size: int = 100,
        cursor: str | None = None,
        touch: bool = False,
    ) -> Call[TopicPage]:
        """One page of topics in name order (§1.3); ``next_cursor`` when more follow."""
        return p.list_topics(prefix, page_size, cursor, touch)

    @stream
    def iter_topics(
        self, *, prefix: str | None = None, page_size: int = 1000
    ) -> Stream[TopicSummary]:
        """Every topic summary, page after page (a convenience over :meth:`list_topics`)."""
        return topic_summaries(prefix, page_size)

    @request
    def delete_topic(self, topic: str, *, if_empty: bool = False) -> Call[DeleteTopicResult]:
        """Delete a topic and everything in it (§1.4). Raises: topic_not_empty."""
        return p.delete_topic(topic, if_empty)

    # -- records (§2, §3, §5) ---------------------------------------------------------

    @request
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
    ) -> Call[WriteResult]:
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
        return p.write(topic, records, options)

    @request
    def diff(
        self,
        topic: str,
        *,
        from_seq: int = 0,
        limit: int = 0,
        node: str | Sequence[str] | None = None,
        include_tags: bool = True,
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
    ) -> Call[DiffResult]:
        """Records after ``from_seq`` with any tombstone (§3); ``wait_ms`` long-polls.
        ``cursor`` reads after a named cursor instead; ``commit`` commits the answer's
        ``next_from_seq`` to it on the server (at most once: never retried).
        ``from_ts`` (ms; instead of ``from_seq``), ``to_ts``/``to_seq`` (inclusive ends),
        ``where`` (a predicate), ``format="cloudevents"``: see ``Engine.diff``. Records
        carry their tags unless ``include_tags=False`` (sent explicitly: the wire's
        default is no tags).

        Raises: invalid_request, topic_not_found.
        """
        args = diff_args(
            from_seq, limit, node, include_tags, include_meta, include_data, wait_ms, max_bytes
        )
        cursor_args(args, cursor, commit)
        bound_args(args, from_ts, to_ts, to_seq, where, format, ce_type_field)
        return p.diff(topic, args, wait_ms if isinstance(wait_ms, int) else 0)

    @request
    def delete_records(
        self, topic: str, *, before_seq: int | None = None, match: object = None
    ) -> Call[DeleteRecordsResult]:
        """Delete records by seq bound and/or tag match (§5; silent, no tombstone).

        Raises: invalid_request, topic_not_found.
        """
        return p.delete_records(topic, before_seq, match)

    # -- named cursors (consumer groups) ------------------------------------------------

    @request
    def put_cursor(
        self, topic: str, cursor: str, seq: int, *, expect_seq: int | None = None
    ) -> Call[CursorInfo]:
        """Commit ``seq`` to the named cursor; ``expect_seq`` makes it a compare-and-set.

        Raises: invalid_request (seq above the head), topic_not_found, cursor_conflict.
        """
        return p.put_cursor(topic, cursor, seq, expect_seq)

    @request
    def get_cursor(self, topic: str, cursor: str) -> Call[CursorInfo]:
        """One cursor with its lag. Raises: topic_not_found, cursor_not_found."""
        return p.get_cursor(topic, cursor)

    @request
    def list_cursors(self, topic: str) -> Call[list[CursorInfo]]:
        """Every cursor of ``topic`` with its lag. Raises: topic_not_found."""
        return p.list_cursors(topic)

    @request
    def delete_cursor(self, topic: str, cursor: str) -> Call[DeleteCursorResult]:
        """Forget a cursor (absent: ``deleted`` false). Raises: topic_not_found."""
        return p.delete_cursor(topic, cursor)

    @steps
    def consume(
        self,
        topic: str,
        group: str,
        handler: Callable[[Record], Any],
        *,
        limit: int = 0,
        wait_ms: int = 5000,
        until_caught_up: bool = False,
    ) -> Steps[ConsumeStats]:
        """Run ``handler`` on every record after consumer group ``group``'s cursor,
        committing each batch once handled (at least once; topics.client._group)."""
        return consume_steps(
            topic, group, handler, limit=limit, wait_ms=wait_ms, until_caught_up=until_caught_up
        )

    # -- routers (§6) -----------------------------------------------------------------

    @request
    def put_router(
        self, router: str, body: Mapping[str, Any] | None = None
    ) -> Call[PutRouterResult]:
        """Create or change a router (§6); an absent source (and dest, unless
        ``create_dest`` is false) is auto-created. Raises: invalid_request, topic_not_found
        (dest absent with create_dest false), router_cycle, topic_exists_incompatible,
        throttled."""
        return p.put_router(router, body)

    @request
    def get_router(self, router: str) -> Call[RouterInfo]:
        """A router's definition and forwarding state. Raises: router_not_found."""
        return p.get_router(router)

    @request
    def list_routers(
        self,
        *,
        prefix: str | None = None,
        source: str | None = None,
        dest: str | None = None,
        page_size: int = 100,
        cursor: str | None = None,
    ) -> Call[RouterPage]:
        """One page of routers in name order."""
        return p.list_routers(prefix, source, dest, page_size, cursor)

    @request
    def delete_router(self, router: str) -> Call[DeleteRouterResult]:
        """Stop and remove a router (copies already in dest stay)."""
        return p.delete_router(router)

    # -- queues (§10) -----------------------------------------------------------------

    @request
    def claim(
        self, topic: str, *, node: str, max: int = 1, lease_ms: int | None = None
    ) -> Call[ClaimResult]:
        """Lease up to ``max`` jobs to ``node`` (§10.2). Not retried after a lost answer.

        Raises: invalid_request, topic_not_found, not_a_queue, throttled.
        """
        return p.claim(topic, node, max, lease_ms)

    @request
    def ack(
        self,
        topic: str,
        *,
        node: str,
        seqs: Sequence[int],
        lease_ids: Sequence[str] | None = None,
    ) -> Call[AckResult]:
        """Complete (delete) jobs held by ``node`` (§10.4); others come back ``skipped``."""
        return p.ack(topic, node, seqs, lease_ids)

    @request
    def nack(
        self,
        topic: str,
        *,
        node: str,
        seqs: Sequence[int],
        delay_ms: int = 0,
        lease_ids: Sequence[str] | None = None,
    ) -> Call[NackResult]:
        """Release leases for reclaim after ``delay_ms`` (§10.5)."""
        return p.nack(topic, node, seqs, delay_ms, lease_ids)

    @request
    def extend(
        self,
        topic: str,
        *,
        node: str,
        seqs: Sequence[int],
        lease_ms: int,
        lease_ids: Sequence[str] | None = None,
    ) -> Call[ExtendResult]:
        """Set held leases to expire ``lease_ms`` from now (§10.6)."""
        return p.extend(topic, node, seqs, lease_ms, lease_ids)

    @request
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
    ) -> Call[WriteResult]:
        """Enqueue one job, claimable at ``deliver_at`` (epoch ms) or ``delay_ms`` from
        now (neither: at once), optionally under a ``dedupe_key``; a write of one record
        (retried under one idempotency key). ``result.dedupe`` names a holder that kept
        it out, or the job it replaced."""
        record = job_record(
            data,
            deliver_at=deliver_at,
            delay_ms=delay_ms,
            dedupe_key=dedupe_key,
            tag=tag,
            meta=meta,
        )
        options = write_options(self.settings, dedupe=dedupe, dedupe_ms=dedupe_ms, replace=replace)
        return p.write(queue, [record], options)

    @request
    def redrive(
        self,
        topic: str,
        *,
        to: str | None = None,
        max: int | None = None,
        where: Mapping[str, Any] | None = None,
    ) -> Call[RedriveResult]:
        """Move dead-lettered jobs of ``topic`` back to their queue, or to ``to`` (admin).
        ``where``: ``{"origin": queue}`` and/or ``{"match": tag match}``. Not retried."""
        return p.redrive(topic, to, max, where)

    # -- probes (§8) ------------------------------------------------------------------

    @request
    def health(self) -> Call[dict[str, Any]]:
        """``GET /v0/health``: ``{"status": "ok", "version", "uptime_ms"}``."""
        return p.probe("/v0/health")

    @request
    def ready(self) -> Call[dict[str, Any]]:
        """``GET /v0/ready``. Raises: not_ready, shutting_down (after retries)."""
        return p.probe("/v0/ready")

    @request
    def metrics(self) -> Call[dict[str, Any]]:
        """``GET /v0/metrics`` as the JSON snapshot."""
        return p.metrics()

    # -- streams ----------------------------------------------------------------------

    @plan(
        awaited=False,
        aio_doc="""Iterate (``async for``) over live records and loss events of ``topics`` (§7); see
        :class:`topics.client.AsyncWatchIterator`. ``wait_for_topic``: a named topic that
        does not exist yet is waited for (then read from its first record) instead of
        raising ``topic_not_found``, as ``topics tail --wait`` does.""",
    )
    def watch(
        self,
        /,
        topics: WatchTopics,
        *,
        tail: bool = False,
        node: str | None = None,
        cursor_store: CursorStore | None = None,
        heartbeat_ms: int = 15_000,
        group: str | None = None,
        wait_for_topic: bool = False,
        **options: Any,
    ) -> Plan[WatchIterator, AsyncWatchIterator]:
        """Iterate over live records and loss events of ``topics`` (§7); see
        :class:`topics.client.WatchIterator`. ``wait_for_topic``: a named topic that does
        not exist yet is waited for (then read from its first record) instead of raising
        ``topic_not_found``, as ``topics tail --wait`` does."""
        spec = WatchSpec.build(topics, tail, node, heartbeat_ms, options, wait_for_topic)
        return WatchPlan(spec, cursor_store, group)

    @plan(
        awaited=False,
        aio_doc="""Leased jobs of queue ``topic``: ``async with client.work(...) as jobs``; see
        :class:`topics.client.AsyncWorkIterator`.""",
    )
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
    ) -> Plan[WorkIterator, AsyncWorkIterator]:
        """Iterate over leased jobs of queue ``topic``; see :class:`topics.client.WorkIterator`."""
        spec = WorkSpec(topic, node, max, lease_ms, backoff_ms, max_backoff_ms, stream, until_empty)
        return WorkPlan(spec)

    @plan(
        awaited=True,
        aio_doc="""Run ``handler`` (a function or coroutine function) on every job of queue
        ``topic`` until cancelled (or, ``until_empty``, drained); the remote twin of
        :func:`topics.run_worker`. A handler that raises gets its job nacked with backoff.""",
    )
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
    ) -> Plan[WorkerStats, Coroutine[Any, Any, WorkerStats]]:
        """Run ``handler`` on every job of queue ``topic`` until interrupted (or,
        ``until_empty``, drained); the remote twin of :func:`topics.run_worker`. A handler
        that raises gets its job nacked with backoff.

        Example::

            stats = client.run_worker("jobs", "w1", print, max=8, until_empty=True)
        """
        spec = WorkSpec(topic, node, max, lease_ms, backoff_ms, max_backoff_ms, None, until_empty)
        return RunWorker(spec, handler)
