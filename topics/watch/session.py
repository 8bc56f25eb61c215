"""Watch sessions, their streams and the connection caps (contract §7.1-§7.4, §11).

The hub (topics/watch/hub.py) creates sessions, opens streams on them and collects idle ones;
this module holds what a session and a stream are. A stream reads through its own
:class:`~topics.watch.feed.WatchFeed`, which the hub hands it.

Rules (the hub's rules 6 and 7):
1. A session's cursors are what its streams have *sent* (``WatchStream.commit`` after the
   bytes left); a stream opens at the session cursors, rewound (never advanced) by the
   client's Last-Event-ID: a cursor map, or a checkpoint frame number undone through the
   last ``CHECKPOINT_RING`` committed frames.
2. A newer stream on a session supersedes the older one (``stop``: its commits stop
   counting; the frontend ends it with a final frame). Closing a stream frees its
   connection slot and tells the hub, which starts the session's idle clock.
"""

from __future__ import annotations

import base64
import re
import secrets
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple, Protocol

from ..errors import ThrottledError, TopicsError
from ..watch_types import TopicWatermarks
from .guard import rewind_joins

if TYPE_CHECKING:
    from ..auth import Principal
    from ..listener_types import GroupSink, StreamListener
    from ..log.topic_log import TopicLog
    from .feed import WatchFeed
    from .guard import SessionGuard
    from .topic import FeedOptions

__all__ = [
    "CHECKPOINT_RING",
    "PrefixEntry",
    "WID_RE",
    "SessionTopic",
    "StreamSlot",
    "StreamSlots",
    "StreamHub",
    "WatchSession",
    "WatchStream",
    "new_wid",
]

WID_PREFIX = "wid_"
WID_RE = re.compile(r"wid_[A-Za-z0-9_-]{22}")
#: Committed frames remembered per session for checkpoint ids. A Last-Event-ID older than
#: this many frames rewinds only as far as the oldest remembered frame.
CHECKPOINT_RING = 1024


def new_wid() -> str:
    """A fresh session id: ``wid_`` + base64url of 16 random bytes (128 bits)."""
    return WID_PREFIX + base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode()


# -- connection caps (§11) ------------------------------------------------------------------


class StreamSlot:
    """One long-lived connection counted against the SSE/WebSocket caps; release once."""

    __slots__ = ("_slots", "key_index", "released")

    def __init__(self, slots: StreamSlots, key_index: int) -> None:
        self._slots = slots
        self.key_index = key_index
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._slots.give_back(self.key_index)


class StreamSlots:
    """The SSE/WebSocket connection caps (§11): a global one and one per key."""

    def __init__(self, cap: int, per_key_cap: int) -> None:
        self.cap = cap
        self.per_key_cap = per_key_cap
        self.total = 0
        self.per_key: dict[int, int] = {}

    def acquire(self, key_index: int) -> StreamSlot:
        if self.cap and self.total >= self.cap:
            raise ThrottledError.for_limit("max_sse_connections", self.cap)
        # Per-key caps only with auth: a dev-mode connection has no key (index -1).
        if key_index >= 0 and self.per_key_cap:
            held = self.per_key.get(key_index, 0)
            if held >= self.per_key_cap:
                raise ThrottledError.for_limit("max_sse_connections_per_key", self.per_key_cap)
            self.per_key[key_index] = held + 1
        self.total += 1
        return StreamSlot(self, key_index)

    def give_back(self, key_index: int) -> None:
        self.total -= 1
        if key_index >= 0 and self.per_key_cap:
            held = self.per_key.get(key_index, 0) - 1
            if held > 0:
                self.per_key[key_index] = held
            else:
                self.per_key.pop(key_index, None)


# -- sessions and streams --------------------------------------------------------------------


class PrefixEntry(NamedTuple):
    """One ``topic_prefix`` entry: as asked, the allowed prefixes it stands for
    (topics/watch/prefix.py rule 2), where existing topics start, and its ``max_backlog``
    (0: none). Declared here, below prefix.py, because a session holds its entries."""

    prefix: str
    covers: tuple[str, ...]
    tail: bool
    max_backlog: int

    def to_dict(self) -> dict[str, object]:
        return {"covers": list(self.covers), "tail": self.tail, "max_backlog": self.max_backlog}


class StreamHub(Protocol):
    """What a stream calls back on the hub (topics/watch/hub.py's ``WatchHub``), declared
    here so this module stays below the hub."""

    @property
    def on_delivered(self) -> Callable[[TopicLog, str, int, Principal | None], None] | None: ...
    def stream_closed(self, stream: WatchStream) -> None: ...


class SessionTopic:
    """A session's state for one topic: the cursor its streams have sent (rule 6)."""

    __slots__ = ("commit_to", "cursor", "done", "guard", "log", "name", "opts")

    def __init__(self, name: str, log: TopicLog | None, cursor: int) -> None:
        self.name = name
        self.log = log
        self.cursor = cursor
        #: Its own read options (a to_seq/to_ts end, issue 18), None: the session's.
        self.opts: FeedOptions | None = None
        self.done = False
        #: ``max_backlog`` and the prefix join of this topic (_watch_guard), or None.
        self.guard: SessionGuard | None = None
        #: The named cursor its streams' sent frames commit to (``commit: true``), or None.
        self.commit_to: str | None = None


