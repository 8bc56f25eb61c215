"""bench/run_all.py's report, targets and plots, rendered from a fixture results file
(tests/unit/bench/results_fixture.json: every benchmark's JSON shape with round numbers, one
skipped and one failed benchmark), so the page can be trusted without a long run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import _numbers as nb
import _report
import _suite
import _targets
import pytest
import run_all

from tests.support.bench import BENCH

FIXTURE = Path(__file__).with_name("results_fixture.json")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def results() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text())
    return data


def _verdicts(results: dict[str, Any]) -> dict[str, _targets.Verdict]:
    return {v.target: v for v in _targets.all_targets(results)}


def test_targets_are_judged_from_the_numbers(results: dict[str, Any]) -> None:
    v = _verdicts(results)
    assert v["append, batch 100, 64 B bytes >= 1 M records/s"].met is True
    dict_ratio = v["append of dict payloads (64 B, batch 100) >= 70 % of ujson.dumps' rate"]
    assert dict_ratio.met is True
    assert dict_ratio.measured.startswith("80%")  # 2.0 M / 2.5 M
    assert v["resident memory <= 150 B per 64 B record"].met is True
    # per-round ratios, then their median: 0.6 and 0.5 -> 55 %
    bare = v["batched writes >= 85 % of the bare-ASGI request rate (same bytes)"]
    assert (bare.met, bare.measured.split()[0]) == (False, "55%")
    # the better redis-py set-up per round: 120k/80k = 1.5, 100k/50k = 2.0 -> 1.75
    redis = v[
        f"batched writes >= 1.5x redis-py pipelined XADD (its better set-up), {nb.CLIENT_BOUND}"
    ]
    assert (redis.met, redis.measured.split()[0]) == (True, "1.75x")
    diff = v[
        "HTTP diff limit 1000 >= 2x redis-py XRANGE COUNT 1000 (one decoded client each), "
        + nb.CLIENT_BOUND
    ]
    assert (diff.met, diff.measured.split()[0]) == (True, "2.25x")
    assert v["p99 write->deliver <= 60 ms at 1000 watchers"].met is False
    assert v["p99 <= Redis XREAD BLOCK's p99, 1 watcher"].met is False
    assert v["p99 <= Redis XREAD BLOCK's p99, 100 watchers"].met is True
    assert v["server memory <= 20 KiB per idle watcher"].met is True
    group = v["fsync class: 64 writers >= 15x one writer (group commit, 1 record per write)"]
    assert (group.met, group.measured) == (True, "20.0x (batches of 100: 9.0x)")
    assert v["disk class >= 70 % of memory class, 16 writers"].met is False
    assert v[
        "recovery time-to-ready <= 2 s per million records (worst case run)"
    ].measured.startswith("0.30 s")
    push = (
        "topics over HTTP, push (GET .../work stream + ack) >= Redis consumer groups "
        f"(redis-py, {nb.CLIENT_BOUND}), jobs/s"
    )
    assert v[f"{push}, 16 workers, pipeline"].met is True
    assert v[f"{push}, 16 workers, drain"].met is False
    # topics 1.00 ms against the trio relay's 0.60 ms at 1 watcher (issue 15)
    trio = v["p99 <= 1.25x the trio relay's p99, 1 watcher"]
    assert (trio.met, trio.measured) == (False, "1.00 ms vs 0.60 ms (1.67x)")
    assert sum(x.met is True for x in v.values()) == 19
    assert sum(x.met is False for x in v.values()) == 7
    # The fixture has no 10,000 point and floors only at 1 watcher.
    unmeasured = {t for t, x in v.items() if x.met is None}
    assert unmeasured >= {
        "p99 <= 1.25x the trio relay's p99, 10 watchers",
        "p99 <= 1.25x the trio relay's p99, 100 watchers",
        "server memory <= 13.5 KiB per idle watcher, 10,000 streams",
        "no watcher starved at 10,000 watchers (each gets every record; max latency)",
    }


def _with_10k(results: dict[str, Any], fewest: int) -> dict[str, Any]:
    """The fixture plus issue 15's scale point, as bench/watch.py records it."""
    data = results["benchmarks"]["watch"]["data"]
    row = {"p50_ms": 100.0, "p99_ms": 200.0, "max_ms": 250.0, "max_ms_worst_round": 300.0,
           "samples": 200_000, "deliveries_per_s": 50_000, "complete": True,
           "min_records_per_watcher": fewest, "watchers_with_every_record": 9_999,
           "messages": 20, "server_cpu_us_per_delivery": 15.0,
           "client_cpu_us_per_delivery": 6.0}  # fmt: skip
    data["sse"]["10000"] = row
    data["redis"]["10000"] = {**row, "p99_ms": 400.0, "max_ms_worst_round": 500.0,
                              "min_records_per_watcher": 20}  # fmt: skip
    data["floor_trio"]["100"] = {"p50_ms": 1.0, "p99_ms": 6.0, "complete": True}
    data["idle_kib_by_streams"] = {"1000": 12.5, "10000": 14.0}
    return results


