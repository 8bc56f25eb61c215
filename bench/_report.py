"""docs/BENCHMARKS.md from one results file: Markdown tables, targets, figures.

The results file holds one entry per benchmark. ``run_all.py --only`` re-runs some and keeps
the others' entries from earlier runs, so a page is not one run's: each entry carries the run
it came from (``run``: the command, commit and machine, written by run_all when it runs the
benchmark), and every section of the page opens with that run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import _history_targets
import _numbers as nb
import _report_peers
from _numbers import Results
from _targets import Verdict, all_targets

NOTES = "BENCHMARKS_NOTES.md"
DASH = "—"


def _n(value: Any, digits: int = 0) -> str:
    v = nb.num(value)
    return DASH if v is None else f"{v:,.{digits}f}"


def _per_fsync(row: dict[str, Any]) -> float | None:
    records, fsyncs = nb.num(row.get("records")), nb.num(row.get("fsyncs"))
    return None if records is None or not fsyncs else records / fsyncs


def _added(value: Any) -> str:
    v = nb.num(value)
    return _n(v) if v is None or v >= 0 else "< 0 (noise)"


def _ms(value: Any) -> str:
    v = nb.num(value)
    return DASH if v is None else f"{v:.2f}"


def _ratio(top: float | None, bottom: float | None) -> str:
    return f"{top / bottom:.2f}x" if top is not None and bottom else DASH


def _load(values: Any) -> str:
    if not isinstance(values, list):
        return DASH
    return " ".join(f"{v:.2f}" for v in values if isinstance(v, int | float))


def table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return [*out, ""]


def _figure(figures: dict[str, str], name: str, alt: str) -> list[str]:
    return [f"![{alt}]({figures[name]})", ""] if name in figures else []


def machine_line(m: dict[str, Any]) -> str:
    """The machine facts a reader needs to compare two runs, in one line."""
    return (
        f"{m.get('nproc', '?')} cores, {m.get('cpu_model', '?')}, {m.get('mem_gib', '?')} GiB, "
        f"{m.get('os', '?')}, kernel {m.get('kernel', '?')}, Python {m.get('python', '?')} "
        f"({m.get('topics_core', '?')} core)"
    )


def run_facts(meta: dict[str, Any]) -> dict[str, Any]:
    """What run_all stores with each benchmark it runs (``entry["run"]``), so the entry still
    says where it came from after later ``--only`` runs replace the file's ``meta``."""
    m = meta.get("machine", {})
    return {
        "command": meta.get("command"),
        "commit": m.get("git_commit"),
        "dirty": m.get("git_dirty"),
        "machine": machine_line(m) if m else None,
    }


def run_of(results: Results, bench: str) -> dict[str, Any] | None:
    """The run a benchmark's entry came from: its own record, else the file's run when the
    entry is that run's, else None (kept from a run that recorded nothing)."""
    entry = results.get("benchmarks", {}).get(bench) or {}
    if isinstance(entry.get("run"), dict):
        run: dict[str, Any] = entry["run"]
        return run
    if entry.get("kept_from_previous_run") or not results.get("meta"):
        return None
    return run_facts(results["meta"])


def run_label(results: Results, bench: str) -> str:
    """'Run: when; how; which commit; which machine' for a section of the page."""
    entry = results.get("benchmarks", {}).get(bench) or {}
    started = entry.get("started_utc", "start not recorded")
    run = run_of(results, bench)
    if run is None:
        return (f"**Run:** {started}, kept from an earlier run whose command, commit and "
                "machine were not recorded.")  # fmt: skip
    how = [f"`{run['command']}`"] if run.get("command") else []
    if run.get("how"):
        how.append(str(run["how"]))
    commit = run.get("commit")
    parts = [
        started,
        ", ".join(how) or "command not recorded",
        (f"commit {commit}" + (" with uncommitted changes" if run.get("dirty") else ""))
        if commit
        else "commit not recorded",
        run.get("machine") or "machine not recorded",
    ]
    if run.get("recorded_in"):
        parts.append(f"results added to the file in {run['recorded_in']}")
    return "**Run:** " + "; ".join(parts) + "."


def _status(results: Results, bench: str) -> list[str]:
    """The run a section's numbers come from, or a line saying why the section is empty."""
    entry = results.get("benchmarks", {}).get(bench)
    if entry is None:
        return ["_Not run in this run._", ""]
    if entry.get("status") != "ok":
        return [f"_{entry.get('status')}: {entry.get('reason', '?')}_", ""]
    detail = []
    if entry.get("command"):
        detail.append(f"`{entry['command']}` — {entry.get('seconds', '?')} s, load "
                      f"{_load(entry.get('load_before'))} before, "
                      f"{_load(entry.get('load_after'))} after.")  # fmt: skip
    if entry.get("note"):
        detail.append(f"_{entry['note']}._")
    return [run_label(results, bench), "", *([" ".join(detail), ""] if detail else [])]


# -- header ---------------------------------------------------------------------------------