class WatchSession:
    """A watch session: subscription, cursors, owner and the stream open on it."""

    __slots__ = (
        "frames",
        "heartbeat_ms",
        "last_access_ms",
        "opts",
        "owner",
        "prefixes",
        "ring",
        "stream",
        "topics",
        "wid",
    )

    def __init__(
        self,
        wid: str,
        owner: Principal | None,
        opts: FeedOptions,
        heartbeat_ms: int,
        topics: dict[str, SessionTopic],
        now_ms: int,
    ) -> None:
        self.wid = wid
        self.owner = owner
        self.opts = opts
        self.heartbeat_ms = heartbeat_ms
        self.topics = topics
        self.last_access_ms = now_ms
        self.stream: WatchStream | None = None
        self.frames = 0  # frame numbers handed out (checkpoint ids)
        # (frame_no, topic, cursor before, done before) of committed checkpoint frames;
        # created by the first one (a deque allocates ~600 B at once, and only sessions
        # of more than 64 topics use checkpoints).
        self.ring: deque[tuple[int, str, int, bool]] | None = None
        #: The ``topic_prefix`` entries it covers (_watch_prefix), None for none.
        self.prefixes: tuple[PrefixEntry, ...] | None = None

    def cursors(self) -> dict[str, int]:
        return {st.name: st.cursor for st in self.topics.values()}

    def rewind(self, target: Mapping[str, int] | int | None) -> None:
        """Apply a Last-Event-ID: a cursor map (per-topic minimum: rewind, never advance)
        or a checkpoint frame number (undo the frames committed after it)."""
        if target is None:
            return
        if isinstance(target, int):
            ring = self.ring
            while ring is not None and ring and ring[-1][0] > target:
                _, name, cursor, done = ring.pop()
                st = self.topics.get(name)
                if st is not None:
                    st.cursor, st.done = cursor, done
            return
        for name, seq in target.items():
            st = self.topics.get(name)
            if st is not None and seq < st.cursor:
                st.cursor = seq
        if self.prefixes is not None:
            rewind_joins(self.topics.values(), target)


class WatchStream:
    """One open stream on a session (engine side; the frontend owns the socket).

    The frontend reads it and calls its methods; it hears back through the listener it
    attaches (topics/listener_types.py), never by setting attributes here.
    """

    __slots__ = ("_hub", "_listener", "active", "closed", "end", "feed", "session", "slot")

    def __init__(
        self, hub: StreamHub, session: WatchSession, slot: StreamSlot, feed: WatchFeed
    ) -> None:
        self._hub = hub
        self.session = session
        self.slot = slot
        self.feed = feed
        self.active = True
        self.closed = False
        #: Why the server ends this stream (set by ``stop``): "superseded", or an error.
        self.end: TopicsError | str | None = None
        # Told by ``stop`` so the frontend can interrupt its idle wait (``attach``).
        self._listener: StreamListener | None = None

    def attach(self, listener: StreamListener, *, direct: bool) -> None:
        """Tell ``listener`` when the engine ends this stream (``stopped``) and, when
        ``direct`` (it can write without a task), when a topic changed (``changed``,
        before the feed's ``wait`` wakes: hub rule 1)."""
        self._listener = listener
        if direct:
            self.feed.attach(listener)

    def group(self, sink: GroupSink | None) -> None:
        """Join the hub's group delivery while an idle one-topic direct stream (hub rule
        8); None leaves it."""
        self.feed.group(sink)

    def detach(self) -> None:
        """The frontend is done: no more calls to its listener or sink."""
        self._listener = None
        self.feed.detach()

    def watermarks(self) -> dict[str, TopicWatermarks]:
        """Where each live topic of the stream starts, with its current watermarks."""
        out = {}
        for name, ft in self.feed.topics.items():
            out[name] = TopicWatermarks(ft.cursor, ft.log.head, ft.log.earliest)
        return out

    def next_frame_no(self) -> int:
        """A session-wide frame number (for checkpoint ids)."""
        self.session.frames += 1
        return self.session.frames

    def commit(self, topic: str, cursor: int, frame_no: int | None, deleted: bool) -> None:
        """The frame carrying ``topic``'s new ``cursor`` has been sent (rule 6)."""
        if not self.active:
            return
        st = self.session.topics.get(topic)
        if st is None:
            return
        if frame_no is not None:
            ring = self.session.ring
            if ring is None:
                ring = self.session.ring = deque(maxlen=CHECKPOINT_RING)
            ring.append((frame_no, topic, st.cursor, st.done))
        st.cursor = cursor
        if st.commit_to is not None and st.log is not None and self._hub.on_delivered:
            self._hub.on_delivered(st.log, st.commit_to, cursor, self.session.owner)
        if deleted:
            st.done = True

    def stop(self, reason: TopicsError | str) -> None:
        """End this stream (rule 7): its commits stop counting; the frontend is told."""
        if self.end is not None:
            return
        self.active = False
        self.end = reason
        if self._listener is not None:
            self._listener.stopped()

    def close(self) -> None:
        """The connection is gone: stop reading, free the slot, start the idle clock."""
        if self.closed:
            return
        self.closed = True
        self.feed.close()
        self.slot.release()
        self._hub.stream_closed(self)
