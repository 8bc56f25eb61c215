"""Reading one sealed segment's frames back for the block cache (issue 31).

Split from ``segment_files.py``, which owns writing and recovery-time reads: this is the
hot read of a cold segment, so it does the least that keeps rule 4 of that module (never
return bad bytes silently): the header is checked against the identity the manifest
recorded, exactly the recorded frame bytes must be there, and ``SegmentBuffer.from_frames``
(the caller) checks every frame's CRC and seq. The index file is not read: the frames
carry their own lengths, and ``topics verify`` and recovery check the index.
"""

from __future__ import annotations

from .fs import Fs
from .segment_files import HEADER_SIZE, SegmentCorruptionError, read_header

__all__ = ["read_sealed_frames"]


def read_sealed_frames(
    fs: Fs, path: str, *, topic_id: int, base_seq: int, salt: int, length: int
) -> bytes:
    """The ``length`` frame bytes of the sealed segment at ``path``.

    Raises:
        SegmentCorruptionError: a bad header, another segment's header, or fewer bytes
            than recorded.
        OSError: the file cannot be opened or read (the caller's read fails; the next
            one tries again).
    """
    handle = fs.open(path)
    try:
        ident = read_header(handle, path)
        data = handle.read_at(HEADER_SIZE, length) if length else b""
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
            f"segment holds {len(data)} frame bytes, {length} were recorded",
            path=path,
            offset=HEADER_SIZE + len(data),
        )
    return data
