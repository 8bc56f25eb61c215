"""Suite-wide settings.

Hypothesis runs derandomized by default: the property machines (hundreds of examples of
up to 100 steps) then test the same examples on every run, so a red gate always means a
change broke something, never that a new random draw found an old gap. Exploring is a
separate, deliberate run: ``TOPICS_HYPOTHESIS=explore pytest tests/property`` draws new
examples each time; what it finds becomes a regression test (tests/property/*regressions*
and the sequences pinned in the machines' modules).

Under ``-n`` (pytest-xdist; ``scripts/test`` runs ``-n 2 --dist loadfile``) each worker is
a process of its own and gets whole *units*: a test module, so its module-scoped servers
and browser start once, or one of :data:`_ONE_WORKER_UNITS`, groups of modules that share
a session-scoped resource. xdist's ``xdist_group`` mark would say that in the modules, but
with pytest 9.2 it groups nothing (xdist 3.8 writes the group into ``item._nodeid``, which
pytest no longer reads: pytest-xdist issue #1386), so the scheduler here does it by path.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("TOPICS_HYPOTHESIS", "ci"))


#: Under ``-n``, each of these goes to one worker whole: its modules share a session-scoped
#: resource that would otherwise start once per worker, a SparkSession (a JVM), or once per
#: module, the three servers of ``server_in_every_mode`` (a worker runs a unit's tests in
#: collection order, which pytest sorts by that fixture's parameter across modules, so one
#: unit starts each server once; one unit per module would start all three per module).
#: tests/unit/test_suite_units.py checks the second list against the modules.
_ONE_WORKER_UNITS = {
    "spark": ("tests/integration/spark/",),
    "every-mode-servers": (
        "tests/integration/test_http_records.py",
        "tests/integration/test_queue_jobs_http.py",
        "tests/integration/test_queues_http.py",
        "tests/integration/test_watch_prefix.py",
        "tests/integration/test_watch_sse_direct.py",
    ),
}


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadfile``, except that each of :data:`_ONE_WORKER_UNITS` is one unit.

    The one private name of xdist the suite uses, ``LoadFileScheduling._split_scope`` (the
    scope of a test id; the documented way to group, ``xdist_group``, is the broken one),
    is checked here before the run starts, and pyproject.toml pins pytest-xdist to 3.8.x,
    the release this was tested with.
    """
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    if not callable(getattr(LoadFileScheduling, "_split_scope", None)):
        raise pytest.UsageError(
            "tests/conftest.py groups modules through LoadFileScheduling._split_scope, which "
            "this pytest-xdist lacks: install the version pyproject.toml pins, or run -n 0"
        )

    class _FileOrUnitScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            for unit, prefixes in _ONE_WORKER_UNITS.items():
                if nodeid.startswith(prefixes):
                    return unit
            return super()._split_scope(nodeid)

    return _FileOrUnitScheduling(config, log)  # type: ignore[arg-type]
