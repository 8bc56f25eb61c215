"""examples/embedded.py runs with one command and shows what it promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "embedded.py"


def test_embedded_example_runs_and_reports_its_tombstone_and_delete() -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "tombstone: Tombstone(gap_from=1, gap_to=3, reason='cap'" in out
    assert "seq=5 tag=customer-1 data={'order': 4, 'total': 40}" in out
    assert "deleted: 2 count now: 3" in out
    assert "new since cursor: [{'order': 8, 'total': 80}] caught_up: True" in out
