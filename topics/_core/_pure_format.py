"""The frame format shared by the pure-Python core's modules: sizes, flags, the one error
and CRC32C (the ``_pure`` twin of what ``_ext.pyx`` itself holds).
"""

from __future__ import annotations

import struct
from typing import Final

Buffer = bytes | bytearray | memoryview

FORMAT_VERSION: Final = 1
FRAME_HEADER_SIZE: Final = 40
FRAME_TRAILER_SIZE: Final = 1
KIND_RECORD: Final = 1
FLAG_LIVE: Final = 0
FLAG_DELETED: Final = 1
RENDER_DATA: Final = 1
RENDER_META: Final = 2
RENDER_TAGS: Final = 4

MIN_FRAME = FRAME_HEADER_SIZE + FRAME_TRAILER_SIZE
U16, U32, U64 = 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF
I64 = 1 << 63

BODY = struct.Struct("<BBHHHIIQq")  # frame bytes [8:40]
U32S = struct.Struct("<I")


class FrameError(ValueError):
    """The one error of the core: bad record input, or bytes that are not valid frames."""

    def __init__(
        self, message: str, index: int = -1, field: str = "frame", reason: str = "frame"
    ) -> None:
        super().__init__(message)
        self.index = index
        self.field = field
        self.reason = reason

    def __reduce__(self) -> tuple[type[FrameError], tuple[str, int, str, str]]:
        return (type(self), (str(self), self.index, self.field, self.reason))


def int_in(value: int, low: int, high: int, what: str) -> int:
    # Mirrors the compiled module's C integer conversions (TypeError / OverflowError).
    if not isinstance(value, int):
        raise TypeError(f"{what} must be an int")
    if not low <= value <= high:
        raise OverflowError(f"{what} out of range")
    return value


def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE: Final = _crc_table()


def as_bytes(data: Buffer) -> bytes:
    # Any buffer, but not bytes(int) or other non-buffers that bytes() would accept.
    return data if type(data) is bytes else memoryview(data).tobytes()


def crc32c(data: Buffer, crc: int = 0) -> int:
    table = _CRC_TABLE
    c = int_in(crc, 0, U32, "crc") ^ U32
    for b in as_bytes(data):
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ U32


def frame_crc(frame: bytes, salt: int) -> int:
    return crc32c(frame[8:-1], crc32c(frame[:4], salt))
