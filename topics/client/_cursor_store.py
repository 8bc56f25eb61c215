"""Where a watching consumer keeps its per-topic cursors across its own restarts.

A watch commits the cursor map of a frame once the consumer has taken every item of that
frame (at-least-once: after a crash the consumer may see the last frame again, never
less). On start, a stored cursor overrides the watch's own start for its topic.

Rules:
1. :class:`FileCursorStore` never leaves a torn or half-written file: it writes a temporary
   file beside the target, fsyncs it, renames it over the target (atomic on POSIX) and
   fsyncs the directory, so after a crash the file holds either the old map or the new one.
2. A stored map is a JSON object of topic -> seq; anything else (a corrupt or foreign
   file) is an error, never silently "start from scratch".
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import ujson

__all__ = ["CursorStore", "FileCursorStore", "MemoryCursorStore"]


@runtime_checkable
class CursorStore(Protocol):
    """Loads and saves a topic -> seq map (the seam a watch commits through)."""

    def load(self) -> dict[str, int] | None:
        """The saved map, or None when nothing was saved yet."""
        ...

    def save(self, cursors: Mapping[str, int]) -> None:
        """Replace the saved map with ``cursors``."""
        ...


class MemoryCursorStore:
    """A cursor store in memory (survives reconnects and re-created watches, not the
    process)."""

    def __init__(self, cursors: Mapping[str, int] | None = None) -> None:
        self.cursors: dict[str, int] | None = dict(cursors) if cursors is not None else None
        self.saves = 0

    def load(self) -> dict[str, int] | None:
        return dict(self.cursors) if self.cursors is not None else None

    def save(self, cursors: Mapping[str, int]) -> None:
        self.cursors = dict(cursors)
        self.saves += 1


class FileCursorStore:
    """A cursor store in one JSON file, replaced atomically on every save (rule 1).

    Args:
        path: the file (its directory must exist).
        fsync: sync the data and the directory (turn off only for scratch use).
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.path = os.fspath(path)
        self.fsync = fsync

    def load(self) -> dict[str, int] | None:
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        try:
            value = ujson.loads(raw)
        except ValueError:
            value = None
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for k, v in value.items()
        ):
            raise ValueError(f"{self.path}: not a cursor file (a JSON object of topic -> seq)")
        return value

    def save(self, cursors: Mapping[str, int]) -> None:
        directory = os.path.dirname(os.path.abspath(self.path))
        data = ujson.dumps(dict(cursors), ensure_ascii=False).encode()
        fd, tmp = tempfile.mkstemp(prefix=".cursors-", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                if self.fsync:
                    os.fsync(f.fileno())  # the data is on disk before the name points at it
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        if self.fsync:
            dfd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dfd)  # the rename itself survives a crash
            finally:
                os.close(dfd)
