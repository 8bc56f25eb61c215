"""Job options of queue writes and the dead-letter redrive, behind the Engine facade (§10.9).

Scheduled jobs (``deliver_at`` / ``delay_ms`` per record), dedupe keys (``dedupe_key``
per record; ``dedupe``, ``dedupe_ms`` and ``replace`` per write) and
``Engine.redrive``. The projection side is ``queues/jobs.py``; docs/QUEUES.md explains.

Rules:
1. The options are checked before anything changes (engine rule 2) and become meta
   stamps (``_queue_jobs`` rule 1); the records handed to the encoder carry no job
   fields. A write without them costs one ``isdisjoint`` per record of a queue write and
   nothing on a log topic.
2. Every append to a queue hands its records' stamps to the projection in the same
   synchronous step (``queue_appended``, called by ``Appender.append_batch``), so no
   claim can see a scheduled job before it is scheduled. Router and dead-letter copies
   that carry stamps are treated alike, as they are after a restart.
3. Dedupe: a record whose key is held is not appended; the answer names the holder's
   seq. With ``replace`` and a holder never handed out, the new record is appended and
   the holder deleted in the same step: the job gets a new seq (it moves to the tail,
   which is what a debounce wants). The WAL order is APPEND then DELETE_SEQS, so a crash
   between them can leave both, never neither. A key repeated within one write is
   ``400``.
4. Redrive moves one batch per target in one synchronous step: re-check that the
   dead-letter seqs are still live, append the copies to the target, delete them from
   the dead-letter topic. Both WAL entries are queued in that step, so they go out in the
   same WAL write: a process killed at any point leaves each job in exactly one place.
   (A power cut that tears that one write between the two frames could keep both.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Any

import trio
import ujson

from .. import _args
from .._names import check_topic_name
from ..errors import (
    ForbiddenError,
    InvalidRequestError,
    RecordTooLargeError,
    TopicNotFoundError,
)
from ..queue_types import RedriveResult
from .jobs import DEDUPE_KEY, DEDUPE_MODES, DEDUPE_UNTIL, DELIVER_AT, read_stamps, stamp_meta

if TYPE_CHECKING:
    from .._persistence.appender import Appender
    from .._storage.wal import WalTicket
    from ..log.registry import TopicRegistry
    from ..log.topic_log import TopicLog
    from ..ops.durability import Durability
    from .ops import QueueOps

__all__ = ["JOB_RECORD_FIELDS", "JOB_WRITE_FIELDS", "JobOps", "JobPlan"]

#: Per-record fields of a queue write (beside data/tag/node/meta).
JOB_RECORD_FIELDS = frozenset({"deliver_at", "delay_ms", "dedupe_key"})
#: Write-level fields that shape how the records' dedupe keys act.
JOB_WRITE_FIELDS = frozenset({"dedupe", "dedupe_ms", "replace"})
#: How far ahead a job may be scheduled, and the longest dedupe window: 365 days.
SCHEDULE_MAX_MS = 365 * 86_400_000
DEDUPE_KEY_MAX_CHARS = 256
#: Jobs one redrive moves when ``max`` is not given, and at most.
REDRIVE_DEFAULT = 1000
REDRIVE_MAX = 100_000
_WHERE_FIELDS = frozenset({"origin", "match"})


@dataclass(frozen=True, slots=True)
class JobWrite:
    """A write's dedupe options (``dedupe``/``dedupe_ms``/``replace``)."""

    window_ms: int | None  # None: until_ack
    replace: bool


@dataclass(slots=True)
class JobPlan:
    """What a queue write with job options will do (built before anything changes)."""

    # (index in the request, key, holder seq) of records not appended.
    duplicates: list[tuple[int, str, int]] = field(default_factory=list)
    # (index in the request, key, position among appended records, old seq).
    replaced: list[tuple[int, str, int, int]] = field(default_factory=list)
    keyed: bool = False  # the write carried dedupe keys: the answer lists outcomes

    def outcomes(self, first_seq: int) -> list[dict[str, Any]] | None:
        if not self.keyed:
            return None
        out: list[dict[str, Any]] = [
            {"index": i, "dedupe_key": key, "seq": seq, "outcome": "duplicate"}
            for i, key, seq in self.duplicates
        ]
        out.extend(
            {
                "index": i,
                "dedupe_key": key,
                "seq": first_seq + pos,
                "outcome": "replaced",
                "replaced_seq": old,
            }
            for i, key, pos, old in self.replaced
        )
        out.sort(key=lambda o: int(o["index"]))
        return out


