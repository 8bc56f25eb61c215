"""Segment files: a topic's record frames on disk, byte for byte as the in-memory segment.

Role: each topic appends its published frames (``topics._core`` record frames, see the
layout in ``_core/_ext.pyi``) to an active segment file; at a size/age limit the engine
seals it (sync, then an index file written atomically). Reads hand the frame bytes to
``SegmentBuffer.from_frames``. Deletions of sealed records flip the frame's trailer byte
in place (the trailer is outside the frame CRC); see ``docs/STORAGE_FORMATS.md`` for the
measurement behind that choice (docs/STORAGE_FORMATS.md, "Segments").

Rule 1: file names are numeric only (``<topic_id>-<base_seq>.seg``, hex): user input
  never reaches a path.
Rule 2: a segment's frames are exactly the bytes after its header; ``length`` counts frame
  bytes written, ``synced_length`` the prefix known durable. The engine records
  ``synced_length`` in the manifest, and only that prefix is ever trusted after a crash
  (``open_for_append`` cuts everything past it).
Rule 3: sealed <=> ``<path>.idx`` exists. The index is written only after the frames are
  synced, under a temp name, fsynced, renamed and the directory synced, so an index never
  describes bytes that are not durable. A sealed segment never changes again except for
  trailer bytes (deletion flags). A sealed segment with tagged frames also has a tag
  index ``<path>.tags`` (``tag_index.py``), renamed into place before the index is.
Rule 4: reading never returns bad bytes silently: a bad header, a sealed segment that
  disagrees with its index or fails a frame CRC, or a missing durable prefix raises
  :class:`SegmentCorruptionError`. Only an unsealed segment read without ``max_length``
  (a reader beside a live writer) stops quietly at a torn tail.
Rule 5: a segment's first sync also syncs its directory entry, so a segment the
  manifest names is always found after a crash.
Rule 6: a writer owns no descriptor: it borrows its file's handle from a bounded
  :class:`~.handles.HandleCache` for each call, and keeps it pinned only while it holds
  unsynced bytes (handles.py Rule 3). So open descriptors never grow with the number of
  topics; a failed write or sync closes the handle (the next open is a fresh one).
"""

from __future__ import annotations

import array
import posixpath
import struct
import sys
from typing import NamedTuple

from topics._core import FrameError, crc32c, frame_offsets, frame_seq, iter_frames

from .fs import Buffer, FileHandle, Fs, StorageCorruptionError
from .handles import HandleCache

__all__ = [
    "SEGMENT_FORMAT_VERSION",
    "SegmentCorruptionError",
    "SegmentData",
    "SegmentWriter",
    "index_size",
    "open_for_append",
    "parse_segment_name",
    "read_header",
    "read_segment",
    "segment_path",
    "write_atomically",
]

SEGMENT_MAGIC = b"TOPICSEG"
INDEX_MAGIC = b"TOPICIDX"
SEGMENT_FORMAT_VERSION = 1
# magic, version, header_size, salt, topic_id, base_seq, reserved, header crc
_HEADER = struct.Struct("<8sHHIQQII")
HEADER_SIZE = _HEADER.size  # 40
# magic, version, reserved, salt, topic_id, base_seq, frame_count, frames_length
_INDEX_HEADER = struct.Struct("<8sHHIQQII")
_U32 = struct.Struct("<I")
_SUFFIX = ".seg"
INDEX_SUFFIX = ".idx"
TAGS_SUFFIX = ".tags"  # the tag index (tag_index.py), which removal takes along
_U32_MAX = 0xFFFFFFFF


class SegmentCorruptionError(StorageCorruptionError):
    """A segment or its index does not validate (Rule 4)."""


class SegmentData(NamedTuple):
    topic_id: int
    base_seq: int
    salt: int
    frames: bytes
    sealed: bool


def segment_path(dir: str, topic_id: int, base_seq: int) -> str:
    """The data file of a topic's segment starting at ``base_seq`` (index: ``+ ".idx"``)."""
    return f"{dir.rstrip('/')}/{topic_id:016x}-{base_seq:016x}{_SUFFIX}"


