"""Durable delete of sealed records: in-place trailer flip + fdatasync vs a per-segment
deletion sidecar rewritten atomically (temp + fsync + rename + fsync dir).

Prints latency per durable delete (one record per request) and per batch of records
(one request deleting many), on the disk holding ``--dir``. The numbers and the choice
are recorded in docs/STORAGE_FORMATS.md ("Deletion flags").

    PYTHONPATH=. python bench/delete_flag.py [--dir DIR] [--frames 20000] [--deletes 300]
        [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import tempfile
import time
from collections.abc import Callable

import ujson

from topics._core import IMPLEMENTATION, crc32c, encode_batch, iter_frames
from topics._storage.fs import RealFs
from topics._storage.segment_edits import mark_deleted
from topics._storage.segment_files import SegmentWriter, segment_path

SALT = 0x5EED
LIMITS = (1 << 20, 1 << 16, 64, 256, 256)


def build_segment(fs: RealFs, root: str, frames_count: int) -> tuple[str, list[int]]:
    path = segment_path(root, 1, 1)
    writer = SegmentWriter.create(fs, path, topic_id=1, base_seq=1, salt=SALT)
    records = [{"data": {"n": i, "body": "x" * 60}, "tag": "bench"} for i in range(frames_count)]
    frames, _ = encode_batch(records, 1, 1_700_000_000_000, "n1", SALT, LIMITS, ujson.dumps)
    writer.append(frames)
    writer.seal()
    ends = [off + size for off, size in iter_frames(frames, SALT, False)]
    return path, ends


def write_sidecar(fs: RealFs, path: str, deleted: list[int]) -> None:
    """The alternative format: sorted u32 frame indexes + CRC, replaced atomically."""
    body = struct.pack(f"<I{len(deleted)}I", len(deleted), *deleted)
    data = body + struct.pack("<I", crc32c(body, SALT))
    final, tmp = path + ".del", path + ".del.tmp"
    handle = fs.open(tmp, create=True)
    try:
        handle.truncate(0)
        handle.write_at(0, data)
        handle.sync_all()
    finally:
        handle.close()
    fs.rename(tmp, final)
    fs.sync_dir(os.path.dirname(path))


def timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


RESULTS: dict[str, dict[str, float]] = {}


def report(name: str, samples: list[float]) -> None:
    s = sorted(samples)

    def p(q: float) -> float:
        return s[min(len(s) - 1, int(q * len(s)))]

    print(
        f"{name:<44} n={len(s):<5} median={statistics.median(s):7.3f} ms  "
        f"p90={p(0.9):7.3f}  p99={p(0.99):7.3f}  mean={statistics.fmean(s):7.3f}"
    )
    RESULTS[name] = {
        "n": len(s),
        "median_ms": statistics.median(s),
        "p90_ms": p(0.9),
        "p99_ms": p(0.99),
        "mean_ms": statistics.fmean(s),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=None, help="directory on the disk to measure")
    ap.add_argument("--frames", type=int, default=20_000)
    ap.add_argument("--deletes", type=int, default=300)
    ap.add_argument("--batch", type=int, default=100, help="records per batched delete")
    ap.add_argument("--rounds", type=int, default=50, help="batched deletes to time")
    ap.add_argument("--quick", action="store_true", help="5000 frames, 50 deletes, 10 rounds")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    if args.quick:
        args.frames, args.deletes, args.rounds = 5_000, 50, 10
    root = tempfile.mkdtemp(prefix="topics-bench-", dir=args.dir)
    fs = RealFs()
    try:
        path, ends = build_segment(fs, root, args.frames)
        size = os.path.getsize(path)
        print(f"core={IMPLEMENTATION} dir={root} segment={size} bytes, {len(ends)} frames")
        step = max(1, len(ends) // args.deletes)
        victims = list(range(0, len(ends), step))[: args.deletes]
        handle = fs.open(path, write=True)

        def flip_on_open_handle(i: int) -> None:
            handle.write_at(40 + ends[i] - 1, b"\x01")
            handle.sync_data()

        # Interleaved, so that both methods see the same (shared, noisy) disk.
        flips, open_flips, sidecars, ratios = [], [], [], []
        deleted: list[int] = []
        for i in victims:
            deleted.append(i)
            flips.append(timed(lambda i=i: mark_deleted(fs, path, [ends[i]])))
            open_flips.append(timed(lambda i=i: flip_on_open_handle(i)))
            sidecars.append(timed(lambda: write_sidecar(fs, path, sorted(deleted))))
            ratios.append(sidecars[-1] / flips[-1])
        handle.close()
        print("-- one record per durable delete")
        report("flag flip (open, pwrite 1 B, fdatasync)", flips)
        report("flag flip on an already open handle", open_flips)
        report("sidecar rewrite (tmp, fsync, rename, fsync dir)", sidecars)
        print(f"   sidecar / flag flip, per-pair median ratio: {statistics.median(ratios):.2f}x")
        single_ratio = statistics.median(ratios)

        print(f"-- {args.batch} records per durable delete")
        batch_flips, batch_sidecars, batch_ratios = [], [], []
        big = list(range(0, len(ends), 2))
        for r in range(args.rounds):
            picked = victims[(r * 7) % len(victims) :][: args.batch] or victims[: args.batch]
            batch_flips.append(timed(lambda p=picked: mark_deleted(fs, path, [ends[i] for i in p])))
            batch_sidecars.append(timed(lambda p=picked: write_sidecar(fs, path, sorted(p))))
            batch_ratios.append(batch_sidecars[-1] / batch_flips[-1])
        report(f"flag flip, {args.batch} pwrites + 1 fdatasync", batch_flips)
        report(f"sidecar rewrite, {args.batch} entries", batch_sidecars)
        print(
            f"   sidecar / flag flip, per-pair median ratio: {statistics.median(batch_ratios):.2f}x"
        )
        report(
            f"sidecar rewrite, {len(big)} entries (half the segment)",
            [timed(lambda: write_sidecar(fs, path, big)) for _ in range(args.rounds)],
        )
        if args.json:
            with open(args.json, "w") as f:
                out = {
                    "rows": RESULTS,
                    "sidecar_over_flip_single": single_ratio,
                    "sidecar_over_flip_batch": statistics.median(batch_ratios),
                }
                json.dump(out, f, indent=2)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
