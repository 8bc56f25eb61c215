"""The findings of ``topics verify`` (``verify.py``): one problem in one file, and what a
check of one file returns.

Rule: a finding's seq range is never narrower than the seqs at risk; ``widened`` says it
was bounded from the manifest (the next segment's base, the topic's head) rather than from
the file itself. Severities, worst first: ``fatal`` (the server cannot start), ``data``
(records or log entries cannot be read back), ``advice`` (nothing is lost).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["SEVERITIES", "Checked", "Finding"]

SEVERITIES = ("fatal", "data", "advice")


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem in one file."""

    path: str  # relative to the data directory
    kind: str  # segment | index | tags | manifest | wal | heads
    problem: str  # crc, truncated, header, index mismatch, missing, torn tail, ...
    severity: str  # fatal | data | advice (rule 5)
    detail: str = ""
    topic: str | None = None
    topic_id: int | None = None
    first_seq: int | None = None
    last_seq: int | None = None
    widened: bool = False  # rule 4
    offset: int | None = None  # of the first bad byte in the file

    def seqs(self) -> str:
        """``A..B`` (``A..?`` with no upper bound), ``~`` in front when widened."""
        if self.first_seq is None:
            return "-"
        last = "?" if self.last_seq is None else str(self.last_seq)
        return f"{'~' if self.widened else ''}{self.first_seq}..{last}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "topic": self.topic,
            "topic_id": self.topic_id,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "widened": self.widened,
            "offset": self.offset,
            "problem": self.problem,
            "severity": self.severity,
            "detail": self.detail,
        }


@dataclass(slots=True)
class Checked:
    """What checking one file found, and how much it read."""

    findings: list[Finding] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    lsns: tuple[int, int] | None = None  # a WAL file's (first_lsn, last valid lsn)
