"""``restore`` against archives it must refuse (topics/_persistence/restore.py rules 1-3):
a path out of the target, an absolute path, links and special files, a foreign or
truncated archive, a non-empty or locked target. Each refusal writes nothing."""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Iterable
from pathlib import Path

import pytest

from topics._persistence import restore as restore_module
from topics._persistence.restore import RestoreError, check_archive, restore
from topics._storage.fs import DataDirLockedError, RealFs

WAL_NAME = "wal/0000000000000000.wal"


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _backup_member(files: dict[str, int]) -> tuple[tarfile.TarInfo, bytes]:
    body = {"format": 1, "created_ms": 0, "last_lsn": 0, "files": files}
    return _file("BACKUP", json.dumps(body).encode())


def _write_tar(path: Path, members: Iterable[tuple[tarfile.TarInfo, bytes]]) -> str:
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return str(path)


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _refused(tmp_path: Path, archive: str, match: str) -> None:
    """``archive`` is refused, and nothing appears anywhere under tmp_path but the
    archive itself."""
    before = _listing(tmp_path)
    with pytest.raises(RestoreError, match=match):
        restore(archive, str(tmp_path / "data"))
    assert _listing(tmp_path) == before


def test_a_parent_path_member_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    evil = "../x"
    archive = _write_tar(tmp_path / "b.tar", [_backup_member({evil: 3}), _file(evil, b"own")])
    _refused(tmp_path, archive, "not part of a topics backup")
    assert not (tmp_path / "x").exists()


def test_a_parent_path_inside_a_known_directory_is_refused(tmp_path: Path) -> None:
    evil = "wal/../../escaped.wal"
    archive = _write_tar(tmp_path / "b.tar", [_backup_member({evil: 3}), _file(evil, b"own")])
    _refused(tmp_path, archive, "not part of a topics backup")


def test_an_absolute_member_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "abs.wal"
    evil = str(target)
    archive = _write_tar(tmp_path / "b.tar", [_backup_member({evil: 3}), _file(evil, b"own")])
    _refused(tmp_path, archive, "not part of a topics backup")
    assert not target.exists()


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE])
def test_links_and_special_files_are_refused_even_under_a_valid_name(
    tmp_path: Path, kind: bytes
) -> None:
    link = tarfile.TarInfo(WAL_NAME)
    link.type = kind
    link.linkname = "/etc/passwd"
    archive = _write_tar(tmp_path / "b.tar", [_backup_member({}), (link, b"")])
    _refused(tmp_path, archive, "link or special file")


def test_an_archive_without_backup_first_is_refused(tmp_path: Path) -> None:
    archive = _write_tar(tmp_path / "b.tar", [_file(WAL_NAME, b"x"), _backup_member({})])
    _refused(tmp_path, archive, "not a topics backup")


def test_a_foreign_format_is_refused(tmp_path: Path) -> None:
    body = _file("BACKUP", json.dumps({"format": 99, "files": {}}).encode())
    archive = _write_tar(tmp_path / "b.tar", [body])
    _refused(tmp_path, archive, "format 99")


def test_not_a_tar_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    path.write_bytes(b"hello, not an archive" * 100)
    _refused(tmp_path, str(path), "not a tar archive")


def test_a_member_missing_from_the_archive_is_refused(tmp_path: Path) -> None:
    """A truncated archive: BACKUP lists more than the tar holds."""
    archive = _write_tar(
        tmp_path / "b.tar",
        [_backup_member({WAL_NAME: 5, "wal/0000000000000001.wal": 5}), _file(WAL_NAME, b"12345")],
    )
    _refused(tmp_path, archive, "missing")


def test_a_member_of_another_size_is_refused(tmp_path: Path) -> None:
    archive = _write_tar(
        tmp_path / "b.tar", [_backup_member({WAL_NAME: 9}), _file(WAL_NAME, b"12345")]
    )
    _refused(tmp_path, archive, "wrong size")


def test_a_member_twice_is_refused(tmp_path: Path) -> None:
    archive = _write_tar(
        tmp_path / "b.tar",
        [_backup_member({WAL_NAME: 1}), _file(WAL_NAME, b"1"), _file(WAL_NAME, b"2")],
    )
    _refused(tmp_path, archive, "twice")


def test_a_valid_archive_is_checked_whole(tmp_path: Path) -> None:
    archive = _write_tar(
        tmp_path / "b.tar", [_backup_member({WAL_NAME: 5}), _file(WAL_NAME, b"12345")]
    )
    assert check_archive(archive)["files"] == {WAL_NAME: 5}


def test_a_non_empty_directory_is_refused_without_force(tmp_path: Path) -> None:
    archive = _write_tar(tmp_path / "b.tar", [_backup_member({})])
    data = tmp_path / "data"
    data.mkdir()
    (data / "notes.txt").write_text("mine")
    with pytest.raises(RestoreError, match="not empty"):
        restore(archive, str(data))
    assert _listing(data) == ["notes.txt"]


def test_force_replaces_only_the_data_directory_s_own_files(tmp_path: Path) -> None:
    archive = _write_tar(tmp_path / "b.tar", [_backup_member({})])
    data = tmp_path / "data"
    (data / "wal").mkdir(parents=True)
    (data / "wal" / "0000000000000007.wal").write_bytes(b"old")
    (data / "heads").write_bytes(b"old")
    (data / "notes.txt").write_text("mine")
    result = restore(archive, str(data), force=True)
    assert result.topics == 0
    assert "notes.txt" in os.listdir(data)
    assert os.listdir(data / "wal") == []
    assert not (data / "heads").exists()


def test_a_locked_directory_is_refused(tmp_path: Path) -> None:
    archive = _write_tar(tmp_path / "b.tar", [_backup_member({})])
    data = tmp_path / "data"
    data.mkdir()
    lock = RealFs().lock(str(data / "LOCK"))  # what a running server holds
    try:
        with pytest.raises(DataDirLockedError):
            restore(archive, str(data))
    finally:
        lock.release()
    assert _listing(data) == ["LOCK"]


def test_a_restore_that_fails_midway_leaves_no_half_backup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {WAL_NAME: 5, "wal/0000000000000001.wal": 5, "manifest/MANIFEST-0000000000000001": 3}
    archive = _write_tar(
        tmp_path / "b.tar",
        [_backup_member(files), *(_file(name, b"x" * size) for name, size in files.items())],
    )
    real, written = restore_module._copy, []

    def failing(fs: object, src: object, dest: str, size: int) -> None:
        if written:
            raise OSError(28, "No space left on device")
        written.append(dest)
        real(fs, src, dest, size)  # type: ignore[arg-type]

    monkeypatch.setattr(restore_module, "_copy", failing)
    with pytest.raises(OSError, match="No space"):
        restore(archive, str(tmp_path / "data"))
    assert written == [str(tmp_path / "data" / WAL_NAME)]  # the manifest was not first
    data = tmp_path / "data"
    assert [p for p in _listing(data) if (data / p).is_file()] == ["LOCK"]
