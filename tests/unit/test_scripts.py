"""scripts/serve and scripts/_venv.sh: arguments reach topics-server, and the install (pip and
the Cython build) runs only when something it depends on changed.

Most tests run the real scripts in a copy of the repository's skeleton whose .venv holds stubs
(`python` logs pip calls, `topics-server` prints its arguments), so they take milliseconds and
never touch the shared venv; one runs the real `scripts/serve --help`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PYTHON_STUB = """#!/bin/sh
if [ "$1" = "-VV" ]; then echo "Python 3.11.stub"; exit 0; fi
echo "$*" >> "$(dirname "$0")/../pip.log"
"""
SERVER_STUB = """#!/bin/sh
echo "topics-server got: $*"
echo "data dir: $TOPICS_DATA_DIR"
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    for name in ("_venv.sh", "serve"):
        shutil.copy2(ROOT / "scripts" / name, tmp_path / "scripts" / name)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "topics-engine"\n')
    (tmp_path / "setup.py").write_text("# build\n")
    core = tmp_path / "topics" / "_core"
    core.mkdir(parents=True)
    (core / "_ext.pyx").write_text("# cython\n")
    (core / "_ext.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, text in (("python", PYTHON_STUB), ("topics-server", SERVER_STUB)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return tmp_path


def _run(tree: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TOPICS_DATA_DIR", "TOPICS_REINSTALL")}
    return subprocess.run(
        list(argv), cwd=tree, capture_output=True, text=True, timeout=30, env=env, check=False
    )


def _pip_calls(tree: Path) -> list[str]:
    log = tree / ".venv" / "pip.log"
    return log.read_text().splitlines() if log.exists() else []


def test_serve_passes_every_argument_to_the_server(tree: Path) -> None:
    for argv in (["--port", "4854"], ["--help"], []):
        proc = _run(tree, "scripts/serve", *argv)
        assert proc.returncode == 0, proc.stderr
        assert f"topics-server got: {' '.join(argv)}".rstrip() in proc.stdout
        assert f"data dir: {tree}/data" in proc.stdout
    # The first start installed the project without extras, the later ones did nothing.
    installs = [c for c in _pip_calls(tree) if c.startswith("-m pip install -q -e")]
    assert installs == ["-m pip install -q -e ."]


def test_install_is_skipped_until_a_build_input_changes(tree: Path) -> None:
    assert _run(tree, "scripts/serve").returncode == 0
    calls = len(_pip_calls(tree))
    assert calls > 0
    proc = _run(tree, "scripts/serve")
    assert len(_pip_calls(tree)) == calls
    assert proc.stderr == ""  # a current install is silent
    (tree / "topics" / "_core" / "_ext.pyx").write_text("# cython, changed\n")
    assert _run(tree, "scripts/serve").returncode == 0
    assert len(_pip_calls(tree)) > calls
    calls = len(_pip_calls(tree))
    (tree / "topics" / "_core" / "_ext.cpython-311-x86_64-linux-gnu.so").unlink()  # a clean
    assert _run(tree, "scripts/serve").returncode == 0
    assert len(_pip_calls(tree)) > calls


def test_sourcing_with_extras_installs_them_once(tree: Path) -> None:
    script = tree / "scripts" / "gate"
    script.write_text('#!/usr/bin/env bash\n. "$(dirname "$0")/_venv.sh" test,bench\necho ok\n')
    script.chmod(0o755)
    assert _run(tree, "scripts/gate", "tests/unit").stdout == "ok\n"
    assert "-m pip install -q -e .[test,bench]" in _pip_calls(tree)
    calls = len(_pip_calls(tree))
    assert _run(tree, "scripts/gate").returncode == 0
    assert _run(tree, "scripts/serve").returncode == 0  # no extras: a subset of what is there
    assert len(_pip_calls(tree)) == calls
    stamp = (tree / ".venv" / ".topics-install-stamp").read_text().splitlines()
    assert stamp[1] == "bench,test"


def test_a_failed_install_shows_its_log_and_stops(tree: Path) -> None:
    (tree / ".venv" / "bin" / "python").write_text(
        '#!/bin/sh\n[ "$1" = "-VV" ] && exit 0\necho "error: no compiler" >&2\nexit 1\n'
    )
    proc = _run(tree, "scripts/serve", "--port", "1")
    assert proc.returncode == 1
    assert "error: no compiler" in proc.stderr
    assert "topics-server got" not in proc.stdout
    assert not (tree / ".venv" / ".topics-install-stamp").exists()


def test_extras_that_look_like_flags_are_refused(tree: Path) -> None:
    script = tree / "scripts" / "bad"
    script.write_text('#!/usr/bin/env bash\n. "$(dirname "$0")/_venv.sh" --port\n')
    script.chmod(0o755)
    proc = _run(tree, "scripts/bad")
    assert proc.returncode == 2
    assert "extras must look like" in proc.stderr


@pytest.mark.slow
def test_the_real_serve_help_runs_against_the_existing_venv() -> None:
    proc = subprocess.run(
        [str(ROOT / "scripts" / "serve"), "--help"],
        capture_output=True,
        text=True,
        timeout=600,  # reinstalls only if a build input changed since the last install
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage: topics-server" in proc.stdout
    assert "--port" in proc.stdout
