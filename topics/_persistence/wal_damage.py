"""WAL entries recovery could not read (issue 32): what they may have held, and who hears.

Role: recovery (``recovery.py``) hands every :class:`~topics._storage.wal_reader.WalSkip`
of its scan here. The damage is isolated the way the rest of issue 32 isolates it: the
engine starts, and what cannot be known is widened and said, never guessed.

Rules:
1. Only LSNs above the manifest's covered LSN count: entries at or below it are in the
   segments already (a skip wholly below is the scrub's and ``topics verify``'s to report).
2. Every topic that existed when the skip was met is *unresolved*: entries of it may have
   been in the run. The next APPEND, HEAD or GAP replayed for it says where its head
   really is; seqs that jump there are a ``corrupt`` gap (recovery.py ``_Replay``).
3. A topic still unresolved at the end of the log gets a ``corrupt`` gap up to the head
   the heads table recorded (same boot: exact), else up to its watermark or its head plus
   as many seqs as the skipped bytes could hold, whichever is higher (widened). So no seq
   is handed out twice even when the run held the WATERMARK entry that reserved them, and
   a reader past that range gets a tombstone, not silence.
4. Deletes, expiries, topic creations, deletions and config changes logged in the run
   cannot be known: records deleted there may reappear, a topic deleted there comes back,
   one created there is missing. One ``Damage`` (kind ``wal``) per file says so.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping

from .._core import FRAME_HEADER_SIZE, FRAME_TRAILER_SIZE
from .._storage.damage import VERIFY_HINT, Damage, DamageRegistry
from .._storage.wal_reader import WalSkip
from ..log.gap_markers import GapMarker
from ..log.topic_log import TopicLog

__all__ = ["WalSkips"]

_logger = logging.getLogger("topics.storage")

# The fewest bytes one record takes in an APPEND entry, so skipped bytes bound the seqs.
_MIN_RECORD_BYTES = FRAME_HEADER_SIZE + FRAME_TRAILER_SIZE
# Seqs one entry may hand out when the bytes are unknown (a missing file): the default
# ``max_batch_records``, plus one reservation.
_SEQS_PER_UNKNOWN_ENTRY = 10_000 + 4096
# When even the LSN count is unknown (no readable file after the run).
_SEQS_UNBOUNDED = 1 << 24


class WalSkips:
    """The runs of WAL entries one recovery skipped (rules 1-4)."""

    def __init__(
        self,
        root: str,
        covered_lsn: int,
        damage: DamageRegistry | None,
        topic_ids: Callable[[], Iterable[int]],
    ) -> None:
        self.root = root
        self.topic_ids = topic_ids  # the topics recovered so far
        self.covered_lsn = covered_lsn
        self.damage = damage
        self.runs: list[tuple[int, int | None]] = []  # (first, last) LSNs lost
        self.seq_bound = 0  # seqs the runs could have held (rule 3)
        self.unresolved: set[int] = set()  # topic ids (rule 2)
        self.orphans = 0  # appends after a run to topics it may have created (rule 4)

    @property
    def lost(self) -> bool:
        return bool(self.runs)

    @property
    def max_lsn(self) -> int:
        """The highest LSN known lost (the new WAL must start above it)."""
        return max((last for _, last in self.runs if last is not None), default=0)

    def add(self, skip: WalSkip) -> None:
        """One run the scan could not read (``scan_wal``'s ``on_skip``)."""
        first = max(skip.first_lsn, self.covered_lsn + 1)
        if skip.last_lsn is not None and skip.last_lsn < first:
            return  # rule 1
        self.runs.append((first, skip.last_lsn))
        self.unresolved.update(self.topic_ids())
        self.seq_bound += _seq_bound(skip, first)
        if self.damage is not None:
            self.damage.report(self._damage(skip, first))

    def log_orphans(self) -> None:
        """Rule 4, after the replay: appends of topics no entry read created."""
        if self.orphans:
            _logger.error(
                "%d WAL entries after the skipped ones append to topics no readable entry "
                "creates (created in the skipped entries?): their records are not recovered; %s",
                self.orphans,
                VERIFY_HINT,
            )

    def explains(self, first: int, last: int) -> bool:
        """True when LSNs ``first..last`` (a jump in the scan) all lie in skipped runs."""
        pos = first
        for lo, hi in sorted(self.runs):
            if lo <= pos and (hi is None or hi >= pos):
                if hi is None:
                    return True
                pos = hi + 1
        return pos > last

    def corrupt_heads(
        self, logs: Iterable[TopicLog], handed_out: Mapping[int, int] | None
    ) -> list[tuple[TopicLog, GapMarker | None]]:
        """Rule 3 for every unresolved topic; returns each one moved, with its marker."""
        moved: list[tuple[TopicLog, GapMarker | None]] = []
        for log in logs:
            if log.topic_id not in self.unresolved or log.config.durability == "ephemeral":
                continue
            known = handed_out.get(log.topic_id) if handed_out is not None else None
            if known is not None:
                target = max(known, log.head)
            else:
                target = max(log.watermark, log.head + self.seq_bound)
            marker = None
            if target > log.head:
                lost_from = log.head + 1
                log.head = target - 1
                marker = log.add_gap("corrupt", target - lost_from + 1, lost_from, target)
            log.watermark = log.head  # logged as a HEAD entry: exactly this head
            moved.append((log, marker))
        return moved

    def _damage(self, skip: WalSkip, first: int) -> Damage:
        last = "the end of the log" if skip.last_lsn is None else str(skip.last_lsn)
        size = "" if skip.nbytes is None else f", {skip.nbytes} bytes"
        detail = (
            f"WAL entries at LSNs {first}..{last}{size} could not be read and were skipped; "
            "records appended there are lost and readers get a `corrupt` tombstone over "
            "them (widened to every topic whose seqs cannot be known); deletes, expiries, "
            "config changes and topic creations or deletions logged there are lost too: "
            "records deleted there may reappear"
        )
        return Damage(
            os.path.relpath(skip.path, self.root),
            "wal",
            skip.problem,
            offset=skip.offset,
            widened=True,
            detail=detail,
        )


def _seq_bound(skip: WalSkip, first: int) -> int:
    if skip.nbytes is not None:
        return skip.nbytes // _MIN_RECORD_BYTES + 1
    if skip.last_lsn is not None:
        return (skip.last_lsn - first + 1) * _SEQS_PER_UNKNOWN_ENTRY
    return _SEQS_UNBOUNDED
