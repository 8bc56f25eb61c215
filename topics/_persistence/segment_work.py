"""A checkpoint's segment files: what it writes for each segment, and the worker-thread
code that writes, seals and removes them (``store.py`` owns when and in what order).

Split from store.py, which calls these with its file system seam and handle cache. The
rules are store.py's: 3 (bytes and flags synced before the manifest that lists them),
5 (a failed checkpoint is safe to retry: writers reopen at their durable length), 6 (an
empty segment gets no file) and 8 (the space check before anything is written, and the
files a failed pass created are removed so they do not hold a full disk). A seal writes
the segment's tag index just before its index (``tag_index.py`` rule 2).
"""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ujson

from .._storage.fs import Fs
from .._storage.handles import HandleCache
from .._storage.segment_edits import mark_deleted, remove_segment
from .._storage.segment_files import (
    SegmentWriter,
    index_size,
    open_for_append,
    segment_path,
)
from .._storage.tag_index import (
    encode_tag_index,
    estimated_tag_index_size,
    tag_index_path,
    tagged_frames,
    write_tag_index,
)
from ..log.cold_damage import readable

if TYPE_CHECKING:
    from .._storage.space import DiskSpace
    from ..log.topic_log import TopicLog

__all__ = [
    "NoRoomError",
    "SegmentFileState",
    "SegmentWork",
    "check_room",
    "remove_all",
    "segment_work",
    "write_segments",
]

log = logging.getLogger("topics.storage")


class NoRoomError(OSError):
    """A checkpoint that would leave less than half the reserve free did not start (rule 8).

    An ENOSPC-class error, so it is retried like a full disk, though nothing was written."""

    def __init__(self, needed: int, free: int | None, floor: int) -> None:
        super().__init__(
            errno.ENOSPC,
            f"the checkpoint needs {needed} bytes and {free} are free; it keeps {floor} "
            "free (half of TOPICS_MIN_FREE_BYTES) and waits for space",
        )


@dataclass(slots=True)
class SegmentFileState:
    """What is on disk for one segment: bytes written (and synced) and whether sealed."""

    path: str
    written: int
    sealed: bool
    writer: SegmentWriter | None = None


@dataclass(slots=True)
class SegmentWork:
    """One segment's part of a checkpoint, snapshotted on the trio thread (store rule 2)."""

    key: tuple[int, int]
    path: str
    topic_id: int
    base_seq: int
    salt: int
    data: bytes
    flag_offsets: list[int]
    seal: bool
    state: SegmentFileState | None
    grows: int  # bytes the disk loses to this work: new frames, the seal's index and tags
    # The SegmentBuffer itself when this work seals it: the worker thread reads its tags
    # for the tag index. Unlike ``data`` this needs no copy: a sealed buffer never grows
    # or moves again, and the only bytes that still change are delete flags, which the
    # tags file does not hold (tag_index.py rule 1). Each ``tag_at`` runs under the GIL.
    tags_of: Any | None = None


def check_room(space: DiskSpace | None, work: list[SegmentWork], body: dict[str, Any]) -> None:
    """Worker thread, store rule 8: raise NoRoomError when the checkpoint would eat into
    the lower half of the reserve (the manifest is measured as its JSON body)."""
    if space is None:
        return
    needed = sum(w.grows for w in work) + len(ujson.dumps(body))
    if not space.room_for(needed):
        raise NoRoomError(needed, space.free_bytes, space.checkpoint_floor)


def segment_work(
    files: dict[tuple[int, int], SegmentFileState],
    segments_dir: str,
    log: TopicLog,
    seg: Any,
    pending: dict[tuple[int, int], set[int]],
) -> SegmentWork:
    """What the checkpoint writes for ``seg`` (trio thread: its bytes are copied here);
    ``pending`` loses the segment's delete flags, which the work now carries."""
    key = (log.topic_id, seg.base_seq)
    state = files.get(key)
    written = state.written if state is not None else 0
    # Bytes are copied here, on the trio thread: the segment may grow (and move its
    # buffer) while the worker thread writes.
    data = bytes(seg.view()[written : seg.nbytes]) if seg.nbytes > written else b""
    seal = seg.sealed and not (state is not None and state.sealed)
    flags = []
    can_read = readable(seg)  # a quarantined segment's frames (log/damaged.py)
    for idx in pending.pop(key, ()):
        if idx >= can_read:
            continue
        end = seg.offset_of(idx) + seg.frame_len(idx)
        if end <= written and not seg.is_live(idx):
            flags.append(end - 1)
    return SegmentWork(
        key=key,
        path=segment_path(segments_dir, log.topic_id, seg.base_seq),
        topic_id=log.topic_id,
        base_seq=seg.base_seq,
        salt=seg.salt,
        data=data,
        flag_offsets=sorted(flags),
        seal=seal,
        state=state,
        grows=len(data)
        + (index_size(seg.count) + estimated_tag_index_size(seg.count) if seal else 0),
        tags_of=seg if seal else None,
    )


