"""Scheduled jobs and dedupe keys of a queue topic: what each job's meta stamps say.

Role: the part of a queue's projection (``QueueState``) that knows which jobs may not be
claimed yet and which dedupe keys are taken. Synchronous, like the rest of the projection.

Rules:
1. A job's schedule and dedupe key live in its stored ``meta``, stamped by the engine when
   the job was written (``stamp_meta``): ``$deliver_at`` (ms epoch), ``$dedupe_key`` and,
   for a window key, ``$dedupe_until`` (ms epoch). The stamps are the truth: the projection
   reads them from every append to the queue, whatever path wrote it (``read_stamps``),
   and rebuilds from the log when it is created after a restart (``scan_log``). So they
   survive restarts and crashes exactly as the record itself does, with no state of their
   own to log.
2. Schedule: ``pending`` maps seq -> time of the jobs not yet due, and a heap of
   (time, seq) pops them as the clock passes (no scan per claim). A job that becomes due
   above the claim cursor is simply fresh; one at or below it (the fresh walk skipped it
   while it was pending) goes on the ``due`` heap, which a claim merges with the fresh
   walk, so due jobs go out in seq order.
3. Dedupe keys map key -> (seq, until). An ``until_ack`` key (until None) is taken while
   its job is live in the queue (not acked, dead-lettered or deleted); a ``window`` key
   while ``now < until``, acked or not. Dead entries are dropped lazily: at lookup, and by
   a sweep whenever the map has doubled since the last one (so memory stays bounded by
   the live keys, amortised O(1) per key).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import ujson

if TYPE_CHECKING:
    from ..log.topic_log import TopicLog

__all__ = [
    "DEDUPE_MODES",
    "DELIVER_AT",
    "DEDUPE_KEY",
    "DEDUPE_UNTIL",
    "DedupeKeys",
    "Schedule",
    "Stamps",
    "read_stamps",
    "scan_log",
    "stamp_meta",
]

DELIVER_AT = "$deliver_at"
DEDUPE_KEY = "$dedupe_key"
DEDUPE_UNTIL = "$dedupe_until"
DEDUPE_MODES = ("until_ack", "window")
_NEEDLES = (b'"$deliver_at"', b'"$dedupe_key"')

#: (deliver_at or None, dedupe key or None, dedupe until or None) of one job.
Stamps = tuple[int | None, str | None, int | None]


class Schedule:
    """Jobs written with a future ``deliver_at`` (rule 2)."""

    __slots__ = ("due", "heap", "pending")

    def __init__(self) -> None:
        self.pending: dict[int, int] = {}
        self.heap: list[tuple[int, int]] = []
        self.due: list[int] = []

    def add(self, seq: int, at: int) -> None:
        self.pending[seq] = at
        heapq.heappush(self.heap, (at, seq))

    def pop_due(self, now: int, cursor: int) -> bool:
        """Move the jobs due by ``now`` out of ``pending``; True if any moved."""
        heap, pending = self.heap, self.pending
        moved = False
        while heap and heap[0][0] <= now:
            at, seq = heapq.heappop(heap)
            if pending.get(seq) == at:
                del pending[seq]
                if seq <= cursor:
                    heapq.heappush(self.due, seq)
                moved = True
        return moved

    def next_ms(self) -> int | None:
        return self.heap[0][0] if self.heap else None

    def discard(self, seq: int) -> None:
        """Forget a pending job (deleted or replaced); its heap entry goes stale."""
        self.pending.pop(seq, None)

    def next_due(self, usable: Callable[[int], bool]) -> int | None:
        """The lowest due seq that is still usable (stale entries are dropped)."""
        due = self.due
        while due and not usable(due[0]):
            heapq.heappop(due)
        return due[0] if due else None

    def rebuild(self, keep: Callable[[int], bool], cursor: int, now: int | None = None) -> None:
        """Keep only the pending jobs ``keep`` accepts and rebuild the heaps (restore)."""
        self.pending = {seq: at for seq, at in self.pending.items() if keep(seq)}
        self.heap = [(at, seq) for seq, at in self.pending.items()]
        heapq.heapify(self.heap)
        self.due = [seq for seq in self.due if keep(seq) and seq <= cursor]
        heapq.heapify(self.due)
        if now is not None:
            self.pop_due(now, cursor)


class DedupeKeys:
    """Dedupe keys taken in one queue (rule 3)."""

    __slots__ = ("_swept_size", "keys")

    def __init__(self) -> None:
        self.keys: dict[str, tuple[int, int | None]] = {}
        self._swept_size = 0

    def __bool__(self) -> bool:
        return bool(self.keys)

    def add(
        self, key: str, seq: int, until: int | None, now: int, live: Callable[[int], bool]
    ) -> None:
        keys = self.keys
        old = keys.get(key)
        if old is not None and old[0] > seq:
            return  # (a rebuild may meet an older job after a newer one with the key)
        keys[key] = (seq, until)
        if len(keys) > max(1024, 2 * self._swept_size):
            for k in [k for k, entry in keys.items() if not _taken(entry, now, live)]:
                del keys[k]
            self._swept_size = len(keys)

    def holder(self, key: str, now: int, live: Callable[[int], bool]) -> int | None:
        """The seq of the job holding ``key`` now, or None when the key is free."""
        entry = self.keys.get(key)
        if entry is None:
            return None
        if _taken(entry, now, live):
            return entry[0]
        del self.keys[key]
        return None


def _taken(entry: tuple[int, int | None], now: int, live: Callable[[int], bool]) -> bool:
    seq, until = entry
    return live(seq) if until is None else now < until


# -- stamps in meta ------------------------------------------------------------------------


def stamp_meta(meta: object, stamps: dict[str, Any]) -> object:
    """``meta`` with ``stamps`` added, in the form it came in: raw JSON bytes get the
    stamps spliced in before the closing brace (the client's bytes are kept verbatim; the
    stamps come last, so they win over a client key of the same name), a mapping is copied
    and updated, None becomes a new object. Anything else is returned unchanged for the
    encoder to reject as it would without stamps."""
    if meta is None:
        return stamps
    if isinstance(meta, bytes | bytearray | memoryview):
        body = bytes(meta).strip()
        if body[:1] != b"{" or body[-1:] != b"}":
            return meta
        inner = body[1:-1].strip()
        extra = ujson.dumps(stamps, ensure_ascii=False).encode()[1:-1]
        return b"{" + (inner + b"," if inner else b"") + extra + b"}"
    if isinstance(meta, dict):
        return {**meta, **stamps}
    return meta


def read_stamps(meta: object) -> Stamps | None:
    """The schedule and dedupe stamps of one record's meta (None when it has none).
    Cheap for a record without them: a substring test, no parse."""
    if meta is None:
        return None
    if type(meta) is dict:  # the embedded API's (and a stamped write's) usual form
        if DELIVER_AT not in meta and DEDUPE_KEY not in meta:
            return None
        value: object = meta
    elif isinstance(meta, bytes | bytearray | memoryview):
        raw = bytes(meta)
        if _NEEDLES[0] not in raw and _NEEDLES[1] not in raw:
            return None
        try:
            value = ujson.loads(raw)
        except ValueError:
            return None
    elif isinstance(meta, dict):
        if DELIVER_AT not in meta and DEDUPE_KEY not in meta:
            return None
        value = meta
    else:
        return None
    if not isinstance(value, dict):
        return None
    key = value.get(DEDUPE_KEY)
    return (
        _stamp_ms(value.get(DELIVER_AT)),
        key if isinstance(key, str) else None,
        _stamp_ms(value.get(DEDUPE_UNTIL)),
    )


#: The latest time a stamp may name. Clients cannot write stamps (topics/_meta_keys.py), but
#: a record stored before that rule could carry any integer, and a 400-digit one made the
#: wait computations (ms / 1000 as a float) raise OverflowError on every /work poll.
_STAMP_MS_MAX = (1 << 63) - 1


def _stamp_ms(value: object) -> int | None:
    """A stamp's time clamped to [0, 2**63 - 1] ms (never earlier than it says), or None."""
    if type(value) is not int:
        return None
    return value if 0 <= value <= _STAMP_MS_MAX else min(max(value, 0), _STAMP_MS_MAX)


def scan_log(log: TopicLog) -> Iterator[tuple[int, bool, Stamps]]:
    """(seq, live, stamps) of every record still held by ``log`` whose meta carries
    stamps, in seq order. A segment with no stamp anywhere in its bytes is skipped with
    one substring search, so a queue that never used the options pays next to nothing."""
    for seg in list(log.segments):
        buf = bytes(seg.view())
        if _NEEDLES[0] not in buf and _NEEDLES[1] not in buf:
            continue
        for idx in range(seg.retired, seg.count):
            seq, _, _, _, meta, _, live = seg.decode(idx)
            stamps = read_stamps(meta)
            if stamps is not None:
                yield seq, live, stamps
