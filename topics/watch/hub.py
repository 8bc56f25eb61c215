"""The watch hub: the engine side of live delivery (contract §7, §7.x; docs/WATCH.md,
"Fan-out").

Role: hold watch sessions (subscription, per-topic cursors, owner, GC), run the feeds that
turn topic logs into stream events (records, tombstones, caught-up, topic-deleted) for SSE
streams and WebSocket subscriptions alike, wake them without polling, and share the work of
a batch between every watcher that reads it. Frontends own the sockets, the outbound
queues and the wire encoding; nothing here knows about HTTP.

Rules:
1. Register, read, wait. A feed topic joins its topic's listener set *before* its first
   read. Every publish of a watched topic (write, delete, topic delete) calls the hub
   synchronously (``TopicLog.listen``), which marks each listener dirty, either right
   there or through the topic's relay task: a feed reads only its dirty topics and waits
   on its own event when none is dirty. The relay marks every listener once when it
   starts (before it first parks) and re-parks in the same synchronous step after each
   wake-up, so no publish can fall between a read and a wait. Nothing polls. A feed whose
   frontend can deliver without a task (an idle SSE stream on the real server, attached
   as the feed's listener: topics/listener_types.py) is read and written right there by
   the pass (the WAL relay's too, rule 5); its event is only set when that frontend
   declines. The pass runs inside the publishing
   call when the topic is quiet (no pass in the last ``SYNC_QUIET_S``), has at most
   ``SYNC_FANOUT`` listeners and no strong one: the frames then leave before the write's
   answer, with no task switch on the way. A busy topic goes through the relay, which
   coalesces publishes into one pass; a large fan-out too, so it does not hold the
   writer's answer back.
2. Everything here is synchronous except the relays and ``WatchFeed.wait``: a poll, a
   commit, a GC pass is atomic between awaits (no locks).
3. One read per (topic state, cursor, options, visible head), through a per-topic cache
   (in full: topics/watch/topic.py, rule 3).
4. A feed topic emits ``caught-up`` on every backlog -> live transition, and reports a
   loss on its first read as ``from_seq_too_old`` (in full: topics/watch/feed.py, rule 4).
5. Strong consistency: a strong feed sees a topic only up to the seqs whose WAL frames
   are committed (in full: topics/watch/topic.py, rule 5); one that is caught up to that
   visible head but not to the real head waits here, on the hub's WAL relay.
6. A session's cursors are what its streams have *sent* (``WatchStream.commit`` after the
   bytes left); a stream opens at the session cursors, rewound (never advanced) by the
   client's Last-Event-ID. A session with an open stream is never collected; an idle one
   is collected ``session_ttl_ms`` after its last use, opportunistically on every create
   and open (``gc``), using the engine clock.
7. A newer stream on a session supersedes the older one (its commits stop counting; the
   frontend ends it with a final frame); removing a session ends its stream with
   ``SessionGoneError`` (410).

8. Group delivery. A pass reads once for all the idle one-topic direct streams (a feed
   with a ``sink``, which the frontend offers with ``WatchStream.group``) that are caught up at the same cursor with the same options, and hands
   the batch to their frontend's ``write_group``, which writes one shared frame to each
   socket in one compiled loop (``_core.fanout``). Per watcher that leaves the system
   call, a cursor move and a commit; the one-by-one path of rule 1 (poll, step, cached
   read, frame lookup, write) cost about 4 us of Python per watcher on top.

Where the rest lives: sessions, streams and the connection caps (rules 6-7) are
topics/watch/session.py (the hub drives them, they call it back only when a stream
closes); a feed and its topics (rule 4) are topics/watch/feed.py; what the hub keeps per
watched topic, its read cache (rule 3) and its visible head (rule 5) are
topics/watch/topic.py. This module keeps the sessions' registry, the passes (rules 1, 2
and 8) and the WAL relay. A feed calls the hub's public ``listen``/``unlisten``/``read``/
``wait_committed``; the pass marks a feed's topics (``WatchFeed.marked``) and notifies it,
the same attribute and call per watcher as when all of this was one module (rule 1's hot
path gains no indirection from the split).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

import trio

from ..errors import (
    InvalidRequestError,
    NotFoundError,
    ThrottledError,
    UnauthorizedError,
)
from ..log.reads import time_bound
from ..watch_types import SessionGoneError, WatchSettings, WatchStatistics
from .feed import FeedTopic, WatchFeed
from .guard import feed_guard
from .joins import JoinTable
from .session import (
    WID_RE,
    SessionTopic,
    StreamSlot,
    StreamSlots,
    WatchSession,
    WatchStream,
    new_wid,
)
from .topic import FeedOptions, Outcome, TopicWatch

if TYPE_CHECKING:
    from .._storage.wal import Wal
    from ..auth import Principal
    from ..log.topic_log import TopicLog

__all__ = ["StreamSlot", "WatchHub", "WatchSession", "WatchStream", "new_wid"]

_log = logging.getLogger("topics.watch")
#: A publish fans out synchronously (inside the publishing call) to at most this many
#: listeners of a topic, and only when the topic's last pass is this old (rule 1). At
#: ~10-15 us per idle SSE watcher, 32 hold a write's answer back by ~0.5 ms at most.
SYNC_FANOUT = 32
SYNC_QUIET_S = 0.001


class WatchHub:
    """Sessions, feeds, the per-topic relays and caches (see the module docstring).

    The engine creates one and passes it what it needs: the clock, retention, the WAL
    (None for a memory-only engine), a way to start tasks in its nursery and to wait for
    WAL progress, and the §11 caps.
    """

    def __init__(
        self,
        *,
        now_ms: Callable[[], int],
        retention: Callable[[TopicLog], None],
        wal: Callable[[], Wal | None],
        spawn: Callable[[Callable[[], Awaitable[None]]], None],
        wait_wal: Callable[[], Awaitable[None]],
        max_sessions: int,
        max_connections: int,
        max_connections_per_key: int,
        settings: WatchSettings | None = None,
        max_sessions_per_key: int = 0,
        max_where_ms: int = 0,
    ) -> None:
        self._now_ms = now_ms
        self.retention = retention
        self._wal = wal
        self._spawn = spawn
        self._wait_wal = wait_wal
        self.max_sessions = max_sessions
        self.max_sessions_per_key = max_sessions_per_key
        #: A filtered delivery read's time budget (topics/log/reads.py rule 4; 0: none).
        self.max_where_ms = max_where_ms
        self.settings = settings if settings is not None else WatchSettings()
        self.slots = StreamSlots(max_connections, max_connections_per_key)
        self._sessions: dict[str, WatchSession] = {}
        # Sessions without a stream, oldest use first (rule 6).
        self._idle: OrderedDict[str, WatchSession] = OrderedDict()
        self._topics: dict[TopicLog, TopicWatch[FeedTopic]] = {}
        self._strong_waiting: dict[FeedTopic, None] = {}
        self._strong_listeners = 0
        self._wal_scope: trio.CancelScope | None = None
        self.retained: TopicLog | None = None  # retention applied during this ``_wake``
        self._publishing = False  # a synchronous fan-out is running (``_publish``)
        self.reads = 0  # reads that missed the cache (tests, bench)
        #: Feeds with ``topic_prefix`` entries, their joiners and prefix index (_watch_joins).
        self.joiners: JoinTable[WatchFeed] = JoinTable()
        #: Commits a named cursor after a delivery (the engine's; set by ``WatchOps``).
        self.on_delivered: Callable[[TopicLog, str, int, Principal | None], None] | None = None

    # -- sessions ---------------------------------------------------------------------

    def create_session(
        self,
        starts: Mapping[str, tuple[TopicLog, int]],
        opts: FeedOptions,
        heartbeat_ms: int,
        owner: Principal | None,
    ) -> WatchSession:
        """Register a session over ``starts`` (topic -> (log, cursor)). 429 at the cap."""
        now = self._now_ms()
        self.gc(now)
        if self.max_sessions and len(self._sessions) >= self.max_sessions:
            raise ThrottledError.for_limit("max_watch_sessions", self.max_sessions)
        per_key = self.max_sessions_per_key
        if per_key and owner is not None and owner.key_index >= 0:
            # Counted, not tracked: a session leaves by GC or kill, and a count cannot drift.
            held = sum(
                1
                for s in self._sessions.values()
                if s.owner is not None and s.owner.key_index == owner.key_index
            )
            if held >= per_key:
                raise ThrottledError.for_limit("max_watch_sessions_per_key", per_key)
        wid = new_wid()
        while wid in self._sessions:  # 128 random bits: never, but cheap to be sure
            wid = new_wid()
        topics = {name: SessionTopic(name, log, cursor) for name, (log, cursor) in starts.items()}
        session = WatchSession(wid, owner, opts, heartbeat_ms, topics, now)
        self._sessions[wid] = session
        self._idle[wid] = session
        return session

    def open_stream(
        self,
        wid: str,
        owner: Principal | None,
        rewind: Mapping[str, int] | int | None = None,
    ) -> WatchStream:
        """Open a stream on session ``wid``: 400 malformed, 404 unknown or collected,
        401 not the creating key, 429 at a connection cap (rules 6, 7)."""
        if not isinstance(wid, str) or WID_RE.fullmatch(wid) is None:
            shown = wid if isinstance(wid, str) and len(wid) <= 64 else "(too long)"
            raise InvalidRequestError(
                f"malformed watch session id {shown!r}; it is wid_ + 22 base64url characters",
                detail={"field": "wid"},
            )
        self.gc(self._now_ms())
        session = self._sessions.get(wid)
        if session is None:
            raise NotFoundError(
                "watch session not found (unknown, or collected after session_ttl_ms "
                "without a stream); POST /v0/watch again",
                detail={"wid": wid},
            )
        if session.owner is not None and session.owner != owner:
            raise UnauthorizedError(
                "this watch session is bound to the API key that created it; "
                "present that key (Authorization: Bearer, or ?token= on the stream GET)"
            )
        slot = self.slots.acquire(session.owner.key_index if session.owner is not None else -1)
        old = session.stream
        if old is not None:
            old.stop("superseded")
        session.rewind(rewind)
        stream = WatchStream(self, session, slot, WatchFeed(self))
        for st in session.topics.values():
            if not st.done and st.log is not None:
                guard = None if st.guard is None else feed_guard(st.guard, st.cursor)
                opts = session.opts if st.opts is None else st.opts
                stream.feed.add(st.name, st.log, st.cursor, opts, guard)
        session.stream = stream
        self._idle.pop(wid, None)
        return stream

    def kill(self, wid: str) -> bool:
        """Remove a session now; its open stream ends with ``error`` 410 (rule 7)."""
        session = self._sessions.pop(wid, None)
        if session is None:
            return False
        self._idle.pop(wid, None)
        if session.stream is not None:
            session.stream.stop(
                SessionGoneError(
                    "the watch session was removed; POST /v0/watch again", detail={"wid": wid}
                )
            )
        return True

    def gc(self, now_ms: int) -> int:
        """Collect sessions idle (no stream) for more than ``session_ttl_ms``."""
        ttl = self.settings.session_ttl_ms
        removed = 0
        idle = self._idle
        while idle:
            wid, session = next(iter(idle.items()))
            if now_ms - session.last_access_ms <= ttl:
                break
            del idle[wid]
            del self._sessions[wid]
            removed += 1
        return removed

    def session(self, wid: str) -> WatchSession | None:
        return self._sessions.get(wid)

    def statistics(self) -> WatchStatistics:
        return WatchStatistics(len(self._sessions), self.slots.total)

    def stream_closed(self, stream: WatchStream) -> None:
        """A stream closed (``WatchStream.close``): its session starts its idle clock."""
        session = stream.session
        if session.stream is not stream:
            return  # superseded: the newer stream owns the session
        session.stream = None
        if self._sessions.get(session.wid) is session:
            session.last_access_ms = self._now_ms()
            self._idle[session.wid] = session
            self._idle.move_to_end(session.wid)

    # -- fan-out (rule 1) ---------------------------------------------------------------

    def listen(self, ft: FeedTopic) -> None:
        """Add ``ft`` to its topic's listeners (a feed calls it before its first read)."""
        tw = self._topics.get(ft.log)
        if tw is None:
            tw = self._topics[ft.log] = TopicWatch(ft.log, self._wal)
            tw.hook = lambda: self._publish(tw)
            ft.log.listen(tw.hook)
            self._spawn(lambda: self._relay(tw))
        tw.listeners[ft] = None
        ft.tw = tw
        if ft.opts.strong:
            tw.strong += 1
            self._strong_listeners += 1

    def unlisten(self, ft: FeedTopic) -> None:
        """Drop ``ft`` from its topic's listeners; the last one stops the topic's relay."""
        tw = ft.tw
        if tw is None or ft not in tw.listeners:
            return
        del tw.listeners[ft]
        self._strong_waiting.pop(ft, None)
        if ft.opts.strong:
            tw.strong -= 1
            self._strong_listeners -= 1
            if not self._strong_listeners and self._wal_scope is not None:
                self._wal_scope.cancel()
                self._wal_scope = None
        if not tw.listeners:
            tw.scope.cancel()
            del self._topics[tw.log]
            if tw.hook is not None:
                tw.log.unlisten(tw.hook)

    def _publish(self, tw: TopicWatch[FeedTopic]) -> None:
        """Every publish of ``tw``'s topic calls this synchronously (``TopicLog.wake``).

        A quiet topic with few listeners is fanned out right here, inside the publishing
        call: the frames leave before the writer's reply and no task has to be scheduled
        first. Otherwise the relay task does it once the publisher yields, which coalesces
        the publishes of a busy topic into one pass and keeps a large fan-out off the
        writer's reply. Strong listeners always go through the relay: nothing new is
        visible to them before the WAL commits the entry just submitted (rule 5).
        """
        now = trio.current_time()
        if (
            tw.strong
            or len(tw.listeners) > SYNC_FANOUT
            or now - tw.last_pass < SYNC_QUIET_S
            or self._publishing
        ):
            tw.lot.unpark_all()
            return
        self._publishing = True
        try:
            self._wake(tw)
        except Exception:  # the publish itself already happened: never fail it
            _log.exception("synchronous watch fan-out failed; the relay takes over")
            tw.lot.unpark_all()
        finally:
            self._publishing = False

    async def _relay(self, tw: TopicWatch[FeedTopic]) -> None:
        with tw.scope:
            lot = tw.lot
            while True:
                # Mark, then park, with no checkpoint between: a publish either happened
                # before the mark (the listeners will read it) or finds us parked.
                self._wake(tw)
                await lot.park()

    def _wake(self, tw: TopicWatch[FeedTopic]) -> None:
        tw.last_pass = trio.current_time()
        if tw.strong:
            tw.visible_head()  # note (lsn, head) as early as possible (rule 5)
        if not tw.listeners:
            return
        # Retention (and the cache's version check) once for every delivery of this
        # synchronous pass, not per watcher: nothing can change the topic meanwhile.
        if not tw.log.deleted:
            self.retention(tw.log)
            tw.check_version()
            self.retained = tw.log
        try:
            groups: dict[tuple[int, FeedOptions, object], list[FeedTopic]] | None = None
            # A copy: a synchronous delivery may see the topic deleted and drop its listener.
            for ft in list(tw.listeners):
                if ft.removed:
                    continue
                feed = ft.feed
                sink = feed.sink
                if sink is not None and ft.live and not feed.marked and not ft.degraded:
                    # Rule 8: a caught-up idle sink reads what every sink at its cursor reads.
                    key = (ft.cursor, ft.opts, sink.write_group)
                    if groups is None:
                        groups = {key: [ft]}
                    elif key in groups:
                        groups[key].append(ft)
                    else:
                        groups[key] = [ft]
                    continue
                feed.marked[ft] = None
                feed.notify()
            if groups is not None:
                for members in groups.values():
                    try:
                        self._deliver_group(members)
                    except Exception:  # a failed read: each stream's own path handles it
                        _log.exception("group watch delivery failed; serving one by one")
                        for m in members:
                            if not m.removed:
                                m.feed.marked[m] = None
                                m.feed.notify()
        finally:
            self.retained = None

    def _deliver_group(self, members: list[FeedTopic]) -> None:
        """Rule 8: one read for ``members`` (caught-up sinks at one cursor with the same
        options), handed to their frontend's ``write_group``; anything but a plain batch
        (a tombstone, a backlog, a deleted topic), and every sink the frontend declines,
        goes the one-by-one way of rule 1."""
        ft = members[0]
        log = ft.log
        rest = members
        if not log.deleted and not ft.opts.strong:
            outcome = self.read(ft, log.head)
            batch = outcome.batch
            if outcome.tombstone is None and outcome.caught_up and not outcome.end_reached:
                cursor = outcome.next_from_seq
                if batch is None:  # nothing to send (deleted records): just move on
                    for m in members:
                        m.cursor = cursor
                    return
                sink = ft.feed.sink
                assert sink is not None
                sinks = [m.feed.sink for m in members]
                declined = sink.write_group(batch, sinks)
                rest = []
                if declined:
                    refused = {id(s) for s in declined}
                    for m in members:
                        if id(m.feed.sink) in refused:
                            rest.append(m)
                        else:
                            m.cursor = cursor
                else:
                    for m in members:
                        m.cursor = cursor
        for m in rest:
            if not m.removed:
                m.feed.marked[m] = None
                m.feed.notify()

    # -- reads (rules 3, 5: topics/watch/topic.py) -------------------------------------

    def read(self, ft: FeedTopic, upto: int) -> Outcome:
        """``ft``'s next read up to ``upto``, shared through its topic's cache (rule 3)."""
        tw = ft.tw
        assert tw is not None
        if tw.log is not self.retained:
            tw.check_version()
        hit = tw.cache.get((ft.cursor, upto, ft.opts))
        if hit is not None:
            return hit
        self.reads += 1
        out_of_time = None
        if ft.opts.keep is not None:
            out_of_time = time_bound(self._now_ms, self.max_where_ms)
        return tw.read(ft.cursor, upto, ft.opts, self._now_ms(), out_of_time)

    # -- strong visibility (rule 5) ---------------------------------------------------

    def wait_committed(self, ft: FeedTopic) -> None:
        """Mark ``ft`` dirty at the next WAL progress (rule 5)."""
        self._strong_waiting[ft] = None
        if self._wal_scope is None:
            scope = self._wal_scope = trio.CancelScope()
            self._spawn(lambda: self._wal_relay(scope))

    async def _wal_relay(self, scope: trio.CancelScope) -> None:
        with scope:
            while True:
                await self._wait_wal()
                waiting, self._strong_waiting = self._strong_waiting, {}
                feeds: dict[WatchFeed, None] = {}
                for ft in waiting:
                    if not ft.removed:
                        ft.feed.marked[ft] = None
                        feeds[ft.feed] = None
                for feed in feeds:  # after marking all: one delivery per feed
                    feed.notify()
