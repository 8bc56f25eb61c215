"""``topics.Reader``: a read-only view of a data directory, safe beside a live writer.

Role: what Spark tasks and offline tools open. It never takes the writer's lock and
never writes: it runs recovery with ``repair=False`` (a torn WAL tail just ends the log)
into its own in-memory state, then answers diffs from it.

Rules:
1. A checkpoint may trim the WAL or drop segment files between the reader's reads of the
   manifest and of those files; the reader then retries with the newer manifest (a few
   times), and only reports a real error.
2. The view is a snapshot as of ``refresh()``; call it again to see newer records.
3. Sealed segments of ``disk``/``fsync`` topics are read from their files when a diff
   needs them, through a cache of ``cache_bytes`` (issue 31). A file the writer removed
   since the snapshot (retention, a deleted topic) makes that diff refresh the view and
   try again, as rule 1 does for recovery.
"""

from __future__ import annotations

import time

from ._args import bool_arg, node_set, u64
from ._clock import SystemClock
from ._core import RENDER_DATA, RENDER_META, RENDER_TAGS
from ._limits import DIFF_BYTE_BUDGET
from ._names import check_topic_name
from ._persistence.recovery import recover
from ._persistence.store import StorePaths
from ._storage.fs import Fs, RealFs, StorageCorruptionError
from ._storage.segment_cache import DEFAULT_CACHE_BYTES, SegmentCache
from .errors import StorageUnavailableError, TopicNotFoundError
from .log.cold_segment import ColdSource
from .log.reads import read_bounds, read_diff
from .log.registry import TopicRegistry
from .log.topic_log import TopicLog
from .settings import Limits, with_cache_bytes
from .types import DiffResult

__all__ = ["Reader"]

_RETRIES = 5
DEFAULT_LIMIT = 256
MAX_LIMIT = 1000


class Reader:
    """Open a data directory read-only.

    Example::

        reader = topics.Reader("./data")
        page = reader.diff("orders", from_seq=0, limit=1000)
    """

    def __init__(self, path: str, *, fs: Fs | None = None, cache_bytes: int | None = None) -> None:
        self._fs = fs if fs is not None else RealFs()
        self._paths = StorePaths.for_dir(path)
        limits = with_cache_bytes(None, cache_bytes)
        capacity = limits.cache_bytes if limits is not None else DEFAULT_CACHE_BYTES
        self._cold = ColdSource(self._fs, self._paths.segments, SegmentCache(capacity))
        if not self._fs.exists(self._paths.root):
            raise FileNotFoundError(f"no topics data directory at {self._paths.root}")
        self._registry = TopicRegistry()
        # Built once: its field checks cost ~7 % of a Spark task when built per diff.
        self._max_node_bytes = Limits().max_node_bytes
        self.refresh()

    def refresh(self) -> None:
        """Reload the newest durable state (rule 1)."""
        for attempt in range(_RETRIES):
            try:
                # A cached copy carries the old view's retired prefix and deletes.
                self._cold.cache.clear()
                self._registry = recover(
                    self._fs, self._paths, repair=False, cold=self._cold
                ).registry
                return
            except (StorageCorruptionError, FileNotFoundError):
                if attempt == _RETRIES - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))

    def topics(self) -> list[str]:
        """Topic names, in name order."""
        return list(self._registry.names)

    def _topic(self, name: str) -> TopicLog:
        log = self._registry.get(check_topic_name(name))
        if log is None:
            raise TopicNotFoundError.for_topic(name)
        return log

    def head_seq(self, topic: str) -> int:
        return self._topic(topic).head

    def earliest_seq(self, topic: str) -> int:
        return self._topic(topic).earliest

    def segments(self, topic: str) -> list[tuple[int, int]]:
        """(first_seq, last_seq) of each held segment: natural split points for parallel reads."""
        log = self._topic(topic)
        return [(seg.base_seq, seg.base_seq + seg.count - 1) for seg in log.segments if seg.count]

    def diff(
        self,
        topic: str,
        *,
        from_seq: int = 0,
        limit: int = 0,
        node: str | list[str] | None = None,
        include_tags: bool = True,
        include_meta: bool = True,
        include_data: bool = True,
        from_ts: int | None = None,
        to_ts: int | None = None,
        to_seq: int | None = None,
        where: object = None,
    ) -> DiffResult:
        """Records after ``from_seq`` with the engine's exact diff semantics (no waiting),
        tags included unless ``include_tags=False``.

        ``from_ts``/``to_ts``/``to_seq``/``where`` as on ``Engine.diff`` (issue 18); a
        ``to_ts`` not yet passed by any record is judged against the wall clock.
        """
        bounds = read_bounds(
            from_seq=u64("from_seq", from_seq),
            from_ts=from_ts,
            to_ts=to_ts,
            to_seq=to_seq,
            where=where,
        )
        limit = min(u64("limit", limit) or DEFAULT_LIMIT, MAX_LIMIT)
        flags = (
            (RENDER_TAGS if bool_arg("include_tags", include_tags) else 0)
            | (RENDER_META if bool_arg("include_meta", include_meta) else 0)
            | (RENDER_DATA if bool_arg("include_data", include_data) else 0)
        )
        skip = node_set(node, self._max_node_bytes)
        now = SystemClock().now_ms()
        for attempt in range(_RETRIES):
            log = self._topic(topic)
            try:
                return read_diff(
                    log, from_seq, limit, skip, flags, DIFF_BYTE_BUDGET, None, bounds, now
                )
            except (StorageUnavailableError, StorageCorruptionError):
                if attempt == _RETRIES - 1:
                    raise
                self.refresh()  # rule 3: the writer may have removed the file
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._registry = TopicRegistry()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
