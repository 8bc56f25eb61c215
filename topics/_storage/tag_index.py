"""Tag index files: a sealed segment's tags, sorted, so a delete by tag finds its frames
without the segment's records in memory.

Role: once a sealed, checkpointed segment goes cold (issue 31), its tags leave the
process-wide ``TagTrie``; a delete by exact tag or by prefix that reaches it asks this
file instead. A checkpoint writes it when it seals a segment holding at least one tagged
frame (``topics/_persistence/segment_work.py``). Layout and order of writes:
docs/STORAGE_FORMATS.md, "Tag index file (sealed segments)".

Rule 1: the file is ``<segment data path>.tags``. It lists every tagged frame of the
  sealed segment by its index (seq - base_seq), deleted or not: liveness is the segment's
  delete flags, read by the caller at query time, so a delete never rewrites this file.
Rule 2: it is written under ``.tags.tmp``, fsynced and renamed BEFORE the segment's index
  is written; the index's directory fsync makes both names durable. So sealed (the index
  exists) and tagged implies the tags file is there. A tags file beside a segment without
  an index is what a seal left that did not finish: never read, replaced or removed when
  the segment is sealed again (an untagged seal removes it before writing the index).
Rule 3: reading never returns bad bytes silently: the checksum (seeded with the segment
  salt), magic, version, identity (topic id, base seq, salt) and the section sizes are
  checked, and any mismatch raises :class:`SegmentCorruptionError` naming the file.
Rule 4: a loaded index holds no Python object per entry or per tag: frame indexes stay
  ``array("I")`` columns and the tags one bytes blob, bisected in place, so a byte-bounded
  cache can count it by ``nbytes``.
"""

from __future__ import annotations

import array
import operator
import struct
import sys
from collections.abc import Iterable

from topics._core import SegmentBuffer, crc32c

from .fs import Fs
from .segment_files import TAGS_SUFFIX, SegmentCorruptionError, write_atomically

__all__ = [
    "TAG_INDEX_FORMAT_VERSION",
    "TagIndex",
    "decode_tag_index",
    "encode_tag_index",
    "estimated_tag_index_size",
    "read_tag_index",
    "tag_index_path",
    "tagged_frames",
    "write_tag_index",
]

TAG_INDEX_MAGIC = b"TOPICTAG"
TAG_INDEX_FORMAT_VERSION = 1
# magic, version, reserved, salt, topic_id, base_seq, tag_count, entry_count
_HEADER = struct.Struct("<8sHHIQQII")
_U32 = struct.Struct("<I")
_U32_MAX = 0xFFFFFFFF
# Fixed cost of a loaded TagIndex (the object, three arrays, the blob) for ``nbytes``.
_OBJECT_OVERHEAD = 320


def tag_index_path(seg_path: str) -> str:
    """The tag index file of the segment whose data file is ``seg_path``."""
    return seg_path + TAGS_SUFFIX


def estimated_tag_index_size(frames: int) -> int:
    """About the bytes a seal's tag index takes for ``frames`` frames (a checkpoint's space
    check, before any tag is read): 4 per entry, 8 plus the tag per distinct tag. 24 per
    frame is every frame tagged with its own 12-byte tag; shared tags take far less (100
    tags over 10,000 frames: 4.1 per frame). The check only needs the magnitude."""
    return _HEADER.size + 4 + 24 * frames


def tagged_frames(seg: SegmentBuffer) -> list[tuple[int, bytes]]:
    """``(index, tag)`` of every tagged frame of ``seg``, deleted ones included (Rule 1)."""
    tag_at = seg.tag_at
    return [(i, tag) for i in range(seg.count) if (tag := tag_at(i)) is not None]


def _le(values: array.array[int]) -> bytes:
    if sys.byteorder == "big":  # pragma: no cover - the format is little-endian
        values = array.array("I", values)
        values.byteswap()
    return values.tobytes()


