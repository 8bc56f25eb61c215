"""Child process for tests/crash/test_crash_heads.py: write, then die by SIGKILL at a
chosen point (no timing involved).

Usage: ``python _heads_child.py DATA_DIR MODE CLASS...``

Creates topic ``t-<class>`` for each CLASS and writes 5 records to each, then waits until
the WAL has written everything. The quiet-topic release (``_durability`` Rule 2a) is off,
so every topic is still inside its reservation window, as if the crash came within
100 ms of the last write. Then, by MODE:

* ``written``: SIGKILL itself at once: every record reached the WAL file (the page
  cache), so nothing is lost.
* ``lost``: arm the WAL file so that its next write SIGKILLs the process instead of
  writing, and append 3 more records to each topic: they are handed out (and, below the
  fsync class, acknowledged: ``ACK <topic> <first> <last>`` is printed) but never reach
  the file.

Prints ``WRITTEN`` before the kill of ``written`` mode, ``ARMED`` before the last writes.
"""

from __future__ import annotations

import os
import signal
import sys

import trio


def _emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(data_dir: str, mode: str, classes: list[str]) -> None:
    from topics._storage.fs import Buffer, FileHandle, RealFs
    from topics.engine import open_engine
    from topics.ops import durability as _durability

    _durability.RELEASE_AFTER_S = 3600.0  # the crash lands inside the reservation window
    armed = False

    class _Handle:
        def __init__(self, inner: FileHandle, wal: bool) -> None:
            self._inner, self._wal = inner, wal

        def write_at(self, offset: int, data: Buffer) -> None:
            if armed and self._wal:
                os.kill(os.getpid(), signal.SIGKILL)
            self._inner.write_at(offset, data)

        def __getattr__(self, name: str) -> object:
            return getattr(self._inner, name)

    class KillFs(RealFs):
        def open(self, path: str, *, write: bool = False, create: bool = False) -> FileHandle:
            inner = super().open(path, write=write, create=create)
            return _Handle(inner, f"{os.sep}wal{os.sep}" in path)  # type: ignore[return-value]

    async with open_engine(data_dir, fs=KillFs()) as engine:
        for cls in classes:
            await engine.put_topic(f"t-{cls}", {"durability": cls})
            await engine.write(f"t-{cls}", [{"data": i} for i in range(5)])
        assert engine._store is not None
        await engine._store.wal.flush()
        if mode == "written":
            _emit("WRITTEN")
            os.kill(os.getpid(), signal.SIGKILL)
        _emit("ARMED")
        armed = True
        async with trio.open_nursery() as nursery:
            for cls in classes:
                nursery.start_soon(_write, engine, f"t-{cls}")


async def _write(engine: object, topic: str) -> None:
    res = await engine.write(topic, [{"data": "lost?"}] * 3)  # type: ignore[attr-defined]
    _emit(f"ACK {topic} {res.first_seq} {res.last_seq}")


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], sys.argv[3:])
