"""Client fixtures: one real ``topics-server`` subprocess shared by the client tests.

The server comes from ``tests.support.server.servers`` (a free loopback port, memory mode
unless ``--data-dir`` is given); at teardown each started server gets SIGTERM and must
exit 0. Helpers here build fault-injecting httpx transports (a tiny fake HTTP
layer in front of the real server) for the retry tests.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx
import pytest

import topics
from tests.support.server import ServerProcess, servers

__all__ = ["FakeTime", "Fault", "FaultyTransport", "ServerProcess", "unique"]

_names = itertools.count(1)


def unique(prefix: str = "t") -> str:
    """A topic name no other test in the session uses."""
    return f"{prefix}-{next(_names)}"


@pytest.fixture(scope="session")
def start_server() -> Iterator[Callable[..., ServerProcess]]:
    """The integration suite's factory, but one set of servers for the whole session."""
    with servers() as start:
        yield start


@pytest.fixture(scope="session")
def server(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    """One dev-mode (no keys) memory server for the whole client suite."""
    return start_server()


@pytest.fixture
def client(server: ServerProcess) -> Iterator[topics.Client]:
    with topics.Client(server.base_url) as c:
        yield c


class FakeTime:
    """Stands in for one client module's ``time`` module: records sleeps, sleeps nothing
    (patching only that module keeps other threads' ``time.sleep`` real)."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []
        self.monotonic = time.monotonic

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)


# -- fault injection ---------------------------------------------------------------------

Fault = Callable[[httpx.Request], httpx.Response | None]
"""Given a request, answer it (a fake response), raise (a transport error), or return
None to let the real server answer."""


class FaultyTransport(httpx.BaseTransport):
    """Runs each request through ``faults`` (consumed in order) before the real server.

    ``after`` faults run once the real server answered: a fault there that raises models a
    lost answer (the request *was* executed).
    """

    def __init__(self, faults: list[Fault] | None = None, after: list[Fault] | None = None):
        self.inner = httpx.HTTPTransport()
        self.faults = list(faults or [])
        self.after = list(after or [])
        self.requests: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.faults:
            answer = self.faults.pop(0)(request)
            if answer is not None:
                return answer
        response = self.inner.handle_request(request)
        if self.after:
            response.read()
            answer = self.after.pop(0)(request)
            if answer is not None:
                return answer
        return response

    def close(self) -> None:
        self.inner.close()


def error_response(status: int, code: str, headers: Mapping[str, str] | None = None,
                   detail: dict[str, Any] | None = None) -> Fault:  # fmt: skip
    """A fault answering with the contract's error envelope."""

    def fault(request: httpx.Request) -> httpx.Response:
        error: dict[str, Any] = {"code": code, "message": f"injected {code}"}
        if detail is not None:
            error["detail"] = detail
        hdrs = {"x-request-id": request.headers.get("x-request-id", "")}
        hdrs.update(headers or {})
        return httpx.Response(status, json={"error": error}, headers=hdrs)

    return fault


def raises(exc: type[httpx.TransportError]) -> Fault:
    def fault(request: httpx.Request) -> httpx.Response:
        raise exc("injected", request=request)

    return fault