def encode_tag_index(
    topic_id: int, base_seq: int, salt: int, tagged: Iterable[tuple[int, bytes]]
) -> bytes:
    """The tag index file's bytes for a segment's tagged frames.

    Args:
        topic_id, base_seq, salt: the segment's identity (the salt also seeds the CRC).
        tagged: ``(frame_index, tag)`` pairs in strictly ascending frame index (a frame
            has at most one tag), each tag non-empty bytes.

    Raises:
        ValueError: indexes that do not ascend or pass a u32, or an empty tag.
        TypeError: a tag that is not bytes.
    """
    by_tag: dict[bytes, array.array[int]] = {}
    last = -1
    for index, tag in tagged:
        if not last < index <= _U32_MAX:
            raise ValueError(f"frame index {index} after {last}: indexes must ascend, below 2**32")
        if type(tag) is not bytes:
            raise TypeError(f"the tag of frame {index} is {type(tag).__name__}, not bytes")
        if not tag:
            raise ValueError(f"the tag of frame {index} is empty")
        last = index
        column = by_tag.get(tag)
        if column is None:
            column = by_tag[tag] = array.array("I")
        column.append(index)
    tags = sorted(by_tag)
    tag_ends, entry_ends, entries = array.array("I"), array.array("I"), array.array("I")
    blob_len = 0
    for tag in tags:
        blob_len += len(tag)
        tag_ends.append(blob_len)  # OverflowError past 4 GiB of tags: never in a segment
        entries.extend(by_tag[tag])
        entry_ends.append(len(entries))
    head = _HEADER.pack(
        TAG_INDEX_MAGIC,
        TAG_INDEX_FORMAT_VERSION,
        0,
        salt,
        topic_id,
        base_seq,
        len(tags),
        len(entries),
    )
    body = b"".join((head, _le(tag_ends), _le(entry_ends), _le(entries), *tags))
    return body + _U32.pack(crc32c(body, salt))


def write_tag_index(fs: Fs, seg_path: str, data: bytes, *, sync_dir: bool = False) -> None:
    """Write ``data`` as the tag index of ``seg_path``: temp file, write, fsync, rename.

    At a seal the index written next syncs the directory (Rule 2), so by default this does
    not; ``sync_dir=True`` makes the new name durable on its own (a tag index written for
    a segment sealed before this file existed).

    Raises:
        OSError: a write, sync or rename failed (a previous tags file is untouched).
    """
    write_atomically(fs, tag_index_path(seg_path), data, sync_dir=sync_dir)


def read_tag_index(
    fs: Fs,
    seg_path: str,
    *,
    topic_id: int,
    base_seq: int,
    salt: int,
    frame_count: int | None = None,
) -> TagIndex:
    """Load and check the tag index of the segment ``seg_path`` (Rule 3).

    Args:
        topic_id, base_seq, salt: the segment's identity, which the file must carry.
        frame_count: the segment's frames, when known: every entry must be below it.

    Raises:
        FileNotFoundError: there is no tag index (the caller decides what that means).
        SegmentCorruptionError: see Rule 3.
        OSError: the read failed.
    """
    path = tag_index_path(seg_path)
    handle = fs.open(path)
    try:
        raw = handle.read_at(0, handle.size())
    finally:
        handle.close()
    return decode_tag_index(
        raw, path=path, topic_id=topic_id, base_seq=base_seq, salt=salt, frame_count=frame_count
    )


def _column(raw: bytes, start: int, count: int) -> array.array[int]:
    column = array.array("I", raw[start : start + 4 * count])
    if sys.byteorder == "big":  # pragma: no cover
        column.byteswap()
    return column


def _ascends(ends: array.array[int]) -> bool:
    """Strictly increasing from above 0: no empty tag, no tag without an entry."""
    return not ends or (ends[0] > 0 and all(map(operator.lt, ends, ends[1:])))


