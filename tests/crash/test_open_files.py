"""Running out of file descriptors: never the end of the engine (issue 14, item 8).

1. Descriptors do not grow with topics: a real process limited to 1024 open files
   writes 5,000 topics, checkpoints (twice: creating, then reopening every active segment
   for append), restarts under the same limit and finds every record
   (``_open_files_child.py``). Before the handle cache it died at the first checkpoint
   with EMFILE.
2. EMFILE during a checkpoint is a passing shortage: the background checkpoint task logs
   it, backs off and retries; the engine keeps serving meanwhile, and the checkpoint
   succeeds once descriptors are back. A failed final checkpoint leaves the WAL to replay.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import ujson

from tests.support.child import child_env
from tests.support.fakedisk import FakeDisk
from tests.support.faultfs import FaultFs
from topics._clock import ManualClock
from topics.engine import Engine, open_engine

pytestmark = pytest.mark.crash

CHILD = Path(__file__).with_name("_open_files_child.py")
ROOT = "/data"
START_MS = 1_700_000_000_000
NOFILE = 1024
TOPICS = 5000


def _limit_open_files() -> None:  # runs in the child, between fork and exec
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, hard))


def _run_child(data_dir: Path, mode: str) -> list[str]:
    env = child_env()
    env.pop("TOPICS_MAX_OPEN_FILES", None)  # the default bound is what is under test
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(data_dir), mode, str(TOPICS)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        preexec_fn=_limit_open_files,
        check=False,
    )
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, f"{mode}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
    assert lines[0] == f"LIMIT {NOFILE}"
    assert lines[-1] == f"OK {TOPICS}"
    return lines


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_five_thousand_topics_checkpoint_and_restart_under_a_1024_descriptor_limit(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    written = _run_child(data_dir, "write")
    fds = [int(line.split()[1]) for line in written if line.startswith("FDS ")]
    assert len(fds) == 2
    # The bound (256 segment handles) plus the WAL, the lock and the interpreter's own.
    assert max(fds) < 256 + 64
    assert len(os.listdir(data_dir / "segments")) == TOPICS
    _run_child(data_dir, "check")


# -- EMFILE injected through the Fs seam ---------------------------------------------------


async def _write_topics(engine: Engine, n: int, first: int = 0) -> None:
    for i in range(n):
        await engine.write(f"t{i}", [{"data": [i, first + j]} for j in range(2)])


async def _contents(engine: Engine) -> dict[str, list[object]]:
    out: dict[str, list[object]] = {}
    for name in engine._registry.names:
        page = await engine.diff(name, from_seq=0, limit=100)
        out[name] = [r["data"] for r in ujson.loads(page.records_json)]
    return out


async def _until(condition: object, what: str) -> None:
    """Let virtual time pass (autojump clock) until ``condition()`` holds."""
    for _ in range(1000):
        if condition():  # type: ignore[operator]
            return
        await trio.sleep(1)
    raise AssertionError(f"never happened: {what}")


async def test_a_checkpoint_out_of_descriptors_is_retried_and_the_engine_keeps_serving(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    disk = FakeDisk()
    fault = FaultFs(disk, op="open", at=10**9, errno=errno.EMFILE)
    caplog.set_level(logging.WARNING, logger="topics.storage")
    async with open_engine(ROOT, clock=ManualClock(START_MS), fs=fault) as engine:
        store = engine._store
        assert store is not None
        await _write_topics(engine, 3)
        generation = store.generation
        fault.at, fault.always = fault.calls["open"] + 1, True  # every open fails from here
        # The background checkpoint task (store.run) fails, logs, backs off, tries again.
        await _until(lambda: fault.fired >= 3, "three failed checkpoint attempts")
        assert store.generation == generation
        assert "Too many open files" in caplog.text
        await _write_topics(engine, 3, first=2)  # the engine still serves writes and reads
        assert (await _contents(engine))["t1"] == [[1, 0], [1, 1], [1, 2], [1, 3]]
        fault.always = False  # descriptors are back
        await _until(lambda: store.generation > generation, "a checkpoint after the shortage")
        expected = await _contents(engine)
    disk.crash(seed=1)
    async with open_engine(ROOT, clock=ManualClock(START_MS), fs=disk) as engine:
        assert await _contents(engine) == expected


async def test_a_final_checkpoint_out_of_descriptors_leaves_the_wal_to_replay(
    caplog: pytest.LogCaptureFixture,
) -> None:
    disk = FakeDisk()
    fault = FaultFs(disk, op="open", at=10**9, errno=errno.EMFILE)
    caplog.set_level(logging.WARNING, logger="topics.storage")
    async with open_engine(ROOT, clock=ManualClock(START_MS), fs=fault) as engine:
        await _write_topics(engine, 3)
        expected = await _contents(engine)
        fault.at = fault.calls["open"] + 1  # the close's checkpoint fails its first open
    assert "final checkpoint failed" in caplog.text
    disk.crash(seed=2)
    async with open_engine(ROOT, clock=ManualClock(START_MS), fs=disk) as engine:
        assert await _contents(engine) == expected
