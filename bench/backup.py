"""Write rate during an online backup against without one (issue 32: >= 80 %).

One embedded engine on a data directory preloaded with ``--preload-mb`` of records. For
each durability class (``fsync``, ``disk``), ``--writers`` tasks append batches of 100
records to their own topic for ``--duration`` seconds per round; rounds alternate between
*quiet* and *backup* (a backup streaming the whole directory to /dev/null for the whole
round: when one ends the next starts, so every backup's plan is in the round too), its
reads paced as the engine paces them unless ``--max-mb-s`` says otherwise (0: unpaced).
Prints records/s per round kind (median over ``--rounds`` pairs) and the ratio as the
median of per-pair ratios.

    PYTHONPATH=. python bench/backup.py [--rounds 5] [--duration 3] [--writers 4]
        [--preload-mb 64] [--max-mb-s 256] [--dir DIR] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from typing import Any

import trio

from topics._persistence.backup import MAX_BYTES_PER_S
from topics.engine import Engine, open_engine

BATCH = 100
PAYLOAD = {"body": "x" * 180}
CLASSES = ("fsync", "disk")


async def _preload(engine: Engine, megabytes: int) -> None:
    """Fill a ``disk`` topic with ~``megabytes`` of records for the backups to copy."""
    await engine.put_topic("preload", {"durability": "disk"})
    batch = [{"data": PAYLOAD} for _ in range(1000)]
    for _ in range(max(1, megabytes * 1024 * 1024 // (1000 * 220))):
        await engine.write("preload", batch)


async def _write_round(engine: Engine, topics: list[str], seconds: float) -> int:
    written = 0
    batch = [{"data": PAYLOAD} for _ in range(BATCH)]

    async def writer(topic: str) -> None:
        nonlocal written
        while True:
            await engine.write(topic, batch)
            written += BATCH

    with trio.move_on_after(seconds):
        async with trio.open_nursery() as nursery:
            for topic in topics:
                nursery.start_soon(writer, topic)
    return written


async def _backups_forever(engine: Engine, stats: dict[str, float], pace: float | None) -> None:
    with open(os.devnull, "wb") as null:  # noqa: ASYNC230 (/dev/null never blocks)

        async def sink(chunk: bytes) -> None:
            null.write(chunk)
            stats["bytes"] += len(chunk)  # counted as it streams: a round may end mid-backup

        while True:
            await engine.backup(sink, max_bytes_per_s=pace)
            stats["backups"] += 1


async def _round(
    engine: Engine, topics: list[str], seconds: float, backup: bool, pace: float | None
) -> dict[str, float]:
    stats = {"backups": 0.0, "bytes": 0.0}
    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        if backup:
            nursery.start_soon(_backups_forever, engine, stats, pace)
        written = await _write_round(engine, topics, seconds)
        nursery.cancel_scope.cancel()
    elapsed = time.perf_counter() - t0
    return {"records_s": written / elapsed, **stats, "seconds": elapsed}


async def run(args: argparse.Namespace, root: str) -> dict[str, Any]:
    pace = args.max_mb_s * 2**20 if args.max_mb_s else None
    out: dict[str, Any] = {
        "max_mb_s": args.max_mb_s,
        "rounds": args.rounds,
        "duration_s": args.duration,
        "writers": args.writers,
        "batch": BATCH,
        "preload_mb": args.preload_mb,
        "classes": {},
    }
    async with open_engine(os.path.join(root, "data")) as engine:
        await _preload(engine, args.preload_mb)
        for durability in CLASSES:
            topics = [f"{durability}-{i}" for i in range(args.writers)]
            for topic in topics:
                await engine.put_topic(topic, {"durability": durability})
            await _write_round(engine, topics, 0.5)  # warm-up
            quiet: list[float] = []
            busy: list[float] = []
            backups = bytes_copied = seconds = 0.0
            for i in range(args.rounds):
                # Alternate which kind goes first, so a drift in the machine's load
                # favours neither.
                for backup in (False, True) if i % 2 == 0 else (True, False):
                    r = await _round(engine, topics, args.duration, backup, pace)
                    (busy if backup else quiet).append(r["records_s"])
                    if backup:
                        backups += r["backups"]
                        bytes_copied += r["bytes"]
                        seconds += r["seconds"]
            ratios = [b / q for b, q in zip(busy, quiet, strict=True)]
            row = {
                "quiet_records_s": statistics.median(quiet),
                "backup_records_s": statistics.median(busy),
                "ratio": statistics.median(ratios),
                "ratios": ratios,
                "backups": int(backups),
                "backup_mb_s": bytes_copied / seconds / 1e6 if seconds else 0.0,
            }
            out["classes"][durability] = row
            print(
                f"{durability:5}  quiet {row['quiet_records_s']:>10,.0f} rec/s  "
                f"backup {row['backup_records_s']:>10,.0f} rec/s  ratio {row['ratio']:.3f}  "
                f"({row['backups']} backups finished, {row['backup_mb_s']:.0f} MB/s streamed)",
                flush=True,
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=3.0, help="seconds per round")
    ap.add_argument("--writers", type=int, default=4, help="writer tasks per class")
    ap.add_argument("--preload-mb", type=int, default=64)
    ap.add_argument(
        "--max-mb-s",
        type=float,
        default=MAX_BYTES_PER_S / 2**20,
        help="the backup's read pace in MiB/s (default: the engine's; 0: unpaced)",
    )
    ap.add_argument("--dir", help="where the data directory goes (default: a temp dir)")
    ap.add_argument("--quick", action="store_true", help="smoke sizes")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.duration, args.preload_mb = 1, 1.0, 8
    root = tempfile.mkdtemp(prefix="topics-bench-backup-", dir=args.dir)
    try:
        print(
            f"backup: {args.writers} writers per class, batch {BATCH}, {args.rounds} round pairs "
            f"of {args.duration:g} s, {args.preload_mb} MB preloaded, backups paced to "
            f"{args.max_mb_s:g} MiB/s (0: unpaced)",
            flush=True,
        )
        out = trio.run(run, args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
