"""The write path behind ``Engine.write`` (contract §2; docs/SEMANTICS.md rule 18).

``Engine.write`` is :meth:`Writes.write` (topics/_facade.py): its signature and docstring
are the API reference. This module owns the machinery: the argument checks, the
idempotency key's dedupe hit, producer fencing (topics/ops/producers.py), the glue to a
queue's job plan (topics/queues/job_ops.py), the append and the result.

Rules:
1. Every argument is checked before the first mutation (engine rule 2), and from the
   topic lookup to the append there is no await unless the durable reservation needs one
   (the clock is then read again): the conditions checked hold for the append they guard.
2. A write that appends nothing (a dedupe hit, or a queue write whose every job is a
   held duplicate) still fences older epochs of its producer, with a PRODUCER entry of
   its own. These rare answers are methods of their own so the common path stays short.
3. The hot path reads the appender's and the durability's methods bound once here, as the
   Engine did; the plain write (no producer, no idempotency key, a log topic) pays for
   none of the options it does not use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace as replace_fields
from typing import TYPE_CHECKING, Any

from .. import _args
from .._meta_keys import ServerMeta, check_client_meta
from .._names import check_topic_name
from ..errors import InvalidRequestError
from ..log.producer_state import ProducerClaim, ProducerState
from ..log.topic_log import DedupeEntry
from ..types import WriteResult
from .producers import check_expected_head, check_producer, producer_arg

if TYPE_CHECKING:
    from .._persistence.appender import Appender
    from ..log.topic_log import TopicLog
    from ..queues.job_ops import JobOps, JobPlan
    from .durability import Durability

__all__ = ["IDEMPOTENCY_KEY_MAX_CHARS", "Writes"]

IDEMPOTENCY_KEY_MAX_CHARS = 256


class Writes:
    """``Engine.write`` over the appender, the durability and the job options."""

    def __init__(self, appender: Appender, durability: Durability, job_ops: JobOps) -> None:
        self._app = appender
        self.clock = appender.clock
        self.limits = appender.limits
        self._job_ops = job_ops
        # Bound once: every write calls most of these.
        self._check_serving = appender.check_serving
        self._topic_for_write = appender.topic_for_write
        self._append_batch = appender.append_batch
        self._wait = appender.wait
        self._log_append = durability.log_append
        self._reserved = durability.reserved
        self._reserve = durability.reserve
        self._job_write_args = job_ops.job_write_args

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
        expected_head_seq: int | None = None,
        producer_id: str | None = None,
        epoch: int | None = None,
        dedupe: str | None = None,
        dedupe_ms: int | None = None,
        replace: bool | None = None,
    ) -> WriteResult:
        """Append a batch atomically (§2); checks in the order of docs/SEMANTICS.md rule 18.

        Args:
            records: mappings with "data" (any JSON value, or bytes of JSON text) and
                optional "tag", "node", "meta".
            expected_head_seq: append only if the topic's ``head_seq`` is exactly this
                (0 for an absent topic this write creates); compare-and-append.
            producer_id, epoch: fence older instances of this producer (both or neither):
                a write with an epoch below the highest one the topic has seen for
                ``producer_id`` is refused; its last batch's ``idempotency_key`` is
                deduplicated without a time window (topics/ops/producers.py).
            dedupe, dedupe_ms, replace: how the records' ``dedupe_key``s act on a queue
                (``"until_ack"`` or ``"window"`` for ``dedupe_ms``; ``replace`` swaps a
                held job never handed out for the new one: topics/queues/job_ops.py rule 3).
                Records of a queue may also carry ``deliver_at`` or ``delay_ms``.

        Raises: invalid_request, batch_too_large, record_too_large, topic_not_found,
        topic_full, throttled, head_mismatch (``detail.head_seq``: the actual head),
        producer_fenced (``detail.current_epoch``).

        Example::

            res = await engine.write("orders", [{"data": {"sku": "A1"}, "tag": "o-1"}])
            res.seqs  # [1]

        Kept whole: it is the hot path of every write, and its steps share their locals
        (the log, the clock reading, the claim and its fence, the key, the job plan) across
        the stretch with no await from the topic lookup to the append (rule 1); the rare
        answers are methods of their own already, and a split of the rest would pass those
        locals back and forth at a call's cost on every write.
        """
        app = self._app
        # A registered name was validated when its topic was created.
        name = (
            topic
            if type(topic) is str and topic in app.registry.topics
            else check_topic_name(topic)
        )
        node = _args.opt_str("node", node, self.limits.max_node_bytes)
        key = idempotency_key_arg(idempotency_key)
        return_seqs = _args.bool_arg("return_seqs", return_seqs)
        claim = None
        if producer_id is not None or epoch is not None:
            claim = producer_arg(producer_id, epoch)
        if expected_head_seq is not None:
            expected_head_seq = _args.u64("expected_head_seq", expected_head_seq)
        jobs = self._job_write_args(dedupe, dedupe_ms, replace)
        self._check_serving()
        # One clock reading serves retention and the batch's ts, unless a wait comes between.
        now = self.clock.now_ms()
        log, created = self._topic_for_write(name, create, config, now)
        if app.store is not None and not created and not self._reserved(log, records):
            log, created = await self._reserve(name, log, records, create, config)
            now = self.clock.now_ms()
        # From here to the append no await: the conditions hold for the append they guard.
        state: ProducerState | None = None
        fence = False
        if claim is not None:
            state = check_producer(log, claim, self.limits.max_producers_per_topic)
            fence = state is None or claim.epoch > state.epoch
        if key is not None and not created:
            hit = self._dedupe_hit(log, key, now, state)
            if hit is not None:
                return await self._deduped(log, hit, return_seqs, claim if fence else None)
        if expected_head_seq is not None:
            check_expected_head(log, expected_head_seq)
        # The records' own checks (rule 18's order): the encoder refuses a client's "$" meta
        # key in the scan it makes anyway (server_meta), unless job options stamp their own
        # "$" keys into the records: those are checked here first.
        plan = None
        server_meta: type | None = ServerMeta
        if jobs is not None or log.config.type == "queue":
            check_client_meta(records)
            server_meta = None
            records, plan = self._job_ops.plan_jobs(log, records, jobs, now)
            if plan is not None and not records:  # every job was a duplicate
                return await self._all_held(log, plan, now, return_seqs, claim if fence else None)
        entry, salt, frames = self._append_batch(log, records, node, created, now, server_meta)
        if plan is not None:
            self._job_ops.settle_jobs(log, plan)
        if key is not None:
            log.remember_key(key, entry)
        if claim is not None:
            log.producers[claim.producer_id] = ProducerState(
                claim.epoch, key, entry.first_seq, entry.last_seq
            )
        n = entry.last_seq - entry.first_seq + 1
        if claim is None:  # the plain write pays nothing for the producer arguments
            timings = await self._log_append(log, salt, frames, created, n)
        else:
            timings = await self._log_append(log, salt, frames, created, n, claim, key, fence=fence)
        result = write_result(
            log, entry, return_seqs, created=created, deduped=False, timings=timings
        )
        if plan is not None and plan.keyed:
            return replace_fields(result, dedupe=plan.outcomes(entry.first_seq))
        return result

    async def _deduped(
        self, log: TopicLog, hit: DedupeEntry, return_seqs: bool, fencing: ProducerClaim | None
    ) -> WriteResult:
        """The answer to a write its idempotency key deduplicated (``fencing``: the
        claim of a newer epoch, which still fences; rule 2)."""
        if fencing is not None:
            await self._raise_epoch(log, fencing)
        return write_result(log, hit, return_seqs, created=False, deduped=True)

    async def _all_held(
        self,
        log: TopicLog,
        plan: JobPlan,
        now: int,
        return_seqs: bool,
        fencing: ProducerClaim | None,
    ) -> WriteResult:
        """The answer to a queue write whose every job was a held duplicate: nothing is
        appended, it still fences as a deduped write does (rule 2)."""
        if fencing is not None:
            await self._raise_epoch(log, fencing)
        nothing = DedupeEntry(now, log.head + 1, log.head)
        result = write_result(log, nothing, return_seqs, created=False, deduped=False)
        return replace_fields(result, dedupe=plan.outcomes(log.head + 1))

    def _dedupe_hit(
        self, log: TopicLog, key: str, now: int, producer: ProducerState | None = None
    ) -> DedupeEntry | None:
        if producer is not None and producer.key == key:  # no window (_producers rule 2)
            return DedupeEntry(now, producer.first_seq, producer.last_seq)
        log.expire_keys(now)
        entry = log.dedupe.get(key)
        if entry is not None and now - entry.written_at_ms > log.config.idempotency_window_ms:
            del log.dedupe[key]  # expired is gone for good, whatever the clock does next
            return None
        return entry

    async def _raise_epoch(self, log: TopicLog, claim: ProducerClaim) -> None:
        """A deduped write from a newer epoch still fences the older ones (it appends
        nothing, so its state change is a PRODUCER entry of its own, synced)."""
        state = log.producers.get(claim.producer_id)
        if state is None:
            log.producers[claim.producer_id] = ProducerState(claim.epoch)
        else:
            state.epoch = claim.epoch
        if self._app.store is not None:
            await self._wait(self._app.store.log_producer(log, claim.producer_id, sync=True))


def idempotency_key_arg(key: object) -> str | None:
    """A write's ``idempotency_key``, checked (None when none was given)."""
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > IDEMPOTENCY_KEY_MAX_CHARS:
        raise InvalidRequestError.for_field(
            "idempotency_key",
            f"must be a non-empty string of at most {IDEMPOTENCY_KEY_MAX_CHARS} characters",
        )
    return key


def write_result(
    log: TopicLog,
    entry: DedupeEntry,
    return_seqs: bool,
    *,
    created: bool,
    deduped: bool,
    timings: tuple[float, float] = (0.0, 0.0),
) -> WriteResult:
    """The answer to a write that appended (or deduplicated to) ``entry``'s seqs."""
    n = entry.last_seq - entry.first_seq + 1
    return WriteResult(
        topic=log.name,
        first_seq=entry.first_seq,
        last_seq=entry.last_seq,
        seqs=list(range(entry.first_seq, entry.last_seq + 1)) if return_seqs else None,
        head_seq=log.head,
        count=n,
        created=created,
        deduped=deduped,
        wal_append_ms=timings[0],
        fsync_ms=timings[1],
    )
