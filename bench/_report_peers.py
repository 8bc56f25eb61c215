"""The C-driven peer comparison of docs/BENCHMARKS.md (bench/peers_c.py, issue 33): its
section and the headline ratios the page quotes (its targets are in _targets.py).

Only these rows give topics / Redis ratios that are results: both servers are driven by a
C load generator with the same connections, pipeline depth and durability. The redis-py and
nats-py rows elsewhere on the page measure their Python clients as much as their servers.
"""

from __future__ import annotations

from typing import Any

import _numbers as nb
from _numbers import Results

DASH = "—"
# shape -> (label, what topics runs, what Redis runs)
SHAPES = {
    "single_16": ("single-record writes, 16 connections", "wrk -c16, 1 record per POST",
                  "redis-benchmark -c 16 -P 1 XADD"),
    "single_1": ("single-record writes, 1 connection", "wrk -c1, 1 record per POST",
                 "redis-benchmark -c 1 -P 1 XADD"),
    "batch_16x100": ("batched writes of 100, 16 connections", "wrk -c16, 100 records per POST",
                     "redis-benchmark -c 16 -P 100 XADD"),
}  # fmt: skip
CLIENT_BOUND = "client-bound (Python client)"


def _n(value: Any, digits: int = 0) -> str:
    v = nb.num(value)
    return DASH if v is None else f"{v:,.{digits}f}"


def _lat(row: dict[str, Any], p50: str, p99: str) -> str:
    a, b = nb.num(row.get(p50)), nb.num(row.get(p99))
    return DASH if a is None or b is None else f"{a:.2f} / {b:.2f}"


def _spread(ratios: Any) -> str:
    values = [v for v in ratios if nb.num(v) is not None] if isinstance(ratios, list) else []
    return f" ({min(values):.2f}-{max(values):.2f})" if len(values) > 1 else ""


def headline(results: Results) -> str | None:
    """One sentence of topics / Redis ratios, from the C-driven rows only."""
    parts = []
    for name, what in (("batch_16x100", "batched writes of 100"),
                       ("single_16", "single-record writes at 16 connections"),
                       ("single_1", "at 1 connection"),
                       ("mixed_16", "mixed read/write")):  # fmt: skip
        r = nb.c_peer_ratio(results, name)
        if r is not None:
            parts.append(f"{what} **{r:.2f}x**")
    if not parts:
        return None
    return ("topics-server ÷ Redis Streams (AOF everysec), both driven by a C load generator "
            "(wrk / redis-benchmark), same connections, pipeline depth and payload: "
            + ", ".join(parts) + ".")  # fmt: skip


def section(results: Results, status: list[str]) -> list[str]:
    lines = ["### C load generators on both sides (the peer ratios)", "", *status]
    d = nb.data(results, "peers_c")
    if d is None:
        return lines
    lines += [
        f"Medians over {d.get('rounds', '?')} alternating rounds of {d.get('duration_s', '?')} s "
        "per shape and side (which side goes first alternates by round; the ratio is the median "
        "of per-round ratios, its range in brackets). topics-server: a temp data dir, topics of "
        "the default `disk` class (WAL written at once, fdatasync shortly after), `wrk -t1`. "
        "Redis: its own temp dir and loopback port, `appendonly yes`, `appendfsync everysec`, "
        "`redis-benchmark` (one thread), field value the same ~45-byte JSON. Server CPU is "
        "utime + stime (children included) from /proc/PID/stat over the run. Latency: wrk's per "
        "request; redis-benchmark's per command (with `-P 100` a command waits for its whole "
        "pipeline). Generators and servers share the machine's cores: rate x CPU per record "
        "says how much of a core a server used; one well under a core was held back by something "
        "else (round trips, its generator, the neighbours).",
        "",
    ]
    rows = []
    for name, (label, mine, theirs) in SHAPES.items():
        s = nb.c_peer_shape(results, name)
        if s is None:
            continue
        t, r = s["median"].get("topics", {}), s["median"].get("redis", {})
        rows.append([label, f"{mine} / {theirs}", _n(t.get("records_s")), _n(r.get("records_s")),
                     f"**{s['median']['ratio']:.2f}x**{_spread(s.get('ratio'))}",
                     _n(t.get("req_s")), _n(r.get("req_s")),
                     _lat(t, "p50_ms", "p99_ms"), _lat(r, "p50_ms", "p99_ms"),
                     _n(t.get("cpu_us_per_record"), 1), _n(r.get("cpu_us_per_record"), 1)])  # fmt: skip
    lines += _table(
        ["shape", "topics / Redis driven by", "topics records/s", "Redis records/s",
         "topics ÷ Redis", "topics req/s", "Redis req/s", "topics p50 / p99 ms",
         "Redis p50 / p99 ms", "topics CPU µs/record", "Redis CPU µs/record"], rows)  # fmt: skip
    mixed = nb.c_peer_shape(results, "mixed_16")
    if mixed is not None:
        t, r = mixed["median"].get("topics", {}), mixed["median"].get("redis", {})
        n = d.get("mixed_read_records", 100)
        lines += [
            f"Mixed read/write: 8 connections write one record per request while 8 others read "
            f"the latest {n} records, two generators at once per side. topics: `diff` limit {n} "
            f'from the previous answer\'s `head_seq` - {n} (the contract has no "last N" read; '
            f"every answer carries the head). Redis: `XREVRANGE key + - COUNT {n}`, its own read "
            "of the newest entries. redis-benchmark runs with `-l` until stopped and reports "
            "mean latency only.",
            "",
        ]
        lines += _table(
            ["system", "ops/s", "writes/s", "reads/s", "records read/s", "write latency ms",
             "read latency ms", "server CPU µs/op"],
            [["topics", _n(t.get("ops_s")), _n(t.get("writes_s")), _n(t.get("reads_s")),
              _n(t.get("records_read_s")), "p50 / p99 " + _lat(t, "write_p50_ms", "write_p99_ms"),
              "p50 / p99 " + _lat(t, "read_p50_ms", "read_p99_ms"), _n(t.get("cpu_us_per_op"), 1)],
             ["Redis", _n(r.get("ops_s")), _n(r.get("writes_s")), _n(r.get("reads_s")),
              _n(r.get("records_read_s")), f"mean {_n(r.get('write_avg_ms'), 2)}",
              f"mean {_n(r.get('read_avg_ms'), 2)}", _n(r.get("cpu_us_per_op"), 1)],
             ["topics ÷ Redis", f"**{mixed['median']['ratio']:.2f}x**{_spread(mixed.get('ratio'))}",
              DASH, DASH, DASH, DASH, DASH, DASH]],
        )  # fmt: skip
    nats = d.get("nats")
    if isinstance(nats, dict) and nats.get("status") != "ok":
        lines += [f"NATS: no C-driven rows ({nats.get('reason', 'not run')}). The NATS rows "
                  f"below are {CLIENT_BOUND}.", ""]  # fmt: skip
    return lines


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return [*out, ""]