def test_the_10000_point_is_judged_and_rendered(results: dict[str, Any]) -> None:
    v = _verdicts(_with_10k(results, fewest=19))
    assert v["p99 <= Redis XREAD BLOCK's p99, 10000 watchers"].met is True
    memory = v["server memory <= 13.5 KiB per idle watcher, 10,000 streams"]
    assert (memory.met, memory.measured) == (False, "14.0 KiB")
    starved = v["no watcher starved at 10,000 watchers (each gets every record; max latency)"]
    assert starved.met is False
    assert starved.measured == (
        "fewest records per watcher 19 of 20 (worst round); slowest delivery 300 ms"
    )
    # 7 ms against 6 ms: 1.17x, inside 1.25x
    assert v["p99 <= 1.25x the trio relay's p99, 100 watchers"].met is True
    page = _report.render(results, {})
    assert "| 10,000 | 300.00 / 500.00 | 19 of 20 / 20 of 20 | 15.0 / 15.0 | 6.0 / 6.0 |" in page
    assert "**12.5 KiB** with 1,000 idle streams; **14.0 KiB** with 10,000 idle streams" in page


def test_no_watcher_starved_when_each_got_every_record(results: dict[str, Any]) -> None:
    v = _verdicts(_with_10k(results, fewest=20))
    assert v["no watcher starved at 10,000 watchers (each gets every record; max latency)"].met


def test_an_empty_run_renders_with_every_target_not_measured(tmp_path: Path) -> None:
    empty: dict[str, Any] = {"meta": {"command": "python bench/run_all.py --only x"}}
    verdicts = _targets.all_targets(empty)
    assert verdicts
    assert all(v.met is None for v in verdicts)
    page = _report.render(empty, {})
    assert "## Targets" in page
    assert "0 met, 0 not met" in page
    pytest.importorskip("matplotlib")
    import _plots

    assert _plots.draw_all(empty, tmp_path) == {}
    assert not list(tmp_path.iterdir())


def test_peers_sit_side_by_side_with_ratios_from_the_same_run(results: dict[str, Any]) -> None:
    writes = {r.label: r.value for r in nb.write_rates(results)}
    assert writes["HTTP, wrk 16 connections x 100 records (disk)"] == 110_000
    assert any(label.startswith("JetStream publish") and v == 25_000 for label, v in writes.items())
    series = nb.watch_series(results)
    assert sorted(series) == [1, 10, 100, 1000]
    nats_at_10 = series[10][nb.WATCH_SYSTEMS[2]]
    assert nats_at_10 is not None
    assert nats_at_10.p99_ms == 5.0
    assert series[10][nb.WATCH_SYSTEMS[0]] is None  # watch.py did not measure 10 here
    systems = [row.system for row in nb.queue_rows(results)]
    assert systems == ["topics", "topics", "Redis", "NATS"]
    page = _report.render(results, {})
    # a peer driven by a Python client gives no ratio (issue 33): its client is measured
    assert "| NATS | JetStream publish_async" in page
    assert "| 25,000 | none: client-bound |" in page
    assert "4.40x" not in page  # topics HTTP batched (110k) / NATS publish (25k)
    assert (
        f"| topics | HTTP, one httpx client, 100 per request: {nb.CLIENT_BOUND} | 40,000 | — |"
        in page
    )
    # watch: topics p99 / Redis p99 at 100 watchers = 7 / 9
    assert "| 100 | 1.50 / 7.00 | 2.00 / 9.00 | 7.00 / 20.00 | 0.78x | 0.35x |" in page
    assert "60,000 (incomplete)" in page


def test_the_floors_sit_beside_topics_and_redis(results: dict[str, Any]) -> None:
    floors = nb.watch_floors(results)
    assert list(floors) == [1]
    trio_floor = floors[1]["trio relay"]
    assert trio_floor is not None
    assert trio_floor.p99_ms == 0.6
    page = _report.render(results, {})
    # topics, the trio relay, the epoll relay and Redis at 1 watcher
    assert "| 1 | 0.50 / 1.00 | 0.35 / 0.60 | 0.30 / 0.50 | 0.40 / 0.90 |" in page
    verdict = _verdicts(results)["p99 <= Redis XREAD BLOCK's p99, 1 watcher"]
    assert verdict.met is False  # the floor is context, never part of the verdict
    assert verdict.measured == "1.00 ms vs 0.90 ms (bare trio relay 0.60 ms)"
    assert (
        "(bare trio relay"
        not in _verdicts(results)["p99 <= Redis XREAD BLOCK's p99, 100 watchers"].measured
    )


