"""Diff with a server-side predicate against the plain diff (issue 18). Prints; never asserts.

In-process engine, memory-only, 200 000 records of ~64 B (``{"kind":...,"n":...,"pad":...}``,
one in ten ``"kind":"refund"``, tagged the same way). Each round reads the whole topic with
limit 1000 four ways, alternating so the ratios share one load:

  * plain: no predicate (every record rendered);
  * data_eq: ``where ["data.kind","Eq","refund"]`` (keeps 10 %; the raw-bytes pre-check
    rejects the rest undecoded);
  * data_gt: ``where ["data.n","Ge",900]`` (keeps 10 %; every record's data decoded);
  * tag_eq: ``where ["tag","Eq","refund"]`` (keeps 10 %; no JSON touched).

The rate is records *scanned* per second (the cursor's progress, what a consumer catching
up cares about); the filtered reads return a tenth as many. Ratios are filtered / plain,
medians of per-round ratios.

``--render`` measures the core alone instead: nanoseconds per record of
``SegmentBuffer.render`` (limit 1000) over the same records for each case, the best of 7
passes over 100,000 records: where a predicate's own cost shows without the engine's.

Usage: python bench/diff_where.py [--rounds N] [--json out.json] [--render]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import trio

import topics
from topics._core import IMPLEMENTATION

RECORDS = 200_000
PASSES = 3  # whole-topic reads per measurement: long enough to ride out a busy machine
CASES: dict[str, object] = {
    "plain": None,
    "data_eq": ["data.kind", "Eq", "refund"],
    "data_gt": ["data.n", "Ge", 900],
    "tag_eq": ["tag", "Eq", "refund"],
}


def _record(i: int) -> dict[str, object]:
    kind = "refund" if i % 10 == 0 else "sale"
    data = b'{"kind":"%s","n":%d,"pad":"%s"}' % (kind.encode(), i % 1000, b"x" * 16)
    return {"data": data, "tag": kind}


async def _scan(engine: topics.AsyncEngine, where: object) -> tuple[float, int]:
    scanned, returned = 0, 0
    t0 = time.perf_counter()
    for _ in range(PASSES):
        cursor, returned = 0, 0
        while True:
            res = await engine.diff("t", from_seq=cursor, limit=1000, where=where)
            scanned += res.records_scanned
            returned += res.record_count
            cursor = res.next_from_seq
            if res.caught_up:
                break
    return scanned / (time.perf_counter() - t0), returned


async def main(rounds: int) -> dict[str, object]:
    rates: dict[str, list[float]] = {name: [] for name in CASES}
    returned: dict[str, int] = {}
    async with topics.open_engine(None) as engine:
        for start in range(0, RECORDS, 1000):
            batch = [_record(i) for i in range(start, start + 1000)]
            await engine.write("t", batch, return_seqs=False)
        for _ in range(rounds):
            for name, where in CASES.items():
                rate, n = await _scan(engine, where)
                rates[name].append(rate)
                returned[name] = n
    ratios = {
        name: statistics.median(a / b for a, b in zip(rates[name], rates["plain"], strict=True))
        for name in CASES
        if name != "plain"
    }
    return {
        "implementation": IMPLEMENTATION,
        "python": sys.version.split()[0],
        "records": RECORDS,
        "rounds": rounds,
        "scanned_per_s": {k: statistics.median(v) for k, v in rates.items()},
        "returned": returned,
        "ratio_vs_plain": ratios,
    }


def render_ns() -> dict[str, float]:
    """ns per record of SegmentBuffer.render for each case (see the module docstring)."""
    import ujson

    from topics._core import _ext
    from topics.query.where import compile_where

    limits = (1 << 20, 1 << 20, 256, 256, 1 << 20)
    frames, _ = _ext.encode_batch(
        [_record(i) for i in range(100_000)], 1, 1000, None, 7, limits, ujson.dumps
    )
    seg = _ext.SegmentBuffer(1, 7)
    seg.append(frames)
    out = {}
    for name, where in CASES.items():
        pred = compile_where(where)
        best = float("inf")
        for _ in range(7):
            t0 = time.perf_counter()
            i = 0
            while i < seg.count:
                _, _, _, i = seg.render(i, 1000, 1 << 30, None, 1, -1, pred)
            best = min(best, (time.perf_counter() - t0) / seg.count * 1e9)
        out[name] = best
    return out


def _print(res: dict[str, object]) -> None:
    rates = res["scanned_per_s"]
    ratios = res["ratio_vs_plain"]
    returned = res["returned"]
    assert isinstance(rates, dict)
    assert isinstance(ratios, dict)
    assert isinstance(returned, dict)
    print(
        f"diff limit 1000 over {res['records']:,} records, {res['rounds']} rounds ({res['implementation']})"
    )
    print(f"{'case':10} {'scanned/s':>12} {'returned':>9} {'vs plain':>9}")
    for name in CASES:
        ratio = f"{ratios[name]:.2f}" if name in ratios else "1.00"
        print(f"{name:10} {rates[name]:>12,.0f} {returned[name]:>9,} {ratio:>9}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--json")
    ap.add_argument("--render", action="store_true", help="the core's render alone, ns/record")
    args = ap.parse_args()
    if args.render:
        ns = render_ns()
        print("SegmentBuffer.render, ns per record (best of 7): ", end="")
        print("  ".join(f"{k} {v:.1f}" for k, v in ns.items()))
        sys.exit(0)
    out = trio.run(main, args.rounds)
    _print(out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
