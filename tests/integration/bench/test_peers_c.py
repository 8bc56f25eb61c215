"""bench/peers_c.py end to end at its smallest size: topics-server and a redis-server of
its own, both driven by C load generators, every shape measured on both sides, and the
servers gone afterwards. scripts/test installs the tools; without them this skips."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.bench import BENCH

TOOLS = ("wrk", "redis-server", "redis-benchmark", "redis-cli")
MISSING = [t for t in TOOLS if shutil.which(t) is None]


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline and str(os.getpid()) != proc.name:
            found.append(cmdline)
    return found


@pytest.mark.slow
@pytest.mark.skipif(
    bool(MISSING), reason=f"not installed: {', '.join(MISSING)} (scripts/test installs them)"
)
def test_quick_run_measures_every_shape_on_both_sides(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    done = subprocess.run(
        [sys.executable, str(BENCH / "peers_c.py"), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(out.read_text())
    assert (results["rounds"], results["duration_s"]) == (1, 1.0)
    assert set(results["shapes"]) == {"single_16", "single_1", "batch_16x100", "mixed_16"}
    for name, shape in results["shapes"].items():
        for side in ("topics", "redis"):
            (row,) = shape[side]
            rate = row["ops_s"] if name == "mixed_16" else row["records_s"]
            assert rate > 0, (name, side, row)
            cpu = row["cpu_us_per_op"] if name == "mixed_16" else row["cpu_us_per_record"]
            assert cpu >= 0, (name, side, row)
        assert shape["median"]["ratio"] > 0
    mixed = results["shapes"]["mixed_16"]["median"]
    assert mixed["topics"]["reads_s"] > 0
    assert mixed["redis"]["reads_s"] > 0
    batch = results["shapes"]["batch_16x100"]["median"]["topics"]
    assert batch["records_s"] == pytest.approx(batch["req_s"] * 100)
    assert results["versions"]["redis-benchmark"]
    assert "nats" in results  # a NATS verdict is recorded either way, never faked
    # The bench's own Redis and topics-server (temp dirs named peers-c-*) are stopped.
    assert _processes_mentioning("peers-c-") == []
