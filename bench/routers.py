"""Router benchmarks (issue: routers, contract §6). Prints numbers; never asserts.

Measures, on a real data directory (a temp dir under --dir, default /tmp):
  * write->visible latency through a 1-hop router: one writer appends one record at a
    time to the source; a reader long-polls the dest (``engine.diff(wait_ms=...)``) and
    stamps the moment each copy comes back. The same loop reading the source itself is the
    baseline; "added" is the difference of the medians (and of the p99s). Durability class
    ``disk`` (acked on enqueue) so the disk does not dominate, and ``fsync`` for scale.
  * forwarding throughput: records/s a router copies out of a backlog already in the
    source (64-byte records; includes the dest's watermark reservations).
  * WAL frames per source append with 1, 10 and 100 routers fanning out of one source
    (``engine.wal_statistics().frames_total`` over N single-record appends, after every
    router caught up; WATERMARK reservations of the dests, one per 4096 seqs per dest,
    are included).

Usage: python bench/routers.py [--samples 2000] [--appends 2000] [--dir PATH] [--json out]
           [--quick]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from typing import Any

import trio
import trio.lowlevel
import trio.testing

from topics.engine import Engine, open_engine

PAYLOAD = b'"' + b"x" * 62 + b'"'  # 64 bytes of JSON


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _visible_latency(engine: Engine, source: str, watched: str, samples: int) -> list[float]:
    """Seconds from before ``write`` to the reader seeing the record in ``watched``."""
    sent: dict[int, float] = {}
    seen: list[float] = []
    done = trio.Event()

    async def reader() -> None:
        cursor = (await engine.get_topic(watched, touch=False)).head_seq
        while len(seen) < samples:
            page = await engine.diff(watched, from_seq=cursor, limit=1000, wait_ms=5000)
            now = time.perf_counter()
            for rec in page.records:
                assert isinstance(rec.data, int)
                seen.append(now - sent[rec.data])
            cursor = page.next_from_seq
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        for i in range(samples):
            sent[i] = time.perf_counter()
            await engine.write(source, [{"data": i}])
            # one record in flight at a time: the latency of each, not of a queue
            while len(seen) <= i:
                await trio.lowlevel.checkpoint()
        await done.wait()
    return seen


async def bench_latency(root: str, durability: str, samples: int) -> dict[str, Any]:
    path = tempfile.mkdtemp(prefix=f"router-latency-{durability}-", dir=root)
    try:
        async with open_engine(path) as engine:
            await engine.put_topic("src", {"durability": durability})
            await engine.put_topic("dst", {"durability": durability})
            base = await _visible_latency(engine, "src", "src", samples)
            await engine.put_router("src->dst", {"source": "src", "dest": "dst"})
            routed = await _visible_latency(engine, "src", "dst", samples)
    finally:
        shutil.rmtree(path, ignore_errors=True)
    us = 1e6
    out = {
        "durability": durability,
        "samples": samples,
        "source_p50_us": _pct(base, 0.5) * us,
        "source_p99_us": _pct(base, 0.99) * us,
        "dest_p50_us": _pct(routed, 0.5) * us,
        "dest_p99_us": _pct(routed, 0.99) * us,
    }
    out["added_p50_us"] = out["dest_p50_us"] - out["source_p50_us"]
    out["added_p99_us"] = out["dest_p99_us"] - out["source_p99_us"]
    return out


async def bench_throughput(root: str, backlog: int) -> dict[str, Any]:
    """Records/s a router forwards out of a backlog already in the source."""
    path = tempfile.mkdtemp(prefix="router-throughput-", dir=root)
    try:
        async with open_engine(path) as engine:
            batch = [{"data": PAYLOAD} for _ in range(1000)]
            for _ in range(backlog // 1000):
                await engine.write("src", batch)
            await engine.put_router("r", {"source": "src", "dest": "dst"})
            await trio.testing.wait_all_tasks_blocked()
            router = engine._router_set.routers["r"]
            source = engine._registry.get("src")
            assert source is not None
            router.cursor = source.head - backlog  # as if the router had been there all along
            t0 = time.perf_counter()
            source.wake()
            while router.cursor < source.head:
                await trio.lowlevel.checkpoint()
            elapsed = time.perf_counter() - t0
    finally:
        shutil.rmtree(path, ignore_errors=True)
    return {"backlog": backlog, "records_per_s": backlog / elapsed if elapsed else float("inf")}


async def bench_wal_frames(root: str, routers: int, appends: int) -> dict[str, Any]:
    path = tempfile.mkdtemp(prefix=f"router-frames-{routers}-", dir=root)
    try:
        async with open_engine(path) as engine:
            await engine.put_topic("src")
            names = [f"r{i}" for i in range(routers)]
            for i, name in enumerate(names):
                await engine.put_router(name, {"source": "src", "dest": f"d{i}"})
            store = engine._store
            assert store is not None
            await store.wal.flush()
            before = engine.wal_statistics()
            assert before is not None
            for i in range(appends):
                await engine.write("src", [{"data": i}])
            while any(engine._router_set.routers[n].cursor < appends for n in names):
                await trio.lowlevel.checkpoint()
            await store.wal.flush()
            after = engine.wal_statistics()
            assert after is not None
    finally:
        shutil.rmtree(path, ignore_errors=True)
    frames = after.frames_total - before.frames_total
    return {
        "routers": routers,
        "appends": appends,
        "wal_frames": frames,
        "frames_per_append": frames / appends,
        "copies": routers * appends,
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix="bench-routers-", dir=args.dir)
    results: dict[str, Any] = {"latency": [], "frames": []}
    try:
        for durability in ("disk", "fsync"):
            samples = args.samples if durability == "disk" else max(200, args.samples // 10)
            res = await bench_latency(root, durability, samples)
            results["latency"].append(res)
            print(
                f"write->visible {durability:5} (n={samples}): source p50 "
                f"{res['source_p50_us']:.0f} us p99 {res['source_p99_us']:.0f} us | dest via "
                f"router p50 {res['dest_p50_us']:.0f} us p99 {res['dest_p99_us']:.0f} us | "
                f"added p50 {res['added_p50_us']:.0f} us p99 {res['added_p99_us']:.0f} us",
                flush=True,
            )
        res = await bench_throughput(root, args.backlog)
        results["throughput"] = res
        print(
            f"forwarding a {res['backlog']}-record backlog: {res['records_per_s']:,.0f} records/s"
        )
        for n in (1, 10, 100):
            res = await bench_wal_frames(root, n, args.appends)
            results["frames"].append(res)
            print(
                f"{n:3} routers: {res['wal_frames']} WAL frames for {res['appends']} source "
                f"appends ({res['copies']} copies) = {res['frames_per_append']:.3f} per append",
                flush=True,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--backlog", type=int, default=200_000)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--quick", action="store_true", help="300 samples, 20k backlog")
    ns = parser.parse_args()
    if ns.quick:
        ns.samples, ns.appends, ns.backlog = 300, 300, 20_000
    out = trio.run(main, ns)
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(out, f, indent=2)
    sys.exit(0)
