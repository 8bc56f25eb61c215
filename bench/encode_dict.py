"""Time encode_batch on 100-record batches whose data are Python values (the dict path).

Prints, from one run with the cases interleaved and repeated (median and best of --runs
samples; the machine may be shared and noisy), the per-record cost of:

  (a) ``for v in values: ujson.dumps(v)``       the yardstick: one dumps call per record
  (b) encode_batch, 64-byte dict data           {"k": "x" * 56} -> 64 bytes of JSON
  (b+) the same with a tag and a meta dict on every record
  (c) encode_batch, 1 KiB dict data
  (d) encode_batch, 64-byte raw JSON bytes data (no dumps at all)
  (e) ``ujson.dumps(values)``, one call per batch (what the batch path starts from)

and the ratio (a)/(b): the share of the bare ujson.dumps rate that encode_batch reaches.
``--baseline PATH`` also times another build of the compiled core (e.g. a copy of an
older ``_ext*.so``) in the same run.
Usage: python bench/encode_dict.py [--runs R] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import json
import statistics
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import ujson

NODE = "node-1"
SALT = 0x5A17
LIMITS = (1 << 20, 1 << 14, 64, 256, 128)


def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"topics._core.{name}")
    except ImportError:
        return None


def _load_path(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("_ext", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def batch_call(core: ModuleType, records: list[dict[str, Any]]) -> Callable[[], object]:
    encode = core.encode_batch
    dumps = ujson.dumps

    def run() -> object:
        return encode(records, 1, 1_700_000_000_000, NODE, SALT, LIMITS, dumps)

    return run


def dumps_each(values: list[Any]) -> Callable[[], object]:
    dumps = ujson.dumps

    def run() -> object:
        for v in values:
            dumps(v)
        return None

    return run


def sample(fn: Callable[[], object], inner: int) -> float:
    """Microseconds per call of ``fn`` over ``inner`` calls, with the GC off."""
    gc.disable()
    try:
        start = time.perf_counter_ns()
        for _ in range(inner):
            fn()
        return (time.perf_counter_ns() - start) / inner / 1000
    finally:
        gc.enable()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--target-ms", type=float, default=20.0, help="time per sample")
    parser.add_argument("--baseline", help="path of another compiled _ext module to time too")
    parser.add_argument("--quick", action="store_true", help="3 rounds of 5 ms samples")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.target_ms = 3, 5.0
    n = args.records

    small = [{"k": "x" * 56} for _ in range(n)]
    large = [{"k": "x" * 1016} for _ in range(n)]
    assert len(ujson.dumps(small[0])) == 64
    assert len(ujson.dumps(large[0])) == 1024
    rec_small = [{"data": v} for v in small]
    rec_rich = [
        {"data": v, "tag": f"orders.{i % 10}", "meta": {"src": "bench", "i": i}}
        for i, v in enumerate(small)
    ]
    rec_large = [{"data": v} for v in large]
    rec_raw = [{"data": ujson.dumps(v).encode()} for v in small]

    cores: list[tuple[str, ModuleType]] = []
    compiled = _load("_ext")
    if compiled is not None:
        cores.append(("cython", compiled))
    else:
        print("compiled core (topics._core._ext): not built; timing the pure fallback")
        pure = _load("_pure")
        assert pure is not None
        cores.append(("pure", pure))
    if args.baseline:
        cores.append(("baseline", _load_path(args.baseline)))
    for _, core in cores[1:]:  # every build must produce the same frames
        for recs in (rec_small, rec_rich, rec_large, rec_raw):
            assert batch_call(core, recs)() == batch_call(cores[0][1], recs)()

    cases: list[tuple[str, Callable[[], object]]] = [
        ("(a) ujson.dumps per record", dumps_each(small)),
        ("(e) ujson.dumps(list) / batch", lambda: ujson.dumps(small)),
    ]
    for label, core in cores:
        cases += [
            (f"(b) {label} 64 B dict", batch_call(core, rec_small)),
            (f"(b+) {label} 64 B +tag+meta", batch_call(core, rec_rich)),
            (f"(c) {label} 1 KiB dict", batch_call(core, rec_large)),
            (f"(d) {label} 64 B raw bytes", batch_call(core, rec_raw)),
        ]

    inner = {}
    for name, fn in cases:  # warm up and size each sample to about --target-ms
        fn()
        once = sample(fn, 3)
        inner[name] = max(1, int(args.target_ms * 1000 / max(once, 0.01)))
    samples: dict[str, list[float]] = {name: [] for name, _ in cases}
    for _ in range(args.runs):  # interleaved: every case once per round
        for name, fn in cases:
            samples[name].append(sample(fn, inner[name]) * 1000 / n)  # ns per record

    print(f"{n} records per batch; ns per record, median (best) of {args.runs} rounds")
    medians, bests = {}, {}
    for name, _ in cases:
        medians[name], bests[name] = statistics.median(samples[name]), min(samples[name])
        print(f"  {name:34s} {medians[name]:8.1f}  ({bests[name]:8.1f})")
    a, a_best = medians["(a) ujson.dumps per record"], bests["(a) ujson.dumps per record"]
    ratios = {}
    for label, _ in cores:
        b, b_best = medians[f"(b) {label} 64 B dict"], bests[f"(b) {label} 64 B dict"]
        ratios[label] = {"median": a / b, "best": a_best / b_best}
        print(
            f"{label}: (a)/(b) = {a / b:.2f}  (encode_batch reaches {100 * a / b:.0f}% of the"
            f" ujson.dumps rate; (b) = {b / a:.2f}x (a)); from the best rounds {a_best / b_best:.2f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            out = {
                "records_per_batch": n,
                "runs": args.runs,
                "ns_per_record_median": medians,
                "ns_per_record_best": bests,
                "dumps_over_encode_batch": ratios,
            }
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
