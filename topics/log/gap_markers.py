"""A topic's gap markers (``_log`` rule 6): seqs that hold no record and stand for records
a router's source lost (``source_trim``, docs/ROUTERS.md).

:class:`~topics.log.topic_log.TopicLog` owns the list (``gaps``, ascending by seq) and takes the
seq; the functions here keep the list's two bounds, the same way on every path (a new
marker, a read reaching one, recovery adopting persisted ones):

1. At most :data:`MAX_GAP_MARKERS` are kept; past that the oldest is forgotten.
2. Markers below the topic's ``evict_floor`` are forgotten: the eviction tombstone a
   reader below the floor gets already covers them.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from ..types import TombstoneReason

__all__ = ["MAX_GAP_MARKERS", "GapMarker", "first_gap_from", "keep_new_gap", "kept_gaps"]

#: Gap markers kept per topic; past this the oldest is forgotten (each one stands for a
#: whole run of records a router's source lost, so reaching this takes a pathological
#: dest that is never trimmed while its source keeps outrunning the router).
MAX_GAP_MARKERS = 10_000


@dataclass(frozen=True, slots=True)
class GapMarker:
    """A seq holding no record that stands for records lost upstream (``_log`` rule 6).

    ``source_from``/``source_to`` is the source's seq range a router could not forward;
    ``missed_estimate`` how many records that range held at most.
    """

    seq: int
    reason: TombstoneReason
    missed_estimate: int
    source_from: int
    source_to: int


def keep_new_gap(gaps: list[GapMarker], marker: GapMarker) -> None:
    """Add ``marker`` (above every held one) to ``gaps``, within bound 1."""
    gaps.append(marker)
    if len(gaps) > MAX_GAP_MARKERS:
        del gaps[0]


def first_gap_from(gaps: list[GapMarker], seq: int, floor: int) -> GapMarker | None:
    """The first marker of ``gaps`` at or above ``seq``, forgetting those below ``floor``
    first (bound 2)."""
    if not gaps:
        return None
    if gaps[0].seq < floor:
        del gaps[: bisect.bisect_left(gaps, floor, key=_gap_seq)]
    i = bisect.bisect_left(gaps, seq, key=_gap_seq)
    return gaps[i] if i < len(gaps) else None


def kept_gaps(markers: list[GapMarker], floor: int, head: int) -> list[GapMarker]:
    """The persisted ``markers`` a log with this ``floor`` and ``head`` keeps, ascending."""
    kept = sorted((m for m in markers if floor <= m.seq <= head), key=_gap_seq)
    return kept[-MAX_GAP_MARKERS:]


def _gap_seq(marker: GapMarker) -> int:
    return marker.seq