def header(results: Results) -> list[str]:
    meta = results.get("meta", {})
    source = meta.get("results_file", "docs/bench/results.json")
    m = meta.get("machine", {})
    tools = m.get("tools", {})
    pkgs = m.get("python_packages", {})
    dirty = " (with uncommitted changes)" if m.get("git_dirty") else ""
    lines = [
        "# Benchmarks",
        "",
        f"<!-- Generated by bench/run_all.py from {source}: do not edit by hand;",
        f"     the hand-written analysis lives in docs/{NOTES}. -->",
        "",
        "This page is **generated** by `python bench/run_all.py` from one results file: every "
        "benchmark, topics and its peers side by side, each in its own process. A run may "
        "re-run only some benchmarks (`--only`) and keep the others' results from earlier "
        "runs, so the sections below need not come from one run: **each section opens with "
        "the run its numbers come from** (when, the command, the commit, the machine). Edits "
        f"here are overwritten; the hand-written analysis — what the numbers mean, dated "
        f"observations, design choices they led to — is in [{NOTES}]({NOTES}). Re-render "
        f"without re-running: `python bench/run_all.py --render-only {source}`.",
        "",
        "The machine is small and shared: compare numbers **within** a section (ratios are "
        "taken from the same run, per round where the script alternates), and check each "
        "section's run and load average before comparing across sections.",
        "",
        "## Runs",
        "",
        "The last `bench/run_all.py` run, which wrote the results file:",
        "",
    ]
    lines += table(
        ["fact", "value"],
        [
            ["command", f"`{meta.get('command', '?')}`"],
            ["started / finished", f"{meta.get('started_utc', '?')} / {meta.get('finished_utc', '?')}"],
            ["mode", "quick (smoke sizes, not for conclusions)" if meta.get("quick") else "full"],
            ["machine", f"{m.get('nproc', '?')} cores (`nproc`), {m.get('cpu_model', '?')}, "
                        f"{m.get('mem_gib', '?')} GiB, {m.get('os', '?')}, kernel {m.get('kernel', '?')}"],
            ["Python", f"{m.get('python', '?')}, topics core: {m.get('topics_core', '?')}, "
                       f"commit {m.get('git_commit', '?')}{dirty}"],
            ["peer servers", f"redis-server {tools.get('redis-server') or 'absent'}, "
                             f"nats-server {tools.get('nats-server') or 'absent'}"],
            ["clients and tools", f"wrk {tools.get('wrk') or 'absent'}, "
                                  f"redis-benchmark {tools.get('redis-benchmark') or 'absent'}, redis-py {pkgs.get('redis') or 'absent'}, "
                                  f"nats-py {pkgs.get('nats-py') or 'absent'}, httpx {pkgs.get('httpx') or '?'}, "
                                  f"hypercorn {pkgs.get('hypercorn') or '?'}, java {tools.get('java') or 'absent'}, "
                                  f"pyspark {pkgs.get('pyspark') or 'absent'}"],
            ["load average at start / end", f"{_load(meta.get('load_start'))} / {_load(meta.get('load_end'))}"],
        ],
    )  # fmt: skip
    rows = []
    for name, entry in results.get("benchmarks", {}).items():
        rows.append([
            name,
            entry.get("status", "?") + (f": {entry['reason']}" if entry.get("reason") else ""),
            str(entry.get("seconds", DASH)),
            f"{_load(entry.get('load_before'))} → {_load(entry.get('load_after'))}",
            entry.get("started_utc", DASH),
            "an earlier run" if entry.get("kept_from_previous_run") else "the last run",
        ])  # fmt: skip
    lines += ["Each benchmark, and the run its results come from (its section says more):", ""]
    lines += table(
        ["benchmark", "status", "seconds", "load avg before → after", "started", "run"], rows
    )
    return lines


def targets_section(verdicts: list[Verdict]) -> list[str]:
    def mark(met: bool | None) -> str:
        return "met" if met else ("not measured" if met is None else "**not met**")

    met = sum(v.met is True for v in verdicts)
    missed = sum(v.met is False for v in verdicts)
    lines = [
        "## Targets",
        "",
        "The issues' targets, judged from the results below (each from the run its section "
        f"names): **{met} met, {missed} not met**, "
        f"{len(verdicts) - met - missed} not measured.",
        "",
    ]
    return lines + table(
        ["issue", "target", "measured", "verdict"],
        [[v.issue, v.target, v.measured, mark(v.met)] for v in verdicts],
    )


# -- topics vs peers ----------------------------------------------------------------------------


def rates_table(rates: list[nb.Rate], reference: int, what: str) -> list[str]:
    ref = rates[reference].value
    rows = []
    for i, r in enumerate(rates):
        # topics' own rows differ by transport, not by product: no ratio for them
        ratio = (
            "reference"
            if i == reference
            else f"{r.ratio:.2f}x (its peers_c topics row ÷ this)"
            if r.ratio is not None
            else DASH
            if r.system == "topics"
            else "none: client-bound"
            if nb.CLIENT_BOUND in r.label
            else _ratio(ref, r.value)
        )
        rows.append([r.system, r.label, _n(r.value), ratio])
    return table(["system", "set-up", "records/s", f"{what} ÷ this"], rows)


