"""The units tests/conftest.py hands to xdist workers name real test files, and every
module that uses the shared every-mode servers is in their unit."""

from __future__ import annotations

from tests.conftest import _ONE_WORKER_UNITS
from tests.support.paths import ROOT


def test_every_unit_prefix_names_a_test_path() -> None:
    for prefixes in _ONE_WORKER_UNITS.values():
        for prefix in prefixes:
            assert (ROOT / prefix).exists(), prefix


def test_the_modules_sharing_the_every_mode_servers_are_one_unit() -> None:
    # The fixture lives in tests/integration/conftest.py, so only modules below it can use it.
    users = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "tests" / "integration").rglob("test_*.py")
        if "server_in_every_mode" in path.read_text(encoding="utf-8")
    }
    assert users == set(_ONE_WORKER_UNITS["every-mode-servers"])
