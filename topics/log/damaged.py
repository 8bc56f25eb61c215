"""Quarantined segments (issue 32): a segment whose bytes fail their checks costs its
topic exactly the seqs it can no longer read, never the topic or the server.

:func:`quarantine` is the one entry point for code that finds a bad segment on its own
(recovery, the online scrub); a cold segment that finds its damage while loading tells
its log through the hook :func:`attach` installs. Both end in :func:`note_damage`. The
segment side (``ColdSegment`` rule 7) is here too: what is readable, and reading it.

Rules:
1. The unreadable range of a segment becomes a gap marker with reason ``corrupt`` on the
   range's last seq, ``source_from``..``source_to`` being the range itself. ``read_diff``
   treats it as it treats a ``crash`` marker: a window ends before the range, and a reader
   that reaches it gets one ``corrupt`` tombstone over the range from its cursor on, then
   the records after it. One marker per damaged segment; a wider report replaces it.
2. The range runs from the first frame that fails its checks (every frame before it
   passed its CRC and seq checks, so the prefix is served) to the segment's last seq, the
   manifest's count being exact; a bad header makes it the whole segment.
3. No floor moves: the marker is the tombstone, and ``evict_floor`` stays at or below
   ``earliest`` (topic_log rule 3). ``count``/``bytes`` lose the records in the range as
   the segment's next load finds them gone (``ColdSegment.on_adjust``).
4. The segment stays in the log, and so its file on disk and its manifest entry
   (``damaged``, written by the next checkpoint, restored by recovery), until retention
   or a delete passes it: an operator may want the file, and ``topics verify`` lists it.
5. Every quarantine is reported to the engine's ``DamageRegistry`` with the topic's name:
   ``/v0/health``, ``topics_storage_damaged_files`` and one log line naming the file,
   the offset and the command that checks the directory.
"""

from __future__ import annotations

import bisect
from dataclasses import replace
from typing import TYPE_CHECKING

from .._core import SegmentBuffer
from .._storage.damage import Damage
from .._storage.readable_prefix import ReadablePrefix, read_readable_prefix
from ..errors import StorageUnavailableError
from .gap_markers import MAX_GAP_MARKERS, GapMarker

if TYPE_CHECKING:
    from .cold_segment import ColdSegment, Segment
    from .topic_log import TopicLog

__all__ = [
    "attach",
    "corrupt_marker",
    "find_damage",
    "load_readable",
    "mark_damaged",
    "note_damage",
    "quarantine",
    "readable",
    "relpath",
]


def quarantine(log: TopicLog, seg: Segment, damage: Damage) -> None:
    """Quarantine ``seg`` of ``log`` from ``damage.first_seq`` (the segment's base when
    None) to its end: rules 1-5 at once. The readable prefix is loaded here so the topic's
    counters drop the lost records now; an ``OSError`` reading it surfaces as
    ``StorageUnavailableError`` (the quarantine itself is already in place).

    A segment still in memory has whole frames there: nothing to isolate (the caller's
    report stands); its file is met again by a load once it goes cold, or by recovery."""
    if isinstance(seg, SegmentBuffer):
        return
    attach(log, seg)
    mark_damaged(seg, damage)
    seg.loaded()
    # earliest may now lie inside the range (topic_log rule 2).
    log._settle_front()


def attach(log: TopicLog, seg: ColdSegment) -> None:
    """Have ``seg`` tell ``log`` when a load finds it damaged (cold_segment rule 7)."""
    seg.on_damage = lambda s, d: note_damage(log, s, d)


def note_damage(log: TopicLog, seg: ColdSegment, damage: Damage) -> None:
    """Rules 1 and 5 for a damage ``seg`` already carries (``seg.damaged``)."""
    damage = replace(damage, topic=log.name, topic_id=log.topic_id)
    marker = corrupt_marker(damage)
    if marker is not None:
        _keep(log.gaps, marker)
    seg.source.damage.report(damage)


