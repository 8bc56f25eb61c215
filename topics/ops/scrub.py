"""The online scrub (issue 32, item 2): the data directory's files re-read at a bounded rate.

Role: a background task of the engine nursery, started when ``Limits.scrub_bytes_per_s``
(``TOPICS_SCRUB_BYTES_PER_S``) is above 0. It checks the segment files (frames, index, tag
index) and the closed WAL files with ``topics verify``'s one-file check
(``_storage/verify.py``), so rot in data nobody reads is found before a read or a restart
meets it. What it finds goes to the engine's damage registry, so ``/v0/health`` and
``topics_storage_damaged_files`` report it like damage recovery or a read met.

Rules:
1. One file at a time, in a worker thread; after each file the task sleeps for the bytes
   it read divided by the rate, so the average stays at the budget (one file may run
   ahead of it by its own size). A pass over nothing still sleeps one second.
2. It never races a checkpoint into a false alarm: a segment not yet sealed is read only
   up to the length the manifest recorded, a file removed meanwhile has no findings
   (verify.py rules 2-3), the newest WAL file (being written) is not read, advice-level
   findings (a checkpoint's files in flight) are not damage, and a finding is reported
   only if it is still there when checked again against a manifest read after it.
3. A bad segment is reported and then isolated through :func:`_on_bad_segment` (its
   unreadable seqs become a ``corrupt`` range, ``topics/log/damaged.py``).
4. ``bytes_total`` and ``passes_total`` are ``topics_scrub_bytes_total`` and
   ``topics_scrub_passes_total`` in /v0/metrics.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from .._storage.damage import Damage, DamageRegistry
from .._storage.fs import Fs
from .._storage.segment_files import parse_segment_name
from .._storage.verify import Finding, ManifestView, check_file_counted, load_view
from .._storage.wal_reader import wal_file_name, wal_files

if TYPE_CHECKING:
    from .._persistence.appender import Appender
    from ..log.topic_log import TopicLog

__all__ = ["Scrub"]

log = logging.getLogger("topics.scrub")

T = TypeVar("T")

#: How long a pass that read nothing waits before the next (rule 1).
IDLE_PASS_S = 1.0


async def _to_thread(fn: Callable[[], T]) -> T:
    return await trio.to_thread.run_sync(fn)


class Scrub:
    """Walks the data directory at ``rate`` bytes per second, forever (rules 1-4)."""

    def __init__(
        self,
        app: Appender,
        fs: Fs,
        root: str,
        rate: int,
        *,
        sleep: Callable[[float], Awaitable[None]] = trio.sleep,
        run_sync: Callable[[Callable[[], Any]], Awaitable[Any]] = _to_thread,
    ) -> None:
        if rate < 1:
            raise ValueError(f"scrub rate must be >= 1 byte per second, got {rate}")
        self.app, self.fs, self.root, self.rate = app, fs, root.rstrip("/"), rate
        self._sleep, self._run_sync = sleep, run_sync
        self.bytes_total = 0
        self.passes_total = 0

    async def run(self) -> None:
        """Pass after pass until cancelled (a background task of the engine nursery)."""
        while True:
            if await self.one_pass() == 0:
                await self._sleep(IDLE_PASS_S)

    async def one_pass(self) -> int:
        """Check every file once; returns the bytes read."""
        view, files = await self._run_sync(self._plan)
        read = 0
        for rel in files:
            found, nbytes = await self._run_sync(partial(self._check, rel, view))
            read += nbytes
            self.bytes_total += nbytes
            for finding in found:
                self._report(finding)
            if nbytes:
                await self._sleep(nbytes / self.rate)
        self.passes_total += 1
        return read

    def _plan(self) -> tuple[ManifestView, list[str]]:
        """The manifest view and the files of this pass (worker thread)."""
        view = load_view(self.fs, self.root)
        segs = sorted(
            f"segments/{name}"
            for name in _listdir(self.fs, f"{self.root}/segments")
            if parse_segment_name(name) is not None
        )
        numbers = (
            wal_files(self.fs, f"{self.root}/wal") if self.fs.exists(f"{self.root}/wal") else []
        )
        closed = [f"wal/{wal_file_name(n)}" for n in numbers[:-1]]  # the newest is being written
        return view, segs + closed

    def _check(self, rel: str, view: ManifestView) -> tuple[list[Finding], int]:
        """One file's damage, confirmed against a fresh view (rule 2; worker thread)."""
        try:
            got = check_file_counted(self.fs, self.root, rel, view)
        except OSError as exc:
            log.warning("scrub: cannot read %s: %s", rel, exc)
            return [], 0
        found = [f for f in got.findings if f.severity != "advice"]
        if found:  # a checkpoint may have sealed or dropped it since the view was read
            try:
                again = check_file_counted(self.fs, self.root, rel, load_view(self.fs, self.root))
            except OSError as exc:
                log.warning("scrub: cannot read %s: %s", rel, exc)
                return [], got.bytes
            found = [f for f in again.findings if f.severity != "advice"]
        return found, got.bytes

    def _report(self, finding: Finding) -> None:
        damage = Damage(
            finding.path,
            finding.kind,
            finding.problem,
            topic=finding.topic,
            topic_id=finding.topic_id,
            first_seq=finding.first_seq,
            last_seq=finding.last_seq,
            widened=finding.widened,
            offset=-1 if finding.offset is None else finding.offset,
            detail=f"found by the online scrub: {finding.detail}",
        )
        owner = parse_segment_name(finding.path.rpartition("/")[2])
        topic = None
        if finding.kind == "segment" and owner is not None:
            topic = next(
                (t for t in self.app.registry.topics.values() if t.topic_id == owner[0]), None
            )
        if topic is None or owner is None:
            self.app.damage.report(damage)
            return
        seg = next((s for s in topic.segments if s.base_seq == owner[1]), None)
        _on_bad_segment(self.app.damage, topic, seg, damage)


def _on_bad_segment(
    registry: DamageRegistry, topic: TopicLog, seg: object | None, damage: Damage
) -> None:
    """Report a bad segment, then make its unreadable seqs a ``corrupt`` range (rule 3).

    The isolation lives in ``topics.log.damaged`` (segment damage at recovery and at
    read time); until that module is there, the report alone is what the scrub can do.
    """
    kept = registry.report(damage)
    if seg is None:
        return  # dropped by a checkpoint meanwhile: nothing left to isolate
    try:
        damaged = importlib.import_module("topics.log.damaged")
    except ModuleNotFoundError:
        return
    damaged.quarantine(topic, seg, kept)


def _listdir(fs: Fs, path: str) -> list[str]:
    try:
        return fs.listdir(path)
    except FileNotFoundError:
        return []