def index_size(frames: int) -> int:
    """Bytes of the index a seal writes for ``frames`` frames (a checkpoint's space check)."""
    return _INDEX_HEADER.size + _U32.size * frames + _U32.size


def parse_segment_name(name: str) -> tuple[int, int] | None:
    """``(topic_id, base_seq)`` of a segment data file name, None for any other name."""
    if not name.endswith(_SUFFIX) or len(name) != 33 + len(_SUFFIX) or name[16] != "-":
        return None
    topic, base = name[:16], name[17:33]
    if topic != topic.lower() or base != base.lower():
        return None
    try:
        return int(topic, 16), int(base, 16)
    except ValueError:
        return None


def _encode_header(topic_id: int, base_seq: int, salt: int) -> bytes:
    head = _HEADER.pack(
        SEGMENT_MAGIC, SEGMENT_FORMAT_VERSION, HEADER_SIZE, salt, topic_id, base_seq, 0, 0
    )
    return head[:-4] + _U32.pack(crc32c(head[:-4]))


def read_header(handle: FileHandle, path: str) -> tuple[int, int, int]:
    """(topic_id, base_seq, salt) of a checked header."""
    raw = handle.read_at(0, HEADER_SIZE)
    if len(raw) < HEADER_SIZE:
        raise SegmentCorruptionError("segment header is short", path=path, offset=0)
    magic, version, size, salt, topic_id, base_seq, _, crc = _HEADER.unpack(raw)
    if magic != SEGMENT_MAGIC or crc32c(raw[:-4]) != crc:
        raise SegmentCorruptionError("bad segment header checksum", path=path, offset=0)
    if version != SEGMENT_FORMAT_VERSION or size != HEADER_SIZE:
        raise SegmentCorruptionError(f"unsupported segment version {version}", path=path, offset=0)
    return topic_id, base_seq, salt


def _le_u32(values: array.array[int]) -> bytes:
    if sys.byteorder == "big":  # pragma: no cover - the format is little-endian
        values = array.array("I", values)
        values.byteswap()
    return values.tobytes()


def _check_seqs(frames: Buffer, count: int, last_off: int, first_seq: int) -> bool:
    """Cheap continuity check: the first and the last (at ``last_off``) of ``count``
    frames carry the expected seqs."""
    return count == 0 or (
        frame_seq(frames, 0) == first_seq and frame_seq(frames, last_off) == first_seq + count - 1
    )


def _cache_for(fs: Fs, handles: HandleCache | None) -> HandleCache:
    # A writer made without the store's cache gets one of its own, bounded to one handle.
    return handles if handles is not None else HandleCache(fs, 1)