def _rows_from(results: Results, benches: Sequence[str]) -> list[str]:
    """Which benchmark's run each row group of a cross-benchmark table comes from."""
    runs = []
    for bench in benches:
        entry = results.get("benchmarks", {}).get(bench) or {}
        if entry.get("status") == "ok":
            runs.append(f"{bench} started {entry.get('started_utc', 'at a time not recorded')}")
    if not runs:
        return []
    return [f"Rows from {len(runs)} benchmarks, each with the run its section names: "
            f"{'; '.join(runs)}.", ""]  # fmt: skip


def peers_section(results: Results, figures: dict[str, str]) -> list[str]:
    writes, reads = nb.write_rates(results), nb.read_rates(results)
    lines = ["## topics vs Redis Streams vs NATS JetStream", ""]
    head = _report_peers.headline(results)
    lines += (
        [f"**Headline** (bench/peers_c.py, the run its section names): {head}", ""] if head else []
    )
    lines += _report_peers.section(results, _status(results, "peers_c"))
    lines += [
        "### Every rate, C-driven and client-bound",
        "",
        "Redis numbers come from `bench/peers_c.py` (redis-benchmark, the rows that say so), "
        "`bench/http_load.py`, `bench/watch.py` and `bench/queues.py` (each in the same run as "
        "the topics numbers of its script); NATS numbers from `bench/peers_nats.py` (a temp "
        "`nats-server -js`, file storage, driven by nats-py on asyncio). Records are the same "
        f"~45-byte JSON object everywhere. Rows marked *{nb.CLIENT_BOUND}* measure redis-py, "
        "nats-py or httpx as much as the server behind them (16 redis-py threads share one "
        "GIL): they show what one Python program gets, and no topics / peer ratio is taken from "
        "them. A ratio is given only against a C-driven peer, from topics measured beside it.",
        "",
        "#### Writes",
        "",
    ]
    lines += rates_table(writes, 1, "topics HTTP batched")
    lines += _rows_from(results, ("engine", "http_load", "peers_c", "nats"))
    lines += _figure(figures, "writes", "write throughput, topics vs peers")
    lines += ["#### Reads of 1000-record windows", ""]
    lines += rates_table(reads, 2, "topics HTTP diff (one client)")
    lines += _rows_from(results, ("engine", "http_load", "nats"))
    lines += [
        "The NATS fetch creates a consumer at a random start sequence and reads 10 windows "
        "from it; payloads stay bytes (redis-py's XRANGE fields do too), while the topics "
        "client decodes the whole answer with ujson.",
        "",
    ]
    lines += _figure(figures, "reads", "read throughput, topics vs peers")
    return lines


# -- per-benchmark sections -------------------------------------------------------------------


def engine_section(results: Results) -> list[str]:
    lines = ["## Embedded engine", "", *_status(results, "engine")]
    engine = nb.data(results, "engine")
    if engine is None:
        return lines
    append = nb.dig(engine, "append_records_per_s") or {}
    rows = []
    for batch in (1, 10, 100, 1000):
        rows.append([str(batch)] + [_n(append.get(f"{kind}_{size}B_batch{batch}"))
                                    for size in (64, 1024) for kind in ("bytes", "dict")])  # fmt: skip
    rows.append(["`ujson.dumps` alone"] + [x for size in (64, 1024)
                                          for x in (DASH, _n(append.get(f"ujson_dumps_{size}B")))])  # fmt: skip
    lines += ["Append, records/s (memory-only engine, one trio run, median of 5):", ""]
    lines += table(["batch", "64 B bytes", "64 B dict", "1 KiB bytes", "1 KiB dict"], rows)
    diff = nb.dig(engine, "diff_records_per_s") or {}
    lines += table(
        ["diff limit", "records/s"], [[k.removeprefix("limit"), _n(v)] for k, v in diff.items()]
    )
    tags = nb.dig(engine, "tag_delete") or {}
    lines += table(
        ["tag delete", "ms"],
        [["`Eq` hitting 1000 of 101 000", _ms(tags.get("eq_1000_ms"))],
         ["`Glob \"tenant4*\"` hitting 11 000", _ms(tags.get("glob_10000_ms"))]],
    )  # fmt: skip
    lines += [
        f"Resident memory per 64 B record: **{_n(engine.get('rss_bytes_per_64B_record'))} B**.",
        "",
    ]
    return lines


