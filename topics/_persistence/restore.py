"""Offline restore of a backup archive (``backup.py``) into a data directory.

Role: ``topics restore FILE DATA_DIR`` (topics/cli/backup_cmds.py) calls :func:`restore`
with no server running on ``DATA_DIR``; the directory it leaves opens like one after a
power loss at the backup's last LSN.

Rules:
1. The whole archive is checked before anything is written (two passes over the file):
   a refused archive leaves the target as it was.
2. Every member is one a backup makes, by name and type: ``BACKUP`` (first), the
   directories ``manifest``, ``segments``, ``wal``, and regular files named
   ``manifest/MANIFEST-<16 hex>``, ``segments/<16 hex>-<16 hex>.seg[.<suffix>]`` or
   ``wal/<16 hex>.wal``. So no absolute path, no ``..``, no link, device or FIFO can
   reach the disk, whatever the archive says. The files and their sizes must be exactly
   those BACKUP lists: a truncated or altered archive is refused, never half restored.
3. The target is created if absent and refused if it holds anything but a lock file,
   unless ``force``: then the data directory's own files (manifest, segments, WAL, heads
   table) are removed first and nothing else is touched. Its lock is taken for the whole
   restore, so the directory of a running server is refused (``DataDirLockedError``).
4. Files are written through the Fs seam and fsynced, then every directory; last, the
   result is read back by recovery (read-only), which checks every manifest, segment
   and WAL frame checksum.
5. A restore that fails while writing removes what it wrote (as ``force`` would). The
   manifest goes in last, so a directory left by a restore killed midway has none:
   recovery refuses it when the backup's WAL starts after LSN 1 (``StaleManifestError``)
   and may otherwise open a prefix of the backup. Either way the restore did not say it
   was done; run it again with ``--force``.
"""

from __future__ import annotations

import contextlib
import io
import re
import tarfile
from dataclasses import dataclass
from typing import IO, Any

import ujson

from .._storage.fs import Fs, RealFs
from .._storage.heads import HEADS_FILE
from .backup import BACKUP_FORMAT, BACKUP_MEMBER, CHUNK_BYTES, DIRECTORIES
from .recovery import recover
from .store import StorePaths

__all__ = ["RestoreError", "RestoreResult", "check_archive", "restore"]

_FILE_NAME = re.compile(
    r"manifest/MANIFEST-[0-9a-f]{16}"
    r"|segments/[0-9a-f]{16}-[0-9a-f]{16}\.seg(?:\.[a-z]{1,16})?"
    r"|wal/[0-9a-f]{16}\.wal"
)
_MAX_BACKUP_MEMBER = 64 << 20


class RestoreError(Exception):
    """The archive or the target directory is refused (the message says why)."""


@dataclass(frozen=True, slots=True)
class RestoreResult:
    info: dict[str, Any]  # the BACKUP member
    files: int
    bytes: int
    topics: int


def check_archive(path: str) -> dict[str, Any]:
    """Rules 1-2 over the archive at ``path``; returns its BACKUP member's fields.

    Raises:
        RestoreError: not a backup archive, or one that names anything a backup cannot.
        OSError: the file cannot be read.
    """
    with _open(path) as tar:
        return _check(tar, path)


def _open(path: str) -> tarfile.TarFile:
    try:
        return tarfile.open(path, "r:*")
    except tarfile.TarError as exc:
        raise RestoreError(f"{path} is not a tar archive: {exc}") from None


def _check(tar: tarfile.TarFile, path: str) -> dict[str, Any]:
    info: dict[str, Any] | None = None
    seen: dict[str, int] = {}
    try:
        for member in tar:
            if info is None:
                info = _backup_member(tar, member, path)
                continue
            name = member.name
            if member.isdir() and name.rstrip("/") in DIRECTORIES:
                continue
            if not member.isreg() or not _FILE_NAME.fullmatch(name):
                kind = "file" if member.isreg() else "link or special file"
                raise RestoreError(
                    f"{path}: member {name!r} ({kind}) is not part of a topics backup; "
                    "nothing was restored"
                )
            if name in seen:
                raise RestoreError(f"{path}: member {name!r} appears twice")
            seen[name] = member.size
    except tarfile.TarError as exc:
        raise RestoreError(f"{path}: damaged archive: {exc}") from None
    if info is None:
        raise RestoreError(f"{path} is empty: not a topics backup")
    listed: dict[str, int] = info["files"]
    if seen != listed:
        missing = sorted(set(listed) - set(seen))
        wrong = sorted(n for n in seen if n in listed and seen[n] != listed[n])
        extra = sorted(set(seen) - set(listed))
        raise RestoreError(
            f"{path} does not hold what its BACKUP member lists (truncated or altered?): "
            f"missing {missing[:5]}, wrong size {wrong[:5]}, not listed {extra[:5]}"
        )
    return info


