"""topics._storage.heads: the table of heads a killed process leaves for the next recovery."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from topics._storage.heads import HEADS_FILE, HeadTable, boot_id, read_heads
from topics.engine import open_engine

pytestmark = pytest.mark.skipif(boot_id() is None, reason="no boot id on this system")


class _Log:
    def __init__(self, topic_id: int, head: int = 0) -> None:
        self.topic_id, self.head = topic_id, head
        self.listeners: list[Callable[[], object]] = []

    def listen(self, listener: Callable[[], object]) -> None:
        self.listeners.append(listener)

    def unlisten(self, listener: Callable[[], object]) -> None:
        self.listeners.remove(listener)

    def move(self, head: int) -> None:
        self.head = head
        for listener in self.listeners:
            listener()


def test_every_change_is_in_the_file_without_a_close(tmp_path: Path) -> None:
    logs = [_Log(i + 1, head=i) for i in range(1500)]  # past the first 1,024 slots: grows
    table = HeadTable.create(str(tmp_path), logs[:10])
    assert table is not None
    for log in logs[10:]:
        table.track(log)
    for log in logs:
        log.move(log.head + 7)
    table.untrack(logs[3])
    logs[3].move(10**6)  # no longer tracked: not written
    got = read_heads(str(tmp_path))  # what a process reading after a SIGKILL sees
    assert got == {log.topic_id: log.head for log in logs if log is not logs[3]}
    table.track(_Log(9999, 5))  # the freed slot is used again
    assert read_heads(str(tmp_path)) == {**got, 9999: 5}
    table.close()
    assert logs[0].listeners == []


def test_a_table_is_trusted_only_on_its_own_boot(tmp_path: Path) -> None:
    table = HeadTable.create(str(tmp_path), [_Log(1, 5)])
    assert table is not None
    assert read_heads(str(tmp_path)) == {1: 5}
    assert read_heads(str(tmp_path), boot=bytes(16)) is None  # another boot
    table.close()
    path = tmp_path / HEADS_FILE
    path.write_bytes(b"garbage")
    assert read_heads(str(tmp_path)) is None
    path.unlink()
    assert read_heads(str(tmp_path)) is None


def test_no_disk_blocks_means_no_table_not_a_failed_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule 6: a store into an unallocated page on a full disk is a SIGBUS, so the blocks
    are allocated first; when they cannot be, the engine opens and works without a table."""

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full)
    assert HeadTable.create(str(tmp_path), []) is None
    assert not (tmp_path / (HEADS_FILE + ".tmp")).exists()

    async def main() -> int:
        async with open_engine(str(tmp_path / "data")) as engine:
            assert engine._store is not None
            assert engine._store.heads is None
            return (await engine.write("t", [{"data": 1}])).first_seq

    assert trio.run(main) == 1
    assert not (tmp_path / "data" / HEADS_FILE).exists()


@pytest.mark.parametrize("damage", ["flip-header", "truncate", "zero-page", "flip-topic-id"])
def test_a_damaged_table_loses_slots_never_invents_a_topics_head(
    tmp_path: Path, damage: str
) -> None:
    """Issue 32: the table is advice, so a damaged header, a cut, a zeroed page or a slot
    whose topic id changed only make recovery fall back to the durable watermark for some
    topics (a wider skip). A changed head value cannot be told from a real one: the table
    is unsynced and rewritten at every recovery, so that needs memory damage, not disk."""
    logs = [_Log(i + 1, head=100 + i) for i in range(600)]
    table = HeadTable.create(str(tmp_path), logs)
    assert table is not None
    table.close()
    path = tmp_path / HEADS_FILE
    raw = bytearray(path.read_bytes())
    if damage == "flip-header":
        raw[3] ^= 0x10
    elif damage == "truncate":
        del raw[len(raw) // 2 + 5 :]
    elif damage == "zero-page":
        raw[4096:8192] = bytes(4096)
    else:  # topic 9's slot now names topic 8, which has its own slot
        raw[32 + 16 * 8] ^= 0x01
    path.write_bytes(bytes(raw))
    got = read_heads(str(tmp_path)) or {}
    truth = {log.topic_id: log.head for log in logs}
    assert len(got) < len(truth) or damage == "flip-topic-id"
    assert all(truth.get(tid) == head for tid, head in got.items() if tid in truth)
    if damage == "flip-topic-id":
        assert 8 not in got  # named twice: neither slot is trusted
        assert 9 not in got  # its slot is gone


async def test_an_engine_starts_beside_a_garbage_table(tmp_path: Path) -> None:
    async with open_engine(str(tmp_path)) as engine:
        await engine.write("t", [{"data": 1}])
    (tmp_path / HEADS_FILE).write_bytes(os.urandom(5000))
    async with open_engine(str(tmp_path)) as engine:
        res = await engine.diff("t", from_seq=0)
        assert res.record_count == 1
        await engine.write("t", [{"data": 2}])