def decode_tag_index(
    raw: bytes,
    *,
    path: str,
    topic_id: int,
    base_seq: int,
    salt: int,
    frame_count: int | None = None,
) -> TagIndex:
    """Check a tag index file's bytes (Rule 3) and load them; ``path`` names it in errors.

    Raises:
        SegmentCorruptionError: see Rule 3.
    """
    size = _HEADER.size
    if len(raw) < size + 4 or crc32c(raw[:-4], salt) != _U32.unpack_from(raw, len(raw) - 4)[0]:
        raise SegmentCorruptionError("tag index fails its checksum", path=path)
    magic, version, _, f_salt, f_topic, f_base, ntags, nentries = _HEADER.unpack_from(raw)
    if magic != TAG_INDEX_MAGIC:
        raise SegmentCorruptionError("not a tag index file", path=path, offset=0)
    if version != TAG_INDEX_FORMAT_VERSION:
        raise SegmentCorruptionError(f"unsupported tag index version {version}", path=path)
    if (f_salt, f_topic, f_base) != (salt, topic_id, base_seq):
        raise SegmentCorruptionError(
            f"tag index of topic {f_topic} segment {f_base} (salt {f_salt:#x}) beside segment "
            f"{base_seq} of topic {topic_id} (salt {salt:#x})",
            path=path,
        )
    blob_at = size + 8 * ntags + 4 * nentries
    if blob_at + 4 > len(raw):
        raise SegmentCorruptionError(
            f"tag index too short for {ntags} tags and {nentries} entries", path=path
        )
    tag_ends = _column(raw, size, ntags)
    entry_ends = _column(raw, size + 4 * ntags, ntags)
    entries = _column(raw, size + 8 * ntags, nentries)
    blob = raw[blob_at:-4]
    if (
        not _ascends(tag_ends)
        or not _ascends(entry_ends)
        or (tag_ends[-1] if ntags else 0) != len(blob)
        or (entry_ends[-1] if ntags else 0) != nentries
    ):
        raise SegmentCorruptionError("tag index sections do not add up", path=path)
    if frame_count is not None and entries and max(entries) >= frame_count:
        raise SegmentCorruptionError(
            f"tag index names frame {max(entries)} of a segment of {frame_count}", path=path
        )
    return TagIndex(tag_ends, entry_ends, entries, blob)


class TagIndex:
    """A sealed segment's tags, sorted, each with its ascending frame indexes (Rule 4).

    Lookups bisect the sorted tags in place (a few slices of the blob per lookup) and
    answer frame indexes; the caller adds ``base_seq`` and checks the delete flags.
    """

    __slots__ = ("_blob", "_entries", "_entry_ends", "_tag_ends")

    def __init__(
        self,
        tag_ends: array.array[int],
        entry_ends: array.array[int],
        entries: array.array[int],
        blob: bytes,
    ) -> None:
        self._tag_ends = tag_ends
        self._entry_ends = entry_ends
        self._entries = entries
        self._blob = blob

    @property
    def nbytes(self) -> int:
        """About the memory this index holds (for a byte-bounded cache)."""
        words = 2 * len(self._tag_ends) + len(self._entries)
        return _OBJECT_OVERHEAD + 4 * words + len(self._blob)

    @property
    def ntags(self) -> int:
        """Distinct tags."""
        return len(self._tag_ends)

    def __len__(self) -> int:
        """Tagged frames (entries)."""
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<TagIndex {self.ntags} tags, {len(self)} entries>"

    def tags(self) -> list[bytes]:
        """Every distinct tag, ascending (one object per tag: for tests and tools)."""
        return [self._tag(i) for i in range(self.ntags)]

    def exact(self, tag: bytes) -> array.array[int]:
        """Ascending frame indexes of the frames tagged exactly ``tag``."""
        i = self._bisect(tag, None, right=False)
        if i == self.ntags or self._tag(i) != tag:
            return array.array("I")
        return self._entries[self._entry_start(i) : self._entry_ends[i]]

    def prefix(self, prefix: bytes) -> list[int]:
        """Ascending frame indexes of the frames whose tag starts with ``prefix`` (the
        empty prefix: every tagged frame)."""
        width = len(prefix)
        lo = self._bisect(prefix, width, right=False)
        hi = self._bisect(prefix, width, right=True)
        if lo == hi:
            return []
        run = self._entries[self._entry_start(lo) : self._entry_ends[hi - 1]]
        # One ascending run per tag: timsort merges the runs instead of sorting afresh.
        return run.tolist() if hi - lo == 1 else sorted(run)

    def _tag(self, i: int) -> bytes:
        start = self._tag_ends[i - 1] if i else 0
        return self._blob[start : self._tag_ends[i]]

    def _entry_start(self, i: int) -> int:
        return self._entry_ends[i - 1] if i else 0

    def _bisect(self, key: bytes, width: int | None, *, right: bool) -> int:
        """First tag whose first ``width`` bytes (all with None) sort above ``key``
        (``right``) or at or above it. Truncation keeps the sorted order, so the tags
        starting with a prefix are the run between its left and right positions."""
        lo, hi = 0, len(self._tag_ends)
        while lo < hi:
            mid = (lo + hi) // 2
            probe = self._tag(mid)[:width]
            if probe < key or (right and probe == key):
                lo = mid + 1
            else:
                hi = mid
        return lo
