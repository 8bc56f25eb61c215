"""The WAL on-disk format and its reader (``scan_wal``), shared by the writer and recovery.

Role: this module owns the bytes of a WAL file: the file header, the frame layout, the
frame encoder the writer uses, and the streaming scan that recovery and the read-only
Reader use. ``docs/STORAGE_FORMATS.md`` ("WAL") is the prose version of the layout.
Recovery (docs/ARCHITECTURE.md, "Durability") streams it, never a whole file in memory.

Rule 1: a frame validates only with the salt of the file it sits in: its CRC32C is seeded
  with the header's random salt and covers the length field and everything after the CRC
  field. Stale bytes from another file, zero fill and torn writes never validate.
Rule 2: inside one file, frame LSNs are consecutive, starting at the header's
  ``first_lsn``; across files they increase strictly. A frame that passes its CRC but
  breaks this is corruption, wherever it is.
Rule 3: only the NEWEST file (highest number) may end in a torn tail (short header,
  truncated frame, bad length, bad CRC). That ends the log: ``repair=True`` truncates the
  file at the end of the last good frame and syncs (a newest file whose header is torn
  holds no frames and is removed). Any bad byte in an OLDER file is
  :class:`WalCorruptionError`, never a silent skip: the writer synced it before it ever
  created the next file.
Rule 4: file numbers are consecutive; a missing file in the middle is corruption (the
  writer's ``trim`` removes oldest-first, making each removal durable before the next).
Rule 5: the scan is streaming: it holds at most one read chunk plus one frame.
"""

from __future__ import annotations

import itertools
import secrets
import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from topics._core import crc32c, encode_wal_frames

from .fs import FileHandle, Fs, StorageCorruptionError

__all__ = [
    "FRAME_HEADER_SIZE",
    "HEADER_SIZE",
    "MAX_PAYLOAD_BYTES",
    "WAL_FORMAT_VERSION",
    "WalCorruptionError",
    "WalEntry",
    "WalFileHeader",
    "encode_frames",
    "encode_header",
    "last_lsn",
    "new_salt",
    "read_wal_header",
    "scan_wal",
    "wal_file_name",
    "wal_files",
    "wal_path",
]

WAL_MAGIC = b"TOPICWAL"
WAL_FORMAT_VERSION = 3
#: Versions a scan reads: version 1 files differ only in never holding a HEAD entry
#: (entries.py rule 5), version 2 files in never holding an APPEND_PRODUCER or PRODUCER
#: entry (rule 6), so a data directory written before either recovers unchanged. A
#: version 2 binary refuses a version 3 file by its header, not at an unknown entry.
_READABLE_VERSIONS = frozenset({1, 2, WAL_FORMAT_VERSION})
# magic, version, header_size, salt, file_no, first_lsn, reserved, header crc
_HEADER = struct.Struct("<8sHHIQQII")
HEADER_SIZE = _HEADER.size  # 40
# payload_len, crc, lsn, entry_type, 3 reserved zero bytes
_FRAME = struct.Struct("<IIQB3x")
FRAME_HEADER_SIZE = _FRAME.size  # 20
_U32 = struct.Struct("<I")
# A bound on one frame, so a garbage length can never make the reader allocate gigabytes.
MAX_PAYLOAD_BYTES = 64 << 20
_CHUNK_BYTES = 1 << 20
_SUFFIX = ".wal"


class WalCorruptionError(StorageCorruptionError):
    """A WAL frame or header that must be valid is not (see Rule 2-4)."""


class WalEntry(NamedTuple):
    """One frame read back from the log."""

    lsn: int
    entry_type: int
    payload: bytes
    file_no: int
    offset: int  # of the frame in its file


class WalFileHeader(NamedTuple):
    file_no: int
    salt: int
    first_lsn: int
    version: int


class _HeaderError(Exception):
    """Internal: a header that does not parse. ``torn``: short or checksum-bad (as a crash
    mid-create leaves it) rather than a valid header of an unknown format."""

    def __init__(self, message: str, *, torn: bool) -> None:
        super().__init__(message)
        self.torn = torn


def wal_file_name(file_no: int) -> str:
    return f"{file_no:016x}{_SUFFIX}"


def wal_path(dir: str, file_no: int) -> str:
    return f"{dir.rstrip('/')}/{wal_file_name(file_no)}"


def wal_files(fs: Fs, dir: str) -> list[int]:
    """The WAL file numbers in ``dir``, ascending (other names are ignored)."""
    out = []
    for name in fs.listdir(dir):
        stem = name[: -len(_SUFFIX)]
        if name.endswith(_SUFFIX) and len(stem) == 16 and stem == stem.lower():
            try:
                out.append(int(stem, 16))
            except ValueError:
                continue
    return sorted(out)