def persistence_section(results: Results, figures: dict[str, str]) -> list[str]:
    lines = ["## Persistence", "", *_status(results, "persistence")]
    rows = nb.persistence_rows(results)
    if rows:
        lines += table(
            ["class", "writers", "records/s", "MB/s", "ack p50 ms", "ack p99 ms", "fsyncs", "WAL batches"],
            [[str(r.get("durability")), str(r.get("writers")), _n(r.get("records_per_s")),
              _n(r.get("mb_per_s"), 1), _ms(r.get("p50_ms")), _ms(r.get("p99_ms")),
              _n(r.get("fsyncs")), _n(r.get("batches"))] for r in rows],
        )  # fmt: skip
    floor = nb.dig(nb.data(results, "persistence"), "fdatasync_floor")
    if isinstance(floor, dict):
        lines += [f"Raw floor of the same disk (4 KiB pwrite + fdatasync): {_n(floor.get('ops_per_s'))}/s, "
                  f"p50 {_ms(floor.get('p50_ms'))} ms, p99 {_ms(floor.get('p99_ms'))} ms.", ""]  # fmt: skip
    lines += _figure(figures, "persistence", "append by durability class and writers")
    group = nb.group_commit_rows(results)
    if group:
        lines += [
            "Group commit: the fsync class with one record per write, so every write "
            "waits for an fdatasync (with batches of 100, the CPU bounds 64 writers first).",
            "",
        ]
        lines += table(
            ["writers", "records/s", "ack p50 ms", "ack p99 ms", "fsyncs", "writes per fsync"],
            [[str(r.get("writers")), _n(r.get("records_per_s")), _ms(r.get("p50_ms")),
              _ms(r.get("p99_ms")), _n(r.get("fsyncs")),
              _n(_per_fsync(r), 1)] for r in group],
        )  # fmt: skip
    recovery = nb.recovery_rows(results)
    if recovery:
        lines += table(
            ["records", "after", "ready in s", "s per million", "recovered", "MB on disk"],
            [[_n(r.get("records")), str(r.get("after")), _ms(r.get("ready_s")),
              _ms(r.get("s_per_million")), _n(r.get("recovered")),
              _n((nb.num(r.get("bytes_on_disk")) or 0) / 1e6)] for r in recovery],
        )  # fmt: skip
    return lines


HTTP_ROWS = (
    ("write_1_latency", "single-record write ack, sequential", "wrk -c1"),
    ("write_16x100", "batched writes, 16 x 100 records (disk class)", "wrk -c16"),
    ("bare_write_shape", "bare ASGI, same request and answer size", "wrk -c16"),
    (
        "bare_write_shape_lane",
        "bare ASGI through the fast lane, same request and answer",
        "wrk -c16",
    ),
    ("write_16x100_hypercorn", "batched writes, hypercorn alone (TOPICS_HTTP_LANE=0)", "wrk -c16"),
    ("diff_256", "diff, limit 256", "wrk -c16"),
    ("diff_1000", "diff, limit 1000", "wrk -c16"),
    ("bare_diff1000_shape", "bare ASGI, diff-1000-shaped", "wrk -c16"),
    ("diff_1_empty", "diff `{}` on an empty topic", "wrk -c16"),
    ("bare_small", "bare ASGI, same small request and answer", "wrk -c16"),
    ("bare_small_lane", "bare ASGI through the fast lane, same small request", "wrk -c16"),
    (
        "redis_xadd_16x100",
        "Redis XADD, pipelines of 100, 16 threads",
        "redis-py, client-bound (Python client)",
    ),
    (
        "py_xadd_100",
        "Redis XADD, pipelines of 100, 1 connection",
        "redis-py, client-bound (Python client)",
    ),
    (
        "redis_xrange_1000",
        "Redis XRANGE COUNT 1000, 1 connection",
        "redis-py, client-bound (Python client)",
    ),
    ("py_write_100", "topics writes of 100, 1 connection", "httpx, client-bound (Python client)"),
    (
        "py_diff_1000",
        "topics diff limit 1000 decoded (ujson), 1 connection",
        "httpx, client-bound (Python client)",
    ),
)


def http_section(results: Results) -> list[str]:
    lines = ["## HTTP server", "", *_status(results, "http_load")]
    if nb.data(results, "http_load") is None:
        return lines
    d = nb.data(results, "http_load")
    lines += [f"Medians over {d.get('rounds', '?')} alternating rounds of {d.get('duration_s', '?')} s "
              "per workload (method: [BENCHMARKS_HTTP.md](BENCHMARKS_HTTP.md)).", ""]  # fmt: skip
    rows = []
    for key, label, client in HTTP_ROWS:
        if not nb.http_rounds(results, key):
            continue
        req = nb.http_median(results, key, "req_s")
        recs = nb.http_median(results, key, "records_s")
        if recs is None and req is not None and key.startswith("diff_") and key[5:].isdigit():
            recs = req * int(key[5:])
        p50, p99 = nb.http_median(results, key, "p50_ms"), nb.http_median(results, key, "p99_ms")
        rows.append([label, client, _n(recs), _n(req),
                     f"{_ms(p50)} / {_ms(p99)}" if p50 is not None else DASH,
                     _n(nb.http_median(results, key, "cpu_us_per_req"))])  # fmt: skip
    lines += table(
        ["workload", "client", "records/s", "req/s", "p50 / p99 ms", "server CPU µs/req"], rows
    )
    return lines