def write_segments(fs: Fs, handles: HandleCache, work: list[SegmentWork]) -> None:
    """Worker thread: append new bytes, flip flags, sync, seal (store rule 3)."""
    created: list[SegmentFileState] = []
    done = False
    try:
        for w in work:
            state = w.state
            if state is None:
                if fs.exists(w.path):  # left by a checkpoint that failed (rule 5)
                    remove_segment(fs, w.path, handles=handles)
                writer = SegmentWriter.create(
                    fs,
                    w.path,
                    topic_id=w.topic_id,
                    base_seq=w.base_seq,
                    salt=w.salt,
                    handles=handles,
                )
                state = SegmentFileState(w.path, 0, False, writer)
                created.append(state)
            if not w.data and not w.flag_offsets and not w.seal:
                w.state = state
                continue
            try:
                _write_segment(fs, handles, w, state)
            except BaseException:
                if state.writer is not None:  # rule 5: reopen at the durable length
                    state.writer.close()
                    state.writer = None
                raise
            w.state = state
        done = True
    finally:
        if not done:
            # Files this pass created are not adopted: the next checkpoint starts them
            # over, so their handles must not stay open (or pinned) meanwhile, and
            # their bytes must not hold the disk full until then (rule 8).
            for state in created:
                if state.writer is not None:
                    state.writer.close()
                    state.writer = None
                _discard(fs, handles, state.path)


def _write_segment(fs: Fs, handles: HandleCache, w: SegmentWork, state: SegmentFileState) -> None:
    if state.writer is None and not state.sealed:
        index = w.path + ".idx"
        if fs.exists(index):  # a seal that failed before its manifest
            fs.remove(index)
        state.writer = open_for_append(fs, w.path, durable_length=state.written, handles=handles)
    if w.flag_offsets:
        mark_deleted(fs, w.path, [o + 1 for o in w.flag_offsets], sync=True)
    if w.data:
        assert state.writer is not None
        state.writer.append(w.data)
        state.writer.sync()
        state.written += len(w.data)
    if w.seal and state.writer is not None:
        _write_tags(fs, w)
        state.writer.seal()
        state.sealed = True
        state.writer = None


def _write_tags(fs: Fs, w: SegmentWork) -> None:
    """Just before a seal: the segment's tag index, or no tags file when no frame has a tag.

    Renamed before the index exists, and the index's directory fsync makes both names
    durable (tag_index.py rule 2). A tags file already there was left by a seal that did
    not finish: it is replaced, or removed for an untagged segment, before the index
    vouches for the segment again.
    """
    tagged = tagged_frames(w.tags_of) if w.tags_of is not None else []
    if tagged:
        write_tag_index(fs, w.path, encode_tag_index(w.topic_id, w.base_seq, w.salt, tagged))
    elif fs.exists(tag_index_path(w.path)):
        fs.remove(tag_index_path(w.path))


def _discard(fs: Fs, handles: HandleCache, path: str) -> None:
    """Best effort: remove a file a failed checkpoint created (the next one would)."""
    try:
        remove_segment(fs, path, handles=handles)
    except OSError as exc:
        log.warning("cannot remove %s after a failed checkpoint: %s", path, exc)


def remove_all(
    fs: Fs, handles: HandleCache, dropped: list[tuple[tuple[int, int], SegmentFileState]]
) -> None:
    """Worker thread: remove dropped segments' files; ``dropped`` keeps what is left."""
    while dropped:
        state = dropped[-1][1]
        if state.writer is not None:
            state.writer.close()
            state.writer = None
        remove_segment(fs, state.path, handles=handles)
        dropped.pop()