def new_salt() -> int:
    """A random u32 salt under which an all-zero frame header does not validate."""
    while True:
        salt = secrets.randbits(32)
        # Zero fill past a torn write must never look like a frame (Rule 1); with a CRC
        # that is 1 in 2**32, and redrawing makes it never.
        if crc32c(bytes(FRAME_HEADER_SIZE - 4), crc32c(bytes(4), salt)) != 0:
            return salt


def encode_header(file_no: int, salt: int, first_lsn: int) -> bytes:
    head = _HEADER.pack(WAL_MAGIC, WAL_FORMAT_VERSION, HEADER_SIZE, salt, file_no, first_lsn, 0, 0)
    return head[:-4] + _U32.pack(crc32c(head[:-4]))


def decode_header(raw: bytes) -> WalFileHeader:
    """Parse a file header; raises _HeaderError."""
    if len(raw) < HEADER_SIZE:
        raise _HeaderError(f"header is {len(raw)} of {HEADER_SIZE} bytes", torn=True)
    magic, version, size, salt, file_no, first_lsn, _, crc = _HEADER.unpack_from(raw)
    if crc32c(raw[: HEADER_SIZE - 4]) != crc or magic != WAL_MAGIC:
        raise _HeaderError("header checksum or magic mismatch", torn=True)
    if version not in _READABLE_VERSIONS or size != HEADER_SIZE:
        raise _HeaderError(f"unsupported WAL format version {version}", torn=False)
    return WalFileHeader(file_no, salt, first_lsn, version)


def read_wal_header(fs: Fs, path: str) -> WalFileHeader:
    """Read and check one file's header.

    Raises:
        WalCorruptionError: short, checksum-bad or of an unknown version.
    """
    try:
        return decode_header(_read_head(fs, path))
    except _HeaderError as exc:
        raise WalCorruptionError(f"bad WAL header: {exc}", path=path, offset=0) from None


def _read_head(fs: Fs, path: str) -> bytes:
    handle = fs.open(path)
    try:
        return handle.read_at(0, HEADER_SIZE)
    finally:
        handle.close()


def encode_frames(frames: Sequence[tuple[int, int, bytes]], salt: int) -> bytearray:
    """Encode (lsn, entry_type, payload) triples as consecutive frames under ``salt``.

    In the core (one C pass, no Python per frame): a group commit of many small frames
    runs this while every writer waits for the batch.
    """
    return encode_wal_frames(frames, salt)


def scan_wal(fs: Fs, dir: str, *, from_lsn: int = 0, repair: bool) -> Iterator[WalEntry]:
    """Stream every entry with ``lsn >= from_lsn``, oldest first.

    Files wholly below ``from_lsn`` (the next file starts at or below it) are not read.
    Exhaust the iterator: the tail repair happens when the scan reaches the tail.

    Args:
        fs: the file system.
        dir: the WAL directory.
        from_lsn: the first LSN wanted (e.g. the checkpoint's covered LSN + 1).
        repair: truncate a torn tail of the newest file (recovery, with the data
            directory locked). ``False`` for read-only readers beside a live writer,
            which just stop at the tail.

    Raises:
        WalCorruptionError: bad bytes in an older file, a CRC-valid frame out of LSN
            order, or a missing file in the numbering (Rules 2-4).
    """
    numbers = wal_files(fs, dir)
    if not numbers:
        return
    for prev, cur in itertools.pairwise(numbers):
        if cur != prev + 1:
            raise WalCorruptionError(
                f"WAL file {prev + 1:016x} is missing between {prev:016x} and {cur:016x}",
                path=wal_path(dir, prev + 1),
            )
    headers = _read_headers(fs, dir, numbers, repair=repair)
    prev_lsn = 0
    for i, header in enumerate(headers):
        if i + 1 < len(headers) and headers[i + 1].first_lsn <= from_lsn:
            continue  # every frame here is below the next file's first LSN
        newest = header.file_no == numbers[-1]
        for entry in _scan_file(fs, dir, header, newest, repair, prev_lsn):
            prev_lsn = entry.lsn
            if entry.lsn >= from_lsn:
                yield entry
        prev_lsn = max(prev_lsn, header.first_lsn - 1)