class SegmentWriter:
    """Appends frames to one active segment file; not safe for two concurrent appenders.

    ``sync()`` may run in a worker thread while ``append()`` runs on the trio thread: it
    reports only the bytes appended before it started. The file handle comes from a
    :class:`HandleCache` for each call (Rule 6).
    """

    def __init__(
        self,
        handles: HandleCache,
        path: str,
        *,
        topic_id: int,
        base_seq: int,
        salt: int,
        offsets: array.array[int],
        length: int,
        entry_durable: bool,
    ) -> None:
        self._handles = handles
        self._fs = handles.fs
        self.path = path
        # Pinned in the cache while it holds unsynced bytes (handles.py Rule 3).
        self._dirty: FileHandle | None = None
        self.topic_id = topic_id
        self.base_seq = base_seq
        self.salt = salt
        self._offsets = offsets
        self._length = length
        self._synced_length = length if entry_durable else 0
        self._entry_durable = entry_durable
        self._sealed = False
        self._failure: OSError | None = None

    @classmethod
    def create(
        cls,
        fs: Fs,
        path: str,
        *,
        topic_id: int,
        base_seq: int,
        salt: int,
        handles: HandleCache | None = None,
    ) -> SegmentWriter:
        """Create a new, empty segment file (header written, not yet synced).

        Args:
            handles: the cache to borrow handles from (the store's; default: a private
                one-handle cache over ``fs``).

        Raises:
            FileExistsError: ``path`` exists already.
            OSError: the file could not be created or written.
        """
        cache = _cache_for(fs, handles)
        if cache.fs.exists(path):
            raise FileExistsError(f"segment {path} already exists")
        cache.discard(path)  # Rule 4 of handles.py: never a handle on an older inode
        handle = cache.acquire(path, create=True)
        ok = False
        try:
            handle.write_at(0, _encode_header(topic_id, base_seq, salt))
            ok = True
        finally:
            if not ok:
                cache.discard(path)
        writer = cls(
            cache,
            path,
            topic_id=topic_id,
            base_seq=base_seq,
            salt=salt,
            offsets=array.array("I"),
            length=0,
            entry_durable=False,
        )
        writer._dirty = handle  # the header is not synced yet: stays pinned until it is
        return writer

    @classmethod
    def open_for_append(
        cls,
        fs: Fs,
        path: str,
        *,
        durable_length: int,
        verify: bool = True,
        handles: HandleCache | None = None,
    ) -> SegmentWriter:
        """Reopen an active segment after a restart, cutting everything past
        ``durable_length`` (the length the manifest recorded; Rule 2).

        Args:
            handles: the cache to borrow handles from (see :meth:`create`).

        Raises:
            SegmentCorruptionError: bad header, or the durable prefix is missing or bad.
            ValueError: the segment is sealed.
            OSError: the open, truncate or sync failed.
        """
        cache = _cache_for(fs, handles)
        if cache.fs.exists(path + INDEX_SUFFIX):
            raise ValueError(f"segment {path} is sealed; it cannot be appended to")
        # A fresh descriptor: whatever a cached one saw (a failed write) is not carried over.
        cache.discard(path)
        handle = cache.acquire(path, write=True)
        ok = False
        try:
            topic_id, base_seq, salt = read_header(handle, path)
            frames = _read_exact(handle, path, durable_length)
            try:
                offsets = frame_offsets(frames, salt, verify)
            except FrameError as exc:
                raise SegmentCorruptionError(f"bad frame: {exc}", path=path) from None
            if not _check_seqs(frames, len(offsets), offsets[-1] if offsets else 0, base_seq):
                raise SegmentCorruptionError("frame seqs do not follow base_seq", path=path)
            if handle.size() > HEADER_SIZE + durable_length:
                handle.truncate(HEADER_SIZE + durable_length)
                # Before new frames land: a crash must not leave them behind old junk.
                handle.sync_all()
            ok = True
        finally:
            if ok:
                cache.release(path)
            else:
                cache.discard(path)
        return cls(
            cache,
            path,
            topic_id=topic_id,
            base_seq=base_seq,
            salt=salt,
            offsets=offsets,
            length=durable_length,
            entry_durable=True,
        )

    @property
    def length(self) -> int:
        """Frame bytes written (not necessarily durable)."""
        return self._length

    @property
    def synced_length(self) -> int:
        """Frame bytes known durable."""
        return self._synced_length

    @property
    def frame_count(self) -> int:
        return len(self._offsets)

    @property
    def sealed(self) -> bool:
        return self._sealed

    def _check_usable(self) -> None:
        if self._sealed:
            raise ValueError(f"segment {self.path} is sealed")
        if self._failure is not None:
            raise OSError(
                self._failure.errno, f"segment {self.path} failed earlier: {self._failure}"
            )

    def append(self, frames: Buffer) -> None:
        """Write whole frames (continuing this segment's seqs) at the end; no sync.

        Raises:
            FrameError: ``frames`` are not whole frames.
            ValueError: seqs do not continue the segment, the segment would pass 4 GiB,
                or it is sealed.
            OSError: the write failed (the writer is then unusable).
        """
        self._check_usable()
        if self._length + len(frames) > _U32_MAX:
            raise ValueError("a segment holds at most 4 GiB of frames")
        # One pass in the core, no Python object per frame: a checkpoint appends every
        # frame written since the last one.
        offsets = frame_offsets(frames, self.salt, False, self._length)
        last_off = offsets[-1] - self._length if offsets else 0
        if not _check_seqs(frames, len(offsets), last_off, self.base_seq + len(self._offsets)):
            raise ValueError("frames do not continue this segment's seqs")
        handle = self._dirty
        try:
            if handle is None:
                handle = self._dirty = self._handles.acquire(self.path, write=True)
            handle.write_at(HEADER_SIZE + self._length, frames)
        except OSError as exc:
            if handle is not None:  # an open that failed (EMFILE) leaves the writer usable
                self._fail(exc)
            raise
        self._offsets.extend(offsets)
        self._length += len(frames)

    def sync(self) -> int:
        """Make every frame appended so far durable; returns ``synced_length``.

        Raises:
            OSError: the fsync failed. The writer is then unusable for good (an fsync
                is never retried: its failure may have dropped the data it covered).
        """
        self._check_usable()
        length = self._length
        if self._dirty is None and self._synced_length == length and self._entry_durable:
            return self._synced_length  # nothing written since the last sync: no open
        # Normally the dirty handle; without one (a reopened writer), a fresh borrow.
        handle = self._dirty or self._handles.acquire(self.path, write=True)
        self._dirty = handle
        try:
            if self._entry_durable:
                handle.sync_data()
            else:
                handle.sync_all()
                self._fs.sync_dir(posixpath.dirname(self.path))  # Rule 5
                self._entry_durable = True
        except OSError as exc:
            self._fail(exc)
            raise
        if self._length == length:  # an append meanwhile (trio thread) keeps it pinned
            self._dirty = None
            self._handles.release(self.path)
        self._synced_length = max(self._synced_length, length)
        return self._synced_length

    def _fail(self, exc: OSError) -> None:
        """A write or sync failed: unusable for good, and its handle is closed (Rule 6)."""
        self._failure = exc
        self._dirty = None
        self._handles.discard(self.path)

    def seal(self) -> None:
        """Sync the frames, then write the index atomically (Rule 3) and close.

        Raises:
            OSError: a sync, write or rename failed; the segment stays unsealed.
        """
        self.sync()
        offsets = _le_u32(self._offsets)
        head = _INDEX_HEADER.pack(
            INDEX_MAGIC,
            SEGMENT_FORMAT_VERSION,
            0,
            self.salt,
            self.topic_id,
            self.base_seq,
            len(self._offsets),
            self._length,
        )
        body = head + offsets
        write_atomically(
            self._fs, self.path + INDEX_SUFFIX, body + _U32.pack(crc32c(body, self.salt))
        )
        self._sealed = True
        self._handles.discard(self.path)  # only delete flags touch it again: one-shot opens

    def close(self) -> None:
        """Close the file's handle (it is dropped from the cache); closing twice is fine."""
        self._dirty = None
        self._handles.discard(self.path)