def hostile_section(results: Results) -> list[str]:
    lines = ["### Under hostile connections", "", *_status(results, "hostile")]
    d = nb.data(results, "hostile")
    if d is None:
        return lines
    lines += [f"{d.get('writers')} writer connections x 100-record batches, rounds of "
              f"{d.get('duration_s')} s alternating a (writers alone) and b (writers while "
              f"{d.get('slowloris')} slowloris connections and {d.get('preauth')} pre-auth body "
              f"holders trickle a byte every {d.get('trickle_s')} s); memory-only server, keys on.",
              ""]  # fmt: skip
    rows = [[f"{r.get('pair', 0) + 1}{r.get('kind')}", _n(r.get("records_s")),
             _n(r.get("rss_growth_mib"), 1) if r.get("kind") == "b" else DASH,
             ", ".join(f"{k} {v}" for k, v in (r.get("attacker") or {}).items()) or DASH]
            for r in d.get("rounds", []) if isinstance(r, dict)]  # fmt: skip
    lines += table(["round", "records/s", "RSS growth MiB", "attacker"], rows)
    return lines


def watch_section(results: Results, figures: dict[str, str]) -> list[str]:
    lines = ["## Live delivery (watch) vs Redis XREAD BLOCK vs NATS", ""]
    lines += _status(results, "watch") + _status(results, "nats")
    series = nb.watch_series(results)
    if not series:
        return lines
    t, r, n = nb.WATCH_SYSTEMS
    rows = []
    for count, systems in series.items():
        cells = [str(count)]
        for system in (t, r, n):
            lat = systems.get(system)
            cells.append(f"{_ms(lat.p50_ms)} / {_ms(lat.p99_ms)}" if lat else DASH)
        mine, redis, nats = systems.get(t), systems.get(r), systems.get(n)
        cells.append(_ratio(mine.p99_ms, redis.p99_ms) if mine and redis else DASH)
        cells.append(_ratio(mine.p99_ms, nats.p99_ms) if mine and nats else DASH)
        for system in (t, r, n):
            lat = systems.get(system)
            mark = "" if lat is None or lat.complete is not False else " (incomplete)"
            cells.append(_n(lat.deliveries_per_s) + mark if lat else DASH)
        rows.append(cells)
    lines += table(
        ["watchers", "topics p50 / p99 ms", "Redis p50 / p99 ms", "NATS p50 / p99 ms",
         "topics p99 ÷ Redis", "topics p99 ÷ NATS", "topics deliveries/s", "Redis deliveries/s",
         "NATS deliveries/s"],
        rows,
    )  # fmt: skip
    floors = nb.watch_floors(results)
    if floors:
        lines += [
            "The floors: the same writer and reader process against bench/_floor_server.py, a "
            "relay that only reads the POST, writes its body as one SSE frame to every watcher "
            "socket and answers (no routing, JSON, storage or auth); once on trio, the loop "
            "topics is built on, once on a bare `select.epoll` loop. What lies between topics "
            "and the trio relay is topics' own work.",
            "",
        ]
        frows = []
        for count, fl in floors.items():
            cells = [str(count)]
            for lat in (series.get(count, {}).get(t), *(fl.get(name) for name, _ in nb.WATCH_FLOORS),
                        series.get(count, {}).get(r)):  # fmt: skip
                cells.append(f"{_ms(lat.p50_ms)} / {_ms(lat.p99_ms)}" if lat else DASH)
            frows.append(cells)
        lines += table(
            ["watchers", "topics p50 / p99 ms", "trio relay p50 / p99 ms",
             "epoll relay p50 / p99 ms", "Redis p50 / p99 ms"],
            frows,
        )  # fmt: skip
    lines += watch_tails(series)
    idle = {n: nb.watch_idle_kib(results, n) for n in (1000, 10_000)}
    idle_cells = [f"**{kib:.1f} KiB** with {n:,} idle streams" for n, kib in idle.items() if kib]
    if idle_cells:
        lines += [f"Server memory per idle SSE watcher (with its session): "
                  f"{'; '.join(idle_cells)}.", ""]  # fmt: skip
    lines += [
        "Every reader of every system is a raw socket in an epoll client process (topics SSE "
        "and Redis XREAD BLOCK in bench/watch.py; NATS push consumers, no acks, one connection "
        "each, in bench/peers_nats.py) read into one preallocated buffer, stamped on arrival "
        "against a monotonic stamp taken just before the write; the writers are one client "
        "each (raw HTTP POST, raw XADD, nats-py publish awaiting its PubAck). Up to 2,500 "
        "readers share one such process (four at 10,000 watchers). Writes are 10 ms apart "
        "(50 ms at 1,000 watchers, 1 s at 10,000), so every write finds the servers idle.",
        "",
    ]
    return lines + _figure(figures, "watch", "watch latency vs watcher count")


