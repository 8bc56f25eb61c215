"""CPU per engine write, two source trees alternated: ab_trees' append cases, load-proof.

On a shared 2-core machine at load 3-8, bench/ab_trees.py's append rates (wall clock)
moved 0.73-1.29 between runs of the same pair of trees. This measures what a write costs
the process instead: ``time.process_time()`` per ``engine.write`` (in-process,
memory-only, 64 B raw records, ``return_seqs=False``), the minimum over 15 repeats (a
neighbour can only add to a repeat, never take away), in batches of 100 and of 1, with no
meta and with a small raw meta each. Each round runs both trees in fresh interpreters,
A then B (B then A on odd rounds); printed are the medians and the median of the
per-round B/A ratios (below 1: B is cheaper). Build each tree's core first
(``python setup.py build_ext --inplace``). Never asserts.

Usage: python bench/ab_write_cpu.py TREE_A TREE_B [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

PROBE = """
import json, sys, time, trio
sys.path.insert(0, sys.argv[1])
import topics, topics._core as core
assert core.IMPLEMENTATION == "cython", core.IMPLEMENTATION

async def per_write(batch, n, meta):
    records = [{"data": b'{"k":"' + b"x" * 56 + b'"}'} for _ in range(batch)]
    if meta:
        for r in records:
            r["meta"] = b'{"trace":"abc","n":1}'
    best = []
    async with topics.open_engine(None) as engine:
        await engine.put_topic("t", {"cap_records": 100000, "discard": "old"})
        for _ in range(200):
            await engine.write("t", records, return_seqs=False)
        for _ in range(15):
            t0 = time.process_time()
            for _ in range(n):
                await engine.write("t", records, return_seqs=False)
            best.append((time.process_time() - t0) / n * 1e6)
    return min(best)

async def main():
    out = {}
    out["b100_us"] = await per_write(100, 300, False)
    out["b100_meta_us"] = await per_write(100, 300, True)
    out["b1_us"] = await per_write(1, 3000, False)
    out["b1_meta_us"] = await per_write(1, 3000, True)
    print(json.dumps(out))

trio.run(main)
"""


def _run(tree: str) -> dict[str, float]:
    res = subprocess.run(
        [sys.executable, "-c", PROBE, tree], cwd=tree, check=True, capture_output=True
    )
    out: dict[str, float] = json.loads(res.stdout)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {args.a: [], args.b: []}
    for r in range(args.rounds):
        for tree in (args.a, args.b) if r % 2 == 0 else (args.b, args.a):
            runs[tree].append(_run(tree))
    print(f"{args.rounds} rounds; CPU µs per write (min of 15 repeats); B/A below 1: cheaper")
    print(f"{'case':16}{'A':>10}{'B':>10}{'B/A':>8}")
    for case in runs[args.a][0]:
        a = [run[case] for run in runs[args.a]]
        b = [run[case] for run in runs[args.b]]
        ratio = statistics.median(y / x for x, y in zip(a, b, strict=True))
        print(f"{case:16}{statistics.median(a):10.2f}{statistics.median(b):10.2f}{ratio:8.3f}")


if __name__ == "__main__":
    main()
