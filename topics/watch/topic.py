"""What the watch hub keeps per watched topic instance: its listeners and relay, the read
cache every watcher of the topic reads through, and the heads a strong watcher may see
(contract §7; docs/WATCH.md "Fan-out").

The hub (topics/watch/hub.py) creates one :class:`TopicWatch` when a topic gets its first
listener and drops it with the last; it runs the passes, this module answers the reads.

Rules (numbered as the hub's, whose docstring lists them all):
3. One read per (topic state, cursor, options, visible head): reads go through a small
   per-topic cache keyed by exactly that, cleared whenever the topic changes (head, live
   count, floors, config). The :class:`RecordBatch` it holds keeps the frames built from it,
   so N watchers at the same cursor cost one read and one encoding per wire shape.
5. Strong consistency: a strong feed sees a topic only up to the seqs whose WAL frames are
   committed (synced for the fsync class, written for memory/disk; ephemeral topics and a
   memory-only engine: the head). Publish and WAL submit happen in one synchronous step
   (``Engine.write``), so at any moment ``wal.next_lsn - 1`` covers every published seq:
   :meth:`TopicWatch.visible_head` notes (lsn, head) pairs and a head is visible once its
   lsn is. A strong feed that is caught up to its visible head but not to the real head
   waits for WAL progress (the hub's WAL relay).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

import trio

from ..log.reads import ReadBounds, read_diff
from ..query.cloudevents import to_cloudevents
from ..types import Tombstone
from ..watch_types import RecordBatch

if TYPE_CHECKING:
    from .._storage.wal import Wal
    from ..log.topic_log import TopicLog

__all__ = ["CACHE_ENTRIES", "MAX_PENDING_HEADS", "FeedOptions", "Outcome", "TopicWatch"]

#: Reads cached per watched topic before the cache starts over (rule 3).
CACHE_ENTRIES = 64
#: (lsn, head) pairs remembered per strong-watched topic (rule 5); dropping the oldest
#: only delays visibility until a later pair is committed.
MAX_PENDING_HEADS = 1024

#: A listener (the hub's are ``FeedTopic``s): a type parameter, not an import, so this
#: module stays below topics/watch/feed.py; it only keys ``listeners``.
L = TypeVar("L", bound=Hashable)


class FeedOptions(NamedTuple):
    """How a feed topic reads: window, byte budget, projection, node filter, consistency.
    Declared here, below topics/watch/feed.py, because the read cache keys on it (rule 3).

    A named tuple, not a dataclass: it is part of every read-cache key, looked up once per
    watcher per change, and a tuple hashes and compares in C (equal options of different
    sessions share cache entries)."""

    limit: int
    budget: int
    flags: int
    skip: frozenset[bytes] | None
    strong: bool
    #: Issue 18 (topics/watch/bounds.py): the ``where`` predicate, the CloudEvents type
    #: field (None: records), and a topic's own inclusive end.
    keep: Any = None
    ce_type: str | None = None
    to_seq: int | None = None
    to_ts: int | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """One read of a topic (cached and shared, rule 3)."""

    tombstone: Tombstone | None
    batch: RecordBatch | None
    next_from_seq: int
    caught_up: bool
    head_seq: int
    end_reached: bool = False  # a to_seq/to_ts end (issue 18)


class TopicWatch(Generic[L]):
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
        "wal",
    )

    def __init__(self, log: TopicLog, wal: Callable[[], Wal | None]) -> None:
        self.log = log
        self.wal = wal
        self.listeners: dict[L, None] = {}
        self.scope = trio.CancelScope()
        self.lot = trio.lowlevel.ParkingLot()  # the relay parks here (hub rule 1)
        #: The hub's listener on the topic (``TopicLog.listen``), set by ``WatchHub.listen``.
        self.hook: Callable[[], None] | None = None
        self.last_pass = -math.inf  # trio time of the last fan-out pass
        self.cache: dict[tuple[int, int, FeedOptions], Outcome] = {}
        self.version: tuple[int, ...] = ()
        self.strong = 0
        self.noted_head = 0
        self.committed = 0
        self.pending: deque[tuple[int, int]] = deque()

    def check_version(self) -> None:
        """Start the read cache over if the topic changed since it was filled (rule 3)."""
        log = self.log
        version = (
            log.head,
            log.count,
            log.earliest,
            log.cap_floor,
            log.ttl_floor,
            id(log.config),
        )
        if version != self.version:
            self.cache.clear()
            self.version = version

    def read(
        self,
        cursor: int,
        upto: int,
        opts: FeedOptions,
        now_ms: int,
        out_of_time: Callable[[], bool] | None = None,
    ) -> Outcome:
        """Read after ``cursor`` up to ``upto`` and cache the outcome (rule 3); the caller
        looked the cache up first. ``out_of_time``: a filtered read's time budget
        (topics/log/reads.py rule 4); one that ends on it is behind, and the feed reads on
        in its next step."""
        log = self.log
        o = opts
        bounds = None
        if o.keep is not None or o.to_seq is not None or o.to_ts is not None:
            bounds = ReadBounds(None, o.to_ts, o.to_seq, o.keep)
        res = read_diff(
            log, cursor, o.limit, o.skip, o.flags, o.budget, upto, bounds, now_ms, out_of_time
        )
        log.last_read_ts = now_ms
        from_seq = res.tombstone.gap_to if res.tombstone is not None else cursor
        batch = None
        if res.record_count:
            records_json = res.records_json
            if o.ce_type is not None:
                records_json = to_cloudevents(log.name, records_json, o.ce_type)
            batch = RecordBatch(
                log.name, from_seq, res.next_from_seq, upto, records_json, res.record_count
            )
        outcome = Outcome(
            res.tombstone,
            batch,
            res.next_from_seq,
            res.next_from_seq >= upto or bool(res.end_reached),
            upto,
            bool(res.end_reached),
        )
        if len(self.cache) >= CACHE_ENTRIES:
            self.cache.clear()
        self.cache[(cursor, upto, opts)] = outcome
        return outcome

    def visible_head(self) -> int:
        """The highest seq of the topic whose WAL frame is committed (rule 5)."""
        log = self.log
        wal = self.wal()
        durability = log.config.durability
        if wal is None or durability == "ephemeral":
            return log.head
        pending = self.pending
        if log.head > self.noted_head:
            pending.append((wal.next_lsn - 1, log.head))
            self.noted_head = log.head
            if len(pending) > MAX_PENDING_HEADS:
                pending.popleft()
        durable = wal.synced_lsn if durability == "fsync" else wal.written_lsn
        while pending and pending[0][0] <= durable:
            self.committed = pending.popleft()[1]
        return min(self.committed, log.head)
