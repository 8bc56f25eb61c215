"""What the issue-19 write conditions cost: the append path before and after, in one run.

``expected_head_seq`` and ``producer_id`` + ``epoch`` added a few checks to every write
(``Engine.write``) and a branch to every logged append (``Store.log_append``). This measures
the embedded engine's append rate with the code just before them and just after (``git
archive`` of ``--before`` and ``--after``, default the engine commit that added them and its
parent, so nothing else differs), alternating the two in child processes round by round so
both see the same machine load, and reports the medians and the per-round ratio. It also
measures the "after" tree with the options in use (a compare-and-append chain; a producer
with its epoch and a key per batch), which the old code cannot run.

Cases: batches of 1 and 100 records of 64 B raw JSON, on a memory-only engine and on a
``disk``-class topic in a data directory (the WAL path; ``fsync`` adds a disk flush that
would hide any CPU difference). Each sample is the best of three fresh engines in one child. Rates are records per second
of the child's own CPU time
(``time.process_time``, which includes the WAL thread's), not wall time: on a shared machine
the wall clock mostly measures the other processes. Prints a table; never asserts.

Usage: python bench/write_conditions.py [--rounds 7] [--before REV|DIR] [--after REV|DIR]
       [--batches 1,100] [--plain-only] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The engine commit that added the write conditions, and its parent.
DEFAULT_AFTER = "76d4f3b"
DEFAULT_BEFORE = "76d4f3b^"
RECORDS = 20_000

CHILD = r"""
import json, sys, tempfile, time, trio, topics
batch, where, mode, total = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
records = [{"data": b'{"k":"' + b"x" * 56 + b'"}'} for _ in range(batch)]

async def run() -> float:
    path = tmp.name if where == "disk" else None
    async with topics.open_engine(path) as engine:
        await engine.put_topic("t", {"durability": "disk"})
        head, n = 0, 0
        t0 = time.process_time()
        while n < total:
            if mode == "plain":
                res = await engine.write("t", records)
            elif mode == "expect":
                res = await engine.write("t", records, expected_head_seq=head)
            else:
                res = await engine.write(
                    "t", records, producer_id="p", epoch=1, idempotency_key=f"b{n}"
                )
            head = res.last_seq
            n += batch
        return n / (time.process_time() - t0)

best = 0.0
for _ in range(3):  # the best of three fresh engines: interference only ever slows a run
    with tempfile.TemporaryDirectory(prefix="wcond-") as name:
        tmp = type("Tmp", (), {"name": name})
        best = max(best, trio.run(run))
print(json.dumps(best))
"""


def _export(rev: str) -> str:
    """The tree at ``rev`` in a temp dir, with the working tree's compiled core; a
    directory is used as it is (a tree prepared by hand)."""
    if os.path.isdir(rev):
        return rev
    out = tempfile.mkdtemp(prefix="wcond-")
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", out], input=archive.stdout, check=True)
    core = os.path.join(ROOT, "topics", "_core")
    for name in os.listdir(core):
        if name.endswith(".so"):
            shutil.copy(os.path.join(core, name), os.path.join(out, "topics", "_core", name))
    return out


def _rate(tree: str, batch: int, where: str, mode: str) -> float:
    env = dict(os.environ, PYTHONPATH=tree)
    argv = [sys.executable, "-c", CHILD, str(batch), where, mode, str(RECORDS)]
    out = subprocess.run(argv, env=env, cwd=tree, check=True, capture_output=True, text=True)
    return float(json.loads(out.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--before", default=DEFAULT_BEFORE, help="git revision of 'before'")
    parser.add_argument("--after", default=DEFAULT_AFTER, help="git revision of 'after'")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument(
        "--plain-only", action="store_true", help="skip the runs with the options in use"
    )
    parser.add_argument("--batches", default="1,100", help="batch sizes, comma-separated")
    args = parser.parse_args()
    before, after = _export(args.before), _export(args.after)
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    batches = [int(b) for b in args.batches.split(",")]
    cases = [(b, w) for w in ("memory", "disk") for b in batches]
    results: dict[str, dict[str, list[float]]] = {}
    try:
        for i in range(args.rounds):
            for batch, where in cases:
                key = f"batch {batch}, {where}"
                got = results.setdefault(
                    key, {"before": [], "after": [], "expect": [], "producer": []}
                )
                # ABBA: which tree runs first alternates, so an order effect cancels out
                pair = [("before", before), ("after", after)]
                for label, tree in pair if i % 2 == 0 else reversed(pair):
                    got[label].append(_rate(tree, batch, where, "plain"))
                if not args.plain_only:
                    got["expect"].append(_rate(after, batch, where, "expect"))
                    got["producer"].append(_rate(after, batch, where, "producer"))
    finally:
        for tree, rev in ((before, args.before), (after, args.after)):
            if tree != rev:
                shutil.rmtree(tree, ignore_errors=True)
    print(f"rounds {args.rounds}, {RECORDS} records per sample, {time.perf_counter() - t0:.0f} s, "
          f"load {load0[0]:.2f} -> {os.getloadavg()[0]:.2f}")  # fmt: skip
    head = ("case", "before rec/s", "after rec/s", "after/before: median (quartiles)",
            "expected_head_seq", "producer_id+epoch+key")  # fmt: skip
    print(" | ".join(head))
    table = {}
    for key, got in results.items():
        ratios = [a / b for a, b in zip(got["after"], got["before"], strict=True)]
        row = {name: statistics.median(v) if v else 0.0 for name, v in got.items()}
        row["ratio"] = statistics.median(ratios)
        q1, _, q3 = statistics.quantiles(ratios, n=4)
        row["ratio_q1"], row["ratio_q3"] = q1, q3
        table[key] = row
        print(f"{key} | {row['before']:,.0f} | {row['after']:,.0f} | {row['ratio']:.3f} "
              f"({q1:.3f}-{q3:.3f}) | {row['expect']:,.0f} | {row['producer']:,.0f}")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            meta = {"rounds": args.rounds, "before": args.before, "after": args.after}
            json.dump({**meta, "cases": table}, f, indent=1)


if __name__ == "__main__":
    main()
