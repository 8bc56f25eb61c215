"""Tests of the benchmark runner. Its modules live in bench/ (scripts, not a package), so
they are importable by their own names once bench/ is on sys.path: importing this package,
which happens before any of its test modules runs, puts it there."""

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
