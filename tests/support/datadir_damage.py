"""A real data directory for the ``topics verify`` tests (tests/unit/storage/test_verify.py,
tests/integration/cli/test_cli_verify.py), and the damage they do to it.

Built once per session with the engine itself (two sessions, so there are two manifest
generations and several WAL files), then copied for each test that damages it.
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import topics
import topics.log.topic_log as topic_log
from topics._core import iter_frames
from topics._storage.fs import RealFs
from topics._storage.manifest import load_manifest
from topics._storage.wal import Wal

TOPICS = ("alpha", "beta")
SEG_HEADER = 40
PAGE = 4096


@contextmanager
def small_files() -> Iterator[None]:
    """Segments that seal at 4 KiB and WAL files that rotate at 16 KiB."""
    create = Wal.create.__func__  # type: ignore[attr-defined]

    def small_wal(cls: type[Wal], *args: Any, **kwargs: Any) -> Wal:
        kwargs["max_file_bytes"] = 16 << 10
        wal: Wal = create(cls, *args, **kwargs)
        return wal

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(topic_log, "SEGMENT_TARGET_BYTES", 4096)
        mp.setattr(Wal, "create", classmethod(small_wal))
        yield


def write_some(engine: Any, rounds: int, start: int) -> None:
    for r in range(rounds):
        for name in TOPICS:
            engine.write(
                name, [{"data": {"n": start + r, "i": i, "pad": "x" * 90}} for i in range(8)]
            )


def build(path: Path) -> None:
    """Two sessions of two ``fsync`` topics; each closes cleanly (a final checkpoint)."""
    with small_files():
        engine = topics.open(str(path))
        for name in TOPICS:
            engine.put_topic(name, {"durability": "fsync"})
        write_some(engine, 40, 0)
        engine.close()
        engine = topics.open(str(path))
        write_some(engine, 40, 1000)
        engine.close()


@dataclass
class Segment:
    rel: str
    topic: str
    base: int
    sealed: bool
    length: int  # recorded in the manifest
    offsets: list[int]  # of every frame within the frames
    seqs: list[int]

    def seq_at(self, file_offset: int) -> int:
        """The seq of the frame holding byte ``file_offset`` of the file."""
        rel = file_offset - SEG_HEADER
        seq = self.seqs[0]
        for off, s in zip(self.offsets, self.seqs, strict=True):
            if off <= rel:
                seq = s
        return seq


def segments(root: Path) -> list[Segment]:
    loaded = load_manifest(RealFs(), str(root / "manifest"))
    assert loaded is not None
    out = []
    for topic in loaded[1]["topics"]:
        for seg in topic["segments"]:
            rel = f"segments/{topic['id']:016x}-{seg['base']:016x}.seg"
            frames = (root / rel).read_bytes()[SEG_HEADER : SEG_HEADER + seg["length"]]
            spans = iter_frames(frames, seg["salt"], True)
            seqs = [struct.unpack_from("<Q", frames, off + 24)[0] for off, _ in spans]
            offsets = [off for off, _ in spans]
            out.append(
                Segment(
                    rel, topic["name"], seg["base"], seg["sealed"], seg["length"], offsets, seqs
                )
            )
    return out


def flip_bit(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x10]))


def truncate(path: Path, size: int) -> None:
    os.truncate(path, size)


def zero_page(path: Path, offset: int) -> None:
    """Zero a 4 KiB page from ``offset`` (as far as the file goes)."""
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(bytes(min(PAGE, size - offset)))


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst
