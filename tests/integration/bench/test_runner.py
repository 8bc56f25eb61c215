"""bench/run_all.py's runner: one subprocess per benchmark, its JSON kept, failures and
skips recorded, ``--only`` keeping the other benchmarks' previous results. Fake scripts
stand in for the benchmarks; one bounded smoke runs real ones."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import _suite
import pytest
import run_all

from tests.support.bench import BENCH


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fake_bench.py"
    path.write_text(
        "import argparse, json\n"
        "p = argparse.ArgumentParser(); p.add_argument('--json'); p.add_argument('--quick', action='store_true')\n"
        "args = p.parse_args()\n" + body
    )
    return str(path)


def test_a_benchmark_runs_in_its_own_process_and_its_json_is_kept(tmp_path: Path) -> None:
    script = _script(
        tmp_path, "print('hello'); json.dump({'quick': args.quick}, open(args.json, 'w'))\n"
    )
    bench = _suite.Bench("fake", script, "a fake")
    entry = _suite.run_one(bench, quick=True, workdir=tmp_path, timeout=60)
    assert entry["status"] == "ok"
    assert entry["data"] == {"quick": True}
    assert entry["command"] == f"python {script} --quick"  # the run's own --json is not shown
    assert len(entry["load_before"]) == len(entry["load_after"]) == 3
    assert "hello" in entry["output_tail"]
    assert Path(entry["log"]).read_text().startswith("hello")


def test_failures_timeouts_and_skips_are_recorded(tmp_path: Path) -> None:
    crash = _suite.Bench("crash", _script(tmp_path, "raise SystemExit('boom')\n"), "x")
    entry = _suite.run_one(crash, quick=False, workdir=tmp_path, timeout=60)
    assert (entry["status"], entry["reason"]) == ("failed", "exit code 1")
    assert "boom" in entry["output_tail"]

    slow = _suite.Bench("slow", _script(tmp_path, "import time; time.sleep(30)\n"), "x")
    t0 = time.monotonic()
    entry = _suite.run_one(slow, quick=False, workdir=tmp_path, timeout=1)
    assert entry["status"] == "failed"
    assert "timed out" in entry["reason"]
    assert time.monotonic() - t0 < 20

    silent = _suite.Bench("silent", _script(tmp_path, "pass\n"), "x")
    entry = _suite.run_one(silent, quick=False, workdir=tmp_path, timeout=60)
    assert (entry["status"], entry["reason"]) == ("failed", "no JSON results written")

    absent = _suite.Bench("absent", "nowhere.py", "x", precheck=lambda: "missing: nothing")
    entry = _suite.run_one(absent, quick=False, workdir=tmp_path, timeout=60)
    assert (entry["status"], entry["reason"]) == ("skipped", "missing: nothing")


def test_only_reruns_some_and_keeps_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "BENCHMARKS.md"
    (tmp_path / "bench").mkdir()
    previous = {
        "meta": {"quick": False},
        "benchmarks": {
            "watch": {"status": "ok", "data": {"idle_kib_per_connection": 9.0}},
            "engine": {"status": "ok", "data": {"rss_bytes_per_64B_record": 999.0}},
        },
    }
    (tmp_path / "bench" / "results.json").write_text(json.dumps(previous))
    ran: list[str] = []

    def fake_run(bench: _suite.Bench, quick: bool, workdir: Path, timeout: float) -> dict[str, Any]:
        ran.append(bench.name)
        return {"status": "ok", "data": {"rss_bytes_per_64B_record": 100.0}, "seconds": 1.0}

    monkeypatch.setattr(run_all, "run_one", fake_run)
    assert run_all.main(["--no-setup", "--only", "engine", "--out", str(out)]) == 0
    assert ran == ["engine"]
    saved = json.loads((tmp_path / "bench" / "results.json").read_text())
    assert list(saved["benchmarks"]) == ["engine", "watch"]  # suite order
    assert saved["benchmarks"]["engine"]["data"]["rss_bytes_per_64B_record"] == 100.0
    assert saved["benchmarks"]["watch"]["kept_from_previous_run"] is True
    assert saved["meta"]["machine"]["nproc"] >= 1
    assert "--only engine" in saved["meta"]["command"]
    # the entry run now carries its run; the kept one keeps what it had (nothing, here)
    run = saved["benchmarks"]["engine"]["run"]
    assert run["command"] == saved["meta"]["command"]
    assert run["commit"] == saved["meta"]["machine"]["git_commit"]
    assert "run" not in saved["benchmarks"]["watch"]
    page = out.read_text()
    assert "| resident memory <= 150 B per 64 B record | 100 B | met |" in page
    assert "9.0 KiB" in page
    assert "kept from an earlier run whose command, commit and machine were not recorded" in page

    with pytest.raises(SystemExit):
        run_all.main(["--no-setup", "--only", "nosuchbench", "--out", str(out)])


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("nats-server", path="/usr/sbin:/usr/bin:/sbin:/bin") is None,
    reason="nats-server not installed",
)
def test_quick_smoke_of_real_benchmarks(tmp_path: Path) -> None:
    """Real scripts, smallest sizes, under ~20 s: the NATS peer end to end plus two micro
    benchmarks, through the real runner, into a page with figures."""
    pytest.importorskip("nats")
    out = tmp_path / "B.md"
    cmd = ["--quick", "--no-setup", "--only", "nats,scan_body,delete_flag", "--out", str(out)]
    import subprocess

    done = subprocess.run(
        [sys.executable, str(BENCH / "run_all.py"), *cmd],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((tmp_path / "bench" / "results.json").read_text())
    nats = results["benchmarks"]["nats"]
    assert nats["status"] == "ok", nats
    assert nats["data"]["publish"]["records_s"] > 0
    assert nats["data"]["workqueue"]["drain_jobs_s"] > 0
    assert nats["data"]["fanout"]["1"]["complete"] is True
    page = out.read_text()
    assert "| NATS | JetStream pull fetch of 1000" in page
    assert (tmp_path / "bench" / "writes.png").stat().st_size > 0
