"""Real-process crash test for named cursors: SIGKILL a child that commits, reopen, check.

The child (this module run as a script) opens an engine on a data directory, keeps a log
topic growing and runs several consumer groups that commit their cursors forward (some
with ``expect_seq``, some through ``diff(commit=True)``), deletes and re-creates a cursor
now and then, and checkpoints at random moments (so recovery goes through the manifest's
"cursors" section and the WAL entries after it). It prints a line per acknowledged change:

* ``INTENT group seq|diff|del`` before it starts a change (one per group in flight: each
  group's task awaits every change before the next);
* ``COMMIT group seq`` after a commit returned (it is synced before it returns);
* ``DELETE group`` after a delete returned.

The parent kills it at a random moment, round after round on the same directory, and
checks each group's recovered cursor: the last acknowledged value, or what the one change
in flight at the kill would have made it (never older, never a value no one committed).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import trio

from tests.support.child import Child

pytestmark = [pytest.mark.crash, pytest.mark.slow]

TOPIC = "log"
GROUPS = ("g0", "g1", "g2", "g3")
HERE = Path(__file__)


def _emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def child_main(data_dir: str, seed: int) -> None:
    from topics.engine import open_engine
    from topics.errors import CursorConflictError, CursorNotFoundError

    rng = random.Random(seed)
    async with open_engine(data_dir) as engine:
        if engine._registry.get(TOPIC) is None:
            await engine.put_topic(TOPIC, {"durability": "disk"})
        store = engine._store
        assert store is not None

        async def producer() -> None:
            while True:
                await engine.write(TOPIC, [{"data": i} for i in range(rng.randint(1, 20))])
                await trio.sleep(rng.uniform(0, 0.005))

        async def group(name: str) -> None:
            while True:
                head = (await engine.get_topic(TOPIC, touch=False)).head_seq
                try:
                    current = (await engine.get_cursor(TOPIC, name)).seq
                except CursorNotFoundError:  # never committed yet, or deleted: starts at 0
                    current = 0
                roll = rng.random()
                if roll < 0.05:
                    _emit(f"INTENT {name} del")
                    await engine.delete_cursor(TOPIC, name)
                    _emit(f"DELETE {name}")
                elif roll < 0.4:
                    _emit(f"INTENT {name} diff")
                    res = await engine.diff(
                        TOPIC, cursor=name, commit=True, limit=rng.randint(1, 50)
                    )
                    if res.next_from_seq != current:
                        _emit(f"COMMIT {name} {res.next_from_seq}")
                else:
                    seq = rng.randint(current, head) if head >= current else head
                    _emit(f"INTENT {name} {seq}")
                    try:
                        await engine.put_cursor(TOPIC, name, seq, expect_seq=current)
                    except CursorConflictError:  # only this task commits it: a bug
                        _emit(f"CONFLICT {name}")
                        raise
                    _emit(f"COMMIT {name} {seq}")
                await trio.sleep(rng.uniform(0, 0.003))

        async def checkpointer() -> None:
            while True:
                await trio.sleep(rng.uniform(0.02, 0.08))
                await store.checkpoint(engine._registry)

        _emit("READY")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(producer)
            for name in GROUPS:
                nursery.start_soon(group, name)
            nursery.start_soon(checkpointer)


# -- the parent ---------------------------------------------------------------------------


def _wait_for_commits(child: Child, n: int, timeout_s: float = 60.0) -> None:
    commits = 0

    def enough(line: str) -> bool:
        nonlocal commits
        commits += line.startswith("COMMIT")
        return commits >= n

    child.wait_until(enough, f"{n} commits", timeout_s)


async def _recovered(data_dir: Path) -> dict[str, int | None]:
    from topics.engine import open_engine

    async with open_engine(str(data_dir)) as engine:
        held = {c.cursor: c.seq for c in await engine.list_cursors(TOPIC)}
    return {name: held.get(name) for name in GROUPS}


def test_sigkill_keeps_every_acknowledged_cursor_commit(tmp_path: Path) -> None:
    rng = random.Random(5)
    acked: dict[str, int | None] = {}
    pending: dict[str, str] = {}
    for round_no in range(4):
        child = Child(HERE, str(tmp_path), str(100 + round_no))
        _wait_for_commits(child, rng.randint(50, 400))
        lines = child.kill()
        assert not [line for line in lines if line.startswith("CONFLICT")]
        for line in lines:
            word, *rest = line.split()
            if word == "INTENT":
                pending[rest[0]] = rest[1]
            elif word == "COMMIT":
                acked[rest[0]] = int(rest[1])
                pending.pop(rest[0], None)
            elif word == "DELETE":
                acked[rest[0]] = None
                pending.pop(rest[0], None)
        got = trio.run(_recovered, tmp_path)
        for name in GROUPS:
            was, now, change = acked.get(name), got[name], pending.get(name)
            ok = now == was
            if change == "del":
                ok = ok or now is None
            elif change == "diff":  # a committing read moves forward by what it read
                ok = ok or (now is not None and now >= (was or 0))
            elif change is not None:
                ok = ok or now == int(change)
            assert ok, (round_no, name, was, change, now)
            acked[name] = now  # the next round starts from what survived
        pending.clear()


if __name__ == "__main__":
    trio.run(child_main, sys.argv[1], int(sys.argv[2]))
