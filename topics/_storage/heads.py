"""The heads table: how far each topic handed out seqs, kept where a killed process leaves it.

Role: after a process crash (SIGKILL, an OOM kill, a segfault) on the same boot, tell
recovery the head each topic had really reached, so that a ``crash`` tombstone names
exactly the seqs that were handed out and lost, and no tombstone appears when nothing was
(issue 20). Without it recovery only knows the durable watermark, which is up to 4,096
seqs above anything handed out.

Rules:
1. A topic's slot is written on every change notification (a ``TopicLog`` listener, run
   synchronously by ``wake()``), and every path that moves a head wakes before it awaits:
   no other task, reader or client can see a seq before the table holds it. The write is a
   store into a shared file mapping: no system call on the write path.
2. The kernel keeps a shared mapping's dirty pages when the process dies, so the next
   process on the same boot reads what the dead one stored last. A power loss or kernel
   crash may lose or tear them: the table names the boot it was written in
   (``/proc/sys/kernel/random/boot_id``) and :func:`read_heads` returns it only on that
   same boot. Otherwise (no boot id on this system, no table, a table that does not parse)
   it returns None and recovery falls back to the durable watermark (recovery.py rule 4).
3. It is never synced and never part of a checkpoint: it is advice for one boot only.
4. A slot is 16 bytes, 8-aligned: the topic id (0: free), then the head. The id is
   written when the topic is tracked, before any head store; a head is one aligned
   8-byte store, so a process killed mid-update leaves the old head or the new one.
5. :meth:`HeadTable.create` fills a fresh table under a temporary name and renames it
   over the old one, so a crash while starting leaves the previous run's table, which
   still describes what the next recovery replays.
6. Every byte of the mapping has its disk blocks allocated before it is mapped
   (``posix_fallocate``): a store into a page of a sparse file that needs a block on a
   full disk would kill the process with SIGBUS. No blocks for a table (or for its growth)
   is not an error: the table is left out (or the new topic untracked), and recovery falls
   back to the watermark for what it does not cover.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import struct
import uuid
from collections.abc import Callable, Iterable
from typing import Protocol

__all__ = ["HEADS_FILE", "HeadTable", "boot_id", "read_heads"]

_logger = logging.getLogger("topics.storage")

HEADS_FILE = "heads"
_MAGIC = b"TOPICSHD"
_VERSION = 1
_HEADER = struct.Struct("<8sI4x16s")  # magic, version, boot id: 32 bytes
_SLOT = struct.Struct("<QQ")  # topic id, head
_HEAD = struct.Struct("<Q")
_FIRST_SLOTS = 1024
_BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


class TrackedLog(Protocol):
    """What the table needs of a topic log (``topics.log.topic_log.TopicLog``)."""

    topic_id: int
    head: int

    def listen(self, listener: Callable[[], object]) -> None: ...
    def unlisten(self, listener: Callable[[], object]) -> None: ...


def boot_id(path: str = _BOOT_ID_PATH) -> bytes | None:
    """This boot's id (16 bytes), or None where the system does not say (rule 2)."""
    try:
        with open(path, encoding="ascii") as f:
            return uuid.UUID(f.read().strip()).bytes
    except (OSError, ValueError):
        return None


def read_heads(root: str, boot: bytes | None = None) -> dict[int, int] | None:
    """Topic id -> head handed out, from the table a process of this boot left in ``root``;
    None when it cannot be trusted (rule 2)."""
    boot = boot if boot is not None else boot_id()
    if boot is None:
        return None
    try:
        with open(os.path.join(root, HEADS_FILE), "rb") as f:
            data = f.read()
    except OSError:
        return None
    if len(data) < _HEADER.size:
        return None
    magic, version, written_in = _HEADER.unpack_from(data)
    if magic != _MAGIC or version != _VERSION or written_in != boot:
        return None
    heads: dict[int, int] = {}
    twice: set[int] = set()
    for off in range(_HEADER.size, len(data) - _SLOT.size + 1, _SLOT.size):
        topic_id, head = _SLOT.unpack_from(data, off)
        if topic_id:
            if topic_id in heads:
                twice.add(topic_id)
            heads[topic_id] = head
    # A topic has one slot: two name it only if one was damaged, and neither is trusted
    # then (the topic falls back to its durable watermark: a wider skip, never a narrower).
    for topic_id in twice:
        del heads[topic_id]
    return heads


