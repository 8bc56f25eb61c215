"""``topics write``: which input line a refused record came from, and skipping bad lines.

Rules:
1. A line that is not JSON (or, with ``--records``, not a record object) is found before
   anything is sent, by the server's own scanner, and named by its line number.
2. A record the server refuses (``400`` naming ``records[i]…`` in ``detail.field`` or
   ``detail.path``) is named by the line it came from: the batch it was in was not stored
   (a write is atomic), so nothing of that batch is half-written.
3. ``--skip-bad``: such a line is reported on stderr and left out, and the rest of its batch
   is sent again (a new write: the refused one stored nothing); without it the load stops
   at the first bad line, after the batches already acknowledged.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import IO, Any

from topics._core.scan import BodyError, split_write_body
from topics.errors import InvalidRequestError, RecordTooLargeError, TopicsError
from topics.types import WriteResult

__all__ = ["BadLine", "check_data_line", "send_batch"]

_INDEX = re.compile(r"records\[(\d+)\]")


class BadLine(Exception):
    """An input line that cannot become a record (rule 1) or that the server refused (2)."""

    def __init__(self, lineno: int, problem: str) -> None:
        super().__init__(f"line {lineno}: {problem}")
        self.lineno = lineno


def check_data_line(line: bytes, lineno: int) -> None:
    """Rule 1 for a data line: one JSON value, checked by the server's scanner."""
    try:
        split_write_body(b'{"records":[{"data":' + line + b"}]}")
    except BodyError as exc:
        raise BadLine(lineno, f"not a JSON value ({exc.problem})") from None


def _refused_index(exc: TopicsError, n: int) -> int | None:
    """Which record of the batch the server refused, if the error says (rule 2)."""
    if not isinstance(exc, InvalidRequestError | RecordTooLargeError):
        return None
    detail = exc.detail or {}
    for key in ("field", "path", "index"):
        value = detail.get(key)
        if isinstance(value, int) and key == "index":
            return value if 0 <= value < n else None
        match = _INDEX.search(value) if isinstance(value, str) else None
        if match is not None and int(match.group(1)) < n:
            return int(match.group(1))
    return None


def send_batch(
    write: Callable[[list[dict[str, Any]]], WriteResult],
    batch: list[dict[str, Any]],
    lines: list[int],
    skip_bad: bool,
    err: IO[str],
) -> tuple[WriteResult | None, int]:
    """Write ``batch`` (records of input ``lines``); returns the result (None if every line
    was skipped) and how many lines were skipped (rules 2, 3)."""
    skipped = 0
    while batch:
        try:
            return write(batch), skipped
        except TopicsError as exc:
            i = _refused_index(exc, len(batch))
            if i is None:
                raise
            if not skip_bad:
                raise BadLine(lines[i], f"{exc.code}: {exc.message}") from None
            err.write(f"topics: skipped line {lines[i]}: {exc.code}: {exc.message}\n")
            del batch[i], lines[i]
            skipped += 1
    return None, skipped
