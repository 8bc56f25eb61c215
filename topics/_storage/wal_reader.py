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
Rule 6 (recovery of a writer, issue 32): given ``on_skip``, a bad frame of an older file,
  or one of the newest with valid frames after it, does not raise: the scan reports the
  LSNs it cannot read (a :class:`WalSkip`) and resumes at the next frame that validates
  under the file's salt with a plausible LSN (``verify_frames.resumes_after``), or at the
  next file. A torn header of an older file and a file missing in the numbering skip the
  whole file the same way. A bad frame of the newest file with nothing valid after it is
  still a torn tail (Rule 3), and an unknown format version still raises.
"""

from __future__ import annotations

import secrets
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

from topics._core import crc32c, encode_wal_frames

from .fs import FileHandle, Fs, StorageCorruptionError
from .verify_frames import resumes_after

__all__ = [
    "FRAME_HEADER_SIZE",
    "HEADER_SIZE",
    "MAX_PAYLOAD_BYTES",
    "WAL_FORMAT_VERSION",
    "WalCorruptionError",
    "WalEntry",
    "WalFileHeader",
    "WalSkip",
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


class WalSkip(NamedTuple):
    """Entries a tolerant scan could not read (Rule 6)."""

    file_no: int
    path: str
    offset: int  # of the first bad byte (0: the whole file)
    problem: str
    first_lsn: int  # the first LSN lost
    last_lsn: int | None  # the last LSN lost; None: every LSN up to the end of the log
    nbytes: int | None  # bytes skipped (None: unknown, e.g. a missing file)


class _Unreadable(NamedTuple):
    """A file a tolerant scan skips whole: a torn header, or missing in the numbering."""

    file_no: int
    problem: str


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


def scan_wal(
    fs: Fs,
    dir: str,
    *,
    from_lsn: int = 0,
    repair: bool,
    on_skip: Callable[[WalSkip], None] | None = None,
) -> Iterator[WalEntry]:
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
        on_skip: called with each run of entries that cannot be read, instead of raising
            (Rule 6); called before the first entry read after the run.

    Raises:
        WalCorruptionError: without ``on_skip``: bad bytes in an older file, a CRC-valid
            frame out of LSN order, or a missing file in the numbering (Rules 2-4). With
            it: only a header of an unknown format version or LSNs going backwards.
    """
    numbers = wal_files(fs, dir)
    if not numbers:
        return
    files = _read_headers(fs, dir, numbers, repair=repair, tolerant=on_skip is not None)
    prev_lsn = 0
    for i, item in enumerate(files):
        upper = next((f.first_lsn for f in files[i + 1 :] if isinstance(f, WalFileHeader)), None)
        if upper is not None and upper <= from_lsn:
            continue  # every frame here is below the next file's first LSN
        if isinstance(item, _Unreadable):
            assert on_skip is not None  # only a tolerant scan lists them
            path = wal_path(dir, item.file_no)
            size = _size(fs, path)
            last = None if upper is None else upper - 1
            on_skip(WalSkip(item.file_no, path, 0, item.problem, prev_lsn + 1, last, size))
            continue
        newest = item.file_no == numbers[-1]
        scan = _FileScan(fs, dir, item, newest=newest, repair=repair, upper=upper)
        for entry in scan.entries(prev_lsn, on_skip):
            prev_lsn = entry.lsn
            if entry.lsn >= from_lsn:
                yield entry
        prev_lsn = max(prev_lsn, item.first_lsn - 1)


def last_lsn(fs: Fs, dir: str) -> int | None:
    """The LSN of the last valid frame in the log (read-only), or None when it is empty."""
    numbers = wal_files(fs, dir)
    headers = _read_headers(fs, dir, numbers, repair=False, tolerant=False)
    for header in reversed(headers):
        assert isinstance(header, WalFileHeader)  # a strict read lists no other
        newest = header.file_no == numbers[-1]
        last = None
        for entry in _FileScan(fs, dir, header, newest=newest, repair=False).entries(0, None):
            last = entry.lsn
        if last is not None:
            return last
    return None


def _size(fs: Fs, path: str) -> int | None:
    try:
        handle = fs.open(path)
    except FileNotFoundError:
        return None
    try:
        return handle.size()
    finally:
        handle.close()