def watch_tails(series: dict[int, dict[str, nb.Latency | None]]) -> list[str]:
    """The slowest delivery, the fewest records a watcher got and the CPU per delivery of
    server and client, topics beside Redis (bench/watch.py measures these; NATS does not)."""
    t, r, _ = nb.WATCH_SYSTEMS

    def pair(a: float | None, b: float | None, digits: int = 1) -> str:
        return f"{_n(a, digits)} / {_n(b, digits)}"

    rows = []
    for count, systems in series.items():
        mine, redis = systems.get(t), systems.get(r)
        if mine is None or mine.max_ms is None:
            continue
        other = redis or nb.Latency(None, None, None, None)
        fewest = [
            DASH if lat.min_records_per_watcher is None or lat.messages is None
            else f"{lat.min_records_per_watcher:.0f} of {lat.messages:.0f}"
            for lat in (mine, other)
        ]  # fmt: skip
        rows.append([f"{count:,}", pair(mine.max_ms, other.max_ms, 2), " / ".join(fewest),
                     pair(mine.server_cpu_us, other.server_cpu_us),
                     pair(mine.client_cpu_us, other.client_cpu_us)])  # fmt: skip
    if not rows:
        return []
    lines = [
        "The slowest delivery (worst round), the fewest of the latency writes any one watcher "
        "received (fewer than all: a starved watcher), and CPU per delivery of the server and "
        "of the reader processes (the client's own overhead, on the same two cores), topics / "
        "Redis:",
        "",
    ]
    return lines + table(
        ["watchers", "max ms", "fewest records per watcher", "server CPU µs/delivery",
         "client CPU µs/delivery"],
        rows,
    )  # fmt: skip


def queues_section(results: Results, figures: dict[str, str]) -> list[str]:
    lines = ["## Job queues", "", *_status(results, "queues")]
    rows = nb.queue_rows(results)
    if not rows:
        return lines
    q = nb.data(results, "queues") or {}
    w = nb.data(results, "nats") or {}
    shape = (f"{q.get('jobs', '?')} jobs, {q.get('workers', '?')} workers, batch {q.get('batch', '?')}"
             if isinstance(q, dict) else "?")  # fmt: skip
    wq = w.get("workqueue", {}) if isinstance(w, dict) else {}
    lines += [f"queues.py: {shape}; NATS: {wq.get('jobs', '?')} jobs, {wq.get('workers', '?')} "
              f"workers, fetch batch {wq.get('batch', '?')}, every message acked.", ""]  # fmt: skip
    redis = next((r for r in rows if r.system == "Redis"), None)
    lines += table(
        ["system", "set-up", "jobs/s produce while consuming", "jobs/s drain backlog",
         "claim p50 / p99 µs", "drain ÷ Redis"],
        [[r.system, r.setup, _n(r.pipeline_jobs_s), _n(r.drain_jobs_s),
          f"{_n(r.claim_p50_us)} / {_n(r.claim_p99_us)}",
          _ratio(r.drain_jobs_s, redis.drain_jobs_s) if redis else DASH] for r in rows],
    )  # fmt: skip
    return lines + _figure(figures, "queues", "queue jobs/s, topics vs peers")


def routers_section(results: Results) -> list[str]:
    lines = ["## Routers", "", *_status(results, "routers")]
    d = nb.data(results, "routers")
    if d is None:
        return lines
    lines += table(
        ["class", "samples", "source p50 / p99 µs", "via router p50 / p99 µs", "added p50 / p99 µs"],
        [[str(r.get("durability")), _n(r.get("samples")),
          f"{_n(r.get('source_p50_us'))} / {_n(r.get('source_p99_us'))}",
          f"{_n(r.get('dest_p50_us'))} / {_n(r.get('dest_p99_us'))}",
          f"{_added(r.get('added_p50_us'))} / {_added(r.get('added_p99_us'))}"]
         for r in d.get("latency", []) if isinstance(r, dict)],
    )  # fmt: skip
    lines += [
        "The two columns come from separate runs (without, then with the router), so "
        '"added" is a difference of percentiles, not a percentile of differences; '
        "where the routed run was the quieter one it comes out below zero and says only "
        "that the router's cost is inside the noise.",
        "",
    ]
    tp = d.get("throughput", {})
    lines += [
        f"Forwarding a {_n(tp.get('backlog'))}-record backlog: **{_n(tp.get('records_per_s'))} records/s**.",
        "",
    ]
    lines += table(
        ["routers", "source appends", "WAL frames", "frames per append"],
        [[_n(r.get("routers")), _n(r.get("appends")), _n(r.get("wal_frames")), _n(r.get("frames_per_append"), 3)]
         for r in d.get("frames", []) if isinstance(r, dict)],
    )  # fmt: skip
    return lines