def test_report_has_every_section_status_and_machine_facts(results: dict[str, Any]) -> None:
    page = _report.render(results, {"writes": "bench/writes.png"})
    for heading in (
        "## Run",
        "## Targets",
        "## topics vs Redis Streams vs NATS JetStream",
        "## Embedded engine",
        "## Persistence",
        "## HTTP server",
        "## Live delivery",
        "## Job queues",
        "## Routers",
        "## Spark",
        "## Micro-benchmarks",
        "## Failed runs",
    ):
        assert heading in page, heading
    assert "BENCHMARKS_NOTES.md" in page.split("## Run")[0]
    assert "![write throughput, topics vs peers](bench/writes.png)" in page
    assert "bench/reads.png" not in page  # only the figures that were drawn
    assert "2 cores (`nproc`), AMD EPYC" in page
    assert "redis-server 7.0.15, nats-server 2.9.10" in page
    assert "_skipped: missing: java_" in page
    assert "Traceback: boom" in page
    assert "1.00 1.00 1.00 → 1.50 1.10 1.00" in page
    # every table row has as many cells as its header
    lines = page.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|---"):
            width = lines[i - 1].count(" | ")
            j = i + 1
            while j < len(lines) and lines[j].startswith("| "):
                assert lines[j].replace("\\|", "").count(" | ") == width, lines[j]
                j += 1


def _section(page: str, heading: str) -> str:
    return page.split(heading + "\n", 1)[1].split("\n## ", 1)[0].lstrip("\n")


def test_each_section_names_the_run_its_numbers_come_from(results: dict[str, Any]) -> None:
    """A results file may hold benchmarks of several runs (``--only`` keeps the others): each
    section opens with its own run, and the page never claims to be one run."""
    benches = results["benchmarks"]
    benches["persistence"].update(
        kept_from_previous_run=True,
        run={"command": "python bench/run_all.py --only persistence", "commit": "def5678",
             "dirty": True, "machine": "1 core, a laptop", "recorded_in": "0123abc"},
    )  # fmt: skip
    benches["routers"]["kept_from_previous_run"] = True  # from a run that recorded nothing
    benches["hostile"] = {
        "status": "ok", "started_utc": "2026-11-25 15:05:37 UTC", "kept_from_previous_run": True,
        "run": {"command": None, "how": "run on its own", "commit": "48f8605"},
    }  # fmt: skip
    page = _report.render(results, {})
    assert "one run of every benchmark" not in page
    assert "each section opens with the run its numbers come from" in page
    # a benchmark of the file's own run: the run in the file's header
    assert _section(page, "## Embedded engine").startswith(
        "**Run:** 2026-11-22 03:00:00 UTC; `python bench/run_all.py`; commit abc1234; "
        "2 cores, AMD EPYC, 23.5 GiB, Debian GNU/Linux 12 (bookworm), kernel 6.1, "
        "Python 3.11.7 (cython core).\n\n`python bench/engine.py` — 10.0 s"
    )
    assert _section(page, "## Persistence").startswith(
        "**Run:** 2026-11-22 03:00:00 UTC; `python bench/run_all.py --only persistence`; "
        "commit def5678 with uncommitted changes; 1 core, a laptop; "
        "results added to the file in 0123abc.\n"
    )
    assert _section(page, "## Routers").startswith(
        "**Run:** 2026-11-22 03:00:00 UTC, kept from an earlier run whose command, commit "
        "and machine were not recorded.\n"
    )
    assert _section(page, "### Under hostile connections").startswith(
        "**Run:** 2026-11-25 15:05:37 UTC; run on its own; commit 48f8605; machine not recorded.\n"
    )
    row = "| {} | ok | 10.0 | 1.00 1.00 1.00 → 1.50 1.10 1.00 | 2026-11-22 03:00:00 UTC | {} |"
    assert row.format("engine", "the last run") in page
    assert row.format("routers", "an earlier run") in page
    # a table that mixes benchmarks says which run each row group comes from
    assert "Rows from 3 benchmarks, each with the run its section names: engine started " in page
    assert "_skipped: missing: java_" in page  # a section with no numbers names no run


