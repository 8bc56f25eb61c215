"""What a watched topic's first read does before reading: the ``topic-added`` frame of a
prefix join and the backlog guard (issue 18 items 3-4; docs/WATCH.md "Prefix watch",
"Backlog guard").

Role: the per-topic extras of a subscription that matter only when a stream (or a
WebSocket subscription) starts reading a topic. The hub keeps them off its hot path: a
``FeedTopic`` carries a :class:`FirstRead` (or None, the common case) and ``_step`` looks
at it once, on the topic's first read, never on a later delivery.

Rules:
1. ``max_backlog`` counts seqs, not live records: the backlog of a cursor is
   ``upto - max(cursor, earliest - 1)`` (``upto``: the head the read may see; deleted
   records inside count too). A count of seqs is exact to compute without a scan and
   never under-counts what a replay would send.
2. A backlog larger than ``max_backlog`` on a topic's first read (a new subscription, a
   resumed stream, a prefix join) is not replayed: a ``backlog-exceeded`` event carries
   the head and moves the cursor there (its frame's id commits it), so the client
   re-snapshots and takes the live records that follow. No tombstone is added for the
   skipped range: the event itself says what was skipped.
3. ``on_backlog: "error"`` refuses instead, where there is still a request to refuse: 409
   ``backlog_exceeded`` at POST /v0/watch and on a WebSocket ``subscribe`` (all or nothing,
   nothing subscribed). A stream that resumes later always gets the event (its GET has no
   one to answer but the stream).
4. A topic that joined by prefix announces itself (``topic-added``, its starting cursor)
   before anything else of it; a stream that resumes before any later frame of that topic
   was committed announces it again (the same cursor: at least once, like ``caught-up``).
5. A Last-Event-ID cursor map that does not name a joined topic predates its join (every
   map a stream sends names every topic it holds), so that topic rewinds to where it
   joined: a consumer that crashed before processing the join loses none of its records.
6. A join past the subscription's topic cap is reported, not dropped in silence: the feed
   gets the topic for one read, which sends ``join-refused`` and removes it (the same
   wake-up path as a join, so an idle stream hears of it at once).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from .. import _args
from ..errors import InvalidRequestError
from ..watch_types import (
    BacklogExceededError,
    BacklogExceededEvent,
    JoinRefusedEvent,
    TopicAddedEvent,
)

if TYPE_CHECKING:
    from ..log.topic_log import TopicLog
    from ..watch_types import WatchEvent

__all__ = [
    "ON_BACKLOG",
    "FirstRead",
    "FirstReadTopic",
    "JoinedTopic",
    "SessionGuard",
    "backlog_of",
    "check_backlogs",
    "feed_guard",
    "first_read",
    "on_backlog_arg",
    "rewind_joins",
    "split_backlogs",
]

ON_BACKLOG = ("jump", "error")


class FirstRead(NamedTuple):
    """A feed topic's first-read extras: ``max_backlog`` (0: none) and the prefix whose
    join it announces (None: no ``topic-added``). With ``refused`` (the topic cap) the
    topic did not join: its first read is a ``join-refused`` event and nothing else, and
    the feed lets it go (rule 6)."""

    max_backlog: int
    added: str | None
    refused: int = 0


class SessionGuard(NamedTuple):
    """A session topic's extras: ``max_backlog`` (0: none), and for a topic that joined
    by prefix after the session began, the prefix and the cursor it joined at."""

    max_backlog: int
    prefix: str | None = None
    joined_at: int = 0


class FirstReadTopic(Protocol):
    """What ``first_read`` uses of a feed topic (feed.py's ``FeedTopic``): declared here,
    not imported, so this module stays below feed.py and session.py."""

    cursor: int

    @property
    def name(self) -> str: ...
    @property
    def log(self) -> TopicLog: ...
    @property
    def guard(self) -> FirstRead | None: ...


class JoinedTopic(Protocol):
    """What ``rewind_joins`` uses of a session topic (session.py's ``SessionTopic``)."""

    cursor: int
    done: bool

    @property
    def name(self) -> str: ...
    @property
    def guard(self) -> SessionGuard | None: ...


def feed_guard(guard: SessionGuard, cursor: int) -> FirstRead | None:
    """What a stream opening at ``cursor`` does first for this session topic (rule 4)."""
    added = guard.prefix if guard.prefix is not None and cursor == guard.joined_at else None
    if added is None and not guard.max_backlog:
        return None
    return FirstRead(guard.max_backlog, added)


def backlog_of(log: TopicLog, cursor: int, upto: int) -> int:
    """Seqs a read from ``cursor`` up to ``upto`` would cover (rule 1)."""
    return max(0, upto - max(cursor, log.earliest - 1))


def first_read(ft: FirstReadTopic, upto: int, out: list[WatchEvent]) -> None:
    """Rules 2 and 4, on ``ft``'s first read, before the read itself."""
    guard = ft.guard
    assert guard is not None
    if guard.refused:
        out.append(JoinRefusedEvent(ft.name, guard.added or "", upto, guard.refused))
        return
    if guard.added is not None:
        out.append(TopicAddedEvent(ft.name, guard.added, upto, ft.cursor))
    limit = guard.max_backlog
    if limit:
        backlog = backlog_of(ft.log, ft.cursor, upto)
        if backlog > limit:
            out.append(BacklogExceededEvent(ft.name, ft.cursor, upto, backlog, limit, upto))
            ft.cursor = upto


def rewind_joins(topics: Iterable[JoinedTopic], target: Mapping[str, int]) -> None:
    """Rule 5: joined topics a Last-Event-ID map does not name go back to their join."""
    for st in topics:
        guard = st.guard
        if (
            guard is not None
            and guard.prefix is not None
            and st.name not in target
            and guard.joined_at < st.cursor
        ):
            st.cursor = guard.joined_at
            st.done = False


# -- arguments --------------------------------------------------------------------------------


def on_backlog_arg(value: object) -> bool:
    """Validate ``on_backlog``; True when it is ``"error"`` (rule 3)."""
    if value not in ON_BACKLOG:
        raise InvalidRequestError.for_field(
            "on_backlog", f'must be "jump" or "error", got {value!r}'
        )
    return value == "error"


def split_backlogs(topics: object, default: int) -> tuple[object, dict[str, int]]:
    """Take ``max_backlog`` out of each per-topic spec of a watch ``topics`` map.

    Returns the map without it (for the start parser, which knows nothing of it) and each
    topic's limit (``default`` where the spec has none; 0 entries are left out). Anything
    that is not a map of objects is passed on untouched for the start parser to refuse.
    """
    limits: dict[str, int] = {}
    if not isinstance(topics, Mapping):
        return topics, limits
    out: dict[Any, Any] = {}
    for name, spec in topics.items():
        limit = default
        if isinstance(spec, Mapping) and "max_backlog" in spec:
            limit = _args.u64(f"topics.{name}.max_backlog", spec["max_backlog"])
            spec = {k: v for k, v in spec.items() if k != "max_backlog"}
        out[name] = spec
        if limit and isinstance(name, str):
            limits[name] = limit
    return out, limits


def check_backlogs(starts: Mapping[str, tuple[TopicLog, int]], limits: Mapping[str, int]) -> None:
    """409 ``backlog_exceeded`` for the first topic further behind than its limit (rule 3)."""
    for name, (log, cursor) in starts.items():
        limit = limits.get(name, 0)
        if not limit:
            continue
        backlog = backlog_of(log, cursor, log.head)
        if backlog > limit:
            raise BacklogExceededError(
                f'topic "{name}" is {backlog} seqs behind its head, more than max_backlog '
                f"{limit}: re-snapshot and watch it from the head (tail), or raise max_backlog",
                detail={
                    "topic": name,
                    "from_seq": cursor,
                    "head_seq": log.head,
                    "backlog": backlog,
                    "max_backlog": limit,
                },
            )
