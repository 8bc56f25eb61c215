"""Online backup: a consistent snapshot of a live data directory, streamed as a tar.

Role: :func:`take_plan` decides, on the trio thread, exactly which bytes of which files
make up the snapshot; :meth:`BackupPlan.stream` hands them to a sink as a POSIX (ustar)
tar, reading each file in chunks in worker threads, while the engine keeps serving reads
and writes. The engine's ``open_backup``/``backup`` (``topics/ops/backups.py``) and
``GET /v0/backup`` are built on it; ``restore.py`` is the way back.

Rules:
1. The barrier is a WAL flush: every entry submitted before the backup began (so every
   write acknowledged by then) is written and synced, and the snapshot is the newest
   manifest plus the WAL after its covered LSN up to there. Not a checkpoint: one under a
   heavy write load has seconds of segment bytes to write first (bench/backup.py saw a
   ``disk``-class load keep the barrier checkpoint from finishing within 3 s), and it
   snapshots on the trio thread; the WAL already makes the snapshot consistent. The cost
   moves to the restore, which replays at most what a crash would (the store checkpoints
   every 30 s or 256 MiB of WAL).
2. The plan takes no lock: in one synchronous step it notes the newest manifest's
   generation G and the WAL's end, and raises ``store.pins`` (rule 3). A checkpoint
   already under way cannot take what G needs: it removes only segment files neither G
   nor its own manifest lists, trims only WAL files wholly covered by G, and anything it
   has left to do after that step sees the pin. (Waiting for the checkpoint lock instead
   made a backup under a heavy ``disk``-class load wait for checkpoints that take seconds,
   back to back.) Then, in a worker thread: G's bytes (read first and kept in memory:
   manifests hold metadata only, and G is the one file the pins do not keep; if two
   newer checkpoints replaced it meanwhile the plan is taken again), every segment file
   G lists up to the length G recorded, the companion files (``<seg>.idx``,
   ``<seg>.tags``, any ``<seg>.*`` but a temp file) of the segments G lists as sealed
   (of an unsealed one, an index a checkpoint is writing would describe more than the
   copied length), and the WAL files that may hold entries after G's covered LSN, the
   current one up to the end of its last applied batch (whole frames).
3. From the plan until the stream ends ``store.pins`` is raised: checkpoints neither
   remove a superseded segment file nor trim the WAL, so every listed file stays.
4. What may still change inside the copied bytes: a delete flag that a later checkpoint
   flips in place (a record deleted during the backup may read as deleted after a
   restore; docs/GUARANTEES.md). Segments and the WAL only grow past the copied lengths;
   a sealed segment's index never changes.
5. Not copied: the lock file and the heads table (advice bound to this boot). A restored
   directory recovers like one after a power loss at the plan's LSN: from the durable
   watermark, a ``disk`` topic may get a ``crash`` gap marker over seqs reserved but
   never written, an ``fsync`` topic skips them silently.
6. The first member is ``BACKUP``, JSON: the format, the server version, the manifest
   generation, its covered LSN, the last LSN copied, the creation time and every other
   member's name and size, so a restore can refuse a foreign or truncated archive.
7. The file reads are paced, by default to MAX_BYTES_PER_S (256 MiB/s; a caller may
   lift it): unpaced, a sink that takes everything at once (/dev/null, a local file) had
   the backup read the page cache at 1-2 GB/s, and on 2 cores ``fsync``-class writes kept
   55-83 % of their rate; paced, 101-104 % (bench/backup.py, a shared machine). A 100 GB
   directory then takes about 7 minutes; its pins hold that long.
"""

from __future__ import annotations

import tarfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio
import ujson

from .._storage.fs import Fs
from .._storage.manifest import manifest_name, read_manifest_body
from .._storage.segment_files import HEADER_SIZE as SEGMENT_HEADER_SIZE
from .._storage.segment_files import segment_path
from .._storage.wal_reader import wal_file_name, wal_path
from .._version import __version__

if TYPE_CHECKING:
    from .store import Store

__all__ = [
    "BACKUP_FORMAT",
    "BACKUP_MEMBER",
    "DIRECTORIES",
    "MAX_BYTES_PER_S",
    "BackupPlan",
    "Sink",
    "take_plan",
]

