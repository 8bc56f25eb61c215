"""Child process for tests/crash/test_open_files.py: many topics under a low open-file limit.

Usage: ``python _open_files_child.py DATA_DIR MODE TOPICS``

The parent starts it with ``RLIMIT_NOFILE`` lowered (``preexec_fn``), so a store that
kept one descriptor per topic would run out at its first checkpoint.

* ``write``: create TOPICS topics ``t0..`` with 3 records each, force a checkpoint, append
  a 4th record to each (every active segment is reopened for append), checkpoint again.
* ``check``: recover, check every topic holds exactly its 4 records, checkpoint once more.

It prints ``FDS <n>`` (open descriptors, from /proc/self/fd) after each checkpoint and
``OK <topics>`` at the end, each line flushed at once; any mismatch is ``BAD <message>``
and exit 3.
"""

from __future__ import annotations

import json
import os
import resource
import sys

import trio

RECORDS = 3
WORKERS = 64  # concurrent creators: topic creations are synced, group commit shares them


def _emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _each(n: int, fn: object) -> None:
    async def worker(k: int) -> None:
        for i in range(k, n, WORKERS):
            await fn(i)  # type: ignore[operator]

    async with trio.open_nursery() as nursery:
        for k in range(WORKERS):
            nursery.start_soon(worker, k)


async def main(data_dir: str, mode: str, topics: int) -> None:
    from topics.engine import open_engine

    _emit(f"LIMIT {resource.getrlimit(resource.RLIMIT_NOFILE)[0]}")
    async with open_engine(data_dir) as engine:
        assert engine._store is not None

        async def checkpoint() -> None:
            await engine._store.checkpoint(engine._registry)  # type: ignore[union-attr]
            _emit(f"FDS {_fds()}")

        if mode == "write":

            async def create(i: int) -> None:
                await engine.write(f"t{i}", [{"data": [i, j]} for j in range(RECORDS)])

            async def append(i: int) -> None:
                await engine.write(f"t{i}", [{"data": [i, RECORDS]}])

            await _each(topics, create)
            await checkpoint()
            await _each(topics, append)
            await checkpoint()
        else:
            names = set(engine._registry.names)
            if len(names) != topics:
                _emit(f"BAD {len(names)} topics recovered, {topics} written")
                sys.exit(3)
            for i in range(topics):
                page = await engine.diff(f"t{i}", from_seq=0, limit=10)
                got = [r["data"] for r in json.loads(page.records_json)]
                if got != [[i, j] for j in range(RECORDS + 1)]:
                    _emit(f"BAD t{i} holds {got}")
                    sys.exit(3)
            await checkpoint()
    _emit(f"OK {topics}")


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
