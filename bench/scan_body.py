"""Time split_write_body on 100-record write bodies (64-byte data values).

Prints the median (and best) per-call time of the compiled splitter, the pure-Python fallback and,
as a yardstick, ``ujson.loads`` of the same body (which decodes everything and so cannot
keep the payload bytes).
Usage: python bench/scan_body.py [--records N] [--runs R] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import time
from collections.abc import Callable
from types import ModuleType

import ujson


def make_body(records: int) -> bytes:
    """A write body whose records each carry exactly 64 bytes of data JSON and a tag."""
    items = []
    for i in range(records):
        head = b'{"user":"u%05d","n":%d,"vals":[1.50,2e3],"ok":true,"s":"' % (i, 10000 + i)
        data = head + b"x" * (62 - len(head)) + b'"}'
        assert len(data) == 64, len(data)
        items.append(b'{"data":%s,"tag":"orders.%d"}' % (data, i % 10))
    return b'{"records":[%s],"node":"node-1","idempotency_key":"k-1"}' % b",".join(items)


def time_us(
    fn: Callable[[bytes], object], body: bytes, runs: int, inner: int
) -> tuple[float, float]:
    """(median, best) microseconds per call over ``runs`` batches of ``inner`` calls; the
    best is the figure least disturbed by other load on the machine."""
    samples = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        for _ in range(inner):
            fn(body)
        samples.append((time.perf_counter_ns() - start) / inner / 1000)
    return statistics.median(samples), min(samples)


def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"topics._core.{name}")
    except ImportError:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--runs", type=int, default=201)
    parser.add_argument("--quick", action="store_true", help="21 runs (a smoke run)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if args.quick:
        args.runs = 21
    body = make_body(args.records)
    compiled, pure = _load("_scan"), _load("_scan_pure")
    assert pure is not None
    if compiled is not None:
        assert compiled.split_write_body(body) == pure.split_write_body(body)
    print(f"body: {len(body)} bytes, {args.records} records of 64-byte data")
    rows: list[tuple[str, Callable[[bytes], object], int]] = []
    if compiled is not None:
        rows.append(("split_write_body (cython)", compiled.split_write_body, 200))
    else:
        print("split_write_body (cython): not built")
    rows.append(("split_write_body (pure)", pure.split_write_body, 5))
    rows.append(("ujson.loads (reference)", ujson.loads, 200))
    results: dict[str, dict[str, float]] = {}
    for name, fn, inner in rows:
        fn(body)  # warm up
        median, best = time_us(fn, body, args.runs, inner)
        rate = args.records / median  # records per microsecond = M records/s
        print(
            f"{name:26s} median {median:8.2f} us/body ({rate:5.2f} M records/s)"
            f"  best {best:8.2f} us"
        )
        results[name] = {"median_us": median, "best_us": best, "records_per_s": rate * 1e6}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"body_bytes": len(body), "records": args.records, "rows": results}, f)


if __name__ == "__main__":
    main()
