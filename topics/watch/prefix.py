"""Prefix watches: ``topic_prefix`` entries of a watch session or a WebSocket subscription
(issue 18 item 3; docs/WATCH.md "Prefix watch").

Role: parse and authorize the entries, list the topics they cover when the subscription
starts, and join topics created later (the registry calls the hub's ``joiners``, a
``_watch_joins.JoinTable``, which calls the matching joiners' ``join``) with a
``topic-added`` frame on their first read (_watch_guard).

Rules:
1. An entry is a topic-name prefix (at least one character of the name alphabet) with
   options ``tail`` (existing topics start at their head instead of their beginning) and
   ``max_backlog``. Topics named in ``topics`` keep their own start; a topic two entries
   cover belongs to the first.
2. Authorization narrows, as listing does (``Principal.list_prefixes``): an entry covers
   only the names the key may touch. An entry that shares no name with the allowlist is
   403 ``forbidden`` at once; one wider than the allowlist covers the allowed part (a
   tenant may watch ``"tenA-"`` with a key for ``"tenA-orders."`` and gets those). The
   narrowed prefixes are what every later join is matched against, so a join can never
   leave the key's scope, however long after the request it happens.
3. A topic created later joins at cursor 0: all of its records, however long the
   consumer was away. An idle session (no stream open) joins them when its next stream
   opens; a topic created and deleted while no stream was open is not reported.
4. Deletion follows the watch page: ``topic-deleted``, terminal for that instance. A new
   instance of the name under a watched prefix is a topic created later (rule 3): it joins
   with ``topic-added`` at 0, even when the old instance's ``topic-deleted`` was never
   sent (deleted and recreated while no stream was open), so a ``topic-added`` for a name
   the consumer already holds means "start this topic over".
5. Topics covered when the subscription starts count against ``TOPICS_MAX_WATCH_TOPICS``
   (400 beyond it), and so do later joins (issue 30): a subscription (an SSE session, a
   WebSocket connection) holds at most that many topics. A topic created past the cap
   does not join; the watcher gets ``join-refused`` for it instead (``_watch_guard``
   rule 6), so no topic goes missing in silence. Without this bound one watcher of a
   busy prefix held state, and a growing cursor id, for every topic ever created.
6. Nothing here runs per delivery: joins happen on topic creation and stream open only,
   and a creation reaches only the subscriptions whose prefix it starts with
   (``_watch_joins``), not every open prefix watch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from .. import _args
from ..errors import ForbiddenError, InvalidRequestError
from ..watch_types import TopicWatermarks
from .feed import WatchFeed
from .guard import FirstRead, SessionGuard
from .session import PrefixEntry, SessionTopic, WatchStream

if TYPE_CHECKING:
    from ..auth import Principal
    from ..log.registry import TopicRegistry
    from ..log.topic_log import TopicLog
    from .joins import JoinTable
    from .topic import FeedOptions

__all__ = [
    "FeedJoiner",
    "PrefixEntry",
    "StreamJoiner",
    "covered_topics",
    "join_existing",
    "join_stream_topic",
    "listen_for_topics",
    "parse_prefixes",
    "prefix_starts",
]

_PREFIX_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,254}")
_OPTIONS = frozenset({"tail", "max_backlog"})


def parse_prefixes(
    value: object, principal: Principal | None, default_max_backlog: int
) -> tuple[PrefixEntry, ...]:
    """Validate ``topic_prefix`` (an object prefix -> options, or an array of prefixes)
    and narrow it to ``principal``'s allowlist (rules 1, 2).

    Raises: invalid_request (malformed), forbidden (outside the allowlist).
    """
    if isinstance(value, list | tuple):
        value = dict.fromkeys(value)
    if not isinstance(value, Mapping) or not value:
        raise InvalidRequestError.for_field(
            "topic_prefix", "must be a non-empty object of prefix -> {tail, max_backlog}"
        )
    out: list[PrefixEntry] = []
    for prefix, spec in value.items():
        field = f"topic_prefix.{prefix}"
        if not isinstance(prefix, str) or _PREFIX_RE.fullmatch(prefix) is None:
            raise InvalidRequestError.for_field(
                "topic_prefix",
                f"{prefix!r} is not a topic name prefix (1-255 chars of A-Z a-z 0-9 . _ : -, "
                "starting alphanumeric)",
            )
        spec = {} if spec is None else spec
        if not isinstance(spec, Mapping):
            raise InvalidRequestError.for_field(field, "must be an object {tail, max_backlog}")
        for key in spec:
            if key not in _OPTIONS:
                raise InvalidRequestError.for_field(
                    f"{field}.{key}", "is not a prefix option (tail, max_backlog)"
                )
        tail = _args.bool_arg(f"{field}.tail", spec.get("tail", False))
        limit = _args.u64(f"{field}.max_backlog", spec.get("max_backlog", default_max_backlog))
        covers: tuple[str, ...] = (prefix,)
        if principal is not None:
            narrowed = principal.list_prefixes(prefix)
            if narrowed is not None:
                if not narrowed:
                    raise ForbiddenError(
                        f'api key may not watch prefix "{prefix}": no name under it is in '
                        "its name prefix allowlist",
                        detail={"topic_prefix": prefix},
                    )
                covers = tuple(narrowed)
        out.append(PrefixEntry(prefix, covers, tail, limit))
    return tuple(out)


def match(entries: tuple[PrefixEntry, ...], name: str) -> PrefixEntry | None:
    """The first entry covering ``name`` (rule 1)."""
    for entry in entries:
        if name.startswith(entry.covers):
            return entry
    return None


def _covered(registry: TopicRegistry, entry: PrefixEntry) -> Iterator[TopicLog]:
    for prefix in entry.covers:
        after: str | None = None
        while True:
            page, after = registry.page(prefix, after, 256)
            yield from page
            if after is None:
                break


def covered_topics(
    registry: TopicRegistry, entries: tuple[PrefixEntry, ...], named: Mapping[str, object]
) -> dict[str, tuple[TopicLog, PrefixEntry]]:
    """Every existing topic the entries cover that ``named`` does not (rule 1)."""
    out: dict[str, tuple[TopicLog, PrefixEntry]] = {}
    for entry in entries:
        for log in _covered(registry, entry):
            if log.name not in named and log.name not in out:
                out[log.name] = (log, entry)
    return out


def prefix_starts(
    registry: TopicRegistry,
    retention: Callable[[TopicLog], None],
    entries: tuple[PrefixEntry, ...],
    named: Mapping[str, object],
) -> dict[str, tuple[TopicLog, int, TopicWatermarks, PrefixEntry]]:
    """Where each covered topic starts: its head with ``tail``, else 0 (rule 1)."""
    out = {}
    for name, (log, entry) in covered_topics(registry, entries, named).items():
        retention(log)
        cursor = log.head if entry.tail else 0
        out[name] = (log, cursor, TopicWatermarks(cursor, log.head, log.earliest), entry)
    return out


def listen_for_topics(registry: TopicRegistry, joins: JoinTable[WatchFeed]) -> None:
    """Have the registry offer every new topic to the prefix subscriptions (through the
    table's prefix index: only those whose prefix the name starts with, rule 6)."""
    if registry.on_add is None:
        registry.on_add = joins.created


def _wake(feed: WatchFeed, name: str) -> None:
    """Have the topic's relay pass over the joined topic (an idle direct stream has no
    task to wake otherwise; the relay marks it and delivers, as for a write)."""
    ft = feed.topics.get(name)
    if ft is not None and ft.tw is not None:
        ft.tw.lot.unpark_all()


def _full(topics: dict[str, SessionTopic], cap: int) -> bool:
    """The session holds ``cap`` topics (rule 5). A joined topic whose deletion was sent
    (``done``, its instance deleted) holds nothing any more: it is let go here, so a
    namespace that churns does not fill the session with the dead (nor its memory)."""
    if len(topics) < cap:
        return False
    dead = [n for n, st in topics.items() if st.done and st.log is not None and st.log.deleted]
    for name in dead:
        del topics[name]
    return len(topics) >= cap


def join_stream_topic(
    stream: WatchStream, log: TopicLog, entry: PrefixEntry, cap: int, wake: bool = True
) -> None:
    """Join ``log`` into the stream's session and feed (rules 3-5): a new instance of a
    name the session holds restarts it; a new name past the cap is refused (reported)."""
    session, feed = stream.session, stream.feed
    st = session.topics.get(log.name)
    if st is not None and st.log is log:
        return
    if st is None and _full(session.topics, cap):
        feed.add(log.name, log, 0, session.opts, FirstRead(0, entry.prefix, cap))
    else:
        st = session.topics[log.name] = SessionTopic(log.name, log, 0)
        st.guard = SessionGuard(entry.max_backlog, entry.prefix, 0)
        feed.add(log.name, log, 0, session.opts, FirstRead(entry.max_backlog, entry.prefix))
    if wake:
        _wake(feed, log.name)


class StreamJoiner:
    """Joins new topics into an SSE stream's session and feed (rules 3-5)."""

    __slots__ = ("cap", "rank", "stream")

    def __init__(self, stream: WatchStream, cap: int) -> None:
        self.stream = stream
        self.cap = cap
        entries = stream.session.prefixes
        assert entries is not None
        #: Where each entry stands in the request: a topic two cover belongs to the first.
        self.rank: dict[PrefixEntry, int] = {}
        for i, entry in enumerate(entries):
            self.rank.setdefault(entry, i)

    def indexed(self) -> list[tuple[str, PrefixEntry]]:
        """(prefix, entry) for the join table's index, one per prefix an entry covers."""
        return [(c, e) for e in self.rank for c in e.covers]

    def join(self, log: TopicLog, candidates: list[PrefixEntry]) -> None:
        stream = self.stream
        if not stream.active or stream.feed.closed:
            return  # superseded or ending: the session joins it at its next open
        entry = min(candidates, key=self.rank.__getitem__)
        join_stream_topic(stream, log, entry, self.cap)


def join_existing(
    stream: WatchStream, registry: TopicRegistry, joins: JoinTable[WatchFeed], cap: int
) -> None:
    """At stream open: join what was created while no stream was open (rule 3), and
    keep joining while this stream is open."""
    entries = stream.session.prefixes
    assert entries is not None
    for entry in entries:
        for log in list(_covered(registry, entry)):
            if match(entries, log.name) is entry:
                join_stream_topic(stream, log, entry, cap, wake=False)
    joiner = StreamJoiner(stream, cap)
    joins.set(stream.feed, joiner, joiner.indexed())


class FeedJoiner:
    """Joins new topics into a WebSocket connection's feed (rules 3, 5): each subscribe's
    entries with that subscribe's options, the latest subscribe first."""

    __slots__ = ("cap", "entries", "feed")

    def __init__(self, feed: WatchFeed, cap: int) -> None:
        self.feed = feed
        self.cap = cap
        self.entries: list[tuple[PrefixEntry, FeedOptions]] = []

    def add(self, entries: tuple[PrefixEntry, ...], opts: FeedOptions) -> None:
        self.entries[:0] = [(e, opts) for e in entries]

    def indexed(self) -> list[tuple[str, int]]:
        """(prefix, position in ``entries``) for the join table's index."""
        return [(c, i) for i, (e, _) in enumerate(self.entries) for c in e.covers]

    def remove(self, prefixes: tuple[str, ...]) -> list[str]:
        """Stop joining under ``prefixes``; returns the topics they had joined or covered
        (re-index the feed after: positions moved)."""
        gone = [e for e, _ in self.entries if e.prefix in prefixes]
        self.entries = [(e, o) for e, o in self.entries if e.prefix not in prefixes]
        covers = tuple(c for e in gone for c in e.covers)
        return [n for n in self.feed.topics if covers and n.startswith(covers)]

    def join(self, log: TopicLog, candidates: list[int]) -> None:
        entry, opts = self.entries[min(candidates)]
        feed = self.feed
        ft = feed.topics.get(log.name)
        if ft is not None and ft.log is log:
            return
        if ft is None and len(feed.topics) >= self.cap:
            guard = FirstRead(0, entry.prefix, self.cap)  # rule 5: reported, not joined
        else:
            guard = FirstRead(entry.max_backlog, entry.prefix)
        feed.add(log.name, log, 0, opts, guard)
        _wake(feed, log.name)
