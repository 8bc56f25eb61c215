"""Integration fixtures: the real ``topics-server`` in a subprocess, and the ASGI app in-process.

``start_server(env)`` runs ``python -m topics.frontends.server --port 0 --memory`` with
extra environment variables (``tests.support.server.servers``), waits for its "listening
on" line and returns a handle; at teardown every server a module started gets SIGTERM and
must exit 0 (graceful shutdown is part of what these tests check). ``inproc`` builds the ASGI app around a memory-only engine on a
ManualClock and talks to it through httpx's ASGI transport: no sockets, deterministic.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.support.server import SERVER_MODES, ServerProcess, assert_serves_as, servers
from topics._clock import ManualClock
from topics.auth import KeyStore
from topics.engine import Engine, open_engine
from topics.frontends.http import HttpSettings, TopicsHttpApp, create_app
from topics.settings import Limits


@pytest.fixture(scope="module")
def start_server() -> Iterator[Callable[..., ServerProcess]]:
    """A factory of servers that all get SIGTERM at the end and must exit 0."""
    with servers() as start:
        yield start


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    """One dev-mode (no keys) server shared by a test module."""
    return start_server()


@pytest.fixture(scope="session")
def start_shared_server() -> Iterator[Callable[..., ServerProcess]]:
    """:func:`start_server` for servers that live the whole session."""
    with servers() as start:
        yield start


@pytest.fixture(scope="session", params=list(SERVER_MODES))
def server_in_every_mode(
    request: pytest.FixtureRequest, start_shared_server: Callable[..., ServerProcess]
) -> ServerProcess:
    """A dev-mode server per :data:`SERVER_MODES` entry; a module that names it as its
    ``server`` runs every test once per mode (writes, watch and queue suites do). One
    server per mode serves all those modules (a start costs 1-2 s, three per module added
    up): their topic names are their own, and none counts what the server holds overall.
    Each is checked to serve as its mode says before any test uses it."""
    server = start_shared_server(SERVER_MODES[request.param])
    assert_serves_as(server, SERVER_MODES[request.param])
    return server


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
