"""What the server knows is damaged on disk (issue 32): one registry per engine.

Role: recovery, cold segment loads and the online scrub report files that fail their
checks here; ``/v0/health`` and ``/v0/metrics`` (``topics_storage_damaged_files``) read it,
and the log line each report makes names the file, the offset and the command that checks
the directory. The registry only records: isolating the damage (a ``corrupt`` tombstone
over the seqs that cannot be read) is the log's job.

Rules:
1. One entry per file (the relative path under the data directory); a second report of
   the same file keeps the first and widens its seq range to cover both.
2. A seq range is never narrower than the truth: when it cannot be known exactly it is
   widened (to the segment's end, the next segment's base, or the topic's head) and
   ``widened`` says so.
3. Only the trio thread reports after recovery; recovery (a worker thread) reports before
   the engine serves, so no lock is needed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

__all__ = ["Damage", "DamageRegistry", "VERIFY_HINT"]

log = logging.getLogger("topics.storage")

#: What the log line tells an operator to run.
VERIFY_HINT = "run `topics verify DATA_DIR` to list every damaged file"


@dataclass(frozen=True, slots=True)
class Damage:
    """One damaged file."""

    path: str  # relative to the data directory, e.g. "segments/0000…-0000….seg"
    kind: str  # "segment" | "index" | "tags" | "wal" | "manifest" | "heads"
    problem: str  # short: "crc", "truncated", "header", ...
    topic: str | None = None
    topic_id: int | None = None
    first_seq: int | None = None
    last_seq: int | None = None
    widened: bool = False
    offset: int = -1
    detail: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "file": self.path,
            "kind": self.kind,
            "problem": self.problem,
            "topic": self.topic,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "widened": self.widened,
            "offset": self.offset,
        }


class DamageRegistry:
    """The damaged files one engine has met (rules 1-3)."""

    __slots__ = ("_by_path",)

    def __init__(self) -> None:
        self._by_path: dict[str, Damage] = {}

    def __len__(self) -> int:
        return len(self._by_path)

    def __contains__(self, path: object) -> bool:
        return path in self._by_path

    def report(self, damage: Damage) -> Damage:
        """Record ``damage`` (rule 1) and log it once per file; returns what is kept."""
        old = self._by_path.get(damage.path)
        if old is None:
            self._by_path[damage.path] = damage
            log.error(
                "damaged %s file %s at offset %d (%s%s)%s; the server keeps serving "
                "everything else; %s",
                damage.kind,
                damage.path,
                damage.offset,
                damage.problem,
                f": {damage.detail}" if damage.detail else "",
                _range_text(damage),
                VERIFY_HINT,
            )
            return damage
        merged = replace(
            old,
            first_seq=_lower(old.first_seq, damage.first_seq),
            last_seq=_upper(old.last_seq, damage.last_seq),
            widened=old.widened or damage.widened,
        )
        self._by_path[damage.path] = merged
        return merged

    def entries(self) -> list[Damage]:
        """Every damaged file, in path order."""
        return [self._by_path[p] for p in sorted(self._by_path)]


def _range_text(damage: Damage) -> str:
    if damage.first_seq is None:
        return ""
    where = f" of topic {damage.topic!r}" if damage.topic is not None else ""
    approx = " (widened: the exact range is unknown)" if damage.widened else ""
    return f"; seqs {damage.first_seq}..{damage.last_seq}{where} cannot be read{approx}"


def _lower(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _upper(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)