class _Slot:
    """A topic's listener: stores its head into its slot (rule 1)."""

    __slots__ = ("log", "off", "table")

    def __init__(self, table: HeadTable, log: TrackedLog, off: int) -> None:
        self.table, self.log, self.off = table, log, off

    def __call__(self) -> None:
        mm = self.table.map
        if mm is not None:
            _HEAD.pack_into(mm, self.off + 8, self.log.head)


class HeadTable:
    """The live table of one engine (one data directory, one process)."""

    def __init__(self, path: str, fd: int, slots: int) -> None:
        self.path = path
        self._fd = fd
        self.map: mmap.mmap | None = mmap.mmap(fd, _HEADER.size + slots * _SLOT.size)
        self._capacity = slots
        self._free: list[int] = list(range(slots - 1, -1, -1))
        self._tracked: dict[int, _Slot] = {}

    @classmethod
    def create(cls, root: str, logs: Iterable[TrackedLog]) -> HeadTable | None:
        """A fresh table tracking ``logs``, in place of the old one (rule 5); None when
        this system has no boot id (recovery could never use the table)."""
        boot = boot_id()
        if boot is None:
            return None
        path = os.path.join(root, HEADS_FILE)
        tmp = path + ".tmp"
        try:
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            _logger.warning("no heads table (%s): a crash recovers heads from the watermark", exc)
            return None
        try:
            os.posix_fallocate(fd, 0, _HEADER.size + _FIRST_SLOTS * _SLOT.size)  # rule 6
            table = cls(path, fd, _FIRST_SLOTS)
        except OSError as exc:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.remove(tmp)
            _logger.warning("no heads table (%s): a crash recovers heads from the watermark", exc)
            return None
        except BaseException:
            os.close(fd)
            raise
        assert table.map is not None
        _HEADER.pack_into(table.map, 0, _MAGIC, _VERSION, boot)
        for log in logs:
            table.track(log)
        os.replace(tmp, path)
        return table

    def track(self, log: TrackedLog) -> None:
        """Give ``log`` a slot and keep its head there from now on (idempotent)."""
        mm = self.map
        if mm is None or log.topic_id in self._tracked:
            return
        if not self._free:
            try:
                self._grow()
            except OSError as exc:  # rule 6: this topic goes untracked
                _logger.warning("heads table not grown (%s): %s is not tracked", exc, log.topic_id)
                return
            mm = self.map
            assert mm is not None
        off = _HEADER.size + self._free.pop() * _SLOT.size
        _SLOT.pack_into(mm, off, log.topic_id, log.head)
        slot = _Slot(self, log, off)
        self._tracked[log.topic_id] = slot
        log.listen(slot)

    def untrack(self, log: TrackedLog) -> None:
        """The topic is gone: free its slot."""
        slot = self._tracked.pop(log.topic_id, None)
        if slot is None:
            return
        log.unlisten(slot)
        if self.map is not None:
            _SLOT.pack_into(self.map, slot.off, 0, 0)
        self._free.append((slot.off - _HEADER.size) // _SLOT.size)

    def _grow(self) -> None:
        assert self.map is not None
        old = self._capacity
        size = _HEADER.size + old * 2 * _SLOT.size
        os.posix_fallocate(self._fd, 0, size)  # rule 6
        self.map.resize(size)
        self._capacity = old * 2
        self._free.extend(range(self._capacity - 1, old - 1, -1))

    def close(self) -> None:
        """Stop tracking; the file stays for the next recovery on this boot."""
        for slot in self._tracked.values():
            slot.log.unlisten(slot)
        self._tracked.clear()
        mm, self.map = self.map, None
        if mm is not None:
            mm.close()
        with contextlib.suppress(OSError):
            os.close(self._fd)
