"""Suite-wide settings.

Hypothesis runs derandomized by default: the property machines (hundreds of examples of
up to 100 steps) then test the same examples on every run, so a red gate always means a
change broke something, never that a new random draw found an old gap. Exploring is a
separate, deliberate run: ``TOPICS_HYPOTHESIS=explore pytest tests/property`` draws new
examples each time; what it finds becomes a regression test (tests/property/*regressions*
and the sequences pinned in the machines' modules).
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("TOPICS_HYPOTHESIS", "ci"))