def _read_headers(
    fs: Fs, dir: str, numbers: list[int], *, repair: bool, tolerant: bool
) -> list[WalFileHeader | _Unreadable]:
    files: list[WalFileHeader | _Unreadable] = []
    last_first = 0
    for file_no in range(numbers[0], numbers[-1] + 1):
        path = wal_path(dir, file_no)
        if file_no not in numbers:
            if not tolerant:
                raise WalCorruptionError(
                    f"WAL file {file_no:016x} is missing between {file_no - 1:016x} and "
                    f"{min(n for n in numbers if n > file_no):016x}",
                    path=path,
                )
            files.append(_Unreadable(file_no, "missing"))
            continue
        newest = file_no == numbers[-1]
        try:
            header = decode_header(_read_head(fs, path))
        except _HeaderError as exc:
            if newest and exc.torn:
                # The writer syncs a new file's header before any frame goes in, so a
                # newest file with a torn header holds nothing that was ever acknowledged.
                if repair:
                    fs.remove(path)
                    fs.sync_dir(dir)
                break
            if not (tolerant and exc.torn):
                raise WalCorruptionError(f"bad WAL header: {exc}", path=path, offset=0) from None
            files.append(_Unreadable(file_no, f"bad header: {exc}"))
            continue
        if header.file_no != file_no:
            if not tolerant or newest:
                raise WalCorruptionError(
                    f"header says file {header.file_no:016x}", path=path, offset=0
                )
            files.append(_Unreadable(file_no, f"header says file {header.file_no:016x}"))
            continue
        if header.first_lsn < 1 or header.first_lsn < last_first:
            raise WalCorruptionError(
                f"first_lsn {header.first_lsn} goes backwards", path=path, offset=0
            )
        last_first = header.first_lsn
        files.append(header)
    return files


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


class _FileScan:
    """The frames of one file, in order (Rules 2, 3 and 6)."""

    def __init__(
        self,
        fs: Fs,
        dir: str,
        header: WalFileHeader,
        *,
        newest: bool,
        repair: bool,
        upper: int | None = None,
    ) -> None:
        self.fs, self.header, self.newest, self.repair = fs, header, newest, repair
        self.path = wal_path(dir, header.file_no)
        self.upper = upper  # the next readable file's first LSN: this file's LSNs stay below

    def entries(
        self, prev_lsn: int, on_skip: Callable[[WalSkip], None] | None
    ) -> Iterator[WalEntry]:
        header, path = self.header, self.path
        if header.first_lsn <= prev_lsn:
            raise WalCorruptionError(
                f"first_lsn {header.first_lsn} does not follow LSN {prev_lsn}", path=path, offset=0
            )
        handle = self.fs.open(path, write=self.repair and self.newest)
        try:
            window = _Window(handle, HEADER_SIZE, handle.size())
            offset = HEADER_SIZE
            expected = header.first_lsn
            while offset < window.end:
                frame = _read_frame(window, offset, header.salt)
                problem = frame if isinstance(frame, str) else None
                lsn = entry_type = 0
                if not isinstance(frame, str):
                    _, _, lsn, entry_type = _FRAME.unpack(frame[:FRAME_HEADER_SIZE])
                    if lsn < expected or (lsn > expected and on_skip is None):
                        if on_skip is None:
                            raise WalCorruptionError(
                                f"frame LSN {lsn} where {expected} was expected",
                                path=path,
                                offset=offset,
                            )
                        problem = f"frame LSN {lsn} where {expected} was expected"
                if problem is not None:
                    if on_skip is None:
                        _end_of_log(
                            handle, path, offset, problem, newest=self.newest, repair=self.repair
                        )
                        return
                    resumed = self._resync(handle, offset, window.end, expected)
                    if resumed is None:
                        if self.newest:
                            _end_of_log(
                                handle, path, offset, problem, newest=True, repair=self.repair
                            )
                        else:
                            n = window.end - offset
                            on_skip(self._skip(offset, problem, expected, self._last(), n))
                        return
                    at, lsn = resumed
                    if lsn > expected:  # else bytes that hid no entry (a bad length)
                        on_skip(self._skip(offset, problem, expected, lsn - 1, at - offset))
                    offset, expected = at, lsn
                    continue
                assert not isinstance(frame, str)
                if lsn > expected:  # a CRC-valid frame past a hole (tolerant only)
                    assert on_skip is not None
                    on_skip(self._skip(offset, "lsn", expected, lsn - 1, 0))
                    expected = lsn
                payload = bytes(frame[FRAME_HEADER_SIZE:])
                yield WalEntry(lsn, entry_type, payload, header.file_no, offset)
                expected += 1
                offset += len(frame)
        finally:
            handle.close()

    def _resync(
        self, handle: FileHandle, offset: int, end: int, expected: int
    ) -> tuple[int, int] | None:
        """(offset, LSN) of the next frame to read past bad bytes at ``offset``."""
        found = resumes_after(handle, offset, end, self.header.salt, expected)
        if found is None or (self.upper is not None and found[1] >= self.upper):
            return None
        return found

    def _last(self) -> int | None:
        return None if self.upper is None else self.upper - 1

    def _skip(self, offset: int, problem: str, first: int, last: int | None, n: int) -> WalSkip:
        return WalSkip(self.header.file_no, self.path, offset, problem, first, last, n)


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
