"""The log's side of cold segments: swapping one in after a checkpoint, and tag deletes
that reach both kinds of segment (issue 31).

Split from topic_log.py (which is at its size cap); both functions keep topic_log rule 4:
a hot segment's live tagged records are in the trie, a cold one's in its tag index file.
"""

from __future__ import annotations

import bisect
import logging
from typing import TYPE_CHECKING, Any

from .._core import SegmentBuffer
from .._storage.fs import StorageCorruptionError
from .._storage.tag_index import (
    TagIndex,
    decode_tag_index,
    encode_tag_index,
    read_tag_index,
    tagged_frames,
)
from ..errors import StorageUnavailableError
from .cold_segment import ColdSegment

if TYPE_CHECKING:
    from .topic_log import TopicLog

__all__ = ["cold_tagged_seqs", "swap_in_cold", "tagged_seqs"]

log = logging.getLogger("topics.storage")


def swap_in_cold(log: TopicLog, seg: SegmentBuffer, cold: ColdSegment) -> bool:
    """Replace the sealed in-memory ``seg`` by ``cold`` (its file's twin) if it is still
    in the log, taking its live tagged records out of the trie. Returns whether it was."""
    i = bisect.bisect_left(log.bases, seg.base_seq)
    if i == len(log.bases) or log.segments[i] is not seg:
        return False  # dropped (retention, deletes, the topic) since the checkpoint began
    trie = log.trie
    if len(trie):
        base = seg.base_seq
        for idx in range(seg.first_live(0), seg.count):
            tag = seg.tag_at(idx)
            if tag is not None and seg.is_live(idx):
                trie.discard(tag, base + idx)
    log.segments[i] = cold
    return True


def tagged_seqs(log: TopicLog, op: str, operand: bytes, bound: int) -> list[int]:
    """Every live seq below ``bound`` whose tag equals (``Eq``) or starts with
    ``operand``; the hot segments' entries leave the trie (the caller deletes
    them all)."""
    out: list[int] = []
    for seg in log.segments:
        if seg.base_seq >= bound:
            break
        if type(seg) is ColdSegment:
            out.extend(cold_tagged_seqs(seg, op, operand, bound))
    trie = log.trie
    out.extend(trie.pop_exact(operand, bound) if op == "Eq" else trie.pop_prefix(operand, bound))
    return out


def cold_tagged_seqs(seg: ColdSegment, op: str, operand: bytes, below: int) -> list[int]:
    """Live seqs of a cold segment below ``below`` whose tag equals (``op == "Eq"``) or
    starts with ``operand``, from its tag index file (or its frames when it has none)."""
    if seg.tagged is False or seg.live_count == 0 or below <= seg.base_seq:
        return []
    index = _tag_index(seg)
    idxs = index.exact(operand) if op == "Eq" else index.prefix(operand)
    end = min(below - seg.base_seq, seg.count)
    return [seg.base_seq + i for i in idxs if seg.retired <= i < end and seg.is_live(i)]


def _tag_index(seg: ColdSegment) -> TagIndex:
    key = (seg.topic_id, seg.base_seq, "tags")
    cache = seg.source.cache
    index: Any = cache.get(key)
    if index is None:
        if seg.tagged:
            try:
                index = read_tag_index(
                    seg.source.fs,
                    seg.path,
                    topic_id=seg.topic_id,
                    base_seq=seg.base_seq,
                    salt=seg.salt,
                    frame_count=seg.count,
                )
            except (FileNotFoundError, StorageCorruptionError) as exc:
                # The frames hold the same tags; only the shortcut is gone or damaged.
                log.warning(
                    "tag index of %s unusable (%s); using the frames. `topics verify "
                    "DATA_DIR` lists damaged files",
                    seg.path,
                    exc,
                )
                seg.tagged = None
            except OSError as exc:
                raise StorageUnavailableError.for_read(seg.path + ".tags", exc) from exc
        if index is None:
            tid, base, salt = seg.topic_id, seg.base_seq, seg.salt
            raw = encode_tag_index(tid, base, salt, tagged_frames(seg.loaded()))
            index = decode_tag_index(raw, path=seg.path, topic_id=tid, base_seq=base, salt=salt)
        cache.put(key, index, index.nbytes)
    return index  # type: ignore[no-any-return]
