"""A crash tombstone appears exactly when records were lost (issue 20, heads table).

A child process (``_heads_child.py``) writes 5 records per topic with the quiet-topic
release off, so every topic is inside its reservation window (watermark 4,101), as in a
crash within 100 ms of a write, and then dies by SIGKILL at a chosen point, no timing
involved. The parent recovers the directory in-process, on the same boot:

* everything reached the WAL file: every head stays exactly 5, no tombstone (before the
  heads table a ``disk``/``memory`` topic reported ``crash`` over 6..4101, and every
  class moved its head to 4,101);
* the next WAL write kills the process, after 3 more records per topic were handed out
  (and acknowledged, below ``fsync``): the head moves to exactly 8, a ``disk``/``memory``
  reader gets one ``crash`` tombstone for exactly 6..8, an ``fsync`` reader none;
* the table from another boot (a power loss may have torn it) is not trusted: the head
  moves to the durable watermark, the tombstone covers 6..4101, as before.

Also, in-process: a topic that used half of a reservation started the next one, and
then went quiet releases it all the same (before, that reservation stayed unsettled and
the topic never released, so any later crash skipped ~4,096 seqs).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support.child import child_env
from topics._storage.heads import HEADS_FILE, boot_id
from topics.engine import Engine, open_engine

pytestmark = [
    pytest.mark.crash,
    pytest.mark.skipif(boot_id() is None, reason="no boot id on this system: no heads table"),
]

CHILD = Path(__file__).with_name("_heads_child.py")
RESERVED = 5 + 4096  # the first write's watermark


def _run_child(data_dir: Path, mode: str, *classes: str) -> list[str]:
    env = child_env()
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(data_dir), mode, *classes],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert proc.returncode == -9, f"exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
    return proc.stdout.splitlines()


async def _read(engine: Engine, topic: str, from_seq: int) -> tuple[list[int], list[Any]]:
    seqs: list[int] = []
    tombstones: list[Any] = []
    while True:
        res = await engine.diff(topic, from_seq=from_seq)
        seqs += [r.seq for r in res.records]
        if res.tombstone is not None:
            tombstones.append(res.tombstone.to_dict())
        from_seq = res.next_from_seq
        if res.caught_up:
            return seqs, tombstones


def _recovered(data_dir: Path, topics: list[str]) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with open_engine(str(data_dir)) as engine:
            for topic in topics:
                log = engine._registry.topics[topic]
                out[topic] = {
                    "head": log.head,
                    "from_0": await _read(engine, topic, 0),
                    "from_5": await _read(engine, topic, 5),
                }
            out["next"] = (await engine.write(topics[0], [{"data": "after"}])).first_seq
        return out

    return trio.run(main)


def test_records_that_reached_the_wal_leave_heads_exact(tmp_path: Path) -> None:
    assert _run_child(tmp_path, "written", "memory", "disk", "fsync") == ["WRITTEN"]
    got = _recovered(tmp_path, ["t-disk", "t-memory", "t-fsync"])
    for topic in ("t-disk", "t-memory", "t-fsync"):
        assert got[topic] == {"head": 5, "from_0": ([1, 2, 3, 4, 5], []), "from_5": ([], [])}
    assert got["next"] == 6


@pytest.mark.parametrize("durability", ["disk", "memory", "fsync"])
def test_lost_records_are_reported_exactly(tmp_path: Path, durability: str) -> None:
    lines = _run_child(tmp_path, "lost", durability)
    assert lines[0] == "ARMED"
    topic = f"t-{durability}"
    got = _recovered(tmp_path, [topic])[topic]
    assert got["head"] == 8  # no seq handed out twice, and none skipped that was not
    if durability == "fsync":
        assert got["from_0"] == ([1, 2, 3, 4, 5], [])
        assert got["from_5"] == ([], [])  # nothing acknowledged was lost: silent
    else:
        assert got["from_0"] == ([1, 2, 3, 4, 5], got["from_5"][1])
        ((tombstone,),) = [got["from_5"][1]]
        assert got["from_5"][0] == []
        assert (tombstone["gap_from"], tombstone["gap_to"]) == (6, 8)
        assert (tombstone["reason"], tombstone["missed_estimate"]) == ("crash", 3)
        for line in lines[1:]:  # an acknowledged batch is inside the reported range
            _, _, first, last = line.split()
            assert 6 <= int(first) <= int(last) <= 8


def test_a_table_from_another_boot_is_not_trusted(tmp_path: Path) -> None:
    _run_child(tmp_path, "lost", "disk")
    path = tmp_path / HEADS_FILE
    data = bytearray(path.read_bytes())
    data[16:32] = bytes(16)  # the boot id: a power loss came between
    path.write_bytes(bytes(data))
    got = _recovered(tmp_path, ["t-disk"])["t-disk"]
    assert got["head"] == RESERVED
    assert [(t["gap_from"], t["gap_to"], t["reason"]) for t in got["from_5"][1]] == [
        (6, RESERVED, "crash")
    ]


def test_a_quiet_topic_releases_a_reservation_no_write_settled(tmp_path: Path) -> None:
    async def main() -> tuple[int, int, int, int]:
        async with open_engine(str(tmp_path)) as engine:
            await engine.put_topic("t", {"durability": "disk"})
            for i in range(30):  # 3,000 seqs: past half of the first reservation
                await engine.write("t", [{"data": i}] * 100)
            assert engine._store is not None
            await engine._store.wal.flush()  # the next reservation is synced, unsettled
            log = engine._registry.topics["t"]
            before = log.watermark
            engine._release_pass()
            engine._release_pass()
            return log.head, before, log.watermark, log.reserved_to

    head, before, watermark, reserved_to = trio.run(main)
    assert before > head
    assert watermark == reserved_to == head == 3000


def test_an_ephemeral_topic_reports_its_records_lost_to_a_restart(tmp_path: Path) -> None:
    """Issue 20 item 2: reason ``restart`` (not ``cap``), after a clean restart, again
    after a second one with nothing written between (the cause is checkpointed), and
    after a SIGKILL; a later cap eviction above it is ``cap`` again."""

    async def reopen(write: int = 0, cap: int = 0) -> tuple[int, list[Any]]:
        async with open_engine(str(tmp_path)) as engine:
            if engine._registry.get("e") is None:
                await engine.put_topic("e", {"durability": "ephemeral"})
            if cap:
                await engine.put_topic("e", {"cap_records": cap, "discard": "old"})
            if write:
                await engine.write("e", [{"data": i} for i in range(write)])
            log = engine._registry.topics["e"]
            return log.head, (await _read(engine, "e", 0))[1]

    def reasons(tombstones: list[Any]) -> list[tuple[int, int, str]]:
        return [(t["gap_from"], t["gap_to"], t["reason"]) for t in tombstones]

    assert trio.run(reopen, 5) == (5, [])
    head, tombstones = trio.run(reopen)
    assert (head, reasons(tombstones)) == (5, [(1, 5, "restart")])
    head, tombstones = trio.run(reopen)
    assert (head, reasons(tombstones)) == (5, [(1, 5, "restart")])
    head, tombstones = trio.run(reopen, 4, 2)  # 6..9 written, 6 and 7 evicted for room
    assert (head, reasons(tombstones)) == (9, [(1, 7, "cap")])

    _run_child(tmp_path / "killed", "written", "ephemeral", "disk")
    got = _recovered(tmp_path / "killed", ["t-ephemeral"])["t-ephemeral"]
    assert got["head"] == 5
    assert [(t["gap_from"], t["gap_to"], t["reason"]) for t in got["from_0"][1]] == [
        (1, 5, "restart")
    ]
