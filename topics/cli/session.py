"""What the ``topics`` commands share: the :class:`Session` each command runs with, the exit
codes (topics/cli.py rule 3), :class:`UsageError` and duration arguments."""

from __future__ import annotations

import argparse
import re
import sys
from typing import IO, Any

from topics.cli.format import Style, dumps, use_colour
from topics.cli.losses import ToldLosses
from topics.client import Client
from topics.types import Tombstone

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_CONFLICT = 0, 1, 2, 3, 4
EXIT_UNAVAILABLE, EXIT_CONNECTION, EXIT_INTERRUPTED = 5, 6, 130


class UsageError(Exception):
    """A bad argument found after parsing (exit 2)."""


class Session:
    """What every command gets: the parsed arguments, the client, the output streams and
    styles, and the state ``write`` keeps across batches."""

    def __init__(self, args: argparse.Namespace, client: Client) -> None:
        self.args = args
        self.style = Style(use_colour(args.color, sys.stdout), args.raw_ts)
        self.err_style = Style(use_colour(args.color, sys.stderr), args.raw_ts)
        self.batch_lines: list[int] = []  # input line numbers of the batch being built
        self.skipped = 0  # lines left out by write --skip-bad
        self.client = client
        self.out: IO[str] = sys.stdout
        self.err: IO[str] = sys.stderr
        self.json: bool = args.json
        self.told = ToldLosses(args.url)

    def emit(self, value: Any) -> None:
        self.out.write(dumps(value) + "\n")

    def warn_tombstone(self, topic: str, tomb: Tombstone) -> None:
        """Loss on stderr (topics/cli.py rule 2) unless ``--quiet``, or unless it is a read
        from the start told already in this terminal session (topics/cli/losses.py); with
        ``--json`` also the tombstone line on stdout, always."""
        quiet = getattr(self.args, "quiet", False)
        from_start = tomb.gap_from == 1
        if not quiet and (not from_start or self.told.first_time(topic)):
            loss = self.err_style.paint("loss", f"LOSS in {topic}")
            self.err.write(
                f"topics: {loss}: seqs {tomb.gap_from}..{tomb.gap_to} are gone "
                f"({tomb.reason}, ~{tomb.missed_estimate} records)\n"
            )
        if self.json:
            self.emit({"tombstone": {"topic": topic, **tomb.to_dict()}})


def duration_ms(text: str) -> int:
    m = re.fullmatch(r"(\d+)(ms|s|m|h|d)", text.strip())
    if m is None:
        raise UsageError(f"{text!r} is not a duration (500ms, 10s, 5m, 2h, 1d)")
    return int(m.group(1)) * _DURATION_UNITS[m.group(2)]


_DURATION_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
