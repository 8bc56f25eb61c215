"""The WAL half of ``topics verify`` (``verify.py``): one WAL file's header and frames, and
what only the whole WAL directory shows (a file missing in the numbering, LSNs going back).

Rules (docs/STORAGE_FORMATS.md, "WAL", validity rules):
1. Every file but the newest must be whole: any bad byte in it is ``data`` damage.
2. The newest file may end in a torn tail (a crash, or a write in progress beside a live
   server): ``advice``. A bad frame in it followed by valid frames of this file is not a
   tail but damage in the middle, whose entries recovery skips: ``data``.
3. A newest file whose header is torn holds nothing that was acknowledged (the header is
   synced before any frame): ``advice``.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import replace

from topics._core import crc32c

from .fs import Fs
from .verify_findings import Checked, Finding
from .verify_frames import resumes_after, walk_wal
from .wal_reader import wal_file_name

__all__ = ["WAL_DIR", "check_wal", "check_wal_dir"]

WAL_DIR = "wal"
_WAL_HEADER = struct.Struct("<8sHHIQQII")  # magic, version, size, salt, file_no, lsn, 0, crc
_HEADER_SIZE = 40
_WAL_VERSIONS = frozenset({1, 2, 3})


def check_wal(fs: Fs, root: str, rel: str, *, newest: bool) -> Checked:
    """Check one WAL file (``rel`` under ``root``); ``newest``: the highest-numbered one.
    ``lsns`` of the result is set only for a whole file."""
    out = Checked(files=1)
    handle = fs.open(f"{root}/{rel}")
    try:
        size = handle.size()
        raw = handle.read_at(0, _HEADER_SIZE)
        out.bytes += len(raw)
        header = _wal_header(raw, rel)
        if isinstance(header, Finding):
            torn = header.problem in ("truncated", "header")
            if newest and torn and size <= _HEADER_SIZE:  # rule 3
                header = replace(header, severity="advice", problem="torn header")
            out.findings.append(header)
            return out
        salt, first_lsn = header
        walk = walk_wal(handle, _HEADER_SIZE, size, salt, first_lsn)
        out.bytes += walk.bytes_read
        bad = walk.bad
        if bad is None:
            out.lsns = (first_lsn, walk.last_lsn)
            return out
        lsn = walk.last_lsn + 1
        if not newest:
            detail = f"{bad.detail}; a WAL file that is not the newest must be whole"
            out.findings.append(Finding(rel, "wal", bad.problem, "data", detail, offset=bad.offset))
            return out
        resumed = resumes_after(handle, bad.offset, size, salt, lsn)
    finally:
        handle.close()
    if resumed is None:
        detail = (
            f"{bad.detail}: the end of a write in progress, or of one a crash cut; "
            "recovery ends the log there"
        )
        out.findings.append(Finding(rel, "wal", "torn tail", "advice", detail, offset=bad.offset))
    else:
        detail = (
            f"{bad.detail}, and valid frames follow at offset {resumed[0]} (LSN {resumed[1]}): "
            "recovery skips the entries in between and replays them"
        )
        out.findings.append(Finding(rel, "wal", bad.problem, "data", detail, offset=bad.offset))
    return out


def _wal_header(raw: bytes, rel: str) -> tuple[int, int] | Finding:
    """(salt, first_lsn) of a valid header, or the finding."""
    if len(raw) < _HEADER_SIZE:
        detail = f"the file is {len(raw)} bytes, shorter than its header"
        return Finding(rel, "wal", "truncated", "data", detail, offset=0)
    magic, version, size, salt, file_no, first_lsn, _, crc = _WAL_HEADER.unpack(raw)
    if magic != b"TOPICWAL" or crc32c(raw[:-4]) != crc:
        return Finding(rel, "wal", "header", "data", "bad WAL header checksum", offset=0)
    if version not in _WAL_VERSIONS or size != _HEADER_SIZE:
        detail = f"unsupported WAL format version {version}"
        return Finding(rel, "wal", "version", "data", detail, offset=0)
    if rel.rpartition("/")[2] != wal_file_name(file_no) or first_lsn < 1:
        detail = f"the header says file {file_no:016x}, first LSN {first_lsn}"
        return Finding(rel, "wal", "header mismatch", "data", detail, offset=0)
    return salt, first_lsn


def check_wal_dir(
    fs: Fs,
    root: str,
    numbers: list[int],
    lsns: dict[int, tuple[int, int]],
    covered_lsn: int | None,
) -> list[Finding]:
    """What no single WAL file shows: a file missing in the numbering (``numbers``: one
    listing), LSNs that do not run on from one whole file (``lsns``) to the next, and a
    WAL that starts after the entries the newest valid manifest (covering up to
    ``covered_lsn``) needs replayed."""
    out = []
    for prev, cur in itertools.pairwise(numbers):
        # A trim removes the oldest file first, so a listing taken while it runs can miss
        # a file only if the one before the gap is gone too: then it is not a hole.
        if cur != prev + 1 and fs.exists(f"{root}/{WAL_DIR}/{wal_file_name(prev)}"):
            rel = f"{WAL_DIR}/{wal_file_name(prev + 1)}"
            detail = f"WAL files {prev + 1:016x}..{cur - 1:016x} are missing in the numbering"
            out.append(Finding(rel, "wal", "missing", "data", detail))
        elif prev in lsns and cur in lsns and lsns[cur][0] != lsns[prev][1] + 1:
            rel = f"{WAL_DIR}/{wal_file_name(cur)}"
            detail = f"first LSN {lsns[cur][0]} does not follow LSN {lsns[prev][1]} of {prev:016x}"
            out.append(Finding(rel, "wal", "lsn", "data", detail, offset=0))
    if numbers and covered_lsn is not None and numbers[0] in lsns:
        first = lsns[numbers[0]][0]
        if first > covered_lsn + 1:
            rel = f"{WAL_DIR}/{wal_file_name(numbers[0])}"
            detail = (
                f"the WAL starts at LSN {first}, but the newest valid manifest covers only up "
                f"to {covered_lsn}: entries {covered_lsn + 1}..{first - 1} are gone"
            )
            out.append(Finding(rel, "wal", "missing", "data", detail, offset=0))
    return out
