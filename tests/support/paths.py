"""Where the repository is, for tests that run its scripts and examples or read its files
(a constant here, not ``Path(__file__).parents[n]`` per test, so moving a test between
folders cannot point it at the wrong directory)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["EXAMPLES", "ROOT"]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
