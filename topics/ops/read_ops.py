"""The diff behind ``Engine.diff`` (contract §3; issue 18's bounds, filter and format).

``Engine.diff`` is :meth:`ReadOps.diff` (topics/_facade.py): its signature and docstring
are the API reference. The read itself is ``topics/log/reads.py``'s (shared with the offline
Reader); this module checks the arguments, resolves a named cursor's start, long-polls a
caught-up read and commits the answer to the cursor.

Rules:
1. Every argument is checked before the topic is looked up (engine rule 2); a read that
   commits needs a serving engine, any other one a ready engine.
2. A long poll parks only on a caught-up read with nothing to say (no record, no
   tombstone, not at its end), then reads once more: a topic deleted meanwhile (even if
   recreated) is topic_not_found. A ``from_ts`` read waits from the seq it resolved to,
   and the answer echoes that first resolution.
3. Issue 18's options cost a plain diff nothing but the tests that find them absent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import trio

from .. import _args
from .._core import RENDER_DATA, RENDER_META, RENDER_TAGS
from .._limits import DIFF_BYTE_BUDGET
from .._names import check_topic_name
from ..errors import InvalidRequestError, TopicNotFoundError
from ..log.reads import ReadBounds, read_bounds, read_diff, time_bound
from ..query.cloudevents import check_format, to_cloudevents
from ..types import DiffResult
from .where_pacing import WherePacer

if TYPE_CHECKING:
    from .._persistence.appender import Appender
    from ..auth import Principal
    from ..cursors.ops import CursorOps
    from ..log.topic_log import TopicLog

__all__ = ["DEFAULT_LIMIT", "MAX_WAIT_MS", "ReadOps"]

DEFAULT_LIMIT = 256
MAX_WAIT_MS = 30_000


class ReadOps:
    """``Engine.diff`` over the appender and the named cursors."""

    def __init__(self, appender: Appender, cursor_ops: CursorOps) -> None:
        self._app = appender
        self.clock = appender.clock
        self.limits = appender.limits
        self._cursor_ops = cursor_ops
        self.where_pacer = WherePacer(appender.limits.where_cpu_share)
        # Bound once: every read calls these.
        self._check_ready = appender.check_ready
        self._check_serving = appender.check_serving
        self._live_topic = appender.live_topic
        self._yield_point = appender.yield_point

    async def diff(
        self,
        topic: str,
        *,
        from_seq: int = 0,
        limit: int = 0,
        node: str | list[str] | None = None,
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
        owner: Principal | None = None,
    ) -> DiffResult:
        """Records after ``from_seq`` (exclusive), windowed, with any tombstone (§3).

        Issue 18: ``from_ts`` starts at the first record with ``$ts >= from_ts`` (instead
        of ``from_seq``; echoed as ``result.from_seq``), ``to_ts``/``to_seq`` end the read
        inclusively (``result.end_reached``), ``where`` filters (topics/query/where.py), and
        ``format="cloudevents"`` answers CloudEvents (``result.events``; the type from
        meta's ``ce_type_field``, default "type"). docs/SEMANTICS.md rules 29-32.

        Records carry what was written, ``tag`` included; ``include_tags=False`` leaves
        tags out (the HTTP wire's default, which its route passes explicitly).

        ``wait_ms`` long-polls: a caught-up read with nothing to return waits for the next
        write (at most 30 s). ``cursor`` starts after a named cursor's committed seq
        instead of ``from_seq`` (topics/cursors/ops.py rule 1); ``commit`` then commits the
        answer's ``next_from_seq`` to it before answering (at most once: an answer lost on
        the way is not read again). ``owner``, the API key reading, counts a new cursor
        against its bound (topics/cursors/ops.py rule 5), and its filtered reads against its
        share of the event loop (topics/ops/where_pacing.py). Raises: invalid_request, topic_not_found (never
        creates), throttled (a new cursor past a bound).

        Example::

            res = await engine.diff("orders", from_seq=0, limit=100)
            for rec in res.records: ...
            cursor = res.next_from_seq

        Kept whole: it is the hot path of every read, a straight sequence of argument
        checks (all before the lookup, rule 1) and one read; the long poll is a method of
        its own already, and what is left shares its locals (the window, the flags, the
        bounds, the format) from the checks to the answer.
        """
        # Issue 30: one key's filtered reads get their share of the loop; the time counted
        # starts here, so the plan's lookup (a large where's hash) is paid for too.
        paced = owner is not None and where is not None
        started = self.where_pacer.timer() if paced else 0.0
        name = check_topic_name(topic)
        from_seq = _args.u64("from_seq", from_seq)
        limit = _args.u64("limit", limit) or DEFAULT_LIMIT
        limit = min(limit, self.limits.max_limit)
        wait_ms = min(_args.u64("wait_ms", wait_ms), MAX_WAIT_MS)
        skip = _args.node_set(node, self.limits.max_node_bytes)
        flags = (
            (RENDER_TAGS if _args.bool_arg("include_tags", include_tags) else 0)
            | (RENDER_META if _args.bool_arg("include_meta", include_meta) else 0)
            | (RENDER_DATA if _args.bool_arg("include_data", include_data) else 0)
        )
        budget = max(1, _args.u64("max_bytes", max_bytes))
        bounds = None  # issue 18's options cost a plain diff nothing but these tests
        if from_ts is not None or to_ts is not None or to_seq is not None or where is not None:
            bounds = read_bounds(
                from_seq=from_seq,
                from_ts=from_ts,
                to_ts=to_ts,
                to_seq=to_seq,
                where=where,
                max_where_cost=self.limits.max_where_cost,
            )
        fmt = type_field = ""
        if format != "records" or ce_type_field is not None:
            fmt, type_field = check_format(format, ce_type_field)
            if fmt == "cloudevents":
                flags |= RENDER_DATA | RENDER_META | RENDER_TAGS
        if cursor is not None and from_ts is not None:
            raise InvalidRequestError.for_field("from_ts", "give cursor or from_ts, not both")
        cname = self._cursor_ops.cursor_read_args(from_seq, cursor, commit)
        if commit:
            self._check_serving()
        else:
            self._check_ready()
        log = self._live_topic(name)
        if cname is not None:
            from_seq = self._cursor_ops.cursor_start(log, cname)
            if commit:
                self._cursor_ops.check_room(log, cname, owner)
        now = self.clock.now_ms() if bounds is not None else 0
        result = read_diff(
            log, from_seq, limit, skip, flags, budget, None, bounds, now, self._time_bound(bounds)
        )
        hold_s = 0.0
        if paced:
            assert owner is not None
            ended = self.where_pacer.timer()
            hold_s = self.where_pacer.charge(owner.owner_id, ended - started, ended)
        if (
            wait_ms
            and result.caught_up
            and not result.record_count
            and result.tombstone is None
            and not result.end_reached
        ):
            result = await self._wait_and_read(
                log, result, wait_ms, from_seq, limit, skip, flags, budget, bounds
            )
        elif hold_s:
            await trio.sleep(hold_s)  # a checkpoint too, like the yield point
        else:
            await self._yield_point()
        if fmt == "cloudevents":
            result = replace(
                result,
                records_json=to_cloudevents(name, result.records_json, type_field),
                format=fmt,
            )
        log.last_read_ts = self.clock.now_ms()
        if commit and cname is not None:
            await self._cursor_ops.commit_read(log, cname, result.next_from_seq, owner)
        return result

    def _time_bound(self, bounds: ReadBounds | None) -> Callable[[], bool] | None:
        """A filtered read's time budget from now (topics/log/reads.py rule 4)."""
        if bounds is None or bounds.where is None:
            return None
        return time_bound(self.clock.now_ms, self.limits.max_where_ms)

    async def _wait_and_read(
        self,
        log: TopicLog,
        first: DiffResult,
        wait_ms: int,
        from_seq: int,
        limit: int,
        skip: frozenset[bytes] | None,
        flags: int,
        budget: int,
        bounds: ReadBounds | None,
    ) -> DiffResult:
        """The long poll of a caught-up read with nothing to say (rule 2)."""
        if bounds is not None and first.from_seq is not None:  # from where from_ts was
            from_seq, bounds = first.from_seq, replace(bounds, from_ts=None)
        with trio.move_on_after(wait_ms / 1000):
            await log.waiters.park()
        if self._app.registry.get(log.name) is not log:  # deleted (maybe recreated) meanwhile
            raise TopicNotFoundError.for_topic(log.name)
        self._app.apply_retention(log)
        now = self.clock.now_ms()
        result = read_diff(
            log, from_seq, limit, skip, flags, budget, None, bounds, now, self._time_bound(bounds)
        )
        if first.from_seq is not None:
            result = replace(result, from_seq=first.from_seq)
        return result
