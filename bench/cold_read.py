"""Reading a sealed ~1 MiB segment file back into a ``SegmentBuffer`` (issue 31's cache
miss): ``os.pread`` of the whole file vs ``mmap``, with and without CRC checks.

    python bench/cold_read.py [--files 200] [--segment-bytes 1048576] [--rounds 3]
        [--dir DIR] [--json out.json]

Writes ``--files`` sealed segments of 64 B records with ``SegmentWriter`` (frames from
``topics._core.encode_batch``, as the engine builds them) into a temporary directory on
the disk of ``--dir`` (default: beside the repository), then times, per file:

- ``pread``: ``os.pread`` of the whole file (one call), nothing else: the I/O alone;
- ``pread+verify``: that, then ``SegmentBuffer.from_frames(frames, base, salt, verify=True)``;
- ``mmap+verify``: ``mmap`` of the file, ``from_frames`` on a memoryview of the mapping
  past the header (verify=True), then the mapping closed;
- ``pread+noverify``: ``pread`` + ``from_frames(verify=False)``;
- ``read_segment``: today's reader (``segment_files.read_segment``: header, frames,
  CRCs, the index file checked) + ``from_frames(verify=False)``;

warm (page cache holding the file: each file is read once untimed first) and cold
(``posix_fadvise(POSIX_FADV_DONTNEED)`` on the file right before its read; on a virtual
disk the host may still cache it). Methods alternate file by file, rounds repeat the
whole set; it prints the median µs per MiB of frames. Never asserts.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ujson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _machine import facts, loadavg, utc_now  # noqa: E402

from topics._core import SegmentBuffer, encode_batch  # noqa: E402
from topics._storage.fs import RealFs  # noqa: E402
from topics._storage.segment_files import (  # noqa: E402
    HEADER_SIZE,
    SegmentWriter,
    read_segment,
    segment_path,
)
from topics.settings import Limits  # noqa: E402

MIB = 1 << 20
SALT = 0x5EED


def write_segments(path: str, files: int, segment_bytes: int) -> list[tuple[str, int]]:
    """``files`` sealed segments of ~``segment_bytes`` frame bytes: (path, base_seq) each."""
    fs = RealFs()
    limits = Limits().encode_limits
    out = []
    seq = 1
    record = {"data": b'{"i":         0,"p":"' + b"x" * 41 + b'"}'}
    for topic_id in range(1, files + 1):
        base = seq
        seg = SegmentWriter.create(fs, segment_path(path, topic_id, base), topic_id=topic_id,
                                   base_seq=base, salt=SALT)  # fmt: skip
        written = 0
        while written < segment_bytes:
            frames, _ = encode_batch([record] * 1000, seq, 1_700_000_000_000, None, SALT, limits,
                                     ujson.dumps)  # fmt: skip
            seg.append(frames)
            written += len(frames)
            seq += 1000
        seg.sync()
        seg.seal()
        seg.close()
        out.append((seg.path, base))
    return out


def read_pread(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, os.fstat(fd).st_size, 0)
    finally:
        os.close(fd)


def pread_only(path: str, base: int) -> int:
    return len(read_pread(path)) - HEADER_SIZE


def pread_build(verify: bool) -> Callable[[str, int], int]:
    def run(path: str, base: int) -> int:
        data = read_pread(path)
        seg = SegmentBuffer.from_frames(memoryview(data)[HEADER_SIZE:], base, SALT, verify)
        return int(seg.nbytes)

    return run


def mmap_build(path: str, base: int) -> int:
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        try:
            seg = SegmentBuffer.from_frames(view[HEADER_SIZE:], base, SALT, True)
            n = int(seg.nbytes)
        finally:
            view.release()  # from_frames copied what it keeps, or closing the map raises
    return n


def read_segment_build(path: str, base: int) -> int:
    data = read_segment(RealFs(), path)  # checks CRCs and the index file
    return int(SegmentBuffer.from_frames(data.frames, base, SALT, False).nbytes)


METHODS: dict[str, Callable[[str, int], int]] = {
    "pread": pread_only,
    "pread+verify": pread_build(True),
    "mmap+verify": mmap_build,
    "pread+noverify": pread_build(False),
    "read_segment": read_segment_build,
}


def forget(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def measure(segments: list[tuple[str, int]], rounds: int, cold: bool) -> dict[str, Any]:
    per: dict[str, list[float]] = {m: [] for m in METHODS}
    names = list(METHODS)
    for r in range(rounds):
        for i, (path, base) in enumerate(segments):
            name = names[(i + r) % len(names)]  # each file meets every method over rounds
            if cold:
                forget(path)
            else:
                read_pread(path)
            t0 = time.perf_counter()
            nbytes = METHODS[name](path, base)
            per[name].append((time.perf_counter() - t0) * 1e6 / (nbytes / MIB))
    return {
        name: {"us_per_mib_median": statistics.median(xs), "us_per_mib_p90": _p90(xs), "n": len(xs)}
        for name, xs in per.items()
        if xs
    }


def _p90(xs: list[float]) -> float:
    return sorted(xs)[int(0.9 * (len(xs) - 1))]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--segment-bytes", type=int, default=MIB)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=str(ROOT.parent))
    ap.add_argument("--quick", action="store_true", help="40 files, 1 round")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    if args.quick:
        args.files, args.rounds = min(args.files, 40), 1
    if args.files < len(METHODS) or args.segment_bytes < 4096 or args.rounds < 1:
        ap.error(f"need --files >= {len(METHODS)}, --segment-bytes >= 4096, --rounds >= 1")
    path = tempfile.mkdtemp(prefix="cold-read-", dir=args.dir)
    out: dict[str, Any] = {"started_utc": utc_now(), "machine": facts(), "load_start": loadavg(),
                           "files": args.files, "segment_bytes": args.segment_bytes,
                           "rounds": args.rounds}  # fmt: skip
    try:
        segments = write_segments(path, args.files, args.segment_bytes)
        out["warm"] = measure(segments, args.rounds, cold=False)
        out["cold"] = measure(segments, args.rounds, cold=True)
    finally:
        shutil.rmtree(path, ignore_errors=True)
    out["load_end"] = loadavg()
    print(f"{args.files} sealed segments of ~{args.segment_bytes / MIB:g} MiB, {args.rounds} rounds; "
          f"median (p90) µs per MiB of frames; load {out['load_start']} -> {out['load_end']}")  # fmt: skip
    print(f"{'method':<16} {'warm':>18} {'cold':>18}")
    for name in METHODS:
        cells = [f"{o[name]['us_per_mib_median']:,.0f} ({o[name]['us_per_mib_p90']:,.0f})"
                 for o in (out["warm"], out["cold"])]  # fmt: skip
        print(f"{name:<16} {cells[0]:>18} {cells[1]:>18}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