def open_for_append(
    fs: Fs,
    path: str,
    *,
    durable_length: int,
    verify: bool = True,
    handles: HandleCache | None = None,
) -> SegmentWriter:
    """Module-level alias of :meth:`SegmentWriter.open_for_append`."""
    return SegmentWriter.open_for_append(
        fs, path, durable_length=durable_length, verify=verify, handles=handles
    )


def write_atomically(fs: Fs, path: str, data: bytes, *, sync_dir: bool = True) -> None:
    """Replace ``path`` by ``data`` through ``<path>.tmp``: write, fsync, rename, and with
    ``sync_dir`` a directory fsync (without it the new name is durable only after the
    caller's next directory fsync of the same directory).

    Raises:
        OSError: a write, sync or rename failed (the final name is untouched then).
    """
    tmp = path + ".tmp"
    if fs.exists(tmp):
        # A fresh inode, never one whose earlier write or fsync may have failed.
        fs.remove(tmp)
    handle = fs.open(tmp, create=True)
    try:
        handle.write_at(0, data)
        handle.sync_all()  # bytes durable before the name that vouches for them
    finally:
        handle.close()
    fs.rename(tmp, path)
    if sync_dir:
        fs.sync_dir(posixpath.dirname(path))


def _read_exact(handle: FileHandle, path: str, length: int) -> bytes:
    data = handle.read_at(HEADER_SIZE, length) if length else b""
    if len(data) != length:
        raise SegmentCorruptionError(
            f"segment holds {len(data)} frame bytes, {length} were recorded durable",
            path=path,
            offset=HEADER_SIZE + len(data),
        )
    return data


