"""The benchmark runner's modules, importable by their own names.

bench/ holds scripts, not a package, so its modules (``_suite``, ``run_all``, ...) import
each other by bare name. Importing this module puts bench/ on ``sys.path``; the
``__init__.py`` of tests/unit/bench and tests/integration/bench import it, so it has run
before any of their test modules imports a bench module.
"""

from __future__ import annotations

import sys

from tests.support.paths import ROOT

__all__ = ["BENCH"]

BENCH = ROOT / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
