"""Child process for tests/crash/test_engine_crash.py: write until killed.

Usage: ``python _child.py DATA_DIR DURABILITY WRITERS SEED [PAUSE_MS]``

Opens an engine on DATA_DIR (creating topic ``t`` with the given durability class if it
is absent), then runs WRITERS concurrent writer tasks that append batches forever (each
pausing up to PAUSE_MS between batches, to bound the data a fast class piles up), plus a
task that forces a checkpoint every few dozen milliseconds (segments are kept small, so
seals and index writes happen too). It prints, one line each, flushed at once:

* ``READY <head_seq>`` once the engine is open;
* ``ACK <first_seq> <last_seq> <sha256>`` after each acknowledged batch, where the hash is
  :func:`batch_digest` over the batch's records as stored (seq, ts, data, tag, node), read
  back right after the ack and checked against what the writer sent;
* ``BAD <message>`` (then exit 3) if the read-back differs from what was written.

The parent SIGKILLs it at a random moment; only whole lines count.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from typing import Any

import trio

TOPIC = "t"


def batch_digest(records: list[dict[str, Any]]) -> str:
    """Hash of records as rendered by a diff with tags (the fields the test compares)."""
    canon = [[r["$seq"], r["$ts"], r.get("data"), r.get("$tag"), r.get("$node")] for r in records]
    return hashlib.sha256(json.dumps(canon, sort_keys=True).encode()).hexdigest()


def _emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(data_dir: str, durability: str, writers: int, seed: int, pause_ms: float) -> None:
    from topics.engine import open_engine
    from topics.log import topic_log as _log

    _log.SEGMENT_TARGET_BYTES = 64 << 10  # seal often: index writes are in the crash window
    async with open_engine(data_dir) as engine:
        if engine._registry.get(TOPIC) is None:
            await engine.put_topic(TOPIC, {"durability": durability})
        _emit(f"READY {engine._registry.topics[TOPIC].head}")

        async def writer(k: int) -> None:
            rng = random.Random(seed * 1000 + k)
            n = 0
            while True:
                size = rng.randint(1, 20)
                records = []
                for j in range(size):
                    rec: dict[str, Any] = {
                        "data": {"w": k, "n": n, "j": j, "pad": "x" * rng.randint(8, 120)}
                    }
                    if rng.random() < 0.5:
                        rec["tag"] = f"w{k}-{n % 7}"
                    if rng.random() < 0.3:
                        rec["node"] = f"node{k}"
                    records.append(rec)
                res = await engine.write(TOPIC, records)
                page = await engine.diff(
                    TOPIC, from_seq=res.first_seq - 1, limit=size, include_tags=True
                )
                stored = json.loads(page.records_json)
                sent = [[rec["data"], rec.get("tag"), rec.get("node")] for rec in records]
                got = [[r.get("data"), r.get("$tag"), r.get("$node")] for r in stored]
                seqs = [r["$seq"] for r in stored]
                if got != sent or seqs != list(range(res.first_seq, res.last_seq + 1)):
                    _emit(f"BAD batch {res.first_seq}-{res.last_seq} read back differently")
                    sys.exit(3)
                _emit(f"ACK {res.first_seq} {res.last_seq} {batch_digest(stored)}")
                n += 1
                if pause_ms:
                    await trio.sleep(rng.uniform(0, pause_ms / 1000))

        async def checkpointer() -> None:
            rng = random.Random(seed)
            while True:
                await trio.sleep(rng.uniform(0.01, 0.06))
                await engine._store.checkpoint(engine._registry)

        async with trio.open_nursery() as nursery:
            for k in range(writers):
                nursery.start_soon(writer, k)
            nursery.start_soon(checkpointer)


if __name__ == "__main__":
    pause = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), pause)
