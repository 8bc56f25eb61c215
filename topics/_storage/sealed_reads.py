"""Reading one sealed segment's frames back for the block cache (issue 31).

Split from ``segment_files.py``, which owns writing and recovery-time reads: this is the
hot read of a cold segment, so it does the least that keeps rule 4 of that module (never
return bad bytes silently): the header is checked against the identity the manifest
recorded, exactly the recorded frame bytes must be there, and ``SegmentBuffer.from_frames``
(the caller) checks every frame's CRC and seq. The index file is not read: the frames
carry their own lengths, and ``topics verify`` and recovery check the index.
"""

from __future__ import annotations

import array
import struct
import sys

from topics._core import crc32c

from .fs import Fs
from .segment_files import (
    HEADER_SIZE,
    INDEX_MAGIC,
    INDEX_SUFFIX,
    SEGMENT_FORMAT_VERSION,
    SegmentCorruptionError,
    read_header,
)

__all__ = ["read_sealed_frames", "read_sealed_offsets"]

# The index file's header (docs/STORAGE_FORMATS.md, "Index file"): magic, version, reserved,
# salt, topic_id, base_seq, frame_count, frames_length; then u32 offsets, then a CRC.
_INDEX_HEADER = struct.Struct("<8sHHIQQII")


def read_sealed_frames(
    fs: Fs,
    path: str,
    *,
    topic_id: int,
    base_seq: int,
    salt: int,
    length: int,
    start: int = 0,
    check_header: bool = True,
) -> bytes:
    """The ``length`` frame bytes from frame offset ``start`` of the sealed segment at
    ``path`` (a whole segment, or one block of its frames for the cache). A caller that
    has checked this file's header once may skip it (``check_header``): the frames'
    own CRCs and seqs still vouch for every byte returned.

    Raises:
        SegmentCorruptionError: a bad header, another segment's header, or fewer bytes
            than recorded.
        OSError: the file cannot be opened or read (the caller's read fails; the next
            one tries again).
    """
    handle = fs.open(path)
    try:
        ident = read_header(handle, path) if check_header else (topic_id, base_seq, salt)
        data = handle.read_at(HEADER_SIZE + start, length) if length else b""
    finally:
        handle.close()
    if ident != (topic_id, base_seq, salt):
        raise SegmentCorruptionError(
            f"segment header names topic {ident[0]} base {ident[1]}; the manifest "
            f"recorded topic {topic_id} base {base_seq}",
            path=path,
            offset=0,
        )
    if len(data) != length:
        raise SegmentCorruptionError(
            f"segment holds {start + len(data)} frame bytes, {start + length} were recorded",
            path=path,
            offset=HEADER_SIZE + start + len(data),
        )
    return data


def read_sealed_offsets(
    fs: Fs, path: str, *, topic_id: int, base_seq: int, salt: int, count: int, length: int
) -> array.array[int]:
    """The frame offsets of the sealed segment at ``path``, from its index file, checked
    against the identity and size the manifest recorded: what lets the cache read one
    block of a segment instead of all of it.

    Raises:
        FileNotFoundError: no index (the caller reads whole segments instead).
        SegmentCorruptionError: an index that fails its checksum or does not match.
    """
    idx_path = path + INDEX_SUFFIX
    handle = fs.open(idx_path)
    try:
        raw = handle.read_at(0, handle.size())
    finally:
        handle.close()
    size = _INDEX_HEADER.size
    if len(raw) != size + 4 * count + 4 or crc32c(raw[:-4], salt) != int.from_bytes(
        raw[-4:], "little"
    ):
        raise SegmentCorruptionError("segment index fails its checksum", path=idx_path)
    magic, version, _, i_salt, i_topic, i_base, i_count, i_length = _INDEX_HEADER.unpack_from(raw)
    if (magic, version, i_salt, i_topic, i_base, i_count, i_length) != (
        INDEX_MAGIC,
        SEGMENT_FORMAT_VERSION,
        salt,
        topic_id,
        base_seq,
        count,
        length,
    ):
        raise SegmentCorruptionError("segment index does not match its segment", path=idx_path)
    offsets = array.array("I", raw[size : size + 4 * count])
    if sys.byteorder == "big":  # pragma: no cover - the format is little-endian
        offsets.byteswap()
    return offsets
