"""Run every benchmark of topics and of its peers, then rewrite docs/BENCHMARKS.md.

    python bench/run_all.py [--quick] [--only NAME,...] [--skip NAME,...]
                            [--out docs/BENCHMARKS.md] [--render-only RESULTS.json]

Sets the machine up first (Debian packages redis-server, redis-tools, wrk, nats-server through apt-get
when root; the ``bench`` extra into ./.venv through pip; then re-runs itself with the
venv's python), runs each benchmark script in its own process one after the other
(recording the load average before and after each), keeps every script's JSON in
``<out dir>/bench/results.json`` and renders the page with its tables, target verdicts and
PNG figures (``<out dir>/bench/*.png``). Each benchmark's entry records the run it came from
(command, commit, machine), which the page names at the top of its section.

The full run takes about 20-35 minutes on a 2-core machine; ``--quick`` (smoke sizes, for
checking the tooling, not for conclusions) about 2-3 minutes. ``--only`` re-runs some
benchmarks and keeps the others' previous results from the same results file.
Benchmarks: engine, persistence, routers, http_load, peers_c, watch, queues, nats,
spark_read, crash_heads, encode_dict, scan_body, delete_flag, diff_where, hostile, backup,
history (the last writes 200 M records, ~20 GB, and may take hours: ``--skip history``
leaves it out).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _report
import _setup
from _machine import ROOT, facts, loadavg, utc_now
from _suite import BENCHES, BY_NAME, run_one

REEXEC_FLAG = "TOPICS_BENCH_IN_VENV"


def _names(text: str | None) -> list[str]:
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise SystemExit(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    return names


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def set_up(argv: list[str]) -> None:
    """Install what is missing, then continue inside the project's venv."""
    log: list[str] = []
    _setup.install_debian(_setup.missing_tools(), log)
    python = _setup.ensure_venv(log)
    for line in log:
        print(f"setup: {line}", flush=True)
    if not _setup.running_in_venv() and not os.environ.get(REEXEC_FLAG):
        os.environ[REEXEC_FLAG] = "1"
        os.execv(str(python), [str(python), str(Path(__file__).resolve()), *argv])


def render(results: dict[str, Any], out: Path) -> None:
    figure_dir = out.parent / "bench"
    try:
        import _plots
    except ImportError:  # tables still render; the figures need the bench extra
        print("matplotlib is not installed (the bench extra): the page gets no figures")
        figures = {}
    else:
        figures = _plots.draw_all(results, figure_dir)
    relative = {name: os.path.relpath(path, out.parent) for name, path in figures.items()}
    out.write_text(_report.render(results, relative))
    print(f"wrote {_display(out)} and {len(figures)} figures in {_display(figure_dir)}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(__doc__ or "").split("\n\n", 2)[-1],
    )
    parser.add_argument("--quick", action="store_true", help="smoke sizes (minutes, not tens)")
    parser.add_argument("--only", help="comma-separated benchmarks to run (default: all)")
    parser.add_argument("--skip", help="comma-separated benchmarks not to run")
    parser.add_argument("--out", default=str(ROOT / "docs" / "BENCHMARKS.md"))
    parser.add_argument("--render-only", metavar="RESULTS", help="re-render from a results file")
    parser.add_argument("--no-setup", action="store_true", help="install nothing")
    parser.add_argument("--timeout", type=float, help="seconds per benchmark (1800, quick 300)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.render_only:
        render(json.loads(Path(args.render_only).read_text()), out)
        return 0
    if not args.no_setup:
        set_up(argv)
    only, skip = _names(args.only), _names(args.skip)
    selected = [b for b in BENCHES if (not only or b.name in only) and b.name not in skip]
    results_file = out.parent / "bench" / "results.json"
    results_file.parent.mkdir(parents=True, exist_ok=True)
    previous: dict[str, Any] = {}
    if only and results_file.exists():
        old = json.loads(results_file.read_text())
        if old.get("meta", {}).get("quick") == args.quick:
            previous = old.get("benchmarks", {})
    command = "python bench/run_all.py " + shlex.join(argv)
    results: dict[str, Any] = {
        "meta": {
            "command": command.strip(),
            "quick": args.quick,
            "started_utc": utc_now(),
            "load_start": loadavg(),
            "machine": facts(),
            "results_file": _display(results_file),
        },
        "benchmarks": {},
    }
    this_run = _report.run_facts(results["meta"])  # kept with each entry, across --only runs
    workdir = Path(tempfile.mkdtemp(prefix="topics-bench-run-"))
    timeout = args.timeout or (300.0 if args.quick else 1800.0)
    print(f"{len(selected)} benchmarks, logs in {workdir}", flush=True)
    for i, bench in enumerate(selected, 1):
        print(f"[{i}/{len(selected)}] {bench.name}: {bench.what} ...", end=" ", flush=True)
        own = None if args.quick or args.timeout else bench.full_timeout_s
        entry = run_one(bench, args.quick, workdir, own or timeout)
        entry["run"] = this_run
        results["benchmarks"][bench.name] = entry
        print(f"{entry['status']}" + (f" ({entry['reason']})" if entry.get("reason") else "")
              + (f" in {entry['seconds']} s" if "seconds" in entry else ""), flush=True)  # fmt: skip
        results_file.write_text(json.dumps(results, indent=1))  # a partial run survives
    for name, entry in previous.items():
        if name not in results["benchmarks"]:
            entry["kept_from_previous_run"] = True
            results["benchmarks"][name] = entry
    order = {b.name: k for k, b in enumerate(BENCHES)}
    results["benchmarks"] = dict(
        sorted(results["benchmarks"].items(), key=lambda kv: order.get(kv[0], 99))
    )
    results["meta"].update(finished_utc=utc_now(), load_end=loadavg())
    results_file.write_text(json.dumps(results, indent=1))
    render(results, out)
    failed = [n for n, e in results["benchmarks"].items() if e.get("status") == "failed"]
    if failed:
        print(f"failed: {', '.join(failed)} (see the 'Failed runs' section)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
