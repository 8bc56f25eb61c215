"""What a damaged segment can still give (issue 32): its frames up to the first one that
fails its checks, and where and why that one failed.

Split from ``sealed_reads.py`` (the hot read of a healthy segment, which raises on the
first bad byte): this one never raises for bad bytes, so the caller can serve the prefix
and quarantine the rest (``topics/log/damaged.py``).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .._core import FrameError, SegmentBuffer, iter_frames
from .fs import Fs
from .segment_files import HEADER_SIZE, SegmentCorruptionError, read_header

__all__ = ["ReadablePrefix", "read_readable_prefix"]

_U32 = struct.Struct("<I")


class ReadablePrefix(NamedTuple):
    """What a damaged segment still holds: its frames before the first unreadable one."""

    buf: SegmentBuffer  # the readable frames (count: how many), unsealed
    problem: str  # "" when nothing is wrong, else "header", "crc", "truncated", ...
    offset: int  # file offset of the first unreadable byte (-1 when nothing is wrong)
    detail: str


def read_readable_prefix(
    fs: Fs, path: str, *, topic_id: int, base_seq: int, salt: int, length: int, count: int
) -> ReadablePrefix:
    """The frames of the segment at ``path`` that pass every check, up to the first that
    does not (issue 32). ``length`` and ``count`` are what the manifest recorded (``count``
    -1 when unknown). Never raises for bad bytes; ``OSError`` when the file cannot be read.

    Every frame before the first bad one passed its CRC and seq checks, so the prefix is
    trustworthy; nothing after a bad frame is (its length field may be the damaged one).
    A bad header makes the whole file untrustworthy: an empty prefix.
    """
    empty = SegmentBuffer(base_seq, salt)
    handle = fs.open(path)
    try:
        try:
            ident = read_header(handle, path)
        except SegmentCorruptionError as exc:
            return ReadablePrefix(empty, "header", 0, str(exc))
        data = handle.read_at(HEADER_SIZE, length) if length else b""
    finally:
        handle.close()
    if ident != (topic_id, base_seq, salt):
        return ReadablePrefix(empty, "header", 0, f"header names topic {ident[0]} base {ident[1]}")
    end, problem, detail = _walk(data, base_seq, salt)
    if not problem and len(data) < length:
        problem, detail = "truncated", f"{len(data)} of {length} frame bytes"
    buf = SegmentBuffer.from_frames(data[:end], base_seq, salt, verify=False)
    if count >= 0 and buf.count > count:
        # More whole frames than recorded: the manifest's count wins (the rest were never
        # listed), and so does its length.
        return _readable_prefix(data, base_seq, salt, count)
    if not problem and count >= 0 and buf.count < count:
        problem, detail = "truncated", f"{buf.count} of {count} frames"
    return ReadablePrefix(buf, problem, HEADER_SIZE + end if problem else -1, detail)


def _walk(data: bytes, base_seq: int, salt: int) -> tuple[int, str, str]:
    """(end of the valid frames, problem, detail): CRC and structure, then seqs."""
    try:
        iter_frames(data, salt, True)
        end = len(data)
        problem = detail = ""
    except FrameError as exc:
        end = _offset_of(data, max(exc.index, 0))
        problem, detail = exc.reason, str(exc)
    try:
        SegmentBuffer.from_frames(data[:end], base_seq, salt, verify=False)
    except FrameError as exc:  # a frame with a valid CRC but the wrong seq
        end = _offset_of(data, max(exc.index, 0))
        problem, detail = "seq", str(exc)
    return end, problem, detail


def _offset_of(data: bytes, frames: int) -> int:
    """The offset of frame ``frames`` (every frame before it is whole)."""
    end = 0
    for _ in range(frames):
        end += _U32.unpack_from(data, end)[0]
    return end


def _readable_prefix(data: bytes, base_seq: int, salt: int, count: int) -> ReadablePrefix:
    end = _offset_of(data, count)
    buf = SegmentBuffer.from_frames(data[:end], base_seq, salt, verify=False)
    return ReadablePrefix(buf, "", -1, "")
