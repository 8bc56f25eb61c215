"""Named-cursor methods behind the Engine facade (server-side consumer positions).

The Engine owns one :class:`CursorOps`, built on its appender, and delegates to it; the
state and its persistence (``cursors``, a store extension) are ``cursors/store.py``.

Rules:
1. A cursor holds a committed seq: "everything up to and including ``seq`` is processed".
   A read that starts from a cursor returns the records after it. A cursor that was never
   committed reads as seq 0 (from the start), so a new consumer group needs no set-up;
   ``get_cursor`` still answers ``cursor_not_found`` for it.
2. A commit may move a cursor back (a rewind) or forward, never past the topic's head
   (400). ``expect_seq`` makes it a compare-and-set against the current value (an absent
   cursor counts as 0): a mismatch is ``409 cursor_conflict`` and changes nothing.
3. Explicit commits and deletes are awaited until synced, like topic config. Commits made
   by a stream after delivery (``commit: true`` on a watch or WebSocket subscription) are
   logged synced but not awaited: a crash may lose the last few, and those records are
   delivered again (at least once).
4. ``lag`` is ``max(0, head_seq - seq)``, the measure a diff reports as ``lag``.
5. Bounds (``429 throttled``, ``detail.limit``): a topic holds at most
   ``Limits.max_cursors_per_topic`` cursors, and one API key creates at most
   ``Limits.max_cursors_per_key`` over every topic (_cursors rule 5; a read-only key may
   commit, so this is what bounds its state). Only a new name is checked: commits to an
   existing cursor always go through. A read or subscription that would commit to a new
   cursor past a bound is refused up front; a stream whose cursor was deleted meanwhile
   does not re-create it past a bound (nothing to answer: the commit is skipped).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .. import _args
from .._names import check_topic_name
from ..cursor_types import CursorInfo, DeleteCursorResult
from ..errors import (
    CursorConflictError,
    CursorNotFoundError,
    InvalidRequestError,
    ThrottledError,
)
from ..watch_types import TopicWatermarks
from .store import (
    CURSOR_DELETE,
    CURSOR_PUT,
    Cursors,
    check_cursor_name,
    encode_delete,
    encode_put,
)

if TYPE_CHECKING:
    from .._persistence.appender import Appender
    from .._storage.wal import WalTicket
    from ..auth import Principal
    from ..log.topic_log import TopicLog

__all__ = ["CursorOps"]


class CursorOps:
    """The named-cursor methods of :class:`topics.Engine`, which documents the public ones
    (see the module docstring)."""

    def __init__(self, appender: Appender) -> None:
        self._app = appender
        self.clock = appender.clock
        self.cursors = Cursors()

    async def put_cursor(
        self,
        topic: str,
        cursor: str,
        seq: int,
        *,
        expect_seq: int | None = None,
        owner: Principal | None = None,
    ) -> CursorInfo:
        """Commit ``seq`` to the named cursor of ``topic`` (rules 1-3), creating it;
        ``owner`` is the API key that asks (rule 5; None: an engine caller).

        Raises: invalid_request (bad name, seq above the head), topic_not_found,
        cursor_conflict (``expect_seq`` differs from the committed seq), throttled
        (``max_cursors_per_topic``, ``max_cursors_per_key``).

        Example::

            await engine.put_cursor("orders", "billing", 41, expect_seq=40)
        """
        name = check_topic_name(topic)
        cname = check_cursor_name(cursor)
        seq = _args.u64("seq", seq)
        expect = _args.u64("expect_seq", expect_seq) if expect_seq is not None else None
        self._app.check_serving()
        log = self._app.live_topic(name)
        if seq > log.head:
            raise InvalidRequestError(
                f"seq: {seq} is beyond the head of {name!r} ({log.head})",
                detail={"field": "seq", "head_seq": log.head},
            )
        held = self.cursors.get(log.topic_id, cname)
        current = held.seq if held is not None else 0
        if expect is not None and expect != current:
            raise CursorConflictError(
                f'cursor "{cname}" of {name!r} is at {current}, not the expected {expect}',
                detail={"topic": name, "cursor": cname, "seq": current, "expect_seq": expect},
            )
        if held is None:
            self.check_room(log, cname, owner)
        ticket = self._commit_cursor(log, cname, seq, owner)
        if ticket is not None:
            await self._app.wait(ticket)
        else:
            await self._app.yield_point()
        return self._cursor_info(log, cname)

    async def get_cursor(self, topic: str, cursor: str) -> CursorInfo:
        """The named cursor with its lag. Raises: topic_not_found, cursor_not_found."""
        name = check_topic_name(topic)
        cname = check_cursor_name(cursor)
        self._app.check_ready()
        log = self._app.live_topic(name)
        if self.cursors.get(log.topic_id, cname) is None:
            raise CursorNotFoundError.for_cursor(name, cname)
        await self._app.yield_point()
        return self._cursor_info(log, cname)

    async def list_cursors(self, topic: str) -> list[CursorInfo]:
        """Every cursor of ``topic`` in name order, with its lag. Raises: topic_not_found."""
        name = check_topic_name(topic)
        self._app.check_ready()
        log = self._app.live_topic(name)
        await self._app.yield_point()
        return [self._cursor_info(log, c) for c in sorted(self.cursors.of(log.topic_id))]

    async def delete_cursor(self, topic: str, cursor: str) -> DeleteCursorResult:
        """Forget the named cursor (absent: ``deleted=False``). Raises: topic_not_found."""
        name = check_topic_name(topic)
        cname = check_cursor_name(cursor)
        self._app.check_serving()
        log = self._app.live_topic(name)
        deleted = self.cursors.delete(log.topic_id, cname)
        if deleted and self._app.store is not None:
            payload = encode_delete(log.topic_id, cname)
            await self._app.wait(self._app.store.log_extension(CURSOR_DELETE, payload, sync=True))
        else:
            await self._app.yield_point()
        return DeleteCursorResult(name, cname, deleted)

    def cursor_lags(
        self, include: Callable[[str], bool] | None = None, limit: int = 0
    ) -> list[CursorInfo]:
        """The cursors of the topics ``include`` accepts, in (topic, cursor) name order:
        the first ``limit`` of them (0: all), for /v0/metrics. Only what is returned is
        built, and a topic's names are sorted only as far as needed (``heapq.nsmallest``),
        so a scrape costs what it shows, not every cursor that exists."""
        out: list[CursorInfo] = []
        by_topic = self.cursors.by_topic
        if not by_topic:
            return out
        for name in self._app.registry.names:
            log = self._app.registry.topics[name]
            held = by_topic.get(log.topic_id)
            if not held or (include is not None and not include(name)):
                continue
            room = limit - len(out) if limit else len(held)
            names = sorted(held) if room >= len(held) else heapq.nsmallest(room, held)
            out.extend(self._cursor_info(log, c) for c in names)
            if limit and len(out) >= limit:
                break
        return out

    # -- engine hooks ----------------------------------------------------------------------

    def start(self) -> None:
        """After recovery: drop the cursors of topics that are gone (_cursors rule 3)."""
        self.cursors.prune({log.topic_id for log in self._app.registry.topics.values()})

    def on_topic_deleted(self, log: TopicLog) -> None:
        self.cursors.drop_topic(log.topic_id)

    def cursor_start(self, log: TopicLog, cursor: str) -> int:
        """Where a read from ``cursor`` starts: its committed seq, or 0 (rule 1)."""
        held = self.cursors.get(log.topic_id, cursor)
        return held.seq if held is not None else 0

    def check_room(self, log: TopicLog, cursor: str, owner: Principal | None) -> None:
        """Rule 5: raise 429 when creating ``cursor`` of ``log`` would pass a bound (an
        existing cursor always has room)."""
        if self.cursors.get(log.topic_id, cursor) is not None:
            return
        limits = self._app.limits
        cap = limits.max_cursors_per_topic
        if cap and len(self.cursors.of(log.topic_id)) >= cap:
            raise ThrottledError.for_limit("max_cursors_per_topic", cap)
        per_key = limits.max_cursors_per_key
        key = owner.owner_id if owner is not None else -1
        if per_key and key >= 0 and self.cursors.per_owner.get(key, 0) >= per_key:
            raise ThrottledError.for_limit("max_cursors_per_key", per_key)

    def _commit_cursor(
        self, log: TopicLog, cursor: str, seq: int, owner: Principal | None = None
    ) -> WalTicket | None:
        """Apply and log one commit (synchronous: atomic between awaits). The caller has
        checked ``seq <= log.head`` (and rule 5 for a new cursor); None for a memory-only
        engine."""
        now = self.clock.now_ms()
        key = owner.owner_id if owner is not None else -1
        self.cursors.commit(log.topic_id, cursor, seq, now, key)
        if self._app.store is None:
            return None
        held = self.cursors.get(log.topic_id, cursor)
        payload = encode_put(log.topic_id, cursor, seq, now, held.owner if held else key)
        return self._app.store.log_extension(CURSOR_PUT, payload, sync=True)

    def commit_delivered(
        self, log: TopicLog, cursor: str, seq: int, owner: Principal | None = None
    ) -> None:
        """A stream of ``owner`` delivered up to ``seq`` of a ``commit: true``
        subscription (rules 3, 5)."""
        if log.deleted or self._app.registry.get(log.name) is not log:
            return
        held = self.cursors.get(log.topic_id, cursor)
        if held is not None and held.seq == seq:
            return
        store = self._app.store
        if store is not None and (store.wal.read_only or store.wal.full):
            return  # the WAL cannot take it; the next delivery commits again
        if held is None:
            try:
                self.check_room(log, cursor, owner)
            except ThrottledError:
                return  # rule 5: deleted meanwhile, and no room to create it again
        self._commit_cursor(log, cursor, min(seq, log.head), owner)

    @staticmethod
    def cursor_read_args(from_seq: int, cursor: object, commit: object) -> str | None:
        """Check a read's ``cursor``/``commit`` pair; the cursor name or None."""
        commit = _args.bool_arg("commit", commit)
        if cursor is None:
            if commit:
                raise InvalidRequestError.for_field("commit", "needs a cursor to commit to")
            return None
        cname = check_cursor_name(cursor)
        if from_seq:
            raise InvalidRequestError.for_field("from_seq", "give from_seq or cursor, not both")
        return cname

    async def commit_read(
        self, log: TopicLog, cursor: str, seq: int, owner: Principal | None = None
    ) -> None:
        """Commit what a read returned (``commit: true``), awaited like an explicit commit;
        the read checked rule 5 before it read."""
        if self.cursor_start(log, cursor) == seq or log.deleted:
            return
        ticket = self._commit_cursor(log, cursor, seq, owner)
        if ticket is not None:
            await self._app.wait(ticket)

    @staticmethod
    def named_starts(topics: Any) -> tuple[Any, dict[str, tuple[str, bool]]]:
        """Take ``cursor``/``commit`` out of a watch's per-topic options: the options left
        and topic -> (cursor name, commit). A cursor replaces ``from_seq``/``tail``."""
        if not isinstance(topics, Mapping):
            return topics, {}
        named: dict[str, tuple[str, bool]] = {}
        out: dict[str, Any] = {}
        for name, spec in topics.items():
            if isinstance(spec, Mapping) and ("cursor" in spec or "commit" in spec):
                rest = dict(spec)
                cursor, commit = rest.pop("cursor", None), rest.pop("commit", False)
                at = f"topics.{name}"
                commit = _args.bool_arg(f"{at}.commit", commit)
                if cursor is None:
                    if commit:
                        raise InvalidRequestError.for_field(
                            f"{at}.commit", "needs a cursor to commit to"
                        )
                else:
                    for key in ("from_seq", "tail", "from_ts"):
                        if key in rest:
                            raise InvalidRequestError.for_field(
                                f"{at}.{key}", "give a cursor or a start, not both"
                            )
                    named[name] = (check_cursor_name(cursor, f"{at}.cursor"), commit)
                spec = rest
            out[name] = spec
        return out, named

    def start_at_cursors(
        self,
        resolved: dict[str, tuple[TopicLog, int, TopicWatermarks]],
        named: Mapping[str, tuple[str, bool]],
        owner: Principal | None = None,
    ) -> None:
        """Move the resolved starts of the topics that name a cursor to its seq; a topic
        that commits to a new cursor is checked against rule 5 first (429 up front; the
        stream's commits check again, so the bound holds however many subscribe)."""
        for name, (cname, commit) in named.items():
            got = resolved.get(name)
            if got is not None:
                log = got[0]
                if commit:
                    self.check_room(log, cname, owner)
                seq = self.cursor_start(log, cname)
                resolved[name] = (log, seq, TopicWatermarks(seq, log.head, log.earliest))

    @staticmethod
    def commit_to(named: Mapping[str, tuple[str, bool]], topic: str) -> str | None:
        """The cursor a delivery of ``topic`` commits to (``commit: true``), or None."""
        got = named.get(topic)
        return got[0] if got is not None and got[1] else None

    def _cursor_info(self, log: TopicLog, cursor: str) -> CursorInfo:
        held = self.cursors.get(log.topic_id, cursor)
        seq, updated = (held.seq, held.updated_ms) if held is not None else (0, 0)
        return CursorInfo(
            topic=log.name,
            cursor=cursor,
            seq=seq,
            head_seq=log.head,
            earliest_seq=log.earliest,
            lag=max(0, log.head - seq),
            updated_ts=updated,
        )
