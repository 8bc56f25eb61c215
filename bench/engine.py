"""In-process engine benchmarks (issue: embedded engine). Prints a table; never asserts.

Measures, on the async Engine inside one trio run (no thread hop), memory-only:
  * append: batch 1/10/100/1000 x payload 64 B / 1 KiB, payload given as raw JSON bytes
    and as a dict (then beside ujson.dumps' own rate on the same dicts, same run);
  * diff: limit 1/256/1000 with raw payload bytes (the records_json splice);
  * tag delete: Eq on a tag with 1000 records, Glob over 10 000 records;
  * resident memory per 64 B record (RSS growth over 1 M records).

Usage: python bench/engine.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import trio
import ujson

import topics
from topics._core import IMPLEMENTATION

REPEATS = 5


def _payload_bytes(size: int) -> bytes:
    body = b'{"k":"' + b"x" * (size - 8) + b'"}'
    assert len(body) == size
    return body


def _payload_dict(size: int) -> dict[str, object]:
    value = ujson.loads(_payload_bytes(size))
    assert isinstance(value, dict)
    return value


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _median_rate(samples: list[float]) -> float:
    return statistics.median(samples)


async def bench_append(batch: int, size: int, as_dict: bool, total: int) -> float:
    """Records/s appending ``total`` records in batches of ``batch``."""
    data: object = _payload_dict(size) if as_dict else _payload_bytes(size)
    records = [{"data": data} for _ in range(batch)]
    rates = []
    for _ in range(REPEATS):
        async with topics.open_engine(None) as engine:
            await engine.put_topic("t")
            n = max(1, total // batch)
            gc.collect()
            t0 = time.perf_counter()
            for _ in range(n):
                await engine.write("t", records, return_seqs=False)
            rates.append(n * batch / (time.perf_counter() - t0))
    return _median_rate(rates)


def bench_dumps(size: int, total: int) -> float:
    """ujson.dumps' own rate on the same dict payloads (records/s)."""
    value = _payload_dict(size)
    dumps: Callable[[object], str] = ujson.dumps
    rates = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for _ in range(total):
            dumps(value)
        rates.append(total / (time.perf_counter() - t0))
    return _median_rate(rates)


