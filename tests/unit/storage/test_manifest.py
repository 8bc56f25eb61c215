"""The checkpoint manifest: atomic replace, fallback to the previous generation, and a
crash anywhere in a write never leaves zero valid manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.fakedisk import FakeDisk, SimulatedCrash
from tests.support.faultfs import FaultFs
from topics._storage.fs import RealFs
from topics._storage.manifest import (
    ManifestCorruptionError,
    load_manifest,
    manifest_generations,
    write_manifest,
)

D = "/data/manifest"


def _disk() -> FakeDisk:
    disk = FakeDisk()
    disk.makedirs(D)
    return disk


def _body(generation: int) -> dict[str, Any]:
    return {
        "covered_lsn": generation * 100,
        "topics": [{"id": 1, "name": "orders/é", "head": generation, "segments": [[1, 4096]]}],
        "big": 2**64 - 1,
        "path": "a/b",
    }


def test_round_trip_and_the_newest_generation_wins(tmp_path: Path) -> None:
    fs = RealFs()
    assert load_manifest(fs, str(tmp_path)) is None
    for g in (1, 2, 3):
        write_manifest(fs, str(tmp_path), g, _body(g))
        assert load_manifest(fs, str(tmp_path)) == (g, _body(g))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "MANIFEST-0000000000000002",
        "MANIFEST-0000000000000003",
    ]


def test_older_generations_are_removed_except_the_previous_one() -> None:
    disk = _disk()
    for g in range(1, 6):
        write_manifest(disk, D, g, _body(g))
    assert manifest_generations(disk, D) == [4, 5]
    assert disk.listdir(D) == ["MANIFEST-0000000000000004", "MANIFEST-0000000000000005"]


def test_a_written_manifest_survives_power_loss_at_once() -> None:
    disk = _disk()
    write_manifest(disk, D, 1, _body(1))
    disk.crash(seed=1)
    assert load_manifest(disk, D) == (1, _body(1))


@pytest.mark.parametrize("damage", ["truncate", "garble_body", "garble_header", "empty"])
def test_a_torn_or_rotten_newest_falls_back_to_the_previous(damage: str) -> None:
    disk = _disk()
    write_manifest(disk, D, 1, _body(1))
    write_manifest(disk, D, 2, _body(2))
    path = f"{D}/MANIFEST-0000000000000002"
    size = len(disk.read_bytes(path))
    if damage == "truncate":
        h = disk.open(path, write=True)
        h.truncate(size - 5)
        h.sync_all()
    elif damage == "garble_body":
        disk.poke(path, size - 10, b"\x00")
    elif damage == "garble_header":
        disk.poke(path, 20, b"\xff")
    else:
        h = disk.open(path, write=True)
        h.truncate(0)
        h.sync_all()
    assert load_manifest(disk, D) == (1, _body(1))
    # The engine writes the next generation after the one it loaded, replacing the
    # rotten file atomically.
    write_manifest(disk, D, 2, _body(22))
    assert load_manifest(disk, D) == (2, _body(22))


def test_temp_files_are_never_loaded() -> None:
    disk = _disk()
    write_manifest(disk, D, 1, _body(1))
    h = disk.open(f"{D}/MANIFEST-0000000000000002.tmp", create=True)
    h.write_at(0, disk.read_bytes(f"{D}/MANIFEST-0000000000000001"))
    h.sync_all()
    assert load_manifest(disk, D) == (1, _body(1))
    write_manifest(disk, D, 3, _body(3))
    assert not [n for n in disk.listdir(D) if n.endswith(".tmp")]  # stale temps cleaned


def test_a_file_renamed_to_another_generation_does_not_validate() -> None:
    disk = _disk()
    write_manifest(disk, D, 1, _body(1))
    write_manifest(disk, D, 2, _body(2))
    disk.rename(f"{D}/MANIFEST-0000000000000001", f"{D}/MANIFEST-0000000000000009")
    assert load_manifest(disk, D) == (2, _body(2))


def test_no_valid_manifest_at_all_raises_instead_of_looking_fresh() -> None:
    disk = _disk()
    write_manifest(disk, D, 1, _body(1))
    disk.poke(f"{D}/MANIFEST-0000000000000001", 40, b"\xee\xee")
    with pytest.raises(ManifestCorruptionError, match="no manifest validates"):
        load_manifest(disk, D)


def test_failed_write_leaves_the_previous_manifest_in_place() -> None:
    for op in ("write_at", "sync_all", "rename", "sync_dir"):
        disk = _disk()
        write_manifest(disk, D, 1, _body(1))
        with pytest.raises(OSError, match="injected"):
            write_manifest(FaultFs(disk, op=op, at=1), D, 2, _body(2))
        assert load_manifest(disk, D) in [(1, _body(1)), (2, _body(2))]
        disk.crash(seed=0)
        assert load_manifest(disk, D) in [(1, _body(1)), (2, _body(2))]


def test_bad_generation_is_rejected() -> None:
    with pytest.raises(ValueError, match="start at 1"):
        write_manifest(_disk(), D, 0, {})


def test_crash_at_every_call_of_a_manifest_write_keeps_a_valid_manifest() -> None:
    def prepared(crash_after: int | None) -> FakeDisk:
        disk = _disk()
        write_manifest(disk, D, 1, _body(1))
        write_manifest(disk, D, 2, _body(2))
        if crash_after is not None:
            disk.crash_after = disk.ops + crash_after
        return disk

    probe = prepared(None)
    start = probe.ops
    write_manifest(probe, D, 3, _body(3))
    write_manifest(probe, D, 4, _body(4))
    total = probe.ops - start
    for crash_at in range(1, total + 2):
        for seed, torn in ((crash_at, True), (crash_at + 1000, True), (0, False)):
            disk = prepared(crash_at)
            written = 2
            try:
                write_manifest(disk, D, 3, _body(3))
                written = 3
                write_manifest(disk, D, 4, _body(4))
                written = 4
            except SimulatedCrash:
                pass
            disk.crash(seed=seed, torn=torn)
            loaded = load_manifest(disk, D)
            assert loaded is not None, f"no manifest after a crash at call {crash_at}"
            generation, body = loaded
            assert body == _body(generation)
            assert generation >= written, "a completed write_manifest was lost"
            # Recovery then writes the next generation and it sticks.
            write_manifest(disk, D, generation + 1, _body(generation + 1))
            disk.crash(seed=seed)
            assert load_manifest(disk, D) == (generation + 1, _body(generation + 1))


def test_golden_vector() -> None:
    """Format version 1 bytes; any change here must bump MANIFEST_FORMAT_VERSION."""
    disk = _disk()
    write_manifest(disk, D, 3, {"covered_lsn": 9})
    assert disk.read_bytes(f"{D}/MANIFEST-0000000000000003").hex() == (
        "544f5049434d414e0100000003000000000000001100000058db6e0a94975bd8"
        "7b22636f76657265645f6c736e223a397d"
    )