def spark_section(results: Results) -> list[str]:
    lines = ["## Spark", "", *_status(results, "spark_read")]
    d = nb.data(results, "spark_read")
    if d is None:
        return lines
    if "rows" not in d:  # an older run of spark_read.py (a Reader loop beside the source)
        return [*lines, "_Results from an older bench/spark_read.py; re-run it._", ""]
    lines += [f"{_n(d.get('records'))} records of ~45-byte JSON, `{d.get('master')}`, best of "
              f"{_n(d.get('repeat'))} after a warm-up, planning included. JSON lines and Parquet "
              "hold the same records (seq, ts and the data fields as columns), exported once by "
              "the data source. The machine is shared: see the load above, and "
              "[SPARK.md](SPARK.md#performance) for another run and what the rows mean.", ""]  # fmt: skip
    lines += table(
        ["source", "action", "records/s", "seconds"],
        [[str(r.get("source")), str(r.get("action")), _n(r.get("records_s")), _ms(r.get("seconds"))]
         for r in d.get("rows", []) if isinstance(r, dict)],
    )  # fmt: skip
    return lines


def micro_section(results: Results) -> list[str]:
    lines = ["## Micro-benchmarks", "", "### encode_batch of dict payloads", ""]
    lines += _status(results, "encode_dict")
    d = nb.data(results, "encode_dict")
    if d is not None:
        med, best = d.get("ns_per_record_median", {}), d.get("ns_per_record_best", {})
        lines += table(["case", "ns per record, median", "best"],
                       [[k, _n(v, 1), _n(best.get(k), 1)] for k, v in med.items()])  # fmt: skip
    lines += ["### Write-body scanner", "", *_status(results, "scan_body")]
    d = nb.data(results, "scan_body")
    if d is not None:
        lines += [f"{_n(d.get('records'))}-record body of {_n(d.get('body_bytes'))} bytes.", ""]
        lines += table(["splitter", "µs per body, median", "best", "records/s"],
                       [[k, _ms(v.get("median_us")), _ms(v.get("best_us")), _n(v.get("records_per_s"))]
                        for k, v in d.get("rows", {}).items()])  # fmt: skip
    lines += ["### Durable delete of a sealed record", "", *_status(results, "delete_flag")]
    d = nb.data(results, "delete_flag")
    if d is not None:
        lines += table(["method", "n", "median ms", "p90 ms", "p99 ms"],
                       [[k, _n(v.get("n")), f"{nb.num(v.get('median_ms')) or 0:.3f}",
                         f"{nb.num(v.get('p90_ms')) or 0:.3f}", f"{nb.num(v.get('p99_ms')) or 0:.3f}"]
                        for k, v in d.get("rows", {}).items()])  # fmt: skip
    lines += ["### Diff with a predicate (`where`)", "", *_status(results, "diff_where")]
    d = nb.data(results, "diff_where")
    if d is not None:
        rates, ratios = d.get("scanned_per_s", {}), d.get("ratio_vs_plain", {})
        returned = d.get("returned", {})
        lines += [f"Diff limit 1000 over {_n(d.get('records'))} records of ~64 B, one in ten "
                  "kept; records *scanned* per second (the cursor's progress), ratio to the plain "
                  f"diff as the median of per-round ratios over {_n(d.get('rounds'))} alternating "
                  "rounds. Target (issue 18): the 10 % predicate >= 0.5 of the plain rate.", ""]  # fmt: skip
        lines += table(["case", "scanned/s", "returned", "vs plain"],
                       [[k, _n(v), _n(returned.get(k)), f"{nb.num(ratios.get(k, 1.0)) or 0:.2f}"]
                        for k, v in rates.items()])  # fmt: skip
    return lines


def failures_section(results: Results) -> list[str]:
    failed = {k: v for k, v in results.get("benchmarks", {}).items() if v.get("status") == "failed"}
    if not failed:
        return []
    lines = ["## Failed runs", ""]
    for name, entry in failed.items():
        lines += [f"### {name}: {entry.get('reason')}", "", "```",
                  str(entry.get("output_tail", "")).strip()[-1500:], "```", ""]  # fmt: skip
    return lines


