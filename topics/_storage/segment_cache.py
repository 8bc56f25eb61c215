"""The block cache: sealed segments read back from their files, bounded in bytes.

Role: a ``disk``/``fsync`` topic's sealed, checkpointed segments live in their files
(``topics/log/cold_segment.py``); what a read needs of one is loaded into this cache and
kept while it is among the most recently used. One cache per open engine (a server has
one engine, so one per process), sized by ``Limits.cache_bytes`` (``TOPICS_CACHE_BYTES``).

Rules:
1. ``bytes`` never exceeds ``capacity`` except by the newest entry: the entry just put is
   never evicted to make room for itself, so a segment larger than the whole cache is
   still readable (it is dropped as soon as anything else is put). A cache of a few KiB
   therefore holds one segment and reloads on nearly every switch (the tests run so).
2. Entries are immutable from the cache's point of view: an owner that changes a cached
   object (a delete flag flipped in memory) also keeps that change itself and reapplies
   it after a reload, so eviction never loses state.
3. Only the trio thread touches the cache: no lock.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

__all__ = ["DEFAULT_CACHE_BYTES", "CacheStatistics", "SegmentCache"]

#: 256 MiB: room for about 250 sealed segments of 1 MiB, what a small server reading
#: recent history needs; docs/OPERATIONS.md says how to size it.
DEFAULT_CACHE_BYTES = 256 << 20

# The tiny cache pass of the test suites (scripts/test) caps every cache, in every
# process it starts, so nearly every read of a cold segment evicts another.
_TEST_CAP = int(os.environ.get("_TOPICS_TEST_CACHE_BYTES") or -1)


@dataclass(frozen=True, slots=True)
class CacheStatistics:
    """Gauges and counters for /v0/metrics."""

    capacity: int
    bytes: int
    entries: int
    hits: int
    misses: int
    evictions: int
    load_errors: int


class SegmentCache:
    """A byte-bounded LRU of loaded segment data (rule 1)."""

    __slots__ = ("_entries", "bytes", "capacity", "evictions", "hits", "load_errors", "misses")

    def __init__(self, capacity: int = DEFAULT_CACHE_BYTES) -> None:
        if capacity < 0:
            raise ValueError(f"cache capacity must be >= 0, got {capacity}")
        self.capacity = capacity if _TEST_CAP < 0 else min(capacity, _TEST_CAP)
        self._entries: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.load_errors = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> object | None:
        """The cached object for ``key`` (now the most recently used), or None (a miss)."""
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return entry[0]

    def peek(self, key: Hashable) -> object | None:
        """The cached object without touching recency or counters."""
        entry = self._entries.get(key)
        return None if entry is None else entry[0]

    def put(self, key: Hashable, value: object, nbytes: int) -> None:
        """Keep ``value`` (costing ``nbytes``) as the most recently used; evict to fit."""
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
        self._entries[key] = (value, nbytes)
        self.bytes += nbytes
        entries = self._entries
        while self.bytes > self.capacity and len(entries) > 1:
            _, (_, size) = entries.popitem(last=False)
            self.bytes -= size
            self.evictions += 1

    def discard(self, key: Hashable) -> None:
        """Forget ``key`` (its segment left the log)."""
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= old[1]

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0

    def statistics(self) -> CacheStatistics:
        return CacheStatistics(
            self.capacity,
            self.bytes,
            len(self._entries),
            self.hits,
            self.misses,
            self.evictions,
            self.load_errors,
        )
