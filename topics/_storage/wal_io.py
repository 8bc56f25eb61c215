"""The WAL's disk calls, run by the writer (on a worker thread, or inline: wal.py Rule 8).

``do_io`` is one batch's [rotate,] encode, write, [fdatasync]; ``create_file`` makes a
rotated file whose header is durable before any frame goes in (Rule 5); ``cut_back``
undoes a write the disk could not hold (Rule 9). They get everything as arguments and
return what changed (Rule 6): no Wal state is touched here.
"""

from __future__ import annotations

import contextlib
import errno
import time
from dataclasses import dataclass

from .fs import FileHandle, Fs, is_no_space
from .wal_reader import HEADER_SIZE, encode_frames, encode_header, new_salt, wal_path

__all__ = ["NO_DESCRIPTOR", "IoResult", "NoSpace", "WalFile", "create_file", "cut_back", "do_io"]


#: The process or the system is out of file descriptors: a passing shortage.
NO_DESCRIPTOR = frozenset({errno.EMFILE, errno.ENFILE})


class NoSpace(Exception):
    """The batch hit a full disk and was cut back cleanly (Rule 9; between these calls and the writer only)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(slots=True)
class WalFile:
    handle: FileHandle
    file_no: int
    first_lsn: int
    salt: int
    size: int


@dataclass(frozen=True, slots=True)
class IoResult:
    append_ms: float
    fsync_ms: float
    fsyncs: int
    new_file: WalFile | None
    bytes_written: int


def create_file(fs: Fs, dir: str, file_no: int, first_lsn: int) -> WalFile:
    path = wal_path(dir, file_no)
    if fs.exists(path):
        raise FileExistsError(f"WAL file {path} already exists")
    try:
        handle = fs.open(path, create=True)
    except OSError as exc:
        # No inode or no descriptor left: nothing was created, and both pass, so the
        # batch stalls and retries like a full disk (Rule 9) instead of failing the WAL.
        if is_no_space(exc) or exc.errno in NO_DESCRIPTOR:
            raise NoSpace(exc) from exc
        raise
    salt = new_salt()
    created = False
    try:
        try:
            handle.write_at(0, encode_header(file_no, salt, first_lsn))
        except OSError as exc:
            if not is_no_space(exc):
                raise
            # Rule 9: the file holds no frame, so it can go; a retry creates it again.
            # (A failed removal is raised instead: the retry would find the file there.)
            handle.close()
            fs.remove(path)
            raise NoSpace(exc) from exc
        # The header (file and directory entry) is durable before any frame is written,
        # so a torn header can only ever belong to a file that holds nothing (Rule 5).
        handle.sync_all()
        fs.sync_dir(dir)
        created = True
    finally:
        if not created:
            handle.close()
    return WalFile(handle, file_no, first_lsn, salt, HEADER_SIZE)


def do_io(
    fs: Fs,
    dir: str,
    current: WalFile,
    frames: list[tuple[int, int, bytes]],
    sync: bool,
    rotate: bool,
    old_unsynced: bool,
) -> IoResult:
    """Worker-thread body: [rotate,] encode, write, [fdatasync]."""
    fsyncs = 0
    new_file = None
    if rotate:
        # Old file first: everything in it is durable before the next file exists, so
        # only the newest file can ever have a torn tail (Rule 5).
        if old_unsynced:
            current.handle.sync_data()
            fsyncs += 1
        new_file = create_file(fs, dir, current.file_no + 1, frames[0][0])
    target = new_file or current
    done = False
    try:
        buf = encode_frames(frames, target.salt) if frames else bytearray()
        t0 = time.perf_counter()
        if buf:
            try:
                target.handle.write_at(target.size, buf)
            except OSError as exc:
                if not is_no_space(exc):
                    raise
                cut_back(fs, dir, target, new=new_file is not None)  # raises: Rule 4
                raise NoSpace(exc) from exc
        t1 = time.perf_counter()
        if sync:
            target.handle.sync_data()
            fsyncs += 1
        t2 = time.perf_counter()
        done = True
    except OSError:
        # The batch is reported failed, so its bytes must not be replayed by the next open:
        # cut them off (best effort: the Wal turns read-only either way).
        with contextlib.suppress(OSError):
            target.handle.truncate(target.size)
        raise
    finally:
        if new_file is not None:
            # On success the old file is finished; on failure the Wal keeps the old one
            # as current (it goes read-only) and the new handle must not leak.
            (current if done else new_file).handle.close()
    fsync_ms = (t2 - t1) * 1e3 if sync else 0.0
    return IoResult((t1 - t0) * 1e3, fsync_ms, fsyncs, new_file, len(buf))


def cut_back(fs: Fs, dir: str, target: WalFile, *, new: bool) -> None:
    """Rule 9: undo a write the disk could not hold, so the retry finds the file as it was.

    A short write may have left part of a frame; truncating to the pre-write length
    removes it (the bytes before were whole frames). No fsync: a crash that resurrects the
    cut bytes leaves a torn tail, which recovery repairs, or whole frames of a batch whose
    callers were told its outcome is unknown. A rotated file that got no frame is removed
    instead, with its directory entry synced, so the retry can create it again.
    """
    if new:
        target.handle.close()
        fs.remove(wal_path(dir, target.file_no))
        fs.sync_dir(dir)
    else:
        target.handle.truncate(target.size)
