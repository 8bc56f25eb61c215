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
4. ``damaged`` (issue 32, ``log/damaged.py``): a quarantined segment's unreadable range
   (``first``..``last``, ``widened`` when it is an upper bound), the offset of its first bad
   byte and the problem. Recovery restores the quarantine without reading the file, and
   its counters are those of the readable prefix. A segment that fails its checks at
   recovery (one still read there: the unsealed tail, or one sealed by 0.1.0) is
   quarantined the same way: seqs from the manifest (up to the next segment's base, or
   the topic's head for the last, which is a guess: ``widened``).
"""

from __future__ import annotations

from typing import Any

from .._core import SegmentBuffer
from .._storage.damage import Damage
from .._storage.readable_prefix import read_readable_prefix
from ..log.cold_segment import ColdSegment, ColdSource, Segment
from ..log.damaged import attach, relpath
from ..log.topic_log import TopicLog

__all__ = [
    "COLD_CLASSES",
    "cold_from_buffer",
    "cold_from_manifest",
    "damaged_at_recovery",
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
    damage = seg.damaged if isinstance(seg, ColdSegment) else None
    if damage is not None:
        entry["damaged"] = {
            "first": damage.first_seq,
            "last": damage.last_seq,
            "widened": damage.widened,
            "offset": damage.offset,
            "problem": damage.problem,
        }
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
    cold = ColdSegment(
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
    bad = info.get("damaged")
    if bad is not None:
        cold.damaged = Damage(
            relpath(cold),
            "segment",
            str(bad.get("problem", "")),
            topic=log.name,
            topic_id=log.topic_id,
            first_seq=int(bad["first"]),
            last_seq=int(bad["last"]),
            widened=bool(bad.get("widened", False)),
            offset=int(bad.get("offset", -1)),
            detail="quarantined before the last restart",
        )
    attach(log, cold)
    return cold


def damaged_at_recovery(
    source: ColdSource,
    log: TopicLog,
    info: dict[str, Any],
    end: int,
    widened: bool,
    last_ts: int,
) -> ColdSegment | SegmentBuffer:
    """Rule 4: a segment that failed its checks at recovery, read again for what is
    readable; its seqs run to ``end`` (exclusive; ``widened``: a guess). ``last_ts`` is
    the segment before it's (a ts for the unreadable frames that keeps ``$ts`` ordered).
    The segment itself, whole, when its frames are fine after all (only its index failed)."""
    base, length = int(info["base"]), int(info["length"])
    cold = ColdSegment(
        source,
        log.topic_id,
        base,
        int(info["salt"]),
        count=max(end - base, 1),
        nbytes=length,
        last_ts=last_ts,
        live_count=0,
        live_bytes=0,
        retired=0,
        tagged=None,
        on_adjust=_adjuster(log),
    )
    found = read_readable_prefix(
        source.fs,
        cold.path,
        topic_id=log.topic_id,
        base_seq=base,
        salt=cold.salt,
        length=length,
        count=-1,
    )
    buf = found.buf
    if not found.problem:
        return buf
    buf.seal()
    cold.last_ts = max(last_ts, buf.last_ts)
    cold.live_count, cold.live_bytes = buf.live_count, buf.live_bytes
    cold.damaged = Damage(
        relpath(cold),
        "segment",
        found.problem,
        topic=log.name,
        topic_id=log.topic_id,
        first_seq=base + buf.count,
        last_seq=base + cold.count - 1,
        widened=widened,
        offset=found.offset,
        detail=found.detail,
    )
    source.cache.put(cold.key, buf, cold._cost())
    attach(log, cold)
    return cold


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
    cold = ColdSegment.from_buffer(
        source, log.topic_id, seg, tagged=tagged, pending=pending, on_adjust=_adjuster(log)
    )
    attach(log, cold)
    return cold
