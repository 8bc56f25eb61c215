"""Leases of a queue topic: the lease record, lease ids, the leases-log WAL entry types
and the durable-lease snapshot and replay of ``QueueState`` (``_queue`` rule 7).

Rules:
1. Every lifecycle change of a durable-lease queue is one WAL entry (types 48..63 are the
   queues' store extension range), carrying outcomes (deadlines, delivery counts, lease
   ids), never clock readings to redo, so replaying them in log order over the last
   snapshot rebuilds the same projection.
2. ``DurableLeases`` is a mixin of ``QueueState``: it reads and writes the projection's
   fields directly (they are declared below for the type checker), and keeps the restore
   path apart from the claim path.
"""

from __future__ import annotations

import heapq
import os
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..log.topic_log import TopicLog

if TYPE_CHECKING:
    from .jobs import Schedule

__all__ = [
    "ACKED",
    "CLAIMED",
    "DEAD_LETTERED",
    "ENTRY_TYPES",
    "EXTENDED",
    "RELEASED",
    "DurableLeases",
    "Lease",
    "is_live",
    "new_lease_ids",
]

# Leases-log WAL entry types (store extension range 48..63 is the queues'). Payloads are
# JSON arrays whose first element is the topic id:
CLAIMED = 48  # [tid, node, [[seq, deliveries, deadline, lease_id], ...]]
ACKED = 49  # [tid, [seq, ...]]
RELEASED = 50  # [tid, available_at, [seq, ...]]
EXTENDED = 51  # [tid, [[seq, lease_id, deadline], ...]]
DEAD_LETTERED = 52  # [tid, [seq, ...]]
ENTRY_TYPES = frozenset({CLAIMED, ACKED, RELEASED, EXTENDED, DEAD_LETTERED})

#: Random bytes per lease id: 96 bits, so a lease id cannot be guessed.
LEASE_ID_BYTES = 12


def new_lease_ids(n: int) -> list[str]:
    """``n`` unguessable lease ids ("lease_" + 24 hex digits), one urandom call for all."""
    hexed = os.urandom(LEASE_ID_BYTES * n).hex()
    w = 2 * LEASE_ID_BYTES
    return ["lease_" + hexed[i * w : (i + 1) * w] for i in range(n)]


@dataclass(slots=True)
class Lease:
    node: str
    lease_id: str
    deadline: int


