"""Comparable figures pulled out of a run's results file, for the report and the plots.

Each benchmark script keeps its own JSON shape; this module is the one place that knows
those shapes. Every getter tolerates a missing benchmark, a missing key or added keys and
answers None (or an empty list) rather than raising: a partial run still renders.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from typing import Any

Results = dict[str, Any]


def data(results: Results, bench: str) -> Any:
    entry = results.get("benchmarks", {}).get(bench)
    if not isinstance(entry, dict) or entry.get("status") != "ok":
        return None
    return entry.get("data")


def dig(tree: Any, *path: str | int) -> Any:
    """tree[path[0]][path[1]]... or None; int keys also match their str form (JSON)."""
    for key in path:
        if isinstance(tree, dict):
            tree = tree.get(key, tree.get(str(key)))
        elif isinstance(tree, list) and isinstance(key, int) and -len(tree) <= key < len(tree):
            tree = tree[key]
        else:
            return None
    return tree


def num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return None if math.isnan(value) else float(value)


# -- http_load: per-round lists ----------------------------------------------------------------


def http_rounds(results: Results, workload: str) -> list[dict[str, Any]]:
    rounds = dig(data(results, "http_load"), "results", workload)
    return [r for r in rounds if isinstance(r, dict)] if isinstance(rounds, list) else []


def http_median(results: Results, workload: str, key: str) -> float | None:
    values = [v for r in http_rounds(results, workload) if (v := num(r.get(key))) is not None]
    return statistics.median(values) if values else None


def http_ratio(results: Results, a: str, b: str, key: str) -> list[float]:
    """Per-round a/b: the two halves of a pair ran close in time and share the noise."""
    out = []
    for x, y in zip(http_rounds(results, a), http_rounds(results, b), strict=False):
        top, bottom = num(x.get(key)), num(y.get(key))
        if top is not None and bottom:
            out.append(top / bottom)
    return out


def redis_xadd_best(results: Results) -> list[float]:
    """redis-py's better XADD set-up per round (16 threads share one GIL, so one
    connection is often faster): the baseline http_load.py itself uses."""
    out = []
    for a, b in zip(
        http_rounds(results, "redis_xadd_16x100"), http_rounds(results, "py_xadd_100"), strict=False
    ):
        values = [v for v in (num(a.get("records_s")), num(b.get("records_s"))) if v is not None]
        if values:
            out.append(max(values))
    return out


def write_vs_redis(results: Results) -> list[float]:
    topics = [num(r.get("records_s")) for r in http_rounds(results, "write_16x100")]
    return [t / r for t, r in zip(topics, redis_xadd_best(results), strict=False) if t and r]


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


# -- comparable rows ----------------------------------------------------------------------------

# Where a Python client (redis-py, nats-py, httpx) drives a server, the client's own CPU bounds
# the rate: such rows say so, and no topics / peer ratio is taken from them (issue 33).
CLIENT_BOUND = "client-bound (Python client)"


@dataclass(frozen=True)
class Rate:
    system: str  # "topics", "Redis", "NATS"
    label: str  # rows driven by a Python client say so: CLIENT_BOUND
    value: float | None
    unit: str = "records/s"
    ratio: float | None = None  # topics ÷ this, measured beside it in the same run


def _c_peer_rate(results: Results, name: str, side: str) -> float | None:
    return num(dig(c_peer_shape(results, name), "median", side, "records_s"))


def write_rates(results: Results) -> list[Rate]:
    engine = data(results, "engine")
    nats = data(results, "nats")
    return [
        Rate("topics", "in-process engine, batch 100, 64 B (memory)",
             num(dig(engine, "append_records_per_s", "bytes_64B_batch100"))),
        Rate("topics", "HTTP, wrk 16 connections x 100 records (disk)",
             http_median(results, "write_16x100", "records_s")),
        Rate("topics", "HTTP, wrk 16 connections x 100 records (disk), the peers_c run",
             _c_peer_rate(results, "batch_16x100", "topics")),
        Rate("topics", f"HTTP, one httpx client, 100 per request: {CLIENT_BOUND}",
             http_median(results, "py_write_100", "records_s")),
        Rate("Redis", "XADD pipelines of 100, redis-benchmark 16 connections (AOF everysec), the peers_c run",
             _c_peer_rate(results, "batch_16x100", "redis"), ratio=c_peer_ratio(results, "batch_16x100")),
        Rate("Redis", f"XADD pipelines of 100, redis-py, 16 threads (AOF everysec): {CLIENT_BOUND}",
             http_median(results, "redis_xadd_16x100", "records_s")),
        Rate("Redis", f"XADD pipelines of 100, one redis-py connection: {CLIENT_BOUND}",
             http_median(results, "py_xadd_100", "records_s")),
        Rate("NATS", f"JetStream publish_async, 100 PubAcks awaited together, one nats-py client (file): {CLIENT_BOUND}",
             num(dig(nats, "publish", "records_s"))),
    ]  # fmt: skip


def read_rates(results: Results) -> list[Rate]:
    engine = data(results, "engine")
    nats = data(results, "nats")
    wrk_diff = http_median(results, "diff_1000", "req_s")
    return [
        Rate("topics", "in-process engine, diff limit 1000",
             num(dig(engine, "diff_records_per_s", "limit1000"))),
        Rate("topics", "HTTP diff limit 1000, wrk 16 connections (not decoded)",
             wrk_diff * 1000 if wrk_diff is not None else None),
        Rate("topics", f"HTTP diff limit 1000, one httpx client (+ ujson): {CLIENT_BOUND}",
             http_median(results, "py_diff_1000", "records_s")),
        Rate("Redis", f"XRANGE COUNT 1000, one redis-py connection: {CLIENT_BOUND}",
             http_median(results, "redis_xrange_1000", "records_s")),
        Rate("NATS", f"JetStream pull fetch of 1000, one nats-py client: {CLIENT_BOUND}",
             num(dig(nats, "fetch", "records_s"))),
    ]  # fmt: skip


@dataclass(frozen=True)
class Latency:
    p50_ms: float | None
    p99_ms: float | None
    deliveries_per_s: float | None
    complete: bool | None
    # The slowest delivery of the worst round (of the one round in older results).
    max_ms: float | None = None
    # The fewest latency records any one watcher got, of ``messages`` (a starved one shows).
    min_records_per_watcher: float | None = None
    messages: float | None = None
    server_cpu_us: float | None = None
    client_cpu_us: float | None = None


def _latency(row: Any) -> Latency | None:
    if not isinstance(row, dict):
        return None
    complete = row.get("complete")
    return Latency(
        num(row.get("p50_ms")),
        num(row.get("p99_ms")),
        num(row.get("deliveries_per_s")),
        complete if isinstance(complete, bool) else None,
        num(row.get("max_ms_worst_round", row.get("max_ms"))),
        num(row.get("min_records_per_watcher")),
        num(row.get("messages")),
        num(row.get("server_cpu_us_per_delivery")),
        num(row.get("client_cpu_us_per_delivery")),
    )


WATCH_SYSTEMS = ("topics SSE watch", "Redis XREAD BLOCK", "NATS push consumers")


def watch_series(results: Results) -> dict[int, dict[str, Latency | None]]:
    """watchers -> system -> latency, for every watcher count any system measured."""
    watch, nats = data(results, "watch"), data(results, "nats")
    sources = {
        WATCH_SYSTEMS[0]: dig(watch, "sse"),
        WATCH_SYSTEMS[1]: dig(watch, "redis"),
        WATCH_SYSTEMS[2]: dig(nats, "fanout"),
    }
    counts: set[int] = set()
    for tree in sources.values():
        if isinstance(tree, dict):
            counts.update(int(k) for k in tree if str(k).isdigit())
    return {
        n: {name: _latency(dig(tree, n)) for name, tree in sources.items()} for n in sorted(counts)
    }


def watch_idle_kib(results: Results, streams: int) -> float | None:
    """Server KiB per idle SSE watcher measured with ``streams`` idle streams (results
    before the 10,000 point kept only the 1,000-stream figure)."""
    watch = data(results, "watch")
    value = num(dig(watch, "idle_kib_by_streams", streams))
    if value is None and streams == 1000:
        value = num(dig(watch, "idle_kib_per_connection"))
    return value


#: The minimal relays of bench/_floor_server.py, as bench/watch.py names their results.
WATCH_FLOORS = (("trio relay", "floor_trio"), ("epoll relay", "floor_epoll"))


def watch_floors(results: Results) -> dict[int, dict[str, Latency | None]]:
    """watchers -> floor name -> latency, for the counts the floors were measured at."""
    watch = data(results, "watch")
    out: dict[int, dict[str, Latency | None]] = {}
    for name, key in WATCH_FLOORS:
        tree = dig(watch, key)
        if not isinstance(tree, dict):
            continue
        for k, row in tree.items():
            if str(k).isdigit():
                out.setdefault(int(k), {})[name] = _latency(row)
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class QueueRow:
    system: str
    setup: str
    pipeline_jobs_s: float | None
    drain_jobs_s: float | None
    claim_p50_us: float | None
    claim_p99_us: float | None


def _queue_system(setup: str) -> str:
    lowered = setup.lower()
    if "redis" in lowered:
        return "Redis"
    if "nats" in lowered:
        return "NATS"
    return "topics"


def _first(row: dict[str, Any], *needles: str) -> float | None:
    """The first numeric value whose key contains every needle (tolerates renamed keys)."""
    for key, value in row.items():
        if all(n in key.lower() for n in needles) and (v := num(value)) is not None:
            return v
    return None


QUEUE_LABELS = {
    "inproc_j0": "topics in-process, claim jitter 0 ms",
    "inproc_j2": "topics in-process, claim jitter 2 ms",
    "http_push": "topics over HTTP, push (GET .../work stream + ack)",
    "http_poll": "topics over HTTP, poll (claim + ack)",
    "redis": f"Redis Streams XREADGROUP/XACK, redis-py: {CLIENT_BOUND}",
}
_FLAT_KEY = re.compile(r"^(?P<setup>.+?)_(?P<phase>pipeline|drain)_(?P<metric>.+)$")


def _flat_queue_rows(tree: dict[str, Any]) -> list[dict[str, Any]]:
    """queues.py --json writes one flat dict of ``<setup>_<phase>_<metric>`` keys."""
    rows: dict[str, dict[str, Any]] = {}
    for key, value in tree.items():
        m = _FLAT_KEY.match(key)
        if m is None or m["metric"].endswith("_all"):
            continue
        row = rows.setdefault(m["setup"], {"setup": QUEUE_LABELS.get(m["setup"], m["setup"])})
        if m["metric"] == "jobs_s":
            row[f"{m['phase']}_jobs_s"] = value
        elif m["phase"] == "drain":  # latencies and CV of the drain phase, as queues.py prints
            row[m["metric"]] = value
    order = list(QUEUE_LABELS)
    ranked = sorted(rows.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 99)
    return [row for _, row in ranked]


def _queue_rows_of(tree: Any) -> list[dict[str, Any]]:
    """Rows of queues.py's results: its flat dict, a list of dicts, or a dict of dicts
    keyed by set-up."""
    if isinstance(tree, dict) and any(_FLAT_KEY.match(k) for k in tree):
        return _flat_queue_rows(tree)
    if isinstance(tree, dict):
        for key in ("rows", "runs", "results", "setups"):
            if key in tree:
                return _queue_rows_of(tree[key])
        rows = []
        for name, value in tree.items():
            if isinstance(value, dict) and any("drain" in k or "pipeline" in k for k in value):
                rows.append({"setup": name, **value})
        return rows
    if isinstance(tree, list):
        return [r for r in tree if isinstance(r, dict)]
    return []


def queue_rows(results: Results) -> list[QueueRow]:
    out = []
    for row in _queue_rows_of(data(results, "queues")):
        setup = str(row.get("setup") or row.get("name") or "?")
        out.append(
            QueueRow(
                _queue_system(setup),
                setup,
                _first(row, "pipeline"),
                _first(row, "drain"),
                _first(row, "p50"),
                _first(row, "p99"),
            )
        )
    nats = dig(data(results, "nats"), "workqueue")
    if isinstance(nats, dict):
        out.append(
            QueueRow(
                "NATS",
                f"NATS JetStream work queue, pull consumer, fetch + ack, nats-py: {CLIENT_BOUND}",
                num(nats.get("pipeline_jobs_s")),
                num(nats.get("drain_jobs_s")),
                num(nats.get("claim_p50_us")),
                num(nats.get("claim_p99_us")),
            )
        )
    return out


def persistence_rows(results: Results) -> list[dict[str, Any]]:
    rows = dig(data(results, "persistence"), "append")
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def group_commit_rows(results: Results) -> list[dict[str, Any]]:
    rows = dig(data(results, "persistence"), "group_commit")
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def group_commit_rate(results: Results, writers: int) -> float | None:
    for row in group_commit_rows(results):
        if row.get("writers") == writers:
            return num(row.get("records_per_s"))
    return None


def recovery_rows(results: Results) -> list[dict[str, Any]]:
    rows = dig(data(results, "persistence"), "recovery")
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def persistence_rate(results: Results, durability: str, writers: int) -> float | None:
    for row in persistence_rows(results):
        if row.get("durability") == durability and row.get("writers") == writers:
            return num(row.get("records_per_s"))
    return None


# -- peers_c: C load generators on both sides ---------------------------------------------------


def c_peer_shape(results: Results, name: str) -> dict[str, Any] | None:
    found = dig(data(results, "peers_c"), "shapes", name)
    return found if isinstance(found, dict) and isinstance(found.get("median"), dict) else None


def c_peer_ratio(results: Results, name: str) -> float | None:
    return num(dig(c_peer_shape(results, name), "median", "ratio"))
