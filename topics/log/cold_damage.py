"""The segment side of a quarantine (issue 32, ``ColdSegment`` rule 7): which frames of
a damaged segment can be read, reading them, and marking the segment damaged.

Split from ``damaged.py`` (the log side: the ``corrupt`` marker, the report), because
``cold_segment.py`` calls these on every load that fails its checks; they take the segment
as the :class:`_Segment` protocol for the same reason (``cold_segment`` imports this
module). The range rule (``damaged.py`` rule 2): from the first frame that fails its
checks (every frame before it passed its CRC and seq checks, so that prefix is served) to
the segment's last seq, the manifest's count being exact; all of it for a bad header.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

from .._core import SegmentBuffer
from .._storage.damage import Damage
from .._storage.readable_prefix import ReadablePrefix, read_readable_prefix
from ..errors import StorageUnavailableError

__all__ = ["find_damage", "load_readable", "mark_damaged", "readable", "relpath"]


class _Segment(Protocol):
    """What these functions use of a ``ColdSegment``."""

    damaged: Damage | None
    on_damage: Any
    source: Any
    topic_id: int
    base_seq: int
    salt: int
    count: int
    nbytes: int

    @property
    def path(self) -> str: ...

    @property
    def key(self) -> tuple[int, int]: ...

    def _drop_blocks(self) -> None: ...


def relpath(seg: _Segment) -> str:
    """``seg``'s file relative to the data directory (how damage reports name it)."""
    return "segments/" + seg.path.rsplit("/", 1)[-1]


def readable(seg: Any) -> int:
    """How many of ``seg``'s frames, from the first, can be read: all unless damaged."""
    damage: Damage | None = getattr(seg, "damaged", None)
    if damage is None or damage.first_seq is None:
        return int(seg.count)
    return min(max(damage.first_seq - int(seg.base_seq), 0), int(seg.count))


def mark_damaged(seg: _Segment, damage: Damage) -> None:
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


def find_damage(seg: _Segment) -> bool:
    """Read ``seg``'s file for what fails its checks (rule 2); quarantine from there and
    return True, or False when every recorded frame is whole after all."""
    found = _read(seg)
    _quarantine_found(seg, found)
    return bool(found.problem)


def load_readable(seg: _Segment) -> SegmentBuffer:
    """The frames of ``seg`` that can be read, quarantining the rest first if a check
    fails now (rule 2); the caller adopts the copy (``ColdSegment.adopt``)."""
    found = _read(seg)
    _quarantine_found(seg, found)
    buf, keep = found.buf, readable(seg)
    if buf.count > keep:  # quarantined from ``keep`` by whoever found it (a scrub)
        cut = buf.offset_of(keep) if keep else 0
        buf = SegmentBuffer.from_frames(buf.view()[:cut], seg.base_seq, seg.salt, False)
    return buf


def _quarantine_found(seg: _Segment, found: ReadablePrefix) -> None:
    if found.problem and readable(seg) > found.buf.count:
        first = seg.base_seq + found.buf.count
        damage = Damage(relpath(seg), "segment", found.problem, first_seq=first)
        mark_damaged(seg, replace(damage, offset=found.offset, detail=found.detail))


def _read(seg: _Segment) -> ReadablePrefix:
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
