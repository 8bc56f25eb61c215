"""The examples run as a user would run them: one command, their own server, exit 0."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
import time

import pytest

import topics
from tests.support.paths import EXAMPLES

from .conftest import ServerProcess


def _run(name: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_http_client_example() -> None:
    out = _run("http_client.py")
    assert "tombstone: Tombstone(gap_from=1, gap_to=4" in out
    assert '"total": 19.90' in out  # bytes went through verbatim
    assert "error: topic_not_found" in out
    assert "request id" in out
    assert "caught up at 9" in out


@pytest.mark.slow
def test_queue_worker_example() -> None:
    out = _run("queue_worker.py")
    assert "jobs done: [" + ", ".join(str(n) for n in range(20)) + "]" in out
    assert (
        "queue now: {'ready': 0, 'in_flight': 0, 'dead_lettered': 0, 'scheduled': 0, 'backoff': 0}"
        in out
    )


@pytest.mark.slow
def test_ws_chat_example() -> None:
    out = _run("ws_chat.py")
    assert "bob heard alice: hi bob" in out
    assert "alice heard bob: hi alice!" in out
    assert "bob heard alice: bye" in out
    assert "heard alice" not in out.replace("bob heard alice", "")  # no echo to alice


def test_client_md_claim_ack_snippet_runs(server: ServerProcess) -> None:
    """The claim/ack snippet of docs/CLIENT.md, run as written against the server."""
    text = (EXAMPLES.parent / "docs" / "CLIENT.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    snippet = next(b for b in blocks if "client.claim(" in b)
    queue = f"jobs-doc-{time.monotonic_ns()}"
    code = snippet.replace("http://127.0.0.1:4000", server.base_url).replace('"jobs"', repr(queue))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "CLIENT.md", "exec"), {})
    assert out.getvalue() == "3 2 1\n"
    with topics.Client(server.base_url) as client:
        state = client.get_topic(queue, touch=False)
    assert state.count == 1  # the acked jobs are gone, the nacked one waits
    assert state.queue is not None
    assert state.queue["in_flight"] == 0
