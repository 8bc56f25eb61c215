"""Read-only frame walkers for ``topics verify``: a segment's record frames, its index, and
a WAL file's frames, streamed in chunks and checked without trusting anything on disk.

Role: the byte-level half of the integrity checker (``verify.py`` holds the findings and
the directory walk). Unlike ``read_segment`` and ``scan_wal``, which stop at the first
problem with an exception, these return *where* the first bad frame is, so the checker can
say which seqs or LSNs it puts at risk (docs/OPERATIONS.md, "Checking a data directory").

Rules:
1. Nothing here writes, and every read goes through the handle it is given.
2. Files are read in chunks of at most :data:`CHUNK_BYTES` (plus one oversized frame), so a
   large segment or WAL file never sits in memory whole.
3. The per-byte work (record frame CRCs and structure) runs in the core's ``frame_offsets``;
   Python only walks frame lengths to find where a chunk's last whole frame ends.
4. A WAL frame validates only under its file's salt (docs/STORAGE_FORMATS.md, "WAL"), so a
   frame found further on after a bad one proves the bad one was not a torn tail:
   :func:`resumes_after` looks for one.
"""

from __future__ import annotations

import array
import re
import struct
import sys
from typing import NamedTuple

from topics._core import FRAME_HEADER_SIZE, FRAME_TRAILER_SIZE, FrameError, crc32c, frame_offsets

from .fs import FileHandle

__all__ = [
    "CHUNK_BYTES",
    "BadFrame",
    "IndexView",
    "SegmentWalk",
    "WalWalk",
    "decode_index",
    "resumes_after",
    "walk_segment",
    "walk_wal",
]

CHUNK_BYTES = 4 << 20
_MIN_RECORD = FRAME_HEADER_SIZE + FRAME_TRAILER_SIZE
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_SEQ_AT = 24  # of a record frame (layout: topics/_core/_ext.pyi)
# magic, version, reserved, salt, topic_id, base_seq, frame_count, frames_length
_INDEX_HEADER = struct.Struct("<8sHHIQQII")
_INDEX_MAGIC = b"TOPICIDX"
_WAL_FRAME = struct.Struct("<IIQB3s")  # payload_len, crc, lsn, entry_type, reserved
_WAL_FRAME_HEADER = _WAL_FRAME.size
_WAL_MAX_PAYLOAD = 64 << 20
# How far above the expected LSN a frame found after a bad one may be and still count as
# this file's: a 4 KiB page of damage destroys at most a few hundred frames.
_RESUME_LSN_SPAN = 1 << 20
_WHY = {"crc": "fails its CRC", "truncated": "is cut short", "kind": "is not a record frame"}


class BadFrame(NamedTuple):
    """The first frame that does not validate."""

    frame: int  # its index: the frames before it validated
    offset: int  # of the bad frame: within the frames (segment) or the file (WAL)
    problem: str  # "crc", "truncated", "header", "seq", "lsn"
    detail: str


class SegmentWalk(NamedTuple):
    offsets: array.array[int]  # of every frame that validated, within the frames
    bad: BadFrame | None
    bytes_read: int


class IndexView(NamedTuple):
    salt: int
    topic_id: int
    base_seq: int
    frames_length: int
    offsets: array.array[int]


def _whole_end(buf: bytes, at_end: bool) -> int:
    """Where the last whole frame of ``buf`` ends (rule 3). At the end of what is checked,
    all of it: a frame cut short there is the core's to report."""
    n = len(buf)
    if at_end:
        return n
    off = 0
    while off + 4 <= n:
        size = _U32.unpack_from(buf, off)[0]
        if size < _MIN_RECORD:  # garbage: hand the core this frame to name
            return off + min(n - off, _MIN_RECORD)
        if off + size > n:
            break
        off += size
    return off


def _frame_offset(buf: bytes, index: int) -> int:
    """Offset of frame ``index`` in ``buf`` (the frames before it are known whole)."""
    off = 0
    for _ in range(index):
        off += _U32.unpack_from(buf, off)[0]
    return off


def walk_segment(
    handle: FileHandle, start: int, length: int, salt: int, base_seq: int
) -> SegmentWalk:
    """Check the ``length`` frame bytes at file offset ``start``: every CRC, every frame's
    structure, and that the seqs run on from ``base_seq`` (first and last of each chunk)."""
    offsets: array.array[int] = array.array("I")
    pos = read = 0
    while pos < length:
        want = min(CHUNK_BYTES, length - pos)
        buf = handle.read_at(start + pos, want)
        read += len(buf)
        if len(buf) < want:
            return SegmentWalk(offsets, _truncated(len(offsets), pos, len(buf), want), read)
        end = _whole_end(buf, pos + want == length)
        if end == 0:  # one frame larger than a chunk: read exactly that frame
            size = _U32.unpack_from(buf, 0)[0]
            if pos + size > length:
                return SegmentWalk(
                    offsets,
                    BadFrame(len(offsets), pos, "truncated", f"of {size} bytes does not fit"),
                    read,
                )
            buf = handle.read_at(start + pos, size)
            read += len(buf)
            if len(buf) < size:
                return SegmentWalk(offsets, _truncated(len(offsets), pos, len(buf), size), read)
            end = size
        chunk = buf[:end] if end < len(buf) else buf
        try:
            found = frame_offsets(chunk, salt, True, pos)
        except FrameError as exc:
            bad_off = pos + _frame_offset(chunk, exc.index)
            why = _WHY.get(exc.reason, exc.reason)
            return SegmentWalk(
                offsets, BadFrame(len(offsets) + exc.index, bad_off, exc.reason, why), read
            )
        first = base_seq + len(offsets)
        if found and (
            _U64.unpack_from(chunk, _SEQ_AT)[0] != first
            or _U64.unpack_from(chunk, found[-1] - pos + _SEQ_AT)[0] != first + len(found) - 1
        ):
            why = f"does not carry the seq its place says ({first} onwards)"
            return SegmentWalk(offsets, BadFrame(len(offsets), pos, "seq", why), read)
        offsets.extend(found)
        pos += end
    return SegmentWalk(offsets, None, read)