def crash_section(results: Results) -> list[str]:
    """bench/crash_heads.py (issue 20): what a SIGKILL skips, and what exact heads cost."""
    lines = [
        "## Crash recovery: skipped seqs and exact heads",
        "",
        *_status(results, "crash_heads"),
    ]
    d = nb.data(results, "crash_heads")
    if d is None:
        return lines
    skip = nb.dig(d, "skip", "table")
    if isinstance(skip, dict):
        lines += [
            f"A real `topics-server` SIGKILLed {_n(nb.dig(d, 'skip', 'rounds'))} times while a "
            "writer appends 4-record batches to one *busy* topic per class (an *idle* one holds "
            "5 records); each killed directory recovered as it is (**heads**: the same boot, "
            "the heads table says how far every topic went) and without its `heads` file "
            "(**watermark**: what a power loss leaves). Skipped = new head - last "
            "acknowledged seq; a silent skip is one with no tombstone (the fsync class).",
            "",
        ]
        lines += table(
            ["recovery", "topic", "skipped, median / max", "tombstone seqs, median / max",
             "reasons", "silent skips"],
            [[key.split("/")[0], key.split("/")[1],
              f"{_n(r.get('skipped_median'))} / {_n(r.get('skipped_max'))}",
              f"{_n(r.get('tombstone_median'))} / {_n(r.get('tombstone_max'))}",
              ", ".join(r.get("reasons") or []) or "-", _n(r.get("silent_skips"))]
             for key, r in skip.items()],
        )  # fmt: skip
    pause = d.get("pause")
    if isinstance(pause, dict):
        lines += ["A `disk` write after a pause long enough to release the reservation waits "
                  "for one synced WATERMARK entry; the same write with the release off:", ""]  # fmt: skip
        lines += table(
            ["release", "writes", "p50 ms", "p90 ms"],
            [[k.removeprefix("release_"), _n(v.get("n")), _ms(v.get("p50_ms")), _ms(v.get("p90_ms"))]
             for k, v in pause.items() if isinstance(v, dict)],
        )  # fmt: skip
    sporadic = d.get("sporadic")
    if isinstance(sporadic, dict):
        lines += ["A `disk` topic written every 50 ms .. 1.5 s (seeded), by `RELEASE_AFTER_S`:", ""]
        lines += table(
            ["RELEASE_AFTER_S", "writes", "waited for a reservation", "mean ms", "p50 ms"],
            [[f"{k} s", _n(v.get("writes")), f"{(nb.num(v.get('paid_share')) or 0):.0%}",
              _ms(v.get("mean_ms")), _ms(v.get("p50_ms"))] for k, v in sporadic.items()],
        )  # fmt: skip
    append = d.get("append")
    if isinstance(append, dict):
        lines += ["Engine append (batch 100) with and without the heads table, medians of "
                  "alternating rounds:", ""]  # fmt: skip
        lines += table(
            ["class / writers", "records/s with", "without", "ratio",
             "CPU µs per write with", "without", "CPU ratio"],
            [[k, _n(v.get("heads_records_per_s")), _n(v.get("none_records_per_s")),
              f"{(nb.num(v.get('ratio')) or 0):.3f}", _n(v.get("heads_cpu_us_per_write"), 1),
              _n(v.get("none_cpu_us_per_write"), 1), f"{(nb.num(v.get('cpu_ratio')) or 0):.3f}"]
             for k, v in append.items()],
        )  # fmt: skip
    if d.get("slot_store_ns") is not None:
        lines += [f"One head store per change notification: {_n(d.get('slot_store_ns'))} ns.", ""]
    il = d.get("interleaved")
    if isinstance(il, dict):
        lines += [f"One engine, the head store switched on and off every 0.3 s ({_n(il.get('rounds'))} "
                  f"times): CPU per 100-record `disk` write {_n(il.get('with_us'), 1)} µs with, "
                  f"{_n(il.get('without_us'), 1)} µs without, ratio {(nb.num(il.get('ratio')) or 0):.3f}.",
                  ""]  # fmt: skip
    return lines


def history_section(results: Results) -> list[str]:
    lines = ["## History bigger than memory (bench/history.py)", "", *_status(results, "history")]
    d = nb.data(results, "history")
    return lines if d is None else lines + _history_targets.section(d)


def backup_section(results: Results) -> list[str]:
    """bench/backup.py (issue 32): the write rate while a backup streams."""
    lines = ["## Writes during an online backup", "", *_status(results, "backup")]
    d = nb.data(results, "backup")
    if d is None:
        return lines
    lines += [f"An embedded engine with {_n(d.get('preload_mb'))} MB preloaded; "
              f"{_n(d.get('writers'))} writers per class append batches of {_n(d.get('batch'))}; "
              f"{_n(d.get('rounds'))} pairs of {_n(d.get('duration_s'))} s rounds, alternating "
              "quiet and with backups streaming the whole directory to /dev/null back to back, "
              f"reads paced to {_n(d.get('max_mb_s'))} MiB/s (0: unpaced). "
              "Ratio: the median of per-pair ratios. Target (issue 32): >= 80 %.", ""]  # fmt: skip
    classes = d.get("classes") or {}
    lines += table(
        ["class", "records/s quiet", "during a backup", "ratio", "backups finished", "MB/s streamed"],
        [[k, _n(v.get("quiet_records_s")), _n(v.get("backup_records_s")),
          f"{nb.num(v.get('ratio')) or 0:.0%}", _n(v.get("backups")), _n(v.get("backup_mb_s"))]
         for k, v in classes.items() if isinstance(v, dict)],
    )  # fmt: skip
    return lines


def render(results: Results, figures: dict[str, str]) -> str:
    """The whole page; ``figures`` maps figure names to paths relative to the page."""
    lines = header(results)
    lines += targets_section(all_targets(results))
    lines += peers_section(results, figures)
    lines += engine_section(results)
    lines += persistence_section(results, figures)
    lines += crash_section(results)
    lines += backup_section(results)
    lines += http_section(results)
    lines += hostile_section(results)
    lines += watch_section(results, figures)
    lines += queues_section(results, figures)
    lines += routers_section(results)
    lines += spark_section(results)
    lines += history_section(results)
    lines += micro_section(results)
    lines += failures_section(results)
    return "\n".join(lines).rstrip() + "\n"
