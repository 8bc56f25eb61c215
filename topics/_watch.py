"""The watch hub: the engine side of live delivery (contract §7, §7.x; ARCHITECTURE
"Live delivery").

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
   frontend can deliver without a task (``deliver``: an idle SSE stream on the real
   server) is read and written right there by the pass (the WAL relay's too, rule 5); its
   event is only set when that frontend declines. The pass runs inside the publishing
   call when the topic is quiet (no pass in the last ``SYNC_QUIET_S``), has at most
   ``SYNC_FANOUT`` listeners and no strong one: the frames then leave before the write's
   answer, with no task switch on the way. A busy topic goes through the relay, which
   coalesces publishes into one pass; a large fan-out too, so it does not hold the
   writer's answer back.
2. Everything here is synchronous except the relays and ``WatchFeed.wait``: a poll, a
   commit, a GC pass is atomic between awaits (no locks).
3. One read per (topic state, cursor, options, visible head): reads go through a small
   per-topic cache keyed by exactly that, cleared whenever the topic changes (head, live
   count, floors, config). The :class:`RecordBatch` it holds keeps the frames built from it,
   so N watchers at the same cursor cost one read and one encoding per wire shape.
4. A feed topic emits ``caught-up`` on every backlog -> live transition: its first read,
   and any read that drains it after one that did not. On its first read a loss tombstone
   (cap/ttl/mixed) is reported as ``from_seq_too_old`` (the cursor fell off the start
   before this stream began); later ones keep the engine's reason, as do ``recreated`` and
   gap markers (``source_trim``).
5. Strong consistency: a strong feed sees a topic only up to the seqs whose WAL frames are
   committed (synced for the fsync class, written for memory/disk; ephemeral topics and a
   memory-only engine: the head). Publish and WAL submit happen in one synchronous step
   (``Engine.write``), so at any moment ``wal.next_lsn - 1`` covers every published seq:
   the hub notes (lsn, head) pairs and a head is visible once its lsn is. A strong feed
   that is caught up to its visible head but not to the real head waits for WAL progress.
6. A session's cursors are what its streams have *sent* (``WatchStream.commit`` after the
   bytes left); a stream opens at the session cursors, rewound (never advanced) by the
   client's Last-Event-ID. A session with an open stream is never collected; an idle one
   is collected ``session_ttl_ms`` after its last use, opportunistically on every create
   and open (``gc``), using the engine clock.
7. A newer stream on a session supersedes the older one (its commits stop counting; the
   frontend ends it with a final frame); removing a session ends its stream with
   ``SessionGoneError`` (410).

8. Group delivery. A pass reads once for all the idle one-topic direct streams (a feed
   with a ``sink``) that are caught up at the same cursor with the same options, and hands
   the batch to their frontend's ``write_group``, which writes one shared frame to each
   socket in one compiled loop (``_core.fanout``). Per watcher that leaves the system
   call, a cursor move and a commit; the one-by-one path of rule 1 (poll, step, cached
   read, frame lookup, write) cost about 4 us of Python per watcher on top.

Sessions, streams and the connection caps (rules 6-7) are topics/_watch_session.py: the
hub drives them, they call it back only when a stream closes. Why the rest is one module
(~850 lines): feeds, relays, the cache, group delivery and strong visibility share rules
1-5 and 8 and each other's private state (a feed registers with the hub's relay and reads
through its cache and visible head; a pass steps the feeds); split, every piece would
reach into the others.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import trio

from ._cloudevents import to_cloudevents
from ._reads import ReadBounds, read_diff
from ._watch_guard import FirstRead, feed_guard, first_read
from ._watch_session import (
    WID_RE,
    SessionTopic,
    StreamSlot,
    StreamSlots,
    WatchSession,
    WatchStream,
    new_wid,
)
from .errors import (
    InvalidRequestError,
    NotFoundError,
    ThrottledError,
    UnauthorizedError,
)
from .types import Tombstone, TombstoneReason
from .watch_types import (
    CaughtUpEvent,
    EndReachedEvent,
    RecordBatch,
    SessionGoneError,
    TombstoneEvent,
    TopicDeletedEvent,
    WatchEvent,
    WatchSettings,
    WatchStatistics,
)

if TYPE_CHECKING:
    from ._log import TopicLog
    from ._storage.wal import Wal
    from .auth import Principal

__all__ = [
    "FeedOptions",
    "FeedTopic",
    "StreamSlot",
    "WatchFeed",
    "WatchHub",
    "WatchSession",
    "WatchStream",
    "new_wid",
]

_log = logging.getLogger("topics.watch")
_LOSS: frozenset[TombstoneReason] = frozenset({"cap", "ttl", "mixed"})
#: Reads cached per watched topic before the cache starts over (rule 3).
CACHE_ENTRIES = 64
#: (lsn, head) pairs remembered per strong-watched topic (rule 5); dropping the oldest
#: only delays visibility until a later pair is committed.
MAX_PENDING_HEADS = 1024
#: A publish fans out synchronously (inside the publishing call) to at most this many
#: listeners of a topic, and only when the topic's last pass is this old (rule 1). At
#: ~10-15 us per idle SSE watcher, 32 hold a write's answer back by ~0.5 ms at most.
SYNC_FANOUT = 32
SYNC_QUIET_S = 0.001


class GroupSink(Protocol):
    """A frontend stream that takes a ready batch of its one topic without a task (rule 8).

    ``write_group`` is the same function for every sink of one frontend (a static method):
    the pass calls it once per group with the batch and the group's sinks, and it returns
    the sinks it could not take the batch for (they are served one by one, as rule 1 says).
    A sink that took the batch has its bytes sent, or queued behind a partial write, and
    commits its session cursor itself once they left.
    """

    @staticmethod
    def write_group(batch: RecordBatch, sinks: list[Any]) -> list[Any]: ...


class FeedOptions(NamedTuple):
    """How a feed topic reads: window, byte budget, projection, node filter, consistency.

    A named tuple, not a dataclass: it is part of every read-cache key, looked up once per
    watcher per change, and a tuple hashes and compares in C (equal options of different
    sessions share cache entries)."""

    limit: int
    budget: int
    flags: int
    skip: frozenset[bytes] | None
    strong: bool
    #: Issue 18 (topics/_watch_bounds.py): the ``where`` predicate, the CloudEvents type
    #: field (None: records), and a topic's own inclusive end.
    keep: Any = None
    ce_type: str | None = None
    to_seq: int | None = None
    to_ts: int | None = None


@dataclass(frozen=True, slots=True)
class _Outcome:
    """One read of a topic (cached and shared, rule 3)."""

    tombstone: Tombstone | None
    batch: RecordBatch | None
    next_from_seq: int
    caught_up: bool
    head_seq: int
    end_reached: bool = False  # a to_seq/to_ts end (issue 18)


# -- feeds ------------------------------------------------------------------------------------


class FeedTopic:
    """One topic of a feed: its read cursor and delivery state (rule 4)."""

    __slots__ = (
        "commit_to",
        "cursor",
        "degraded",
        "feed",
        "first",
        "guard",
        "live",
        "log",
        "name",
        "opts",
        "removed",
        "tw",
    )

    def __init__(
        self, feed: WatchFeed, name: str, log: TopicLog, cursor: int, opts: FeedOptions
    ) -> None:
        self.feed = feed
        self.name = name
        self.log = log
        self.cursor = cursor
        self.opts = opts
        self.first = True
        self.live = False
        self.degraded = False
        self.removed = False
        self.tw: _TopicWatch | None = None
        #: The named cursor this topic's deliveries commit to (``commit: true``), or None.
        self.commit_to: str | None = None
        #: What its first read must do before reading (_watch_guard): a ``topic-added``
        #: frame, the ``max_backlog`` check. None (the common case) costs nothing later.
        self.guard: FirstRead | None = None

    @property
    def lossy(self) -> bool:
        """A topic that drops records by itself (TTL, or caps with discard "old")."""
        cfg = self.log.config
        return bool(cfg.ttl_ms) or bool((cfg.cap_records or cfg.cap_bytes) and cfg.discard == "old")


class WatchFeed:
    """The events of a set of topic cursors, for one connection (rules 1, 4).

    ``poll()`` reads every dirty topic once (round robin) and returns the events in order;
    ``await wait()`` returns once a topic is dirty again. Close it when done.
    """

    __slots__ = ("_dirty", "_event", "_hub", "closed", "deliver", "ended", "sink", "topics")

    def __init__(self, hub: WatchHub) -> None:
        self._hub = hub
        self.topics: dict[str, FeedTopic] = {}
        self._dirty: dict[FeedTopic, None] = {}
        # Created by ``wait`` only: an idle SSE stream that is delivered to directly never
        # waits, and keeps no event (rule 1 holds: ``wait`` checks the marks first).
        self._event: trio.Event | None = None
        self.closed = False
        #: Set by a frontend that can deliver without waking a task (an idle SSE stream):
        #: the relay calls it after marking a topic of this feed dirty, and wakes ``wait``
        #: only when it returns False (it could not, or topics are still behind).
        self.deliver: Callable[[], bool] | None = None
        #: Set by a frontend while its stream is one idle, directly written topic: the
        #: pass may then hand it a batch read once for every such watcher (rule 8).
        self.sink: GroupSink | None = None
        #: Topics that reached their to_seq/to_ts end (issue 18), until subscribed again:
        #: the frames of their last read still commit to a ``commit: true`` named cursor.
        #: Created by the first end (an idle watcher pays nothing for it).
        self.ended: dict[str, FeedTopic] | None = None

    def add(
        self,
        name: str,
        log: TopicLog,
        cursor: int,
        opts: FeedOptions,
        guard: FirstRead | None = None,
    ) -> FeedTopic:
        """Start delivering ``name`` after ``cursor`` (replaces an earlier subscription)."""
        self.remove(name)
        if self.ended:
            self.ended.pop(name, None)
        ft = FeedTopic(self, name, log, cursor, opts)
        ft.guard = guard
        self.topics[name] = ft
        self._hub._listen(ft)  # rule 1: registered before the first read
        self._mark(ft)
        return ft

    def remove(self, name: str) -> bool:
        ft = self.topics.pop(name, None)
        if ft is None:
            return False
        self._drop(ft)
        return True

    def close(self) -> None:
        for ft in list(self.topics.values()):
            self._drop(ft)
        self.topics.clear()
        self.closed = True
        self._hub.joiners.pop(self, None)  # no more prefix joins (_watch_prefix)

    @property
    def has_dirty(self) -> bool:
        """Some topic is marked for a read (``poll`` has work)."""
        return bool(self._dirty)

    def dirty_topics(self) -> list[str]:
        return [ft.name for ft in self._dirty]

    def degrade_lossy(self) -> list[str]:
        """The outbound queue stayed full past its grace: every lossy topic jumps to its
        head with a ``from_seq_too_old`` tombstone at its next read. Returns their names."""
        names = []
        for ft in self.topics.values():
            if ft.lossy and not ft.removed:
                ft.degraded = True
                self._mark(ft)
                names.append(ft.name)
        return names

    def poll(self) -> list[WatchEvent]:
        """Read each dirty topic once; topics still behind stay dirty (round robin)."""
        out: list[WatchEvent] = []
        if not self._dirty:
            return out
        batch = list(self._dirty)
        self._dirty.clear()
        for ft in batch:
            if not ft.removed and self._step(ft, out):
                self._dirty[ft] = None
        return out

    async def wait(self) -> None:
        """Return once some topic may have something to deliver."""
        try:
            while not self._dirty:
                event = self._event = trio.Event()
                await event.wait()
        finally:
            self._event = None  # ``_mark`` sets only an event someone waits on

    # -- internals --------------------------------------------------------------------

    def _mark(self, ft: FeedTopic) -> None:
        self._dirty[ft] = None
        if self._event is not None:
            self._event.set()

    def _notify(self) -> None:
        """Topics were marked by a relay: deliver directly if the frontend can, else wake
        ``wait``."""
        deliver = self.deliver
        if (deliver is None or not deliver()) and self._event is not None:
            self._event.set()

    def _drop(self, ft: FeedTopic) -> None:
        ft.removed = True
        self._dirty.pop(ft, None)
        self._hub._unlisten(ft)

    def _step(self, ft: FeedTopic, out: list[WatchEvent]) -> bool:
        """One read of ``ft``; append its events. Returns True while it is behind."""
        hub = self._hub
        log = ft.log
        if log.deleted:
            out.append(TopicDeletedEvent(ft.name, log.head, ft.cursor))
            if self.topics.get(ft.name) is ft:
                del self.topics[ft.name]
            self._drop(ft)
            return False
        if log is not hub._retained:
            hub.retention(log)
        assert ft.tw is not None
        upto = hub._visible_head(ft.tw) if ft.opts.strong else log.head
        if ft.degraded:
            ft.degraded = False
            if upto > ft.cursor:
                lost = Tombstone(
                    ft.cursor + 1, upto, "from_seq_too_old", upto - ft.cursor, log.earliest, upto
                )
                ft.cursor = upto
                out.append(TombstoneEvent(ft.name, lost, upto))
        first = ft.first
        if first:
            ft.first = False
            if ft.guard is not None:
                first_read(ft, upto, out)  # topic-added, the backlog guard
        outcome = hub._read(ft, upto)
        tomb = outcome.tombstone
        if tomb is not None:
            if first and tomb.reason in _LOSS:
                tomb = replace(tomb, reason="from_seq_too_old")
            out.append(TombstoneEvent(ft.name, tomb, tomb.gap_to))
        if outcome.batch is not None:
            out.append(outcome.batch)
        ft.cursor = outcome.next_from_seq
        if outcome.end_reached:  # issue 18: terminal for this topic, like a deletion
            out.append(EndReachedEvent(ft.name, log.head, ft.cursor))
            if self.topics.get(ft.name) is ft:
                del self.topics[ft.name]
                if self.ended is None:
                    self.ended = {}
                self.ended[ft.name] = ft
            self._drop(ft)
            return False
        if not outcome.caught_up:
            ft.live = False
            return True
        if not ft.live:
            ft.live = True
            out.append(CaughtUpEvent(ft.name, outcome.head_seq, ft.cursor))
        if ft.opts.strong and upto < log.head:
            hub._wait_committed(ft)
        return False


# -- per-topic fan-out ---------------------------------------------------------------------


class _TopicWatch:
    """Everything the hub keeps per watched topic instance: listeners, relay, cache."""

    __slots__ = (
        "cache",
        "committed",
        "hook",
        "last_pass",
        "listeners",
        "log",
        "lot",
        "noted_head",
        "pending",
        "scope",
        "strong",
        "version",
    )

    def __init__(self, log: TopicLog) -> None:
        self.log = log
        self.listeners: dict[FeedTopic, None] = {}
        self.scope = trio.CancelScope()
        self.lot = trio.lowlevel.ParkingLot()  # the relay parks here (rule 1)
        #: The hub's listener on the topic (``TopicLog.listen``), set by ``_listen``.
        self.hook: Callable[[], None] | None = None
        self.last_pass = -math.inf  # trio time of the last fan-out pass
        self.cache: dict[tuple[int, int, FeedOptions], _Outcome] = {}
        self.version: tuple[int, ...] = ()
        self.strong = 0
        self.noted_head = 0
        self.committed = 0
        self.pending: deque[tuple[int, int]] = deque()


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
    ) -> None:
        self._now_ms = now_ms
        self.retention = retention
        self._wal = wal
        self._spawn = spawn
        self._wait_wal = wait_wal
        self.max_sessions = max_sessions
        self.max_sessions_per_key = max_sessions_per_key
        self.settings = settings if settings is not None else WatchSettings()
        self.slots = StreamSlots(max_connections, max_connections_per_key)
        self._sessions: dict[str, WatchSession] = {}
        # Sessions without a stream, oldest use first (rule 6).
        self._idle: OrderedDict[str, WatchSession] = OrderedDict()
        self._topics: dict[TopicLog, _TopicWatch] = {}
        self._strong_waiting: dict[FeedTopic, None] = {}
        self._strong_listeners = 0
        self._wal_scope: trio.CancelScope | None = None
        self._retained: TopicLog | None = None  # retention applied during this ``_wake``
        self._publishing = False  # a synchronous fan-out is running (``_publish``)
        self.reads = 0  # reads that missed the cache (tests, bench)
        #: Feeds with ``topic_prefix`` entries -> their join (``_watch_prefix``).
        self.joiners: dict[WatchFeed, Callable[[TopicLog], None]] = {}
        #: Commits a named cursor after a delivery (the engine's; set by ``WatchOps``).
        self.on_delivered: Callable[[TopicLog, str, int], None] | None = None

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

    def _stream_closed(self, stream: WatchStream) -> None:
        session = stream.session
        if session.stream is not stream:
            return  # superseded: the newer stream owns the session
        session.stream = None
        if self._sessions.get(session.wid) is session:
            session.last_access_ms = self._now_ms()
            self._idle[session.wid] = session
            self._idle.move_to_end(session.wid)

    # -- fan-out (rule 1) ---------------------------------------------------------------

    def _listen(self, ft: FeedTopic) -> None:
        tw = self._topics.get(ft.log)
        if tw is None:
            tw = self._topics[ft.log] = _TopicWatch(ft.log)
            tw.hook = lambda: self._publish(tw)
            ft.log.listen(tw.hook)
            self._spawn(lambda: self._relay(tw))
        tw.listeners[ft] = None
        ft.tw = tw
        if ft.opts.strong:
            tw.strong += 1
            self._strong_listeners += 1

    def _unlisten(self, ft: FeedTopic) -> None:
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

    def _publish(self, tw: _TopicWatch) -> None:
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

    async def _relay(self, tw: _TopicWatch) -> None:
        with tw.scope:
            lot = tw.lot
            while True:
                # Mark, then park, with no checkpoint between: a publish either happened
                # before the mark (the listeners will read it) or finds us parked.
                self._wake(tw)
                await lot.park()

    def _wake(self, tw: _TopicWatch) -> None:
        tw.last_pass = trio.current_time()
        if tw.strong:
            self._visible_head(tw)  # note (lsn, head) as early as possible (rule 5)
        if not tw.listeners:
            return
        # Retention (and the cache's version check) once for every delivery of this
        # synchronous pass, not per watcher: nothing can change the topic meanwhile.
        if not tw.log.deleted:
            self.retention(tw.log)
            self._check_version(tw)
            self._retained = tw.log
        try:
            groups: dict[tuple[int, FeedOptions, object], list[FeedTopic]] | None = None
            # A copy: a synchronous delivery may see the topic deleted and drop its listener.
            for ft in list(tw.listeners):
                if ft.removed:
                    continue
                feed = ft.feed
                sink = feed.sink
                if sink is not None and ft.live and not feed._dirty and not ft.degraded:
                    # Rule 8: a caught-up idle sink reads what every sink at its cursor reads.
                    key = (ft.cursor, ft.opts, sink.write_group)
                    if groups is None:
                        groups = {key: [ft]}
                    elif key in groups:
                        groups[key].append(ft)
                    else:
                        groups[key] = [ft]
                    continue
                feed._dirty[ft] = None
                feed._notify()
            if groups is not None:
                for members in groups.values():
                    try:
                        self._deliver_group(members)
                    except Exception:  # a failed read: each stream's own path handles it
                        _log.exception("group watch delivery failed; serving one by one")
                        for m in members:
                            if not m.removed:
                                m.feed._dirty[m] = None
                                m.feed._notify()
        finally:
            self._retained = None

    def _deliver_group(self, members: list[FeedTopic]) -> None:
        """Rule 8: one read for ``members`` (caught-up sinks at one cursor with the same
        options), handed to their frontend's ``write_group``; anything but a plain batch
        (a tombstone, a backlog, a deleted topic), and every sink the frontend declines,
        goes the one-by-one way of rule 1."""
        ft = members[0]
        log = ft.log
        rest = members
        if not log.deleted and not ft.opts.strong:
            outcome = self._read(ft, log.head)
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
                m.feed._dirty[m] = None
                m.feed._notify()

    # -- reads (rules 3, 5) -------------------------------------------------------------

    def _read(self, ft: FeedTopic, upto: int) -> _Outcome:
        tw = ft.tw
        assert tw is not None
        log = tw.log
        if log is not self._retained:
            self._check_version(tw)
        key = (ft.cursor, upto, ft.opts)
        hit = tw.cache.get(key)
        if hit is not None:
            return hit
        self.reads += 1
        o = ft.opts
        now = self._now_ms()
        bounds = None
        if o.keep is not None or o.to_seq is not None or o.to_ts is not None:
            bounds = ReadBounds(None, o.to_ts, o.to_seq, o.keep)
        res = read_diff(log, ft.cursor, o.limit, o.skip, o.flags, o.budget, upto, bounds, now)
        log.last_read_ts = now
        from_seq = res.tombstone.gap_to if res.tombstone is not None else ft.cursor
        batch = None
        if res.record_count:
            records_json = res.records_json
            if o.ce_type is not None:
                records_json = to_cloudevents(log.name, records_json, o.ce_type)
            batch = RecordBatch(
                log.name, from_seq, res.next_from_seq, upto, records_json, res.record_count
            )
        outcome = _Outcome(
            res.tombstone,
            batch,
            res.next_from_seq,
            res.next_from_seq >= upto or bool(res.end_reached),
            upto,
            bool(res.end_reached),
        )
        if len(tw.cache) >= CACHE_ENTRIES:
            tw.cache.clear()
        tw.cache[key] = outcome
        return outcome

    @staticmethod
    def _check_version(tw: _TopicWatch) -> None:
        """Start the read cache over if the topic changed since it was filled (rule 3)."""
        log = tw.log
        version = (
            log.head,
            log.count,
            log.earliest,
            log.cap_floor,
            log.ttl_floor,
            id(log.config),
        )
        if version != tw.version:
            tw.cache.clear()
            tw.version = version

    def _visible_head(self, tw: _TopicWatch) -> int:
        """The highest seq of ``tw``'s topic whose WAL frame is committed (rule 5)."""
        log = tw.log
        wal = self._wal()
        durability = log.config.durability
        if wal is None or durability == "ephemeral":
            return log.head
        pending = tw.pending
        if log.head > tw.noted_head:
            pending.append((wal.next_lsn - 1, log.head))
            tw.noted_head = log.head
            if len(pending) > MAX_PENDING_HEADS:
                pending.popleft()
        durable = wal.synced_lsn if durability == "fsync" else wal.written_lsn
        while pending and pending[0][0] <= durable:
            tw.committed = pending.popleft()[1]
        return min(tw.committed, log.head)

    def _wait_committed(self, ft: FeedTopic) -> None:
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
                        ft.feed._dirty[ft] = None
                        feeds[ft.feed] = None
                for feed in feeds:  # after marking all: one delivery per feed
                    feed._notify()
