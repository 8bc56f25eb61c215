"""Online backup through the engine (topics/_persistence/backup.py, topics/ops/backups.py):
what a snapshot holds, the pins that keep its files, one backup at a time, a memory-only
engine, and a round trip through ``restore``."""

from __future__ import annotations

import io
import os
import tarfile
import threading
from pathlib import Path

import pytest
import trio
import ujson

from topics._persistence import store as store_module
from topics._persistence.restore import restore
from topics.engine import Engine, open_engine
from topics.errors import InvalidRequestError, ThrottledError


async def _tar(engine: Engine) -> bytes:
    out = bytearray()

    async def sink(chunk: bytes) -> None:
        out.extend(chunk)

    await engine.backup(sink)
    return bytes(out)


def _save(tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "backup.tar"
    path.write_bytes(data)
    return str(path)


async def _records(engine: Engine, topic: str) -> list[tuple[int, object]]:
    page = await engine.diff(topic, from_seq=0)
    return [(r["$seq"], r["data"]) for r in ujson.loads(page.records_json)]


async def _write(engine: Engine, topic: str, values: range) -> None:
    for i in values:
        await engine.write(topic, [{"data": i}])


async def test_a_memory_only_engine_has_nothing_to_back_up() -> None:
    async with open_engine(None) as engine:
        with pytest.raises(InvalidRequestError) as caught:
            await engine.open_backup()
    assert caught.value.detail == {"reason": "memory_only"}


async def test_a_backup_round_trips_through_restore(tmp_path: Path) -> None:
    async with open_engine(str(tmp_path / "live")) as engine:
        await engine.put_topic("f", {"durability": "fsync"})
        await engine.put_topic("d", {"durability": "disk"})
        await _write(engine, "f", range(30))
        await _write(engine, "d", range(10))
        store = engine._store
        assert store is not None
        await store.checkpoint(engine._registry)  # the snapshot: a manifest and a WAL tail
        await _write(engine, "f", range(30, 50))
        await _write(engine, "d", range(10, 20))
        archive = await _tar(engine)
        live_f = await _records(engine, "f")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        names = tar.getnames()
        first = tar.extractfile("BACKUP")
        assert first is not None
        info = ujson.loads(first.read())
    assert names[0] == "BACKUP"
    assert len(archive) % 10240 == 0
    assert not any(n in ("LOCK", "heads") for n in names)
    assert set(info["files"]) == {n for n in names if "/" in n}
    assert info["format"] == 1
    assert info["last_lsn"] > info["covered_lsn"] >= 1
    result = restore(_save(tmp_path, archive), str(tmp_path / "restored"))
    assert result.topics == 2
    async with open_engine(str(tmp_path / "restored")) as engine:
        assert await _records(engine, "f") == live_f
        assert [v for _, v in await _records(engine, "d")] == list(range(20))


async def test_a_backup_of_an_empty_engine_restores_to_an_empty_engine(tmp_path: Path) -> None:
    async with open_engine(str(tmp_path / "live")) as engine:
        archive = await _tar(engine)
    result = restore(_save(tmp_path, archive), str(tmp_path / "restored"))
    assert result.topics == 0
    async with open_engine(str(tmp_path / "restored")) as engine:
        assert engine.topic_count == 0
        await engine.write("new", [{"data": 1}])  # it starts and takes writes


async def test_the_snapshot_is_taken_at_open_and_its_files_stay_until_it_ends(
    tmp_path: Path,
) -> None:
    """Writes after the plan are not in it; a topic deleted during the stream (its segment
    files superseded, two checkpoints later removable) is still copied whole, and the
    files go once the backup ends."""
    async with open_engine(str(tmp_path / "live")) as engine:
        await engine.put_topic("f", {"durability": "fsync"})
        await _write(engine, "f", range(30))
        store = engine._store
        assert store is not None
        await store.checkpoint(engine._registry)  # segment files for the topic
        backup = await engine.open_backup()
        assert store.pins == 1
        await _write(engine, "f", range(30, 40))  # after the plan: not in the snapshot
        segments = os.listdir(tmp_path / "live" / "segments")
        assert segments
        await engine.delete_topic("f")
        for _ in range(3):
            await store.checkpoint(engine._registry)
        assert os.listdir(tmp_path / "live" / "segments") == segments  # pinned
        out = bytearray()

        async def sink(chunk: bytes) -> None:
            out.extend(chunk)

        assert await backup.stream(sink) == backup.size == len(out)
        assert store.pins == 0
        for _ in range(2):
            await store.checkpoint(engine._registry)
        assert os.listdir(tmp_path / "live" / "segments") == []  # released: removed now
    restore(_save(tmp_path, bytes(out)), str(tmp_path / "restored"))
    async with open_engine(str(tmp_path / "restored")) as engine:
        assert [v for _, v in await _records(engine, "f")] == list(range(30))


async def test_one_backup_at_a_time(tmp_path: Path) -> None:
    async with open_engine(str(tmp_path / "live")) as engine:
        async with await engine.open_backup():
            with pytest.raises(ThrottledError) as caught:
                await engine.open_backup()
            assert caught.value.detail == {"limit": "concurrent_backups", "max": 1}
        store = engine._store
        assert store is not None
        assert store.pins == 0
        first = await engine.open_backup()  # released: a new one may start
        first.close()
        second = await engine.open_backup()
        first.close()  # again: must not free the slot the second one holds
        with pytest.raises(ThrottledError):
            await engine.open_backup()
        second.close()


async def test_a_sink_that_fails_releases_the_backup(tmp_path: Path) -> None:
    async with open_engine(str(tmp_path / "live")) as engine:
        await _write(engine, "t", range(5))

        async def broken(chunk: bytes) -> None:
            raise ConnectionResetError("client went away")

        with pytest.raises(ConnectionResetError):
            await engine.backup(broken)
        store = engine._store
        assert store is not None
        assert store.pins == 0
        assert len(await _tar(engine)) > 0


async def test_the_wal_files_of_the_snapshot_are_not_trimmed_while_it_streams(
    tmp_path: Path,
) -> None:
    """The snapshot's newest manifest covers 10 records, the WAL file after it holds 10
    more; checkpoints during the stream would trim that file (it rotated out), but it is
    pinned, and the restore has all 20."""
    live = tmp_path / "live"
    async with open_engine(str(live)) as engine:
        store = engine._store
        assert store is not None
        await engine.put_topic("f", {"durability": "fsync"})
        await _write(engine, "f", range(10))
        await store.checkpoint(engine._registry)
        await _write(engine, "f", range(10, 20))
        backup = await engine.open_backup()
        wal_files = os.listdir(live / "wal")
        store.wal.rotate_soon()
        await _write(engine, "f", range(20, 30))
        for i in range(3):  # each with a change, so each writes a manifest and trims
            await store.checkpoint(engine._registry)
            await _write(engine, "f", range(30 + i, 31 + i))
        assert set(wal_files) <= set(os.listdir(live / "wal"))  # pinned: nothing trimmed
        out = bytearray()

        async def sink(chunk: bytes) -> None:
            out.extend(chunk)

        await backup.stream(sink)
        # The trims it held off come with the next checkpoints that have something to
        # write (an idle one writes nothing at all: store rule 9).
        await _write(engine, "f", range(33, 34))
        for _ in range(2):
            await store.checkpoint(engine._registry)
        assert not set(wal_files) & set(os.listdir(live / "wal"))  # released: trimmed now
    restore(_save(tmp_path, bytes(out)), str(tmp_path / "restored"))
    async with open_engine(str(tmp_path / "restored")) as engine:
        assert [v for _, v in await _records(engine, "f")] == list(range(20))


async def test_a_backup_taken_while_a_checkpoint_writes_is_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan takes no lock: taken while a checkpoint is inside its segment writes, it
    is built on the manifest before that one, and neither that checkpoint nor the next
    takes a file it needs."""
    live = tmp_path / "live"
    async with open_engine(str(live)) as engine:
        store = engine._store
        assert store is not None
        await engine.put_topic("f", {"durability": "fsync"})
        await _write(engine, "f", range(10))
        await store.checkpoint(engine._registry)
        await _write(engine, "f", range(10, 20))
        entered, release = trio.Event(), threading.Event()
        real = store_module.write_segments

        def held(*args: object, **kwargs: object) -> object:
            trio.from_thread.run_sync(entered.set)
            release.wait(10)
            return real(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(store_module, "write_segments", held)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.checkpoint, engine._registry)
            await entered.wait()
            backup = await engine.open_backup()  # the checkpoint is mid-way
            assert backup.info["manifest_generation"] == store.generation
            release.set()
        monkeypatch.setattr(store_module, "write_segments", real)
        await engine.delete_topic("f")
        await _write(engine, "g", range(1))
        for _ in range(2):
            await store.checkpoint(engine._registry)
            await _write(engine, "g", range(1))
        out = bytearray()

        async def sink(chunk: bytes) -> None:
            out.extend(chunk)

        await backup.stream(sink)
    restore(_save(tmp_path, bytes(out)), str(tmp_path / "restored"))
    async with open_engine(str(tmp_path / "restored")) as engine:
        assert [v for _, v in await _records(engine, "f")] == list(range(20))
