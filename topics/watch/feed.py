"""Watch feeds: the events of a set of topic cursors, read for one connection (contract §7,
§7.x; docs/WATCH.md "Fan-out").

An SSE stream (through its session's :class:`~topics.watch.session.WatchStream`) and a
WebSocket connection each read through one :class:`WatchFeed`; the hub (topics/watch/hub.py)
marks its topics dirty on every publish and, for an idle directly written stream, reads and
delivers for it (the hub's rules 1 and 8). A feed reads through the hub: its retention, its
per-topic read cache and its strong visibility (topics/watch/topic.py, rules 3 and 5).

Rules (numbered as the hub's, whose docstring lists them all):
4. A feed topic emits ``caught-up`` on every backlog -> live transition: its first read,
   and any read that drains it after one that did not. On its first read a loss tombstone
   (cap/ttl/mixed) is reported as ``from_seq_too_old`` (the cursor fell off the start
   before this stream began); later ones keep the engine's reason, as do ``recreated`` and
   gap markers (``source_trim``).
9. A read that raises (a record stored by an older version that no reader can render,
   docs/GUARANTEES.md "Stored data stays readable") does not end the stream: the failing
   record becomes a tombstone of its own seq with reason ``unreadable`` and the cursor
   moves on (``_past_unreadable``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

import trio

from ..types import Tombstone, TombstoneReason
from ..watch_types import (
    CaughtUpEvent,
    EndReachedEvent,
    TombstoneEvent,
    TopicDeletedEvent,
    WatchEvent,
)
from .guard import FirstRead, first_read
from .topic import FeedOptions, Outcome

if TYPE_CHECKING:
    from ..listener_types import ChangeListener, GroupSink
    from ..log.topic_log import TopicLog
    from .joins import JoinTable
    from .topic import TopicWatch

__all__ = ["FeedHub", "FeedTopic", "WatchFeed"]

_LOSS: frozenset[TombstoneReason] = frozenset({"cap", "ttl", "mixed"})
_log = logging.getLogger(__name__)
#: Rule 9: single-seq reads one failed read may take to find the record that fails.
_PROBES = 256


class FeedHub(Protocol):
    """What a feed uses of the hub (topics/watch/hub.py's ``WatchHub``), declared here so
    this module stays below the hub: the calls are the same, only the type is narrower."""

    @property
    def retained(self) -> TopicLog | None: ...
    @property
    def joiners(self) -> JoinTable[WatchFeed]: ...
    def retention(self, log: TopicLog) -> None: ...
    def listen(self, ft: FeedTopic) -> None: ...
    def unlisten(self, ft: FeedTopic) -> None: ...
    def read(self, ft: FeedTopic, upto: int) -> Outcome: ...
    def wait_committed(self, ft: FeedTopic) -> None: ...


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
        self.tw: TopicWatch[FeedTopic] | None = None
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
    ``await wait()`` returns once a topic is dirty again. Close it when done. A frontend
    that can deliver without a task says so with :meth:`attach` and :meth:`group`
    (topics/listener_types.py); it never sets the attributes itself.
    """

    __slots__ = ("_changed", "_event", "_hub", "closed", "ended", "marked", "sink", "topics")

    def __init__(self, hub: FeedHub) -> None:
        self._hub = hub
        self.topics: dict[str, FeedTopic] = {}
        #: Topics due for a read, in marking order (``poll`` reads them round robin). The
        #: hub's pass marks them directly, then calls ``notify`` once per feed (rule 1).
        self.marked: dict[FeedTopic, None] = {}
        # Created by ``wait`` only: an idle SSE stream that is delivered to directly never
        # waits, and keeps no event (rule 1 holds: ``wait`` checks the marks first).
        self._event: trio.Event | None = None
        self.closed = False
        # The attached listener's ``changed`` (``attach``), kept bound: the relay calls it
        # after marking a topic of this feed dirty, and wakes ``wait`` only when it returns
        # False (it could not, or topics are still behind).
        self._changed: Callable[[], bool] | None = None
        #: The frontend stream while it is one idle, directly written topic (``group``):
        #: the pass may then hand it a batch read once for every such watcher (rule 8).
        #: The hub reads it per watcher per change; only ``group`` sets it.
        self.sink: GroupSink | None = None
        #: Topics that reached their to_seq/to_ts end (issue 18), until subscribed again:
        #: the frames of their last read still commit to a ``commit: true`` named cursor.
        #: Created by the first end (an idle watcher pays nothing for it).
        self.ended: dict[str, FeedTopic] | None = None

    def attach(self, listener: ChangeListener) -> None:
        """Tell ``listener`` when a topic of this feed changed, before waking ``wait``
        (``listener_types`` rule 2): a frontend that can deliver without a task."""
        self._changed = listener.changed

    def group(self, sink: GroupSink | None) -> None:
        """Offer ``sink`` the hub's group delivery (rule 8) while it is an idle one-topic
        direct stream; None withdraws it (its pump reads for it again)."""
        self.sink = sink

    def detach(self) -> None:
        """No more calls to a listener or a sink: changes only wake ``wait``."""
        self._changed = None
        self.sink = None

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
        self._hub.listen(ft)  # rule 1: registered before the first read
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
        self._hub.joiners.drop(self)  # no more prefix joins (_watch_joins)

    @property
    def has_dirty(self) -> bool:
        """Some topic is marked for a read (``poll`` has work)."""
        return bool(self.marked)

    def dirty_topics(self) -> list[str]:
        return [ft.name for ft in self.marked]

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
        if not self.marked:
            return out
        batch = list(self.marked)
        self.marked.clear()
        for ft in batch:
            if not ft.removed and self._step(ft, out):
                self.marked[ft] = None
        return out

    async def wait(self) -> None:
        """Return once some topic may have something to deliver."""
        try:
            while not self.marked:
                event = self._event = trio.Event()
                await event.wait()
        finally:
            self._event = None  # ``_mark`` sets only an event someone waits on

    def notify(self) -> None:
        """Topics were marked by a relay: the attached listener delivers if it can, else
        ``wait`` wakes."""
        changed = self._changed
        if (changed is None or not changed()) and self._event is not None:
            self._event.set()

    # -- internals --------------------------------------------------------------------

    def _past_unreadable(self, ft: FeedTopic, upto: int) -> Outcome:
        """Rule 9: the read of ``ft`` up to ``upto`` raised. Probe one seq at a time for
        the first record that fails; the records before it go out as one read, as they
        would have, and the failing one becomes a tombstone of its own seq (``unreadable``)
        on the next poll, so the cursor moves past it."""
        _log.exception(
            "watch read of %s after seq %d failed; skipping what fails", ft.name, ft.cursor
        )
        hub, log, start = self._hub, ft.log, ft.cursor
        seq, failed = start, False
        try:
            # Bounded, so a long backlog costs this poll at most _PROBES reads; the
            # records probed fine go out and the next poll probes on from there.
            for _ in range(_PROBES):
                if seq >= upto:
                    break
                ft.cursor = seq
                try:
                    step = hub.read(ft, seq + 1).next_from_seq
                except Exception:
                    failed = True
                    break
                if step <= seq:
                    break
                seq = step
        finally:
            ft.cursor = start
        if failed and seq == start:
            bad = start + 1
            tomb = Tombstone(bad, bad, "unreadable", 1, log.earliest, log.head)
            return Outcome(tomb, None, bad, bad >= upto, upto)
        # The good records before the failing one (or, when no single record fails, the
        # first one alone: progress either way).
        try:
            part = hub.read(ft, seq if seq > start else start + 1)
        except Exception:
            part = hub.read(ft, start + 1)
        # Caught up only if that read reached ``upto`` itself (it was asked for less).
        caught_up = part.caught_up and part.next_from_seq >= upto
        return replace(part, caught_up=caught_up, head_seq=upto)

    def _mark(self, ft: FeedTopic) -> None:
        self.marked[ft] = None
        if self._event is not None:
            self._event.set()

    def _drop(self, ft: FeedTopic) -> None:
        ft.removed = True
        self.marked.pop(ft, None)
        self._hub.unlisten(ft)

    def _first_read(self, ft: FeedTopic, upto: int, out: list[WatchEvent]) -> bool:
        """``topic-added`` and the backlog guard (_watch_guard); True when the topic left:
        a join past the topic cap is reported (``join-refused``), then let go."""
        first_read(ft, upto, out)
        assert ft.guard is not None
        if not ft.guard.refused:
            return False
        if self.topics.get(ft.name) is ft:
            del self.topics[ft.name]
        self._drop(ft)
        return True

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
        if log is not hub.retained:
            hub.retention(log)
        assert ft.tw is not None
        upto = ft.tw.visible_head() if ft.opts.strong else log.head
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
            if ft.guard is not None and self._first_read(ft, upto, out):
                return False
        elif ft.live and ft.cursor == log.head and ft.opts.to_seq is None and ft.opts.to_ts is None:
            return False  # at the head, no end to find: a repeated wake (a join's, its write's)
        try:
            outcome = hub.read(ft, upto)
        except Exception:  # one record no reader can render must not end the stream
            outcome = self._past_unreadable(ft, upto)
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
            hub.wait_committed(ft)
        return False
