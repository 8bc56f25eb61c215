"""Dead letters of the queues (contract §10.6; ``_queue_ops`` rule 5, ``_queue`` rule 9).

Role: copy the jobs that used up ``max_deliveries`` to their ``dead_letter`` topic and
delete them from the queue, as soon as they leave their last lease: awaited by a nack or a
claim, started as a task by a caller that cannot await, and, for a lease nobody looks at,
driven by one timer task per queue that sleeps until the deadline of the earliest lease
held on a last delivery.

Rules:
1. The copy goes through ``Engine.write`` (the target is auto-created, its seqs reserved
   and the append logged and synced like any write), shielded from cancellation; then the
   jobs are deleted from the queue like an ack and ``DEAD_LETTERED`` is logged. The WAL
   order is the target's APPEND, DELETE_SEQS, DEAD_LETTERED: a crash between them leaves a
   duplicate copy at worst, never a lost job.
2. A failed copy (the target full, ``discard: "reject"``) puts the jobs back on the
   freelist with their delivery counts; the next claim tries again.
3. The timer reads the engine's clock for every sleep, so a ``ManualClock`` drives it; it
   wakes once per deadline (an extend moves the next wake) and ends when no lease on a last
   delivery is left or the queue is gone.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

import trio
import ujson

from .._meta_keys import ServerMeta
from ..errors import InvalidRequestError, RecordTooLargeError, TopicsError
from .state import DEAD_LETTERED, QueueState

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .._clock import Clock
    from .._persistence.appender import Appender
    from .._storage.wal import WalTicket
    from ..log.topic_log import TopicLog
    from ..types import WriteResult
    from .store import Queues

__all__ = ["DeadLetters", "stamp_dead_letter_meta"]

log_ = logging.getLogger("topics.queue")


class _QueueOps(Protocol):
    """What the moves use of ``QueueOps`` (queues/ops.py), which owns them. A protocol, not
    an import, keeps this module below ops.py, which builds a :class:`DeadLetters`."""

    @property
    def appender(self) -> Appender: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def queues(self) -> Queues: ...
    @property
    def engine_write(self) -> Callable[..., Awaitable[WriteResult]]: ...
    def queue_state(self, log: TopicLog, keep_doomed: bool = False) -> QueueState: ...
    def log_lease(self, log: TopicLog, kind: int, *body: object) -> WalTicket | None: ...


class DeadLetters:
    """The dead-letter moves of one engine's queues (see the module docstring)."""

    def __init__(self, ops: _QueueOps) -> None:
        self._ops = ops

    def soon(self, log: TopicLog, q: QueueState, seqs: list[int]) -> None:
        """Copy ``seqs`` (DEAD_LETTERING) out from a caller that cannot await (rule 5)."""
        nursery = self._ops.appender.nursery
        if not seqs:
            return
        if nursery is None:  # (no engine nursery: nothing could run the copy)
            q.give_back(seqs)
            return
        nursery.start_soon(self.move, log, q, seqs)

    def watch(self, log: TopicLog, q: QueueState) -> None:
        """Start the queue's expiry timer if it is not running (rule 5)."""
        if not q.reaping and self._ops.appender.nursery is not None:
            q.reaping = True
            self._ops.appender.nursery.start_soon(self._reap, log, q)

    async def _reap(self, log: TopicLog, q: QueueState) -> None:
        """Sleep until the next lease held on a last delivery is past its deadline (by
        the engine's clock), then look at the queue, which dead-letters it; until no such
        lease is left or the queue is gone. Not a poll: it wakes once per deadline (an
        extend only moves the next wake)."""
        try:
            while self._ops.queues.states.get(log.topic_id) is q:
                due = q.last_try_deadline()
                if due is None:
                    return
                await trio.sleep(max(due + 1 - self._ops.clock.now_ms(), 0) / 1000)
                if self._ops.queues.states.get(log.topic_id) is q:
                    self._ops.queue_state(log, keep_doomed=True)
                    doomed = q.take_doomed()
                    if doomed:
                        await self.move(log, q, doomed)
        finally:
            q.reaping = False

    async def move(self, log: TopicLog, q: QueueState, seqs: list[int]) -> None:
        """Move jobs past ``max_deliveries`` to the dead-letter topic (rule 5, §10.6)."""
        target = log.config.dead_letter
        assert target is not None
        records = []
        for seq in seqs:
            loc = log.locate(seq)
            assert loc is not None, "a tracked job is live"
            _, _, _, tag, meta, data, _ = log.segments[loc[0]].decode(loc[1])
            stamped = stamp_dead_letter_meta(meta, log.name, q.deliveries[seq], seq)
            records.append({"data": data, "tag": tag.decode() if tag else None, "meta": stamped})
        with trio.CancelScope(shield=True):
            try:
                await self._write_copies(target, records, log.name, seqs)
            except TopicsError as exc:
                log_.warning(
                    "queue %s: cannot dead-letter %d jobs to %s (%s); they stay claimable",
                    log.name,
                    len(seqs),
                    target,
                    exc.code,
                )
                if self._ops.queues.states.get(log.topic_id) is q:
                    q.give_back(seqs)
                    q.wake()
                return
        if self._ops.queues.states.get(log.topic_id) is not q:
            return  # the queue was deleted meanwhile: nothing left to delete
        moved = [seq for seq in seqs if seq in q.dead_lettering]
        for seq in moved:
            q.untrack(seq)
        q.dead_lettered += len(moved)
        self._ops.appender.delete_seqs(log, moved)
        self._ops.log_lease(log, DEAD_LETTERED, moved)
        q.mark()
        if moved:  # the queue shrank: an idle worker draining it (until_empty) looks again
            q.wake()

    async def _write_copies(
        self, target: str, records: list[dict[str, Any]], source: str, seqs: list[int]
    ) -> None:
        try:
            await self._ops.engine_write(target, records, return_seqs=False)
        except (InvalidRequestError, RecordTooLargeError):
            # The stamps pushed a record's meta over a limit: keep only the stamps.
            for record, seq in zip(records, seqs, strict=True):
                record["meta"] = stamp_dead_letter_meta(None, source, 0, seq)
            await self._ops.engine_write(target, records, return_seqs=False)


def stamp_dead_letter_meta(meta: bytes | None, source: str, deliveries: int, seq: int) -> bytes:
    """A job's ``meta`` with the §10.6 trace keys appended (the original bytes are kept
    verbatim; the stamps come last, so a reader that keeps the last of duplicate keys
    sees these even when the job was dead-lettered before)."""
    stamps = b'"$dead_letter_from":%s,"$dead_letter_deliveries":%d,"$dead_letter_src_seq":%d' % (
        ujson.dumps(source).encode(),
        deliveries,
        seq,
    )
    if meta is None:
        return ServerMeta(b"{" + stamps + b"}")
    body = bytes(meta).strip()
    inner = body[1:-1].strip()
    if not inner:
        return ServerMeta(b"{" + stamps + b"}")
    return ServerMeta(b"{" + inner + b"," + stamps + b"}")