class JobOps:
    """Scheduled jobs, dedupe keys and redrive for :class:`topics.Engine`, which documents
    ``redrive`` (see the module docstring)."""

    def __init__(self, appender: Appender, durability: Durability, queues: QueueOps) -> None:
        self._app = appender
        self.clock = appender.clock
        self.limits = appender.limits
        self._durability = durability
        self._queue_ops = queues
        appender.queue_appended = self.queue_appended

    # -- writes -----------------------------------------------------------------------------

    @staticmethod
    def job_write_args(dedupe: object, dedupe_ms: object, replace: object) -> JobWrite | None:
        """A write's dedupe options, checked (None when none was given)."""
        if dedupe is None and dedupe_ms is None and replace is None:
            return None
        if dedupe is not None and dedupe not in DEDUPE_MODES:
            raise InvalidRequestError.for_field(
                "dedupe", f'must be "until_ack" or "window", got {dedupe!r}'
            )
        window: int | None = None
        if dedupe == "window":
            if dedupe_ms is None:
                raise InvalidRequestError.for_field(
                    "dedupe_ms", 'is required with "dedupe": "window" (the window length)'
                )
            window = _args.u64("dedupe_ms", dedupe_ms)
            if not 1 <= window <= SCHEDULE_MAX_MS:
                raise InvalidRequestError.for_field(
                    "dedupe_ms", f"must be between 1 and {SCHEDULE_MAX_MS}, got {window}"
                )
        elif dedupe_ms is not None:
            raise InvalidRequestError.for_field("dedupe_ms", 'only applies to "dedupe": "window"')
        return JobWrite(
            window, _args.bool_arg("replace", replace) if replace is not None else False
        )

    def plan_jobs(
        self,
        log: TopicLog,
        records: Sequence[Mapping[str, Any]],
        options: JobWrite | None,
        now: int,
    ) -> tuple[Sequence[Mapping[str, Any]], JobPlan | None]:
        """The records to encode (job fields turned into meta stamps, duplicates left
        out) and the plan (rules 1 and 3); ``records`` unchanged and None when no record
        has a job field. Raises before anything changes."""
        marked = _marked_records(log, records, options)
        if not marked:
            return records, None
        return self._plan_marked(log, records, marked, options, now)

    def _plan_marked(
        self,
        log: TopicLog,
        records: Sequence[Mapping[str, Any]],
        marked: list[int],
        options: JobWrite | None,
        now: int,
    ) -> tuple[Sequence[Mapping[str, Any]], JobPlan]:
        """:meth:`plan_jobs` for a queue write whose ``marked`` records have job fields."""
        fields = JOB_RECORD_FIELDS
        opts = options if options is not None else JobWrite(None, False)
        q = self._queue_ops.queue_state(log)
        plan = JobPlan()
        out: list[Mapping[str, Any]] = list(records)
        dropped: set[int] = set()
        seen: dict[str, int] = {}
        replacing: list[tuple[int, str, int]] = []
        for i in marked:
            record = records[i]
            stamps = _job_stamps(record, i, now, opts)
            key = stamps.get(DEDUPE_KEY)
            if key is not None:
                plan.keyed = True
                if key in seen:
                    raise InvalidRequestError.for_field(
                        f"records[{i}].dedupe_key",
                        f"repeats records[{seen[key]}].dedupe_key in one write",
                    )
                seen[key] = i
                holder = q.dedupe.holder(key, now, q._is_live)
                if holder is not None:
                    if opts.replace and q.unclaimed(holder):
                        replacing.append((i, key, holder))
                    else:
                        plan.duplicates.append((i, key, holder))
                        dropped.add(i)
                        continue
            copy = {k: v for k, v in record.items() if k not in fields}
            if stamps:
                copy["meta"] = stamp_meta(record.get("meta"), stamps)
            out[i] = copy
        kept = [r for i, r in enumerate(out) if i not in dropped]
        if replacing:
            position = {i: n for n, i in enumerate(j for j in range(len(out)) if j not in dropped)}
            plan.replaced = [(i, key, position[i], old) for i, key, old in replacing]
        return kept, plan

    def settle_jobs(self, log: TopicLog, plan: JobPlan) -> WalTicket | None:
        """After the append: delete the jobs a ``replace`` superseded (rule 3)."""
        if not plan.replaced:
            return None
        q = self._queue_ops.queues.states.get(log.topic_id)
        old = [seq for _, _, _, seq in plan.replaced]
        if q is not None:
            for seq in old:
                q.schedule.discard(seq)
        _, ticket = self._app.delete_seqs(log, old)
        if q is not None:
            q.mark()
        return ticket

    def queue_appended(
        self, log: TopicLog, records: Sequence[Mapping[str, Any]], first_seq: int, now: int
    ) -> None:
        """Hand the stamps of an append to the queue's projection (rule 2). A queue with
        no projection yet builds it from the log when it is first used."""
        q = self._queue_ops.queues.states.get(log.topic_id)
        if q is None:
            return
        for n, record in enumerate(records):
            meta = record.get("meta")
            if meta is None:
                continue
            stamps = read_stamps(meta)
            if stamps is not None:
                q.adopt(first_seq + n, stamps, True, now)

    # -- redrive ----------------------------------------------------------------------------

    async def redrive(
        self,
        topic: str,
        *,
        to: str | None = None,
        max: int | None = None,
        where: Mapping[str, Any] | None = None,
        may_touch: Callable[[str], bool] | None = None,
    ) -> RedriveResult:
        """Move dead-lettered jobs from ``topic`` back to their queue (or ``to``).

        Each job goes to ``to`` if given, else to the queue its ``$dead_letter_from``
        stamp names. The copy keeps ``data``, ``$tag`` and ``meta`` and gets provenance
        stamps (``$redrive_from``, ``$redrive_src_seq``, ``$redrive_origin``,
        ``$redrive_origin_seq``, ``$redrive_at``); it is a fresh job (deliveries start
        again). Jobs move in seq order, one atomic batch per target (module rule 4).

        Args:
            max: jobs to move at most (default 1000, at most 100000).
            where: ``{"origin": queue}`` only jobs dead-lettered from that queue;
                ``{"match": <tag match as in a delete>}`` only jobs whose tag matches.
            may_touch: the caller's name allowlist; a target outside it is ``forbidden``
                before anything moves.

        Raises: invalid_request, topic_not_found (``topic``, or ``to``), not_a_queue
        (``to`` is a log topic), forbidden.
        """
        name = check_topic_name(topic)
        target_name = check_topic_name(to) if to is not None else None
        limit = REDRIVE_DEFAULT if max is None else _args.u64("max", max)
        if not 1 <= limit <= REDRIVE_MAX:
            raise InvalidRequestError.for_field("max", f"must be between 1 and {REDRIVE_MAX}")
        origin, spec = _where_args(where)
        self._app.check_serving()
        await trio.lowlevel.checkpoint()
        dlq = self._app.live_topic(name)
        if target_name is not None:
            self._queue_ops.queue_log(target_name)
        picked, skipped, named = _select(dlq, limit, origin, spec, target_name, self._app.registry)
        if may_touch is not None:
            # Every queue a record names, live or not: a check of the live ones alone would
            # answer 403 for another tenant's queue and 200 "skipped" for a free name.
            for target in sorted(named):
                if not may_touch(target):
                    raise ForbiddenError(
                        f'api key may not touch "{target}" (the redrive target): outside '
                        "its name prefix allowlist",
                        detail={"to": target},
                    )
        moved = 0
        batches: list[dict[str, Any]] = []
        fsync_ms = 0.0
        step = self.limits.max_batch_records
        by_target: dict[str, list[int]] = {}
        for seq, target in picked:
            by_target.setdefault(target, []).append(seq)
        for target, seqs in by_target.items():
            for k in range(0, len(seqs), step):
                outcome = await self._redrive_batch(dlq, target, seqs[k : k + step])
                if outcome is None:
                    continue
                count, first, last, waited = outcome
                moved += count
                fsync_ms += waited
                batches.append({"to": target, "count": count, "first_seq": first, "last_seq": last})
        return RedriveResult(name, moved, skipped, dlq.count, batches, fsync_ms)

    async def _redrive_batch(
        self, dlq: TopicLog, target: str, seqs: list[int]
    ) -> tuple[int, int, int, float] | None:
        """Move one batch (module rule 4); None when nothing of it is left to move."""
        dest = self._queue_ops.queue_log(target)
        if self._app.store is not None and not self._durability.reserved(dest, seqs):
            dest, _ = await self._durability.reserve(target, dest, seqs, False, None)
        if self._app.registry.get(dlq.name) is not dlq:
            raise TopicNotFoundError.for_topic(dlq.name)
        dest = self._queue_ops.queue_log(target)  # (deleted or retyped while reserving?)
        now = self.clock.now_ms()
        live = [seq for seq in seqs if _is_live(dlq, seq)]  # another redrive may have won
        if not live:
            return None
        records = [_redrive_copy(dlq, seq, now) for seq in live]
        try:
            entry, salt, frames = self._app.append_batch(dest, records, None, False, now)
        except (InvalidRequestError, RecordTooLargeError):
            # The stamps pushed a meta over a limit: the copies carry the stamps alone.
            records = [_redrive_copy(dlq, seq, now, keep_meta=False) for seq in live]
            entry, salt, frames = self._app.append_batch(dest, records, None, False, now)
        tickets: list[WalTicket] = []
        store = self._app.store
        if store is not None:
            ticket = store.log_append(dest, salt, frames)
            if ticket is not None:
                tickets.append(ticket)
        _, deleted = self._app.delete_seqs(dlq, live)
        if deleted is not None:
            tickets.append(deleted)
        dest.wake()
        dlq.wake()
        waited = 0.0
        if any(log.config.durability == "fsync" for log in (dest, dlq)):
            for ticket in tickets:
                waited += (await self._app.wait(ticket))[1]
        else:
            await self._app.yield_point()
        return len(live), entry.first_seq, entry.last_seq, waited