def _spans(frames: bytes, salt: int, verify: bool, path: str) -> list[tuple[int, int]]:
    try:
        return iter_frames(frames, salt, verify)
    except FrameError as exc:
        raise SegmentCorruptionError(f"bad frame: {exc}", path=path) from None


def _whole_prefix(frames: bytes, salt: int, verify: bool) -> bytes:
    """The longest prefix of whole (and, with verify, checksum-valid) frames."""
    try:
        iter_frames(frames, salt, verify)
        return frames
    except FrameError as exc:
        bad = max(exc.index, 0)
    end = 0
    for _ in range(bad):  # only on a torn tail: walk lengths up to the first bad frame
        end += _U32.unpack_from(frames, end)[0]
    return frames[:end]


def read_segment(
    fs: Fs, path: str, *, verify: bool = True, max_length: int | None = None
) -> SegmentData:
    """Read a segment's header and frames (only the first ``max_length`` frame bytes when
    given), checking the header and, for a sealed segment, the index (Rule 4).

    Args:
        fs: the file system seam.
        path: the segment's data file.
        verify: check every frame's CRC (structure and the index are always checked).
        max_length: the durable length recorded for it; that many bytes must be there
            and end on a frame boundary.

    Raises:
        SegmentCorruptionError: see Rule 4.
    """
    handle = fs.open(path)
    try:
        topic_id, base_seq, salt = read_header(handle, path)
        available = handle.size() - HEADER_SIZE
        sealed = fs.exists(path + INDEX_SUFFIX)
        if sealed:
            frames = _read_exact(handle, path, available)
        elif max_length is not None:
            frames = _read_exact(handle, path, max_length)
        else:
            frames = _whole_prefix(_read_exact(handle, path, available), salt, verify)
    finally:
        handle.close()
    spans = _spans(frames, salt, verify, path)
    if sealed:
        _check_index(fs, path, (topic_id, base_seq, salt), frames, spans)
    if not _check_seqs(frames, len(spans), spans[-1][0] if spans else 0, base_seq):
        raise SegmentCorruptionError("frame seqs do not follow base_seq", path=path)
    if sealed and max_length is not None and max_length != len(frames):
        if max_length > len(frames) or max_length not in {off for off, _ in spans}:
            raise SegmentCorruptionError(
                f"recorded length {max_length} is not a frame boundary of the sealed segment",
                path=path,
            )
        frames = frames[:max_length]
    return SegmentData(topic_id, base_seq, salt, frames, sealed)


def _check_index(
    fs: Fs,
    path: str,
    ident: tuple[int, int, int],
    frames: bytes,
    spans: list[tuple[int, int]],
) -> None:
    idx_path = path + INDEX_SUFFIX
    handle = fs.open(idx_path)
    try:
        raw = handle.read_at(0, handle.size())
    finally:
        handle.close()
    topic_id, base_seq, salt = ident
    size = _INDEX_HEADER.size
    if len(raw) < size + 4 or crc32c(raw[:-4], salt) != _U32.unpack_from(raw, len(raw) - 4)[0]:
        raise SegmentCorruptionError("segment index fails its checksum", path=idx_path)
    magic, version, _, i_salt, i_topic, i_base, count, length = _INDEX_HEADER.unpack_from(raw)
    if (magic, version, i_salt, i_topic, i_base) != (
        INDEX_MAGIC,
        SEGMENT_FORMAT_VERSION,
        salt,
        topic_id,
        base_seq,
    ) or len(raw) != size + 4 * count + 4:
        raise SegmentCorruptionError("segment index does not match its segment", path=idx_path)
    offsets = array.array("I", raw[size : size + 4 * count])
    if sys.byteorder == "big":  # pragma: no cover
        offsets.byteswap()
    if length != len(frames) or offsets.tolist() != [off for off, _ in spans]:
        raise SegmentCorruptionError(
            f"sealed segment has {len(frames)} frame bytes in {len(spans)} frames; its index "
            f"says {length} bytes in {count} frames",
            path=path,
        )
