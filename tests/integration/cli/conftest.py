"""CLI fixtures: a real memory ``topics-server`` and a runner for the ``topics`` CLI.

``topics_cli`` runs each command in-process (``topics.cli.main`` with its own
stdin/stdout/stderr and environment). A test marked ``cli_process`` runs a second time with
every command as a real subprocess (``python -m topics.cli``, exactly what a user runs:
interpreter start, stdin and stdout pipes, ``sys.exit`` codes, the environment; marked
slow). A command costs ~0.5 s that way, so only the tests whose subject is that boundary
are marked; ``TOPICS_CLI_SUBPROCESS=all`` runs every test both ways.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.server import ServerProcess, servers
from topics.cli import main

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def cli_server() -> Iterator[ServerProcess]:
    with servers() as start:
        yield start()


@contextlib.contextmanager
def _environ(env: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _in_process(
    args: list[str], input: str | None, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    stdin = io.TextIOWrapper(io.BytesIO((input or "").encode()), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    with _environ(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        real_stdin, sys.stdin = sys.stdin, stdin
        try:
            code = main(args)
        except SystemExit as exc:  # argparse usage errors
            code = exc.code if isinstance(exc.code, int) else 2
        finally:
            sys.stdin = real_stdin
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "topics_cli" not in metafunc.fixturenames:
        return
    ways: list[object] = ["inproc"]
    every = os.environ.get("TOPICS_CLI_SUBPROCESS") == "all"
    if every or metafunc.definition.get_closest_marker("cli_process") is not None:
        ways.append(pytest.param("subprocess", marks=pytest.mark.slow))
    metafunc.parametrize("topics_cli", ways, indirect=True)


@pytest.fixture
def topics_cli(request: pytest.FixtureRequest, cli_server: ServerProcess, tmp_path: Path) -> Run:
    """Run the CLI against the server (``TOPICS_URL`` in its environment). Each test is one
    terminal session of its own: ``XDG_RUNTIME_DIR``, where the CLI remembers the losses it
    told (topics/cli/losses.py), is the test's, never the user's."""
    runtime = tmp_path / "xdg-runtime"
    runtime.mkdir(mode=0o700)

    def run(*args: str, input: str | None = None, env: dict[str, str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:  # fmt: skip
        full_env = {**os.environ, "TOPICS_URL": cli_server.base_url}
        full_env["XDG_RUNTIME_DIR"] = str(runtime)
        full_env.pop("TOPICS_API_KEY", None)
        full_env.update(env or {})
        if request.param == "inproc":
            return _in_process(list(args), input, full_env)
        return subprocess.run(
            [sys.executable, "-m", "topics.cli", *args],
            input=input, capture_output=True, text=True, env=full_env, timeout=timeout,
        )  # fmt: skip

    return run
