"""Walking record frames, and the WAL's own frames."""

from __future__ import annotations

import array
import struct
from collections.abc import Sequence

from ._pure_format import (
    BODY,
    FRAME_HEADER_SIZE,
    KIND_RECORD,
    MIN_FRAME,
    U32,
    U32S,
    U64,
    Buffer,
    FrameError,
    as_bytes,
    crc32c,
    frame_crc,
    int_in,
)


def check_frame(buf: bytes, off: int, index: int, salt: int, verify: bool) -> int:
    """Return the length of the valid frame at ``off`` or raise FrameError."""

    def fail(reason: str) -> FrameError:
        return FrameError(f"frame {index} at offset {off}: {reason}", index, "frame", reason)

    avail = len(buf) - off
    if avail < MIN_FRAME:
        raise fail("truncated")
    size = U32S.unpack_from(buf, off)[0]
    if size > avail:
        raise fail("truncated")
    if size < MIN_FRAME:
        raise fail("kind")
    frame = buf[off : off + size]
    if verify and U32S.unpack_from(frame, 4)[0] != frame_crc(frame, salt):
        raise fail("crc")
    kind, res1, nlen, tlen, res2, mlen, dlen, _, _ = BODY.unpack_from(frame, 8)
    # Any non-zero trailer reads as deleted (see _ext: a garbled flip must not corrupt).
    if kind != KIND_RECORD or res1 or res2:
        raise fail("kind")
    if dlen == 0 or MIN_FRAME + nlen + tlen + mlen + dlen != size:
        raise fail("kind")
    return int(size)


def iter_frames(buf: Buffer, salt: int, verify: bool = True) -> list[tuple[int, int]]:
    int_in(salt, 0, U32, "salt")
    data = as_bytes(buf)
    spans: list[tuple[int, int]] = []
    off = 0
    while off < len(data):
        size = check_frame(data, off, len(spans), salt, verify)
        spans.append((off, size))
        off += size
    return spans


def frame_offsets(buf: Buffer, salt: int, verify: bool = True, start: int = 0) -> array.array[int]:
    spans = iter_frames(buf, salt, verify)
    if not isinstance(start, int):
        raise TypeError("start must be an int")
    if start < 0:
        raise ValueError("negative start offset")
    if start + len(buf) > U32:
        raise OverflowError("frame offsets pass 4 GiB (u32)")
    return array.array("I", [start + off for off, _ in spans])


_WAL_FRAME = struct.Struct("<IIQB3x")


def encode_wal_frames(frames: Sequence[tuple[int, int, bytes]], salt: int) -> bytearray:
    int_in(salt, 0, U32, "salt")
    items = list(frames)
    for item in items:
        if type(item) is not tuple or len(item) != 3:
            raise TypeError("each frame must be a (lsn, entry_type, payload) tuple")
        lsn, kind, payload = item
        if not isinstance(lsn, int) or not 0 <= lsn <= U64:
            raise ValueError(f"lsn {lsn!r} is not a u64")
        if not isinstance(kind, int) or not 0 <= kind <= 0xFF:
            raise ValueError(f"entry_type {kind!r} is not a u8")
        if not isinstance(payload, bytes):
            raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
        if len(payload) > U32:
            raise ValueError(f"payload of {len(payload)} bytes is over u32")
    out = bytearray()
    for lsn, kind, payload in items:
        head = _WAL_FRAME.pack(len(payload), 0, lsn, kind)
        crc = crc32c(head[8:] + payload, crc32c(head[:4], salt))
        out += head[:4] + U32S.pack(crc) + head[8:] + payload
    return out


def frame_seq(buf: Buffer, offset: int = 0) -> int:
    if offset < 0:
        raise IndexError("negative frame offset")
    if len(buf) - offset < FRAME_HEADER_SIZE:
        raise FrameError(f"frame at offset {offset}: truncated", -1, "frame", "truncated")
    return int(struct.unpack_from("<Q", buf, offset + 24)[0])