# -- helpers ------------------------------------------------------------------------------


def _job_stamps(record: Mapping[str, Any], i: int, now: int, opts: JobWrite) -> dict[str, Any]:
    """The meta stamps one record's job fields ask for (checked; rule 1)."""
    stamps: dict[str, Any] = {}
    at = record.get("deliver_at")
    delay = record.get("delay_ms")
    if at is not None and delay is not None:
        raise InvalidRequestError.for_field(
            f"records[{i}].delay_ms", "cannot be given with deliver_at (pick one)"
        )
    if delay is not None:
        delay = _args.u64(f"records[{i}].delay_ms", delay)
        if delay > SCHEDULE_MAX_MS:
            raise InvalidRequestError.for_field(
                f"records[{i}].delay_ms", f"is more than {SCHEDULE_MAX_MS} ms (365 days)"
            )
        at = now + delay
    elif at is not None:
        at = _args.u64(f"records[{i}].deliver_at", at)
        if at > now + SCHEDULE_MAX_MS:
            raise InvalidRequestError.for_field(
                f"records[{i}].deliver_at", "is more than 365 days ahead"
            )
    if at is not None and at > now:
        stamps[DELIVER_AT] = at
    key = record.get("dedupe_key")
    if key is not None:
        if not isinstance(key, str) or not key or len(key) > DEDUPE_KEY_MAX_CHARS:
            raise InvalidRequestError.for_field(
                f"records[{i}].dedupe_key",
                f"must be a non-empty string of at most {DEDUPE_KEY_MAX_CHARS} characters",
            )
        stamps[DEDUPE_KEY] = key
        if opts.window_ms is not None:
            stamps[DEDUPE_UNTIL] = now + opts.window_ms
    return stamps


