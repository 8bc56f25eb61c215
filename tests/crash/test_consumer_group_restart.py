"""docs/GUIDES.md, "A consumer group that survives restarts", exactly as written: the
example consumer (examples/consumer_group.py) is killed in the middle of a batch, the
server is killed too (SIGKILL: no clean shutdown) and restarted on its data directory,
then the consumer is started again. Every record is handled, none is skipped, and only the
batch the kill cut short is handled twice (at least once)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

import topics
from tests.support.server import spawn_server

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "consumer_group.py"
ENV = {"TOPICS_ALLOW_INSECURE_NO_AUTH": "1"}


def _consumer(url: str, out: Path, *extra: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, str(EXAMPLE), "--url", url, "--topic", "orders", "--group",
           "billing", "--out", str(out), "--batch", "10", *extra]  # fmt: skip
    return subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_a_consumer_group_survives_a_restart_of_consumer_and_server(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "handled.txt"
    server = spawn_server(ENV, "--data-dir", str(data))
    try:
        with topics.Client(server.base_url) as client:
            client.write("orders", [{"data": {"n": n}} for n in range(1, 101)])
        consumer = _consumer(server.base_url, out, "--pause-at", "35")
        try:
            assert consumer.stdout is not None
            assert consumer.stdout.readline() == "group billing resumes after seq 0\n"
            assert consumer.stdout.readline() == "paused at 35\n"  # 31..35 handled, not committed
        finally:
            consumer.kill()
            consumer.wait()
        with topics.Client(server.base_url) as client:
            assert client.get_cursor("orders", "billing").seq == 30
    finally:
        server.stop(signal.SIGKILL)  # the server crashes too

    server = spawn_server(ENV, "--data-dir", str(data))
    try:
        with topics.Client(server.base_url) as client:
            assert client.get_cursor("orders", "billing").seq == 30  # survived the crash
            client.write("orders", [{"data": {"n": n}} for n in range(101, 121)])
        again = _consumer(server.base_url, out, "--until-caught-up")
        stdout, stderr = again.communicate(timeout=60)
        assert again.returncode == 0, stderr
        assert stdout.splitlines() == [
            "group billing resumes after seq 30",
            "handled 90 records, committed seq 120",
        ]
        with topics.Client(server.base_url) as client:
            info = client.get_cursor("orders", "billing")
            assert (info.seq, info.lag) == (120, 0)
    finally:
        assert server.stop() == 0, server.stderr()

    handled = [int(line) for line in out.read_text().split()]
    assert sorted(set(handled)) == list(range(1, 121))  # none skipped
    twice = sorted(s for s in set(handled) if handled.count(s) > 1)
    assert twice == [31, 32, 33, 34, 35]  # only the batch the kill cut short