async def bench_dict_vs_dumps(size: int, total: int, pairs: int = 7) -> dict[str, float]:
    """Dict appends at batch 100 beside ``ujson.dumps`` on the same dicts, in alternating
    pairs: ``ratio`` is the median of the per-pair ratios. Measured apart (one after the
    other, seconds between), the two rates drift differently on a shared machine and
    their quotient moved 45-105 % between runs of unchanged code."""
    value = _payload_dict(size)
    records = [{"data": value} for _ in range(100)]
    dumps: Callable[[object], str] = ujson.dumps
    n = max(1, total // 100)
    ratios, appends, dumped = [], [], []
    async with topics.open_engine(None) as engine:
        await engine.put_topic("t")
        for _ in range(pairs):
            gc.collect()
            t0 = time.perf_counter()
            for _ in range(n):
                await engine.write("t", records, return_seqs=False)
            append_rate = n * 100 / (time.perf_counter() - t0)
            await engine.delete_records("t", before_seq=2**62)  # bound the memory
            t0 = time.perf_counter()
            for _ in range(n * 100):
                dumps(value)
            dumps_rate = n * 100 / (time.perf_counter() - t0)
            appends.append(append_rate)
            dumped.append(dumps_rate)
            ratios.append(append_rate / dumps_rate)
    return {
        "append": statistics.median(appends),
        "dumps": statistics.median(dumped),
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }


async def bench_diff(limit: int, records: int) -> float:
    """Records/s reading a topic front to back with ``limit`` per call (raw bytes)."""
    rates = []
    async with topics.open_engine(None) as engine:
        batch = [{"data": _payload_bytes(64)} for _ in range(1000)]
        for _ in range(records // 1000):
            await engine.write("t", batch, return_seqs=False)
        for _ in range(REPEATS):
            cursor, got = 0, 0
            t0 = time.perf_counter()
            while got < records:
                res = await engine.diff("t", from_seq=cursor, limit=limit)
                got += res.record_count
                cursor = res.next_from_seq
                if res.caught_up:
                    break
            rates.append(got / (time.perf_counter() - t0))
    return _median_rate(rates)


async def bench_tag_delete() -> dict[str, float]:
    """Milliseconds per tag delete: Eq hitting 1000 records, Glob hitting 10 000."""
    out: dict[str, list[float]] = {"eq_1000_ms": [], "glob_10000_ms": []}
    for _ in range(REPEATS):
        async with topics.open_engine(None) as engine:
            for t in range(100):
                recs = [{"data": b"1", "tag": f"tenant{t}:job-{i}"} for i in range(1000)]
                await engine.write("t", recs, return_seqs=False)
            await engine.write(
                "t", [{"data": b"1", "tag": "hot"} for _ in range(1000)], return_seqs=False
            )
            t0 = time.perf_counter()
            res = await engine.delete_records("t", match=["tag", "Eq", "hot"])
            out["eq_1000_ms"].append((time.perf_counter() - t0) * 1000)
            assert res.deleted == 1000
            t0 = time.perf_counter()
            res = await engine.delete_records("t", match=["tag", "Glob", "tenant4*"])
            out["glob_10000_ms"].append((time.perf_counter() - t0) * 1000)
            assert res.deleted == 11_000  # tenant4 and tenant40..49
    return {k: statistics.median(v) for k, v in out.items()}


async def bench_memory(records: int) -> float:
    """Resident bytes per 64 B record (RSS growth while holding ``records`` records)."""
    gc.collect()
    async with topics.open_engine(None) as engine:
        await engine.put_topic("m")
        batch = [{"data": _payload_bytes(64)} for _ in range(1000)]
        await engine.write("m", batch[:1], return_seqs=False)
        gc.collect()
        before = _rss_bytes()
        for _ in range(records // 1000):
            await engine.write("m", batch, return_seqs=False)
        gc.collect()
        after = _rss_bytes()
        state = await engine.get_topic("m")
        assert state.count == records // 1000 * 1000 + 1
    return (after - before) / (records // 1000 * 1000)


async def main(quick: bool) -> dict[str, object]:
    total = 100_000 if quick else 300_000
    results: dict[str, object] = {
        "implementation": IMPLEMENTATION,
        "python": sys.version.split()[0],
    }
    append = {}
    for size in (64, 1024):
        for batch in (1, 10, 100, 1000):
            n = total if batch >= 10 else total // 10
            append[f"bytes_{size}B_batch{batch}"] = await bench_append(batch, size, False, n)
            append[f"dict_{size}B_batch{batch}"] = await bench_append(batch, size, True, n)
        append[f"ujson_dumps_{size}B"] = bench_dumps(size, total)
    results["append_records_per_s"] = append
    results["dict_vs_dumps"] = {
        f"{size}B": await bench_dict_vs_dumps(size, total) for size in (64, 1024)
    }
    results["diff_records_per_s"] = {
        f"limit{limit}": await bench_diff(limit, 100_000 if limit > 1 else 20_000)
        for limit in (1, 256, 1000)
    }
    results["tag_delete"] = await bench_tag_delete()
    results["rss_bytes_per_64B_record"] = _memory_in_fresh_process(200_000 if quick else 1_000_000)
    return results


def _memory_in_fresh_process(records: int) -> float:
    """RSS growth must be measured where no earlier benchmark left freed memory behind."""
    out = subprocess.run(
        [sys.executable, __file__, "--memory-probe", str(records)],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip())


def _print(results: dict[str, object]) -> None:
    print(f"core: {results['implementation']}  python {results['python']}")
    for section in ("append_records_per_s", "diff_records_per_s", "tag_delete"):
        print(f"\n{section}")
        values = results[section]
        assert isinstance(values, dict)
        for key, value in values.items():
            print(f"  {key:28s} {value:>14,.1f}")
    print(f"\nrss_bytes_per_64B_record     {results['rss_bytes_per_64B_record']:>14,.1f}")
    append = results["append_records_per_s"]
    assert isinstance(append, dict)
    pairs = results["dict_vs_dumps"]
    assert isinstance(pairs, dict)
    for size in (64, 1024):
        p = pairs[f"{size}B"]
        print(
            f"dict append at batch 100 / ujson.dumps rate ({size} B), alternating pairs: "
            f"{p['ratio']:.0%} (pairs {p['ratio_min']:.0%}-{p['ratio_max']:.0%})"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="smaller runs (a smoke test of the script)"
    )
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--memory-probe", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_probe:
        print(trio.run(bench_memory, args.memory_probe))
        sys.exit(0)
    out = trio.run(main, args.quick)
    _print(out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