def _truncated(index: int, pos: int, got: int, want: int) -> BadFrame:
    return BadFrame(
        index, pos + got, "truncated", f"is cut short: the file ends {want - got} bytes early"
    )


def decode_index(raw: bytes) -> IndexView | str:
    """A ``.seg.idx`` file's contents, or why it does not validate on its own."""
    size = _INDEX_HEADER.size
    if len(raw) < size + 4:
        return f"index is {len(raw)} bytes, shorter than its header"
    magic, version, _, salt, topic_id, base, count, length = _INDEX_HEADER.unpack_from(raw)
    if magic != _INDEX_MAGIC:
        return "bad index magic"
    if version != 1:
        return f"unsupported index version {version}"
    if crc32c(raw[:-4], salt) != _U32.unpack_from(raw, len(raw) - 4)[0]:
        return "index fails its checksum"
    if len(raw) != size + 4 * count + 4:
        return f"index of {len(raw)} bytes cannot hold {count} offsets"
    offsets = array.array("I", raw[size : size + 4 * count])
    if sys.byteorder == "big":  # pragma: no cover - the format is little-endian
        offsets.byteswap()
    return IndexView(salt, topic_id, base, length, offsets)


class WalWalk(NamedTuple):
    frames: int  # that validated
    last_lsn: int  # of the last one (first_lsn - 1 when none)
    bad: BadFrame | None
    bytes_read: int


class _Window:
    """A sliding read window over [start, end) of one file (rule 2)."""

    def __init__(self, handle: FileHandle, end: int) -> None:
        self.handle, self.end = handle, end
        self.base, self.buf, self.read = 0, b"", 0

    def get(self, offset: int, size: int) -> memoryview | None:
        if offset + size > self.end:
            return None
        if offset < self.base or offset + size > self.base + len(self.buf):
            self.buf = self.handle.read_at(offset, max(size, min(CHUNK_BYTES, self.end - offset)))
            self.base = offset
            self.read += len(self.buf)
            if len(self.buf) < size:
                return None
        lo = offset - self.base
        return memoryview(self.buf)[lo : lo + size]


def _wal_frame(window: _Window, offset: int, salt: int) -> tuple[int, int] | str:
    """(lsn, frame length) of the checksum-valid frame at ``offset``, or why there is none."""
    head = window.get(offset, _WAL_FRAME_HEADER)
    if head is None:
        return "truncated"
    length, crc, lsn, _, _ = _WAL_FRAME.unpack(head)
    if length > _WAL_MAX_PAYLOAD:
        return "header"
    frame = window.get(offset, _WAL_FRAME_HEADER + length)
    if frame is None:
        return "truncated"
    if crc32c(frame[8:], crc32c(frame[:4], salt)) != crc:
        return "crc"
    return lsn, _WAL_FRAME_HEADER + length


def walk_wal(handle: FileHandle, start: int, end: int, salt: int, first_lsn: int) -> WalWalk:
    """Check the WAL frames in [start, end): lengths, CRCs, and LSNs consecutive from
    ``first_lsn``; stops at the first bad frame."""
    window = _Window(handle, end)
    offset, expected, count = start, first_lsn, 0
    while offset < end:
        got = _wal_frame(window, offset, salt)
        if isinstance(got, str):
            detail = {
                "truncated": f"the file ends inside the frame of LSN {expected}",
                "header": f"the frame of LSN {expected} has an impossible length",
                "crc": f"the frame of LSN {expected} fails its CRC",
            }[got]
            return WalWalk(count, expected - 1, BadFrame(count, offset, got, detail), window.read)
        lsn, size = got
        if lsn != expected:
            bad = BadFrame(count, offset, "lsn", f"frame LSN {lsn} where {expected} was expected")
            return WalWalk(count, expected - 1, bad, window.read)
        offset += size
        expected += 1
        count += 1
    return WalWalk(count, expected - 1, None, window.read)


def resumes_after(
    handle: FileHandle, start: int, end: int, salt: int, expected: int
) -> tuple[int, int] | None:
    """(offset, lsn) of a valid frame past ``start`` carrying an LSN at or above
    ``expected`` (rule 4), or None: then the bad bytes at ``start`` are a torn tail."""
    # A frame header ends with the LSN's upper four bytes, the entry type and three zero
    # bytes: search for that shape (overlapping matches) instead of trying every offset.
    upper = _U64.pack(expected)[4:]
    pattern = re.compile(b"(?=" + re.escape(upper) + b".\x00\x00\x00)", re.DOTALL)
    window = _Window(handle, end)
    pos = start + 1
    while pos < end:
        chunk = handle.read_at(pos, min(CHUNK_BYTES, end - pos))
        if not chunk:
            return None
        for match in pattern.finditer(chunk):
            offset = pos + match.start() - 12
            if offset <= start:
                continue
            got = _wal_frame(window, offset, salt)
            if not isinstance(got, str) and expected <= got[0] < expected + _RESUME_LSN_SPAN:
                return offset, got[0]
        if pos + len(chunk) >= end:
            return None
        # The next chunk starts where a header cut at this one's end would have matched.
        pos += max(1, len(chunk) - (_WAL_FRAME_HEADER - 1))
    return None
