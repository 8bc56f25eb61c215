"""Integration fixtures: the real ``topics-server`` in a subprocess, and the ASGI app in-process.

``start_server(env)`` runs ``python -m topics.frontends.server --port 0 --memory`` with
extra environment variables, waits for its "listening on" line and returns a handle; at
teardown every started server gets SIGTERM and must exit 0 (graceful shutdown is part of
what these tests check). ``inproc`` builds the ASGI app around a memory-only engine on a
ManualClock and talks to it through httpx's ASGI transport: no sockets, deterministic.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field

import httpx
import pytest

from topics._clock import ManualClock
from topics.auth import KeyStore
from topics.engine import Engine, open_engine
from topics.frontends.http import HttpSettings, TopicsHttpApp, create_app
from topics.settings import Limits

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
LISTENING = "topics-server listening on "


@dataclass
class ServerProcess:
    """A running topics-server subprocess."""

    proc: subprocess.Popen[str]
    base_url: str
    stderr_path: str
    stdout_lines: list[str] = field(default_factory=list)

    def client(self, key: str | None = None, **kwargs: object) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30.0, **kwargs)  # type: ignore[arg-type]

    def stderr(self) -> str:
        with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Send ``sig`` and wait for the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"topics-server did not stop:\n{self.stderr()}") from None


def spawn_server(env: Mapping[str, str] | None = None, *args: str) -> ServerProcess:
    """Start a server on a free loopback port and wait until it listens (memory-only
    unless ``args`` holds ``--data-dir``)."""
    full_env = dict(os.environ)
    full_env.pop("TOPICS_API_KEYS", None)
    full_env.update({"TOPICS_LOG_LEVEL": "WARNING", "PYTHONUNBUFFERED": "1"})
    full_env.update(env or {})
    err = tempfile.NamedTemporaryFile(prefix="topics-server-", suffix=".log", delete=False)  # noqa: SIM115
    storage = [] if "--data-dir" in args else ["--memory"]
    cmd = [sys.executable, "-m", "topics.frontends.server", "--port", "0", *storage, *args]
    proc = subprocess.Popen(
        cmd, env=full_env, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1
    )
    err.close()
    server = ServerProcess(proc, "", err.name)
    assert proc.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                continue
            line = proc.stdout.readline()
            if not line:  # exited before listening
                proc.wait()
                raise AssertionError(f"topics-server exited {proc.returncode}:\n{server.stderr()}")
            server.stdout_lines.append(line)
            if line.startswith(LISTENING):
                server.base_url = line[len(LISTENING) :].strip()
                return server
    proc.kill()
    proc.wait()
    raise AssertionError(f"topics-server did not start in {START_TIMEOUT_S}s:\n{server.stderr()}")


@pytest.fixture(scope="module")
def start_server() -> Iterator[Callable[..., ServerProcess]]:
    """A factory of servers that all get SIGTERM at the end and must exit 0."""
    started: list[ServerProcess] = []

    def start(env: Mapping[str, str] | None = None, *args: str) -> ServerProcess:
        server = spawn_server(env, *args)
        started.append(server)
        return server

    yield start
    for server in started:
        code = server.stop()
        assert code == 0, f"topics-server exited {code} on SIGTERM:\n{server.stderr()}"


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    """One dev-mode (no keys) server shared by a test module."""
    return start_server()


#: The distinct ways topics-server can carry a request (settings read at start): the fast
#: lane with streams writing to its sockets, the lane with every frame through ASGI, and
#: hypercorn alone. Direct writes exist only on lane connections, so hypercorn alone with
#: ``TOPICS_SSE_DIRECT=1`` and with ``0`` are the same server and run once.
SERVER_MODES: dict[str, dict[str, str]] = {
    "lane": {"TOPICS_HTTP_LANE": "1", "TOPICS_SSE_DIRECT": "1"},
    "lane-asgi": {"TOPICS_HTTP_LANE": "1", "TOPICS_SSE_DIRECT": "0"},
    "hypercorn": {"TOPICS_HTTP_LANE": "0", "TOPICS_SSE_DIRECT": "1"},
    # Direct writes need a connection the lane owns, so with the lane off the switch must
    # change nothing: this mode proves it rather than assuming it.
    "hypercorn-asgi": {"TOPICS_HTTP_LANE": "0", "TOPICS_SSE_DIRECT": "0"},
}


@pytest.fixture(scope="module", params=list(SERVER_MODES))
def server_in_every_mode(
    request: pytest.FixtureRequest, start_server: Callable[..., ServerProcess]
) -> ServerProcess:
    """A dev-mode server per :data:`SERVER_MODES` entry; a module that names it as its
    ``server`` runs every test once per mode (writes, watch and queue suites do)."""
    return start_server(SERVER_MODES[request.param])


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


# -- in-process --------------------------------------------------------------------------


@dataclass
class InProc:
    """The ASGI app around an open engine, with an httpx client bound to it."""

    app: TopicsHttpApp
    engine: Engine
    clock: ManualClock

    def client(self, key: str | None = None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app),  # type: ignore[arg-type]
            base_url="http://topics.test",
            headers=headers,
        )


@pytest.fixture
def http_settings() -> HttpSettings:
    """Override (e.g. with ``pytest.mark.parametrize``-free fixtures) to change settings."""
    return HttpSettings()


@pytest.fixture
async def inproc(http_settings: HttpSettings) -> AsyncIterator[InProc]:
    clock = ManualClock(1_700_000_000_000)
    async with open_engine(None, clock=clock, limits=http_settings.limits) as engine:
        yield InProc(create_app(engine, http_settings), engine, clock)


def settings_with(keys: str = "", **kwargs: object) -> HttpSettings:
    """HttpSettings with the given TOPICS_API_KEYS spec and Limits/HttpSettings fields."""
    limit_fields = {k: v for k, v in kwargs.items() if k in Limits.__dataclass_fields__}
    other = {k: v for k, v in kwargs.items() if k not in limit_fields}
    return HttpSettings(
        limits=Limits(**limit_fields),  # type: ignore[arg-type]
        keys=KeyStore.from_spec(keys),
        **other,  # type: ignore[arg-type]
    )