def _where_args(where: object) -> tuple[str | None, _args.MatchSpec | None]:
    if where is None:
        return None, None
    if not isinstance(where, Mapping):
        raise InvalidRequestError.for_field("where", "must be an object")
    for key in where:
        if key not in _WHERE_FIELDS:
            raise InvalidRequestError.for_field(f"where.{key}", "is not a redrive filter")
    origin = where.get("origin")
    if origin is not None:
        origin = check_topic_name(origin)
    match = where.get("match")
    return origin, _args.match_arg(match) if match is not None else None


def _is_live(log: TopicLog, seq: int) -> bool:
    if seq < log.earliest or seq > log.head:
        return False
    loc = log.locate(seq)
    return loc is not None and log.segments[loc[0]].is_live(loc[1])


def _dead_letter_origin(meta: bytes | None) -> tuple[str | None, int | None]:
    if meta is None or b'"$dead_letter_from"' not in meta:
        return None, None
    try:
        value = ujson.loads(meta)
    except ValueError:
        return None, None
    if not isinstance(value, dict):
        return None, None
    origin, seq = value.get("$dead_letter_from"), value.get("$dead_letter_src_seq")
    return (
        origin if isinstance(origin, str) else None,
        seq if type(seq) is int else None,
    )


def _select(
    dlq: TopicLog,
    limit: int,
    origin: str | None,
    spec: _args.MatchSpec | None,
    to: str | None,
    registry: TopicRegistry,
) -> tuple[list[tuple[int, str]], int, set[str]]:
    """(seq, target) of up to ``limit`` live jobs in seq order that pass the filter, how
    many passed it but cannot move (no origin and no ``to``, or the origin is no longer a
    queue), and every target those jobs name, whether it exists or not."""
    picked: list[tuple[int, str]] = []
    skipped = 0
    named: set[str] = set()
    for seg in list(dlq.segments):
        idx = seg.first_live(0)
        while idx < seg.count and len(picked) < limit:
            if spec is not None and not _tag_matches(seg.tag_at(idx), spec):
                idx = seg.first_live(idx + 1)
                continue
            seq, _, _, _, meta, _, _ = seg.decode(idx)
            source, _ = _dead_letter_origin(meta)
            if origin is not None and source != origin:
                idx = seg.first_live(idx + 1)
                continue
            target = to if to is not None else source
            if target is not None:
                named.add(target)
            dest = registry.get(target) if target is not None else None
            if target is None or dest is None or dest.config.type != "queue":
                skipped += 1
            else:
                picked.append((seq, target))
            idx = seg.first_live(idx + 1)
        if len(picked) >= limit:
            break
    return picked, skipped, named


