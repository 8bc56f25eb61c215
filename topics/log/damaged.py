"""Quarantined segments (issue 32): a segment whose bytes fail their checks costs its
topic exactly the seqs it can no longer read, never the topic or the server.

:func:`quarantine` is the one entry point for code that finds a bad segment on its own
(recovery, the online scrub); a cold segment that finds its damage while loading tells
its log through the hook :func:`attach` installs. Both end in :func:`note_damage`. The
segment side (``ColdSegment`` rule 7: what is readable, reading it) is ``cold_damage.py``.

Rules:
1. The unreadable range of a segment becomes a gap marker with reason ``corrupt`` on the
   range's last seq, ``source_from``..``source_to`` being the range itself. ``read_diff``
   treats it as it treats a ``crash`` marker: a window ends before the range, and a reader
   that reaches it gets one ``corrupt`` tombstone over the range from its cursor on, then
   the records after it. One marker per damaged segment; a wider report replaces it.
2. The range runs from the first frame that fails its checks (every frame before it
   passed its CRC and seq checks, so the prefix is served) to the segment's last seq, the
   manifest's count being exact; a bad header makes it the whole segment
   (``cold_damage.py`` finds it).
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
from .cold_damage import mark_damaged, readable, relpath
from .gap_markers import MAX_GAP_MARKERS, GapMarker

if TYPE_CHECKING:
    from .cold_segment import ColdSegment, Segment
    from .topic_log import TopicLog

__all__ = ["attach", "corrupt_marker", "note_damage", "quarantine", "readable", "relpath"]

# ``readable`` and ``relpath`` (cold_damage.py) are re-exported: the log side's callers
# need them with ``quarantine``.


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
