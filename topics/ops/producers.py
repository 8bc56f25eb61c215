"""Producer fencing and compare-and-append: the write conditions of contract §2 (issue 19).

Role: check a write's ``producer_id`` + ``epoch`` and ``expected_head_seq`` against a topic,
and keep each producer's state (its highest epoch and its last appended batch) on the
topic's ``TopicLog.producers``. The engine calls these in its synchronous write step, so a
check and the append it guards are one atomic step (no await between them).

Rules:
1. Fencing is per topic. A write carrying ``(producer_id, epoch)`` with ``epoch`` below the
   highest epoch the topic has seen for that producer is ``409 producer_fenced``; an equal
   or higher epoch is accepted and becomes the highest. Per topic because the state then
   lives, is logged and is deleted with the topic it guards (like idempotency keys, §0.8),
   and a restarted producer fences each topic with its first write there.
2. Each producer's last appended batch (its idempotency key, if any, and its seq range) is
   kept with its epoch, without a time window: a retry of that batch with the same key,
   from any epoch not fenced, answers the original seqs (``deduped``). A producer that
   sends one batch at a time and resends its last one after a restart therefore appends
   it exactly once, however long the restart took (the §0.8 window covers only
   ``idempotency_window_ms`` and is not logged).
3. The state is durable: an append that carries a producer is one WAL entry with the
   frames (``APPEND_PRODUCER``), so after a crash the state and the records it names come
   back together or not at all; a change without an append (an epoch raised by a deduped
   retry, or by a write to an ``ephemeral`` topic, whose appends are not logged) is a
   ``PRODUCER`` entry. Both are synced when they raise the epoch, whatever the class, so
   an acknowledged fence survives any crash. The checkpoint copies every topic's state
   into the manifest. An ``ephemeral`` topic's other producer writes are not logged: after
   a crash it keeps its epochs, not its last batch (which went with its records).
4. Compare-and-append: ``expected_head_seq`` must equal the topic's ``head_seq`` (the
   highest seq ever handed out: 0 for a new or absent topic, unchanged by deletes,
   eviction and expiry; after a crash the head a read reports), else ``409 head_mismatch``
   with the actual head in ``detail.head_seq``. Checked after fencing and deduplication
   (a retry of a batch that did append is answered ``deduped``, not refused), right
   before the append.
5. At most ``Limits.max_producers_per_topic`` producer ids per topic
   (``TOPICS_MAX_PRODUCERS_PER_TOPIC``, 0 = unlimited): state is never forgotten while the
   topic lives (forgetting it would drop a fence), so a new id past the cap is
   ``429 throttled`` (``detail.limit`` ``max_producers_per_topic``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import _args
from ..errors import HeadMismatchError, InvalidRequestError, ProducerFencedError, ThrottledError
from ..log.producer_state import ProducerClaim, ProducerState

if TYPE_CHECKING:
    from ..log.topic_log import TopicLog

__all__ = [
    "PRODUCER_ID_MAX_CHARS",
    "check_expected_head",
    "check_producer",
    "producer_arg",
]

PRODUCER_ID_MAX_CHARS = 256


def producer_arg(producer_id: object, epoch: object) -> ProducerClaim | None:
    """Both or neither; ``epoch`` a u64 and ``producer_id`` a non-empty string."""
    if producer_id is None and epoch is None:
        return None
    if producer_id is None:
        raise InvalidRequestError.for_field("producer_id", "is required with epoch")
    if epoch is None:
        raise InvalidRequestError.for_field("epoch", "is required with producer_id")
    if not isinstance(producer_id, str) or not 0 < len(producer_id) <= PRODUCER_ID_MAX_CHARS:
        raise InvalidRequestError.for_field(
            "producer_id",
            f"must be a non-empty string of at most {PRODUCER_ID_MAX_CHARS} characters",
        )
    _utf8(producer_id, "producer_id")
    return ProducerClaim(producer_id, _args.u64("epoch", epoch))


def _utf8(value: str, field: str) -> bytes:
    try:
        return value.encode()
    except UnicodeEncodeError:
        raise InvalidRequestError.for_field(field, "is not valid UTF-8") from None


def check_producer(log: TopicLog, claim: ProducerClaim, cap: int) -> ProducerState | None:
    """Rule 1 (and 5: ``cap`` new ids, 0 = unlimited): raise if ``claim`` is fenced or
    would be one id too many; the producer's current state, if any."""
    state = log.producers.get(claim.producer_id)
    if state is None:
        if cap and len(log.producers) >= cap:
            raise ThrottledError.for_limit("max_producers_per_topic", cap)
        return None
    if claim.epoch < state.epoch:
        raise ProducerFencedError(
            f'producer "{claim.producer_id}" epoch {claim.epoch} is fenced: topic '
            f'"{log.name}" has seen epoch {state.epoch}; nothing was appended',
            detail={
                "topic": log.name,
                "producer_id": claim.producer_id,
                "epoch": claim.epoch,
                "current_epoch": state.epoch,
            },
        )
    return state


def check_expected_head(log: TopicLog, expected: int) -> None:
    """Rule 4."""
    if log.head != expected:
        raise HeadMismatchError(
            f'topic "{log.name}" head is {log.head}, not the expected {expected}; '
            "nothing was appended",
            detail={"topic": log.name, "expected_head_seq": expected, "head_seq": log.head},
        )
