"""Named cursors (issue 21): what a commit costs. Prints a table; never asserts.

In-process (the async Engine on a data directory in a temporary folder, so commits are
really synced):
  * commit: ``put_cursor`` calls/s from 1 committer in a loop, and from 16 concurrent
    committers (16 groups): each commit is synced before it returns, so the WAL's group
    commit decides how many share one fdatasync;
  * consume: a group reads N records in pages of 100 — plain ``diff`` (the reader keeps
    its own cursor), ``diff(cursor=, commit=True)`` (the server commits every page), and
    ``diff`` + ``put_cursor(expect_seq=)`` after every page (what ``client.consume`` does) —
    records/s.

Each measurement is repeated ``--repeat`` times, the variants interleaved (reversed every
other round) so a noisy neighbour hits them alike; medians are printed.

    python bench/cursors.py [--records 100000] [--commits 2000] [--repeat 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from topics.engine import Engine, open_engine

PAGE = 100


async def _commits(engine: Engine, n: int, committers: int) -> float:
    per = n // committers

    async def one(k: int) -> None:
        for i in range(per):
            await engine.put_cursor("t", f"g{k}", i % 1000)

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for k in range(committers):
            nursery.start_soon(one, k)
    return per * committers / (time.perf_counter() - t0)


async def _consume(engine: Engine, mode: str, group: str) -> float:
    seq, n = 0, 0
    t0 = time.perf_counter()
    while True:
        if mode == "plain":
            res = await engine.diff("t", from_seq=seq, limit=PAGE)
        elif mode == "diff_commit":
            res = await engine.diff("t", cursor=group, commit=True, limit=PAGE)
        else:
            res = await engine.diff("t", from_seq=seq, limit=PAGE)
            if res.next_from_seq != seq:
                await engine.put_cursor("t", group, res.next_from_seq, expect_seq=seq)
        n += res.record_count
        seq = res.next_from_seq
        if res.caught_up:
            break
    return n / (time.perf_counter() - t0)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="topics-bench-cursors-") as data:
        async with open_engine(data) as engine:
            await engine.put_topic("t", {"durability": "disk"})
            for i in range(0, args.records, 1000):
                await engine.write("t", [{"data": {"i": i + j}} for j in range(1000)])
            runs: list[tuple[str, Callable[[int], Awaitable[float]]]] = [
                ("commit, 1 committer", lambda r: _commits(engine, args.commits, 1)),
                ("commit, 16 committers", lambda r: _commits(engine, args.commits * 4, 16)),
                ("consume: plain diff", lambda r: _consume(engine, "plain", f"p{r}")),
                ("consume: diff commit=true", lambda r: _consume(engine, "diff_commit", f"d{r}")),
                ("consume: diff + put_cursor", lambda r: _consume(engine, "put", f"c{r}")),
            ]
            for r in range(args.repeat):
                order = runs if r % 2 == 0 else list(reversed(runs))
                for name, run in order:
                    results.setdefault(name, []).append(await run(r))
    return {name: statistics.median(values) for name, values in results.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--commits", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", help="also write the medians here")
    args = p.parse_args()
    medians = trio.run(main_async, args)
    width = max(len(k) for k in medians)
    for name, value in medians.items():
        unit = "commits/s" if name.startswith("commit") else "records/s"
        print(f"{name:<{width}}  {value:>12,.0f} {unit}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(medians, f, indent=2)


if __name__ == "__main__":
    main()