def corrupt_marker(damage: Damage) -> GapMarker | None:
    """The gap marker that stands for ``damage``'s seq range (rule 1)."""
    first, last = damage.first_seq, damage.last_seq
    if first is None or last is None or last < first:
        return None
    return GapMarker(last, "corrupt", last - first + 1, first, last)


def relpath(seg: ColdSegment) -> str:
    """``seg``'s file relative to the data directory (how damage reports name it)."""
    return "segments/" + seg.path.rsplit("/", 1)[-1]


def readable(seg: Segment) -> int:
    """How many of ``seg``'s frames, from the first, can be read: all unless damaged."""
    damage: Damage | None = getattr(seg, "damaged", None)
    if damage is None or damage.first_seq is None:
        return int(seg.count)
    return min(max(damage.first_seq - seg.base_seq, 0), seg.count)


def mark_damaged(seg: ColdSegment, damage: Damage) -> None:
    """Quarantine ``seg`` from ``damage.first_seq`` (its base when None) on: every cached
    copy goes, the owner is told; the next load reads the readable prefix and fixes the
    counters (cold_segment rule 7). A second report only widens the range."""
    first = damage.first_seq if damage.first_seq is not None else seg.base_seq
    if seg.damaged is not None and seg.damaged.first_seq is not None:
        first = min(first, seg.damaged.first_seq)
    seg.damaged = replace(
        damage,
        path=relpath(seg),
        topic_id=seg.topic_id,
        first_seq=max(first, seg.base_seq),
        last_seq=seg.base_seq + seg.count - 1,
    )
    seg.source.cache.discard(seg.key)
    seg.source.cache.discard((seg.topic_id, seg.base_seq, "tags"))
    seg._drop_blocks()
    if seg.on_damage is not None:
        seg.on_damage(seg, seg.damaged)
    else:
        seg.source.damage.report(seg.damaged)


def find_damage(seg: ColdSegment) -> bool:
    """Read ``seg``'s file for what fails its checks (rule 2); quarantine from there and
    return True, or False when every recorded frame is whole after all."""
    found = _read(seg)
    _quarantine_found(seg, found)
    return bool(found.problem)


def load_readable(seg: ColdSegment) -> SegmentBuffer:
    """The frames of ``seg`` that can be read, quarantining the rest first if a check
    fails now (rule 2); the caller adopts the copy (``ColdSegment.adopt``)."""
    found = _read(seg)
    _quarantine_found(seg, found)
    buf, keep = found.buf, readable(seg)
    if buf.count > keep:  # quarantined from ``keep`` by whoever found it (a scrub)
        cut = buf.offset_of(keep) if keep else 0
        buf = SegmentBuffer.from_frames(buf.view()[:cut], seg.base_seq, seg.salt, False)
    return buf


def _quarantine_found(seg: ColdSegment, found: ReadablePrefix) -> None:
    if found.problem and readable(seg) > found.buf.count:
        first = seg.base_seq + found.buf.count
        damage = Damage(relpath(seg), "segment", found.problem, first_seq=first)
        mark_damaged(seg, replace(damage, offset=found.offset, detail=found.detail))


def _read(seg: ColdSegment) -> ReadablePrefix:
    try:
        return read_readable_prefix(
            seg.source.fs,
            seg.path,
            topic_id=seg.topic_id,
            base_seq=seg.base_seq,
            salt=seg.salt,
            length=seg.nbytes,
            count=seg.count,
        )
    except OSError as exc:
        seg.source.cache.load_errors += 1
        raise StorageUnavailableError.for_read(seg.path, exc) from exc


def _keep(gaps: list[GapMarker], marker: GapMarker) -> None:
    """Insert ``marker`` in seq order, replacing a marker on the same seq (a re-report)."""
    i = bisect.bisect_left(gaps, marker.seq, key=_seq)
    if i < len(gaps) and gaps[i].seq == marker.seq:
        gaps[i] = marker
        return
    gaps.insert(i, marker)
    if len(gaps) > MAX_GAP_MARKERS:
        del gaps[0]


def _seq(marker: GapMarker) -> int:
    return marker.seq
