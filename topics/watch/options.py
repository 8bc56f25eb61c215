"""The prefix and backlog options of one watch request (POST /v0/watch or a WebSocket
``subscribe``): parsed once, then applied to the session or feed they create.

Role: keep ``_watch_ops`` to a few calls while ``topic_prefix`` (``_watch_prefix``) and
``max_backlog`` / ``on_backlog`` (``_watch_guard``) go through both entry points with one
meaning.

Rules:
1. Everything is checked before anything changes: the options (400), the prefixes against
   the key's allowlist (403), the topic cap counting what the prefixes cover (400), and
   with ``on_backlog: "error"`` every topic's backlog (409).
2. ``max_backlog`` at the top level is the default of every topic and prefix; a topic's
   or a prefix's own ``max_backlog`` replaces it (0 turns it off for that one).
3. A request with ``topic_prefix`` may leave ``topics`` out or empty.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from .. import _args
from ..errors import InvalidRequestError
from ..watch_types import TopicWatermarks
from .guard import (
    FirstRead,
    SessionGuard,
    check_backlogs,
    on_backlog_arg,
    split_backlogs,
)
from .prefix import (
    FeedJoiner,
    PrefixEntry,
    listen_for_topics,
    parse_prefixes,
    prefix_starts,
)

if TYPE_CHECKING:
    from ..auth import Principal
    from ..log.registry import TopicRegistry
    from ..log.topic_log import TopicLog
    from ..settings import Limits
    from .feed import WatchFeed
    from .hub import WatchHub, WatchSession
    from .topic import FeedOptions

    class _Watches(Protocol):
        """What these options need of the engine's live delivery (``WatchOps``)."""

        @property
        def registry(self) -> TopicRegistry: ...

        @property
        def watch_hub(self) -> WatchHub: ...

        def apply_retention(self, log: TopicLog, now: int | None = None) -> None: ...

        @property
        def limits(self) -> Limits: ...


__all__ = ["WatchGuardArgs"]

Resolved = dict[str, tuple["TopicLog", int, TopicWatermarks]]


class WatchGuardArgs:
    """One request's ``topic_prefix`` / ``max_backlog`` / ``on_backlog`` (rules 1-3)."""

    __slots__ = ("entries", "error", "limits", "topics")

    def __init__(
        self,
        topics: object,
        limits: dict[str, int],
        entries: tuple[PrefixEntry, ...] | None,
        error: bool,
    ) -> None:
        self.topics = topics
        self.limits = limits
        self.entries = entries
        self.error = error

    @classmethod
    def parse(
        cls,
        topics: object,
        topic_prefix: object,
        max_backlog: object,
        on_backlog: object,
        principal: Principal | None,
    ) -> WatchGuardArgs:
        error = on_backlog_arg(on_backlog)
        default = _args.u64("max_backlog", max_backlog)
        topics, limits = split_backlogs(topics, default)
        entries = None
        if topic_prefix is not None:
            entries = parse_prefixes(topic_prefix, principal, default)
        return cls(topics, limits, entries, error)

    def starts(
        self, parse: Callable[[object, int], dict[str, tuple[int, bool]]], cap: int
    ) -> dict[str, tuple[int, bool]]:
        """The named topics' starts (none needed beside a prefix, rule 3)."""
        topics = self.topics
        if self.entries is not None and (topics is None or topics == {}):
            return {}
        return parse(topics, cap)

    def resolve(
        self, engine: _Watches, resolved: Resolved, held: Mapping[str, object], cap: int
    ) -> Resolved:
        """``resolved`` plus what the prefixes cover (not ``held`` already), rule 1."""
        if self.entries is not None:
            named = {**held, **resolved}
            covered = prefix_starts(engine.registry, engine.apply_retention, self.entries, named)
            total = len(named) + len(covered)
            if total > cap:
                raise InvalidRequestError(
                    f"topic_prefix: the watch would cover {total} topics; at most {cap} "
                    "(TOPICS_MAX_WATCH_TOPICS): use a narrower prefix",
                    detail={"field": "topic_prefix", "max": cap, "topics": total},
                )
            for name, (log, cursor, marks, entry) in covered.items():
                resolved[name] = (log, cursor, marks)
                if entry.max_backlog:
                    self.limits[name] = entry.max_backlog
                else:
                    self.limits.pop(name, None)
        if self.error and self.limits:
            check_backlogs({n: (log, c) for n, (log, c, _) in resolved.items()}, self.limits)
        return resolved

    def first_read(self, name: str) -> FirstRead | None:
        limit = self.limits.get(name, 0)
        return FirstRead(limit, None) if limit else None

    def arm_session(self, engine: _Watches, session: WatchSession) -> None:
        """Give the new session its limits and prefixes; listen for new topics."""
        if self.limits:
            for name, st in session.topics.items():
                limit = self.limits.get(name, 0)
                if limit:
                    st.guard = SessionGuard(limit)
        if self.entries is not None:
            session.prefixes = self.entries
            listen_for_topics(engine.registry, engine.watch_hub.joiners)

    def arm_feed(self, engine: _Watches, feed: WatchFeed, opts: FeedOptions) -> None:
        """A WebSocket feed keeps joining under the subscribed prefixes."""
        if self.entries is None:
            return
        joins = engine.watch_hub.joiners
        joiner = joins.get(feed)
        if not isinstance(joiner, FeedJoiner):
            joiner = FeedJoiner(feed, engine.limits.max_watch_topics)
        joiner.add(self.entries, opts)
        joins.set(feed, joiner, joiner.indexed())
        listen_for_topics(engine.registry, joins)

    def prefixes_dict(self) -> dict[str, Any] | None:
        """The prefixes as the answer echoes them (what each covers after narrowing)."""
        if self.entries is None:
            return None
        return {e.prefix: e.to_dict() for e in self.entries}
