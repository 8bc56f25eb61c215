"""Changing segment files after they are written: delete flags flipped in place, and
removal (split from segment_files.py, whose rules 3-4 these keep: a flag flip never
touches a frame's CRC or the index, and a data file never outlives its index's meaning).
"""

from __future__ import annotations

import posixpath

from .fs import Fs
from .handles import HandleCache
from .segment_files import HEADER_SIZE, INDEX_SUFFIX, TAGS_SUFFIX, read_header

__all__ = ["mark_deleted", "remove_segment"]


def mark_deleted(fs: Fs, path: str, frame_end_offsets: list[int], *, sync: bool = True) -> None:
    """Flip the trailer byte of each given frame to 1 (deleted), in place, then fdatasync.

    The trailer is outside the frame CRC and the index, so the segment still verifies.

    Args:
        fs: the file system seam.
        path: the segment's data file (sealed or active).
        frame_end_offsets: for each frame, ``offset + frame_len`` within the frames.
        sync: fdatasync before returning (the delete is durable when this returns).

    Raises:
        SegmentCorruptionError: bad header.
        ValueError: an offset outside the segment's frames.
        OSError: the write or fdatasync failed.
    """
    handle = fs.open(path, write=True)
    try:
        read_header(handle, path)  # never flip a byte in a file that is not a segment
        frames_length = handle.size() - HEADER_SIZE
        for end in frame_end_offsets:
            if not 0 < end <= frames_length:
                raise ValueError(f"frame end {end} is outside the segment's frames")
        for end in frame_end_offsets:
            handle.write_at(HEADER_SIZE + end - 1, b"\x01")
        if sync:
            handle.sync_data()
    finally:
        handle.close()


def remove_segment(
    fs: Fs, path: str, *, sync: bool = True, handles: HandleCache | None = None
) -> None:
    """Remove a segment's data file, then its index, then its tag index (a missing file is
    fine).

    Data first: an index or tag index left alone by a crash describes nothing and is
    ignored (recovery removes it, recovery.py rule 7), while a data file left without its
    index would read as an active segment. A handle ``handles`` holds for it is closed
    first (a cached handle never outlives the file's name).
    """
    if handles is not None:
        handles.discard(path)
    index, tags = path + INDEX_SUFFIX, path + TAGS_SUFFIX
    for p in (path, index, index + ".tmp", tags, tags + ".tmp"):
        if fs.exists(p):
            fs.remove(p)
    if sync:
        fs.sync_dir(posixpath.dirname(path))
