"""Cursor stores: memory, and the atomic file (temp + fsync + rename + directory fsync)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from topics.client import CursorStore, FileCursorStore, MemoryCursorStore


def test_memory_store() -> None:
    store = MemoryCursorStore()
    assert store.load() is None
    store.save({"a": 1})
    loaded = store.load()
    assert loaded == {"a": 1}
    loaded["a"] = 99  # a copy: the store is not aliased
    assert store.load() == {"a": 1}
    assert isinstance(store, CursorStore)


def test_file_store_round_trip_and_replace(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    store = FileCursorStore(path)
    assert store.load() is None
    store.save({"orders": 5, "audit": 2})
    store.save({"orders": 7, "audit": 2})
    assert FileCursorStore(path).load() == {"orders": 7, "audit": 2}
    assert os.listdir(tmp_path) == ["c.json"]  # no temp file left behind
    assert isinstance(store, CursorStore)


def test_file_store_is_atomic_when_the_write_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.json"
    store = FileCursorStore(path)
    store.save({"a": 1})

    def broken_fsync(fd: int) -> None:
        raise OSError(5, "EIO")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="EIO"):
        store.save({"a": 2})
    monkeypatch.undo()
    assert store.load() == {"a": 1}  # the old map, whole
    assert os.listdir(tmp_path) == ["c.json"]


def test_file_store_syncs_file_and_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real(fd))
    FileCursorStore(tmp_path / "c.json").save({"a": 1})
    assert len(synced) == 2
    synced.clear()
    FileCursorStore(tmp_path / "d.json", fsync=False).save({"a": 1})
    assert synced == []


@pytest.mark.parametrize("content", [b"", b"[1,2]", b'{"a":"x"}', b'{"a":-1}', b"{nope"])
def test_a_foreign_file_is_an_error_not_a_fresh_start(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "c.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="not a cursor file"):
        FileCursorStore(path).load()
