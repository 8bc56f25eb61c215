"""The store's side of cold segments (issue 31): which topics keep history in files,
what the manifest records so recovery need not read them, and making one.

Rules:
1. ``disk`` and ``fsync`` topics' sealed, checkpointed segments live in their files;
   ``memory`` and ``ephemeral`` topics keep every record in RAM (what those classes mean).
2. The manifest entry of a sealed segment records its counters (``count``, ``live``,
   ``live_bytes``, ``last_ts``, ``tags``) as of the checkpoint's snapshot; they agree with
   the delete flags that checkpoint leaves in the file and with the topic's ``earliest``
   (everything below it is retired). An entry without them (written by 0.1.0) makes
   recovery read the segment once.
3. ``tags``: true when a tag index file sits beside the segment, false when no frame has
   a tag, null when unknown (derive it from the frames).
"""

from __future__ import annotations

from typing import Any

from .._core import SegmentBuffer
from ..log.cold_segment import ColdSegment, ColdSource, Segment
from ..log.topic_log import TopicLog

__all__ = [
    "COLD_CLASSES",
    "cold_from_buffer",
    "cold_from_manifest",
    "has_tag",
    "segment_entry",
]

COLD_CLASSES = frozenset({"disk", "fsync"})


def has_tag(seg: SegmentBuffer) -> bool:
    """Whether any frame of ``seg`` (live or not) carries a tag: its tag index file exists."""
    return any(seg.tag_at(i) is not None for i in range(seg.count))


def segment_entry(seg: Segment, tagged: bool | None) -> dict[str, Any]:
    """The manifest's entry for ``seg`` (rule 2: counters for sealed segments)."""
    entry: dict[str, Any] = {
        "base": seg.base_seq,
        "salt": seg.salt,
        "length": seg.nbytes,
        "sealed": seg.sealed,
    }
    if seg.sealed:
        entry["count"] = seg.count
        entry["live"] = seg.live_count
        entry["live_bytes"] = seg.live_bytes
        entry["last_ts"] = seg.last_ts
        entry["tags"] = tagged
    return entry


def _adjuster(log: TopicLog) -> Any:
    def adjust(dn: int, db: int) -> None:
        log.count += dn
        log.bytes += db

    return adjust


def cold_from_manifest(
    source: ColdSource, log: TopicLog, info: dict[str, Any], earliest: int
) -> ColdSegment:
    base, count = int(info["base"]), int(info["count"])
    tags = info.get("tags")
    return ColdSegment(
        source,
        log.topic_id,
        base,
        int(info["salt"]),
        count=count,
        nbytes=int(info["length"]),
        last_ts=int(info["last_ts"]),
        live_count=int(info["live"]),
        live_bytes=int(info["live_bytes"]),
        retired=min(max(earliest - base, 0), count),
        tagged=None if tags is None else bool(tags),
        on_adjust=_adjuster(log),
    )


def cold_from_buffer(
    source: ColdSource,
    log: TopicLog,
    seg: SegmentBuffer,
    pending: set[int],
    *,
    tagged: bool | None = None,
) -> ColdSegment:
    """The cold twin of ``seg``. ``tagged`` as the manifest recorded it; when not given,
    the segment has no tag index file, so its tags are derived from the frames."""
    if tagged is None and not has_tag(seg):
        tagged = False
    return ColdSegment.from_buffer(
        source, log.topic_id, seg, tagged=tagged, pending=pending, on_adjust=_adjuster(log)
    )