def _tag_matches(tag: bytes | None, spec: _args.MatchSpec) -> bool:
    if tag is None:
        return False
    op, operand = spec
    return tag == operand if op == "Eq" else tag.startswith(operand)


def _redrive_copy(dlq: TopicLog, seq: int, now: int, keep_meta: bool = True) -> dict[str, Any]:
    loc = dlq.locate(seq)
    assert loc is not None, "checked live"
    _, _, _, tag, meta, data, _ = dlq.segments[loc[0]].decode(loc[1])
    origin, origin_seq = _dead_letter_origin(meta)
    stamps = {
        "$redrive_from": dlq.name,
        "$redrive_src_seq": seq,
        "$redrive_origin": origin,
        "$redrive_origin_seq": origin_seq,
        "$redrive_at": now,
    }
    return {
        "data": data,
        "tag": tag.decode() if tag else None,
        "meta": stamp_meta(meta if keep_meta else None, stamps),
    }


def _marked_records(
    log: TopicLog, records: Sequence[Mapping[str, Any]], options: JobWrite | None
) -> list[int] | None:
    """The indexes of the records of a write to ``log`` that carry job fields (None or
    empty: none does); raises for dedupe options on a log topic."""
    if log.config.type != "queue":
        if options is not None:
            raise InvalidRequestError.for_field(
                "dedupe", f'applies to queue topics; "{log.name}" is a {log.config.type}'
            )
        return None
    if not isinstance(records, list | tuple):
        return None  # the engine's batch check answers
    fields = JOB_RECORD_FIELDS
    try:
        # Every key of every record in one C loop: ~35 ns a record, where a Python
        # test per record cost ~150 (this runs for every write to a queue).
        if fields.isdisjoint(chain.from_iterable(records)):
            return None
    except TypeError:
        pass  # a record that is not a mapping: the encoder will say so
    return [
        i
        for i, r in enumerate(records)
        if (type(r) is dict or isinstance(r, Mapping)) and not fields.isdisjoint(r)
    ]
