"""``topics verify DATA_DIR``: check a data directory on this machine, read-only.

The one command that talks to no server: it reads the files itself
(``topics._storage.verify``), so it works on a directory whose server is down or will not
start, and beside a running one (it never takes the lock and never writes).

Rules:
1. Output for people: a table of the findings (file, kind, topic, seqs, problem,
   severity, detail), then one summary line; ``--json``: one object with the same facts.
2. Exit codes: 0 no damage (``advice`` findings alone are printed but still 0), 1 damage
   found (any ``data`` or ``fatal`` finding), 2 the check could not run, or not over
   every file (not a directory, permission denied, not a topics data directory).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import IO

from topics._storage.fs import RealFs
from topics._storage.verify import Finding, VerifyReport, verify_data_dir
from topics.cli.format import cut, dumps, table

__all__ = ["EXIT_CLEAN", "EXIT_COULD_NOT_RUN", "EXIT_DAMAGED", "exit_code", "run"]

EXIT_CLEAN, EXIT_DAMAGED, EXIT_COULD_NOT_RUN = 0, 1, 2
_HEADER = ("FILE", "KIND", "TOPIC", "SEQS", "PROBLEM", "SEVERITY", "DETAIL")


def exit_code(report: VerifyReport) -> int:
    """Rule 2."""
    if not report.ran:
        return EXIT_COULD_NOT_RUN
    return EXIT_DAMAGED if report.damaged else EXIT_CLEAN


def run(args: argparse.Namespace) -> int:
    """Run ``topics verify`` with parsed ``args``; returns the exit code."""
    started = time.monotonic()
    report = verify_data_dir(RealFs(), args.data_dir)
    seconds = time.monotonic() - started
    code = exit_code(report)
    if args.json:
        _json(report, seconds, code, sys.stdout)
    elif report.files_checked or report.findings:
        _text(report, seconds, sys.stdout)
    if report.error is not None:
        sys.stderr.write(f"topics: verify: {report.error}\n")
    return code


def _topic(f: Finding) -> str | None:
    if f.topic is not None:
        return f.topic
    return None if f.topic_id is None else f"#{f.topic_id}"


def _damaged_files(report: VerifyReport) -> int:
    return len({f.path for f in report.findings if f.severity != "advice"})


def _text(report: VerifyReport, seconds: float, out: IO[str]) -> None:
    if report.findings:
        rows = [
            (f.path, f.kind, _topic(f), f.seqs(), f.problem, f.severity, cut(f.detail, 100))
            for f in report.findings
        ]
        table(rows, _HEADER, out)
    counts = {s: sum(f.severity == s for f in report.findings) for s in ("fatal", "data", "advice")}
    damaged = _damaged_files(report)
    verdict = (
        f"{damaged} damaged file{'s' if damaged != 1 else ''}" if report.damaged else "no damage"
    )
    if report.findings:
        verdict += " (" + ", ".join(f"{n} {s}" for s, n in counts.items() if n) + ")"
    generation = report.manifest_generation
    manifest = "none valid" if generation is None else f"generation {generation}"
    out.write(
        f"checked {report.files_checked} files ({report.bytes_checked / 1e6:,.1f} MB) in "
        f"{seconds:.2f} s: {verdict}; manifest: {manifest}\n"
    )


def _json(report: VerifyReport, seconds: float, code: int, out: IO[str]) -> None:
    status = {EXIT_CLEAN: "clean", EXIT_DAMAGED: "damaged"}.get(code, "error")
    out.write(
        dumps(
            {
                "status": status,
                "data_dir": report.data_dir,
                "files_checked": report.files_checked,
                "bytes_checked": report.bytes_checked,
                "seconds": round(seconds, 3),
                "manifest_generation": report.manifest_generation,
                "damaged_files": _damaged_files(report),
                "findings": [f.to_dict() for f in report.findings],
                "error": report.error,
            }
        )
        + "\n"
    )
