"""Real-process crash tests: SIGKILL a writing engine at random moments, reopen, compare.

A child process (``tests/crash/_child.py``) writes batches from several concurrent tasks
and prints every acknowledged batch (seqs and a hash of the records as stored) the moment
its ``await engine.write`` returns; it also checkpoints every few dozen milliseconds on
small segments, so seals, index renames, manifest renames and WAL trims all happen inside
the kill window. The parent kills it with SIGKILL after a random delay, reopens the data
directory in-process and checks, round after round on the same directory:

* ``fsync`` class: every acknowledged record is present with identical seq, ts, data, tag
  and node; seqs are contiguous except for the documented crash gap (recovery moves the
  head to the durable watermark: the seqs between the last surviving record and the new
  head are never handed out again; the records below it stay readable, so a reader from 0
  gets no tombstone); new writes continue right above the recovered head.
* ``disk`` class: acked is not durable, but no seq is ever handed out twice: any record
  that survives at a seq some round saw acknowledged has exactly the acknowledged content.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import trio
import ujson

from tests.crash._child import TOPIC, batch_digest
from tests.support.child import Child
from topics.engine import open_engine

pytestmark = pytest.mark.crash

CHILD = Path(__file__).with_name("_child.py")
WRITERS = 4


def _acks(lines: list[str]) -> list[tuple[int, int, str]]:
    acks = []
    for line in lines:
        assert not line.startswith("BAD"), line
        kind, first, last, digest = line.split()
        assert kind == "ACK"
        acks.append((int(first), int(last), digest))
    return acks


async def _recovered(data_dir: Path) -> dict[str, Any]:
    """Open the directory, read everything, write one more batch; the state seen."""
    async with open_engine(str(data_dir)) as engine:
        st = await engine.get_topic(TOPIC, touch=False)
        records: list[dict[str, Any]] = []
        cursor = 0
        first_page = None
        while True:
            page = await engine.diff(TOPIC, from_seq=cursor, limit=1000, include_tags=True)
            first_page = first_page or page
            records.extend(ujson.loads(page.records_json))
            cursor = page.next_from_seq
            if page.caught_up:
                break
        res = await engine.write(TOPIC, [{"data": {"parent": st.head_seq}, "tag": "p"}])
        return {
            "head": st.head_seq,
            "count": st.count,
            "earliest": st.earliest_seq,
            "records": {r["$seq"]: r for r in records},
            "tombstone": first_page.tombstone if first_page else None,
            "next_write": res.first_seq,
        }


def _run_rounds(
    tmp_path: Path, durability: str, rounds: int, seed: int, pause_ms: float = 0.0
) -> list[dict[str, Any]]:
    """Kill/reopen ``rounds`` times; returns, per round, the acks and the recovered view."""
    rng = random.Random(seed)
    history = []
    for r in range(rounds):
        args = (str(tmp_path), durability, str(WRITERS), str(seed * 100 + r), str(pause_ms))
        child = Child(CHILD, *args)
        ready = child.wait_for("READY ", timeout_s=15.0)
        start_head = int(ready.split()[1])
        lines = child.kill_after(rng.uniform(0.02, 0.35))
        acks = _acks(lines[lines.index(ready) + 1 :])
        view = trio.run(_recovered, tmp_path)
        history.append({"start_head": start_head, "acks": acks, "view": view})
    return history


def _digest_of(view: dict[str, Any], first: int, last: int) -> str | None:
    recs = [view["records"].get(s) for s in range(first, last + 1)]
    if any(r is None for r in recs):
        return None
    return batch_digest(recs)  # type: ignore[arg-type]


def test_sigkill_fsync_writer_loses_no_acked_record(tmp_path: Path) -> None:
    history = _run_rounds(tmp_path, "fsync", rounds=15, seed=11)
    assert sum(len(h["acks"]) for h in history) > 15, "the child acked almost nothing"
    all_acks: list[tuple[int, int, str]] = []
    parent_writes: dict[int, int] = {}  # seq of each batch the parent wrote -> its payload
    heads = []
    for h in history:
        view = h["view"]
        all_acks.extend(h["acks"])
        # Every batch ever acknowledged is there, byte for byte (seq/ts/data/tag/node).
        for first, last, digest in all_acks:
            assert _digest_of(view, first, last) == digest, f"acked batch {first}-{last}"
        for seq, parent_head in parent_writes.items():
            assert view["records"][seq]["data"] == {"parent": parent_head}
        # The records are all live: nothing was evicted, so no reader gets a tombstone.
        assert view["tombstone"] is None
        assert view["count"] == len(view["records"])
        present = sorted(view["records"])
        assert present[0] == 1
        assert view["earliest"] == 1
        # New writes continue right above the recovered head, which is above every seq
        # handed out before the crash.
        assert view["next_write"] == view["head"] + 1
        assert all(last <= view["head"] for _, last, _ in all_acks)
        heads.append(view["head"])
        parent_writes[view["next_write"]] = view["head"]
    # Contiguous apart from the crash gaps: every missing seq lies in a gap that ends at a
    # recovered head (the watermark the head jumped to) and starts above the last record
    # that survived below it.
    final = history[-1]["view"]
    present = set(final["records"])
    missing = sorted(set(range(1, max(present) + 1)) - present)
    gaps: list[list[int]] = []
    for s in missing:
        if gaps and gaps[-1][1] == s - 1:
            gaps[-1][1] = s
        else:
            gaps.append([s, s])
    for lo, hi in gaps:
        assert hi in heads, f"seqs {lo}-{hi} are missing but no recovered head is {hi}"
        assert lo - 1 in present or lo == 1


def test_sigkill_disk_writer_never_reuses_a_seq(tmp_path: Path) -> None:
    # Paced: a disk-class writer is not held back by fsyncs and would pile up data.
    history = _run_rounds(tmp_path, "disk", rounds=10, seed=23, pause_ms=8.0)
    assert sum(len(h["acks"]) for h in history) > 10, "the child acked almost nothing"
    acked: dict[int, tuple[int, str]] = {}  # first seq -> (last seq, digest), every round
    for h in history:
        for first, last, digest in h["acks"]:
            for seq in range(first, last + 1):
                # A seq handed out in one round is never handed out again in another.
                assert not any(f <= seq <= to for f, (to, _) in acked.items()), f"seq {seq} reused"
            acked[first] = (last, digest)
        view = h["view"]
        for first, (last, digest) in acked.items():
            got = _digest_of(view, first, last)
            if any(s in view["records"] for s in range(first, last + 1)):
                # Whatever survives of an acked batch is that batch (a batch is atomic in
                # the WAL: one frame), never other records at reused seqs.
                assert got == digest, f"batch {first}-{last} changed"
        assert view["next_write"] == view["head"] + 1
        assert all(last <= view["head"] for last, _ in acked.values())
        # The child's next round starts above everything handed out so far.
    starts = [h["start_head"] for h in history[1:]]
    assert starts == [h["view"]["next_write"] for h in history[:-1]]
