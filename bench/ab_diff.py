"""The plain diff of two source trees, alternated in one run (did a change slow it?).

Each round runs, once in a fresh interpreter per tree (A then B then A ..., so both see
the same load): bench/engine.py's diff measurement (limit 1000 and 256 over 300 000 raw
64 B records, in-process, memory-only) and the core alone (``SegmentBuffer.render`` of
1000 such records, ns per record, where the engine's per-call costs do not blur it).
Prints medians and the median of per-round B/A ratios. Build each tree's core first
(``python setup.py build_ext --inplace``).

Usage: python bench/ab_diff.py OLD_TREE NEW_TREE [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

PROBE = """
import json, sys, trio
sys.path.insert(0, sys.argv[1])
import bench.engine as be
import topics._core as core
assert core.IMPLEMENTATION == "cython", core.IMPLEMENTATION
be.REPEATS = 5
out = {f"limit{n}": trio.run(be.bench_diff, n, 300_000) for n in (1000, 256)}
import statistics, time, ujson
from topics._core import _ext
recs = [{"data": b'{"k":"' + b"x" * 56 + b'"}'} for _ in range(1000)]
frames, _ = _ext.encode_batch(recs, 1, 1000, None, 7, (1 << 20, 1 << 20, 256, 256, 1 << 20), ujson.dumps)
seg = _ext.SegmentBuffer(1, 7)
seg.append(frames)
ns = []
for _ in range(30):
    t0 = time.perf_counter()
    for _ in range(50):
        seg.render(0, 1000, 1 << 30, None, 3)
    ns.append((time.perf_counter() - t0) / 50 / 1000 * 1e9)
out["render_ns_per_record"] = statistics.median(ns)
print(json.dumps(out))
"""


def _run(tree: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": tree}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, tree], env=env, cwd=tree, check=True, capture_output=True
    )
    result: dict[str, float] = json.loads(out.stdout)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for _ in range(args.rounds):
        runs["old"].append(_run(args.old))
        runs["new"].append(_run(args.new))
    print(f"{'case':20} {'old':>12} {'new':>12} {'new/old':>8}  (rec/s; ns for render)")
    for case in runs["old"][0]:
        old = [r[case] for r in runs["old"]]
        new = [r[case] for r in runs["new"]]
        ratio = statistics.median(b / a for a, b in zip(old, new, strict=True))
        print(
            f"{case:20} {statistics.median(old):>12,.1f} {statistics.median(new):>12,.1f} "
            f"{ratio:>8.3f}"
        )


if __name__ == "__main__":
    main()