def last_lsn(fs: Fs, dir: str) -> int | None:
    """The LSN of the last valid frame in the log (read-only), or None when it is empty."""
    numbers = wal_files(fs, dir)
    headers = _read_headers(fs, dir, numbers, repair=False)
    for header in reversed(headers):
        newest = header.file_no == numbers[-1]
        last = None
        for entry in _scan_file(fs, dir, header, newest, False, 0):
            last = entry.lsn
        if last is not None:
            return last
    return None


def _read_headers(fs: Fs, dir: str, numbers: list[int], *, repair: bool) -> list[WalFileHeader]:
    headers: list[WalFileHeader] = []
    for file_no in numbers:
        path = wal_path(dir, file_no)
        try:
            header = decode_header(_read_head(fs, path))
        except _HeaderError as exc:
            if not exc.torn or file_no != numbers[-1]:
                raise WalCorruptionError(f"bad WAL header: {exc}", path=path, offset=0) from None
            # The writer syncs a new file's header before any frame goes in, so a newest
            # file with a torn header holds nothing that was ever acknowledged.
            if repair:
                fs.remove(path)
                fs.sync_dir(dir)
            break
        if header.file_no != file_no:
            raise WalCorruptionError(f"header says file {header.file_no:016x}", path=path, offset=0)
        if header.first_lsn < 1 or (headers and header.first_lsn < headers[-1].first_lsn):
            raise WalCorruptionError(
                f"first_lsn {header.first_lsn} goes backwards", path=path, offset=0
            )
        headers.append(header)
    return headers


class _Window:
    """A sliding read window over one file (Rule 5)."""

    def __init__(self, handle: FileHandle, start: int, end: int) -> None:
        self.handle = handle
        self.end = end  # file size when the scan began: a live writer may append later
        self.base = start
        self.buf = b""

    def get(self, offset: int, size: int) -> memoryview | None:
        """The bytes [offset, offset+size), or None when the file ends first."""
        if offset + size > self.end:
            return None
        if offset < self.base or offset + size > self.base + len(self.buf):
            want = max(size, min(_CHUNK_BYTES, self.end - offset))
            self.buf = self.handle.read_at(offset, want)
            self.base = offset
            if len(self.buf) < size:
                return None
        lo = offset - self.base
        return memoryview(self.buf)[lo : lo + size]


def _scan_file(
    fs: Fs, dir: str, header: WalFileHeader, newest: bool, repair: bool, prev_lsn: int
) -> Iterator[WalEntry]:
    path = wal_path(dir, header.file_no)
    if header.first_lsn <= prev_lsn:
        raise WalCorruptionError(
            f"first_lsn {header.first_lsn} does not follow LSN {prev_lsn}", path=path, offset=0
        )
    handle = fs.open(path, write=repair and newest)
    try:
        window = _Window(handle, HEADER_SIZE, handle.size())
        offset = HEADER_SIZE
        expected = header.first_lsn
        while offset < window.end:
            frame = _read_frame(window, offset, header.salt)
            if isinstance(frame, str):
                _end_of_log(handle, path, offset, frame, newest=newest, repair=repair)
                return
            _, _, lsn, entry_type = _FRAME.unpack(frame[:FRAME_HEADER_SIZE])
            if lsn != expected:
                raise WalCorruptionError(
                    f"frame LSN {lsn} where {expected} was expected", path=path, offset=offset
                )
            payload = bytes(frame[FRAME_HEADER_SIZE:])
            yield WalEntry(lsn, entry_type, payload, header.file_no, offset)
            expected += 1
            offset += len(frame)
    finally:
        handle.close()


def _read_frame(window: _Window, offset: int, salt: int) -> memoryview | str:
    """The whole checksum-valid frame at ``offset``, or why there is none."""
    head = window.get(offset, FRAME_HEADER_SIZE)
    if head is None:
        return "truncated frame header"
    length, crc = _FRAME.unpack(head)[:2]
    if length > MAX_PAYLOAD_BYTES:
        return f"bad payload length {length}"
    frame = window.get(offset, FRAME_HEADER_SIZE + length)
    if frame is None:
        return "truncated frame"
    if crc32c(frame[8:], crc32c(frame[:4], salt)) != crc:
        return "bad frame CRC"
    return frame


def _end_of_log(
    handle: FileHandle, path: str, offset: int, problem: str, *, newest: bool, repair: bool
) -> None:
    if not newest:
        raise WalCorruptionError(
            f"{problem} in a WAL file that is not the newest", path=path, offset=offset
        )
    if repair:
        handle.truncate(offset)
        # fsync, not fdatasync: the new size is the whole point and must be durable
        # before a new WAL file is created after this one.
        handle.sync_all()
