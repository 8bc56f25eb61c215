"""The hub's table of prefix joins: which feed joins new topics under which prefixes
(issue 30, finding 2; docs/WATCH.md "Prefix watch").

Role: the registry calls :meth:`JoinTable.created` for every topic it adds; the table
finds the feeds whose prefixes the name starts with through a :class:`PrefixIndex`
(``topics.watch.index``) and hands each its matching entries. What a join does is the
joiner's (``topics.watch.prefix``); this module only routes.

Rules:
1. A creation costs the prefix index lookup (at most one probe per character of the
   name) plus the joins whose prefix matches: a feed none of whose prefixes the name
   starts with is never called. Before, every open prefix watch was called on every
   creation, whatever its prefixes.
2. A feed has one joiner; ``set`` replaces it with its new entries, ``drop`` takes it and
   all its entries out (the feed closing, its last prefix unsubscribed).
3. ``created`` never raises: the topic is created whatever a watch makes of it.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from .index import PrefixIndex

if TYPE_CHECKING:
    from ..log.topic_log import TopicLog

__all__ = ["JoinTable", "Joiner"]

_log = logging.getLogger("topics.watch")
#: A feed (the hub's are ``WatchFeed``s): a type parameter, not an import, so this module
#: stays below topics/watch/feed.py, which drops itself from the table on close.
F = TypeVar("F", bound=Hashable)


class Joiner(Protocol):
    """Joins a new topic into one feed, given the entries of it whose prefix matched (in
    the index's order: shortest prefix first); it picks the one its own order prefers."""

    def join(self, log: TopicLog, candidates: list[Any]) -> None: ...


class JoinTable(Generic[F]):
    """Feed -> joiner, and the prefix index of their entries (see the module docstring)."""

    __slots__ = ("_index", "_joiners", "joins")

    def __init__(self) -> None:
        self._joiners: dict[F, Joiner] = {}
        self._index: PrefixIndex[F, Any] = PrefixIndex()
        #: Joiners called by creations (tests, the bench: rule 1's bound is counted).
        self.joins = 0

    def __contains__(self, feed: object) -> bool:
        return feed in self._joiners

    def __len__(self) -> int:
        return len(self._joiners)

    @property
    def probes(self) -> int:
        """Prefix index probes made by creations (rule 1)."""
        return self._index.probes

    def get(self, feed: F) -> Joiner | None:
        return self._joiners.get(feed)

    def set(self, feed: F, joiner: Joiner, entries: Iterable[tuple[str, Any]]) -> None:
        """``feed`` joins through ``joiner`` under each ``(prefix, value)`` of ``entries``
        (the value is what ``joiner.join`` is handed when the prefix matches)."""
        self._index.remove(feed)
        self._joiners[feed] = joiner
        for prefix, value in entries:
            self._index.add(prefix, feed, value)

    def drop(self, feed: F) -> None:
        self._joiners.pop(feed, None)
        self._index.remove(feed)

    def created(self, log: TopicLog) -> None:
        """The registry's ``on_add``: hand the new topic to the feeds it matches."""
        for feed, candidates in self._index.matches(log.name).items():
            joiner = self._joiners.get(feed)
            if joiner is None:
                continue
            self.joins += 1
            try:
                joiner.join(log, candidates)
            except Exception:
                _log.exception("joining topic %r into a prefix watch failed", log.name)