class DurableLeases:
    """Snapshot and replay of a queue's projection (rule 2)."""

    log: TopicLog
    cursor: int
    deliveries: dict[int, int]
    leases: dict[int, Lease]
    free: set[int]
    delayed: dict[int, int]
    dead_lettering: set[int]
    dead_lettered: int
    doomed: list[int]
    last_tries: set[int]
    schedule: Schedule
    _free_order: deque[int]
    _deadlines: list[tuple[int, int, str]]
    _delays: list[tuple[int, int]]
    _seen: tuple[int, int]
    _drop_dead: Callable[[], bool]
    dead_letter_after: Callable[[], int]
    untrack: Callable[[int], None]

    def snapshot(self, durable: bool) -> dict[str, Any]:
        """The manifest entry: the counter always; the whole projection if ``durable``."""
        out: dict[str, Any] = {"dead_lettered": self.dead_lettered}
        if not durable:
            return out
        jobs: list[list[Any]] = []
        for seq, deliveries in self.deliveries.items():
            lease = self.leases.get(seq)
            if lease is not None:
                jobs.append([seq, deliveries, "L", lease.node, lease.lease_id, lease.deadline])
            elif seq in self.delayed:
                jobs.append([seq, deliveries, "D", self.delayed[seq]])
            else:  # FREE, or DEAD_LETTERING (not finished: claimable again after a restart)
                jobs.append([seq, deliveries, "F"])
        out["cursor"] = self.cursor
        out["jobs"] = jobs
        return out

    def load(self, section: dict[str, Any], durable: bool) -> None:
        """Start from a manifest entry (before the logged events are applied)."""
        self.dead_lettered = int(section.get("dead_lettered", 0))
        if not durable or "jobs" not in section:
            return
        self.cursor = int(section.get("cursor", 0))
        for job in section["jobs"]:
            seq, deliveries, kind = int(job[0]), int(job[1]), job[2]
            self.deliveries[seq] = deliveries
            if kind == "L":
                self.leases[seq] = Lease(str(job[3]), str(job[4]), int(job[5]))
            elif kind == "D":
                self.delayed[seq] = int(job[3])
            else:  # (rule 9's check waits for finish_restore, after the replay)
                self.free.add(seq)

    def apply_event(self, kind: int, body: list[Any]) -> None:
        """Replay one logged lifecycle event (``body`` without the topic id)."""
        if kind == CLAIMED:
            node = str(body[0])
            for seq, deliveries, deadline, lease_id in body[1]:
                self.free.discard(seq)
                self.delayed.pop(seq, None)
                self.dead_lettering.discard(seq)
                self.deliveries[seq] = int(deliveries)
                self.leases[seq] = Lease(node, str(lease_id), int(deadline))
                self.cursor = max(self.cursor, int(seq))
        elif kind == ACKED:
            for seq in body[0]:
                self.untrack(int(seq))
        elif kind == RELEASED:
            available_at = int(body[0])
            for seq in body[1]:
                if self.leases.pop(int(seq), None) is not None:
                    self.delayed[int(seq)] = available_at  # refresh frees it when due
        elif kind == EXTENDED:
            for seq, lease_id, deadline in body[0]:
                lease = self.leases.get(int(seq))
                if lease is not None and lease.lease_id == lease_id:
                    lease.deadline = int(deadline)
        elif kind == DEAD_LETTERED:
            for seq in body[0]:
                self.untrack(int(seq))
            self.dead_lettered += len(body[0])

    def finish_restore(self) -> None:
        """After loading and replaying: keep only live jobs, make every live seq <= cursor
        tracked (a job delivered while leases were not durable comes back FREE), and
        rebuild the heaps and the freelist order."""
        log = self.log
        self._drop_dead()
        schedule = self.schedule
        tracked = self.deliveries
        schedule.rebuild(lambda seq: seq not in tracked, self.cursor)
        for seq in list(_live_seqs(log, self.cursor)):
            if seq not in self.deliveries and seq not in schedule.pending:
                self.deliveries[seq] = 0
                self.free.add(seq)
        after = self.dead_letter_after()
        for seq in sorted(self.free):  # rule 9: what exhausted its deliveries goes out now
            if after and self.deliveries[seq] >= after:
                self.free.discard(seq)
                self.dead_lettering.add(seq)
                self.doomed.append(seq)
        self._free_order = deque(sorted(self.free))
        self._deadlines = [(ls.deadline, seq, ls.lease_id) for seq, ls in self.leases.items()]
        heapq.heapify(self._deadlines)
        self._delays = [(at, seq) for seq, at in self.delayed.items()]
        heapq.heapify(self._delays)
        self.last_tries = {seq for seq in self.leases if after and self.deliveries[seq] >= after}
        self._seen = (log.head, log.count)


def is_live(log: TopicLog, seq: int) -> bool:
    if seq < log.earliest or seq > log.head:
        return False
    loc = log.locate(seq)
    return loc is not None and log.segments[loc[0]].is_live(loc[1])


def _live_seqs(log: TopicLog, last: int) -> Iterator[int]:
    """Live seqs from ``earliest`` up to ``last`` inclusive."""
    for seg in list(log.segments):
        if seg.base_seq > last:
            return
        idx = seg.first_live(0)
        while idx < seg.count and seg.base_seq + idx <= last:
            yield seg.base_seq + idx
            idx = seg.first_live(idx + 1)