def test_render_only_writes_the_page_and_non_empty_pngs(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "docs" / "BENCHMARKS.md"
    out.parent.mkdir()
    assert run_all.main(["--render-only", str(FIXTURE), "--out", str(out)]) == 0
    page = out.read_text()
    pngs = sorted(p.name for p in (tmp_path / "docs" / "bench").glob("*.png"))
    assert pngs == ["persistence.png", "queues.png", "reads.png", "watch_latency.png", "writes.png"]
    for name in pngs:
        data = (tmp_path / "docs" / "bench" / name).read_bytes()
        assert data.startswith(PNG_MAGIC)
        assert len(data) > 5_000
        assert f"](bench/{name})" in page


def test_queue_table_of_a_script_without_json_is_parsed() -> None:
    out = """queues: 5,000 jobs, 16 workers, batch 16, core=cython, nproc=2
set-up                             pipeline/s    drain/s    p50 µs    p99 µs     CV CV pipe
topics in-process, jitter 0 ms         52,084    111,745       376    12,900  0.004  0.010
topics over HTTP                        1,488      4,685    14,700   135,000  0.013  0.020    70.0    18.3
Redis Streams XREADGROUP/XACK           9,161     23,537     3,000    32,000  0.032  0.040
"""
    parsed = _suite.parse_queues_stdout(out)
    assert parsed is not None
    assert (parsed["jobs"], parsed["workers"], parsed["batch"]) == (5000, 16, 16)
    assert [r["setup"] for r in parsed["rows"]] == [
        "topics in-process, jitter 0 ms",
        "topics over HTTP",
        "Redis Streams XREADGROUP/XACK",
    ]
    assert parsed["rows"][1]["drain_jobs_s"] == 4685
    fake = {"benchmarks": {"queues": {"status": "ok", "data": parsed}}}
    verdicts = _targets.queue_targets(fake)
    assert [v.met for v in verdicts] == [False, False]
    assert _suite.parse_queues_stdout("nothing here") is None


def test_the_bench_extra_is_what_setup_installs() -> None:
    import _setup

    reqs = _setup.bench_requirements()
    names = {_setup._dist_name(r) for r in reqs}
    assert {"matplotlib", "nats-py", "redis"} <= names
    assert set(_setup.PY_MODULES.values()) <= names
    assert _setup._dist_name("nats-py>=2.6") == "nats-py"


def test_every_benchmark_script_exists_and_takes_json_and_quick() -> None:
    for bench in _suite.BENCHES:
        text = (BENCH.parent / bench.script).read_text()
        assert _suite._supports_json(BENCH.parent / bench.script) or bench.stdout_parser, bench.name
        for arg in bench.quick:
            if arg.startswith("--"):
                assert f'"{arg}"' in text, (bench.name, arg)


def test_c_driven_peers_give_the_ratios_and_judge_issue_33(results: dict[str, Any]) -> None:
    """bench/peers_c.py's rows: medians of per-round ratios, the targets from them, and the
    headline taken from them alone."""
    v = _verdicts(results)
    single = v["single-record writes, 16 connections >= 0.5x redis-benchmark XADD -P 1 -c 16"]
    assert (single.met, single.measured) == (False, "0.25x (rounds 0.20x-0.30x)")
    batch = v["batched writes of 100, 16 connections >= 1.0x redis-benchmark XADD -P 100 -c 16"]
    assert (batch.met, batch.measured) == (True, "1.05x (rounds 0.90x-1.20x)")
    cpu = v["server CPU per single-record write <= 40 µs (16 connections)"]
    assert (cpu.met, cpu.measured) == (True, "40.0 µs (Redis 5.0 µs)")
    page = _report.render(results, {})
    assert (
        "**Headline** (bench/peers_c.py, the run its section names): topics-server ÷ Redis "
        "Streams (AOF everysec), both driven by a C load generator (wrk / redis-benchmark), "
        "same connections, pipeline depth and payload: batched writes of 100 **1.05x**, "
        "single-record writes at 16 connections **0.25x**, at 1 connection **0.20x**, mixed "
        "read/write **0.50x**."
    ) in page
    assert (
        "| single-record writes, 16 connections | wrk -c16, 1 record per POST / redis-benchmark "
        "-c 16 -P 1 XADD | 11,000 | 45,000 | **0.25x** (0.20-0.30) | 11,000 | 45,000 | "
        "1.10 / 5.50 | 0.10 / 0.60 | 40.0 | 5.0 |"
    ) in page
    assert "| topics ÷ Redis | **0.50x** (0.50-0.50) |" in page
    assert "NATS: no C-driven rows (the `nats` CLI is not on PATH)" in page
    # the C-driven section comes first; in the table of every rate, only the C-driven Redis
    # row gets a ratio, taken from topics measured beside it
    assert page.index("### C load generators") < page.index("### Every rate")
    assert "| 200,000 | 1.05x (its peers_c topics row ÷ this) |" in page


def test_a_run_without_peers_c_has_no_headline(results: dict[str, Any]) -> None:
    del results["benchmarks"]["peers_c"]
    page = _report.render(results, {})
    assert "**Headline**" not in page
    v = _verdicts(results)
    assert v["server CPU per single-record write <= 40 µs (16 connections)"].met is None