BACKUP_FORMAT = 1
BACKUP_MEMBER = "BACKUP"
#: The data directory's subdirectories a backup holds (every member lives in one).
DIRECTORIES = ("manifest", "segments", "wal")
#: Bytes read per worker-thread call: large enough that the thread hand-off is noise,
#: small enough that a backup holds a bounded buffer.
CHUNK_BYTES = 1 << 20
_BLOCK = 512
_RECORD = 20 * _BLOCK  # tar's record: an archive's length is a multiple of it
#: Rule 7's default pace of the file reads.
MAX_BYTES_PER_S = 256 * 2**20
# Rule 2's retry: a plan whose manifest two newer checkpoints replaced while it was read.
_PLAN_ATTEMPTS = 3

#: Where the tar bytes go (an HTTP body, a file); awaited once per chunk.
Sink = Callable[[bytes], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class _Member:
    name: str  # path inside the archive, relative to the data directory
    size: int
    path: str = ""  # the file to copy ``size`` bytes from
    data: bytes = b""  # or the bytes themselves (BACKUP, the manifest)


def _pad(size: int) -> int:
    return -size % _BLOCK


def _header(name: str, size: int, mtime: int, *, directory: bool = False) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = mtime
    info.mode = 0o755 if directory else 0o644
    info.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    return info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict")


class BackupPlan:
    """The files and lengths of one snapshot (rule 2), pinned until :meth:`release`."""

    def __init__(self, store: Store, members: list[_Member], info: dict[str, Any]) -> None:
        self._store = store
        self._fs: Fs = store.fs
        self._released = False
        self._rate: float | None = None
        self._t0 = 0.0
        self._read = 0
        self.info = info
        self.created_s = int(info["created_ms"]) // 1000
        files = {m.name: m.size for m in members}
        info["files"] = files
        backup = ujson.dumps(info, ensure_ascii=False, escape_forward_slashes=False).encode()
        self.members = [_Member(BACKUP_MEMBER, len(backup), data=backup), *members]
        body = sum(_BLOCK + m.size + _pad(m.size) for m in self.members)
        body += _BLOCK * len(DIRECTORIES) + 2 * _BLOCK
        #: The archive's exact length (an HTTP Content-Length: a cut stream shows).
        self.size = body + (-body % _RECORD)

    def release(self) -> None:
        """Let checkpoints remove and trim again (idempotent)."""
        if not self._released:
            self._released = True
            self._store.pins -= 1

    async def stream(self, sink: Sink, *, max_bytes_per_s: float | None = MAX_BYTES_PER_S) -> int:
        """Send the whole archive to ``sink``; returns its length in bytes.

        ``max_bytes_per_s`` paces the file reads (rule 7; None: as fast as the sink takes).

        Raises:
            OSError: a listed file could not be read, or was shorter than planned.
        """
        if self._released:
            raise RuntimeError("this backup plan was released; take a new one")
        self._rate = max_bytes_per_s
        self._t0 = trio.current_time()
        self._read = 0
        sent = 0
        first, *files = self.members
        sent += await self._send_bytes(sink, first)
        for directory in DIRECTORIES:
            await sink(_header(directory + "/", 0, self.created_s, directory=True))
            sent += _BLOCK
        for member in files:
            if member.path:
                sent += await self._send_file(sink, member)
            else:
                sent += await self._send_bytes(sink, member)
        trailer = 2 * _BLOCK + (-(sent + 2 * _BLOCK) % _RECORD)
        await sink(bytes(trailer))
        sent += trailer
        assert sent == self.size, (sent, self.size)
        return sent

    async def _pace(self, nbytes: int) -> None:
        self._read += nbytes
        if self._rate:
            ahead = self._read / self._rate - (trio.current_time() - self._t0)
            if ahead > 0:
                await trio.sleep(ahead)

    async def _send_bytes(self, sink: Sink, member: _Member) -> int:
        await sink(
            _header(member.name, member.size, self.created_s)
            + member.data
            + bytes(_pad(member.size))
        )
        return _BLOCK + member.size + _pad(member.size)

    async def _send_file(self, sink: Sink, member: _Member) -> int:
        await sink(_header(member.name, member.size, self.created_s))
        handle = await trio.to_thread.run_sync(self._fs.open, member.path)
        try:
            offset = 0
            while offset < member.size:
                want = min(CHUNK_BYTES, member.size - offset)
                chunk = await trio.to_thread.run_sync(handle.read_at, offset, want)
                if len(chunk) != want:
                    raise OSError(
                        f"backup: {member.path} ends at {offset + len(chunk)} bytes, "
                        f"but the snapshot holds {member.size}"
                    )
                await sink(chunk)
                offset += want
                await self._pace(want)
        finally:
            handle.close()
        if _pad(member.size):
            await sink(bytes(_pad(member.size)))
        return _BLOCK + member.size + _pad(member.size)


async def take_plan(store: Store, now_ms: int) -> BackupPlan:
    """Flush the WAL, then list the snapshot's files and pin them (rules 1-3).

    Raises:
        WalError, OSError: the WAL failed or a file could not be read (nothing is pinned).
    """
    await store.wal.flush()  # rule 1
    for attempt in range(_PLAN_ATTEMPTS):
        # Rule 2: the generation, the WAL's end and the pin in one synchronous step.
        generation = store.generation
        wal_files, last_lsn = store.wal.backup_files()
        store.pins += 1
        try:
            members, covered = await trio.to_thread.run_sync(
                _list_files, store, generation, wal_files, abandon_on_cancel=False
            )
            break
        except FileNotFoundError:
            store.pins -= 1
            if attempt + 1 == _PLAN_ATTEMPTS:
                raise
        except BaseException:
            store.pins -= 1
            raise
    info: dict[str, Any] = {
        "format": BACKUP_FORMAT,
        "server_version": __version__,
        "manifest_generation": generation,
        "covered_lsn": covered,
        "last_lsn": last_lsn,
        "created_ms": now_ms,
    }
    return BackupPlan(store, members, info)


def _list_files(
    store: Store, generation: int, wal_files: list[tuple[int, int | None, int | None]]
) -> tuple[list[_Member], int]:
    """The members after BACKUP, and the manifest's covered LSN (a worker thread)."""
    fs, paths = store.fs, store.paths
    members: list[_Member] = []
    covered = 0
    if generation:
        name = manifest_name(generation)
        path = f"{paths.manifest}/{name}"
        raw = _read_whole(fs, path)  # first: the only file the pins do not keep
        body = read_manifest_body(fs, path, generation)
        if isinstance(body, str):
            raise OSError(f"backup: the newest manifest {path} does not validate: {body}")
        members.append(_Member(f"manifest/{name}", len(raw), data=raw))
        covered = int(body["covered_lsn"])
        members += _segment_members(fs, paths.segments, body)
    for i, (file_no, _, length) in enumerate(wal_files):
        if i + 1 < len(wal_files):
            next_first = wal_files[i + 1][1]
            if next_first is not None and next_first <= covered + 1:
                continue  # every entry in it is covered by the manifest
        path = wal_path(paths.wal, file_no)
        size = length if length is not None else _size(fs, path)
        members.append(_Member(f"wal/{wal_file_name(file_no)}", size, path=path))
    return members, covered


def _segment_members(fs: Fs, directory: str, body: dict[str, Any]) -> list[_Member]:
    names = fs.listdir(directory) if fs.exists(directory) else []
    companions: dict[str, list[str]] = {}
    for name in names:
        stem, dot, _ = name.partition(".seg.")
        if dot and not name.endswith(".tmp"):
            companions.setdefault(stem + ".seg", []).append(name)
    members = []
    for topic in body.get("topics", ()):
        for seg in topic.get("segments", ()):
            path = segment_path(directory, int(topic["id"]), int(seg["base"]))
            name = path.rsplit("/", 1)[1]
            size = SEGMENT_HEADER_SIZE + int(seg["length"])
            members.append(_Member(f"segments/{name}", size, path=path))
            if not seg.get("sealed"):
                # An index (or tag file) a checkpoint is writing now describes more than
                # the recorded length: recovery would refuse the copy (rule 2).
                continue
            for extra in sorted(companions.get(name, ())):
                extra_path = f"{directory}/{extra}"
                members.append(_Member(f"segments/{extra}", _size(fs, extra_path), path=extra_path))
    return members


def _size(fs: Fs, path: str) -> int:
    handle = fs.open(path)
    try:
        return handle.size()
    finally:
        handle.close()


def _read_whole(fs: Fs, path: str) -> bytes:
    handle = fs.open(path)
    try:
        return handle.read_at(0, handle.size())
    finally:
        handle.close()