def _backup_member(tar: tarfile.TarFile, member: tarfile.TarInfo, path: str) -> dict[str, Any]:
    if member.name != BACKUP_MEMBER or not member.isreg():
        raise RestoreError(
            f"{path} is not a topics backup: its first member is {member.name!r}, not BACKUP"
        )
    if member.size > _MAX_BACKUP_MEMBER:
        raise RestoreError(f"{path}: BACKUP member of {member.size} bytes is too large")
    raw = tar.extractfile(member)
    assert raw is not None
    try:
        info = ujson.loads(raw.read())
    except ValueError as exc:
        raise RestoreError(f"{path}: BACKUP member is not JSON: {exc}") from None
    if not isinstance(info, dict) or info.get("format") != BACKUP_FORMAT:
        got = info.get("format") if isinstance(info, dict) else None
        raise RestoreError(
            f"{path}: backup format {got!r} is not {BACKUP_FORMAT}, the one this version reads"
        )
    files = info.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(k, str) and type(v) is int and v >= 0 for k, v in files.items()
    ):
        raise RestoreError(f"{path}: BACKUP member has no valid file list")
    return info


def restore(
    archive: str, data_dir: str, *, force: bool = False, fs: Fs | None = None
) -> RestoreResult:
    """Restore ``archive`` into ``data_dir`` (module rules 1-4).

    Raises:
        RestoreError: the archive is refused, or the directory is not empty (no ``force``).
        DataDirLockedError: a server (or another restore) has ``data_dir`` open.
        StorageCorruptionError: the restored directory does not recover.
        OSError: reading the archive or writing the directory failed.
    """
    fs = fs if fs is not None else RealFs()
    info = check_archive(archive)  # rule 1: before the target is even looked at
    paths = StorePaths.for_dir(data_dir)
    fs.makedirs(paths.root)
    present = [n for n in fs.listdir(paths.root) if n != "LOCK"]
    if present and not force:
        raise RestoreError(
            f"{paths.root} is not empty ({', '.join(present[:5])}); restore into an empty "
            "directory, or pass --force to replace its data"
        )
    lock = fs.lock(paths.lock)
    try:
        if present:
            _clear(fs, paths)
        for sub in (paths.manifest, paths.segments, paths.wal):
            fs.makedirs(sub)
        try:
            files, nbytes = _extract(fs, archive, paths.root, info["files"])
            for sub in (paths.manifest, paths.segments, paths.wal, paths.root):
                fs.sync_dir(sub)
        except BaseException:
            with contextlib.suppress(OSError):
                _clear(fs, paths)  # rule 5: never leave half a backup behind
            raise
        recovered = recover(fs, paths, repair=False)
    finally:
        lock.release()
    return RestoreResult(info, files, nbytes, len(recovered.registry))


def _clear(fs: Fs, paths: StorePaths) -> None:
    """Rule 3's ``force``: the data directory's own files go, nothing else."""
    for sub in (paths.manifest, paths.segments, paths.wal):
        if fs.exists(sub):
            for name in fs.listdir(sub):
                fs.remove(f"{sub}/{name}")
            fs.sync_dir(sub)
    for name in (HEADS_FILE, HEADS_FILE + ".tmp"):
        if fs.exists(f"{paths.root}/{name}"):
            fs.remove(f"{paths.root}/{name}")
    fs.sync_dir(paths.root)


def _extract(fs: Fs, archive: str, root: str, listed: dict[str, int]) -> tuple[int, int]:
    files = nbytes = 0
    manifests: list[tuple[str, bytes]] = []
    with _open(archive) as tar:
        for member in tar:
            if member.name == BACKUP_MEMBER or member.isdir():
                continue
            # check_archive vetted every name, type and size; checked again here, so an
            # archive changed between the passes cannot slip a member through.
            name = member.name
            if not member.isreg() or listed.get(name) != member.size:
                raise RestoreError(f"{archive} changed while it was restored")
            if not _FILE_NAME.fullmatch(name):
                raise RestoreError(f"{archive}: member {name!r} is not part of a topics backup")
            src = tar.extractfile(member)
            assert src is not None
            if name.startswith("manifest/"):
                manifests.append((name, src.read()))  # rule 5: written last
            else:
                _copy(fs, src, f"{root}/{name}", member.size)
            files += 1
            nbytes += member.size
    for name, data in manifests:
        _copy(fs, io.BytesIO(data), f"{root}/{name}", len(data))
    return files, nbytes


def _copy(fs: Fs, src: IO[bytes], dest: str, size: int) -> None:
    handle = fs.open(dest, create=True)
    try:
        handle.truncate(0)
        offset = 0
        while offset < size:
            chunk = src.read(min(CHUNK_BYTES, size - offset))
            if not chunk:
                raise RestoreError(f"archive ended inside {dest}")
            handle.write_at(offset, chunk)
            offset += len(chunk)
        handle.sync_all()
    finally:
        handle.close()
