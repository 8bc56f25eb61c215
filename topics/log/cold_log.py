"""The log's side of cold segments: swapping one in after a checkpoint, and tag deletes
that reach both kinds of segment (issue 31).

Split from topic_log.py (which is at its size cap); both functions keep topic_log rule 4:
a hot segment's live tagged records are in the trie, a cold one's in its tag index file.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from .._core import SegmentBuffer
from .cold_segment import ColdSegment

if TYPE_CHECKING:
    from .topic_log import TopicLog

__all__ = ["swap_in_cold", "tagged_seqs"]


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
            out.extend(seg.tagged_seqs(op, operand, bound))
    trie = log.trie
    out.extend(trie.pop_exact(operand, bound) if op == "Eq" else trie.pop_prefix(operand, bound))
    return out
