"""Readiness tells the truth when the server cannot accept connections (issue #30, finding 8).

With its descriptors exhausted, trio's accept loop logs EMFILE and retries every 0.1 s: the
process lives and ``/v0/health`` is right to say 200, but ``/v0/ready`` said 200 too while
every new client waited in the listen backlog. What must hold (frontends/http/accepting.py,
probe_routes rule 2), in every server mode (the lane and hypercorn share one accept loop):

1. while accepts fail, ``/v0/ready`` on a connection the server already has answers
   ``503 not_ready`` with ``detail.accepting`` (``EMFILE``) and a Retry-After;
2. once descriptors are back and an accept succeeds, it is 200 again, and the server
   serves new connections, with nothing lost.

The test lowers the running server's descriptor limit (``prlimit``) to just above what it
holds, opens connections until the kernel's backlog is all that takes them, and asks on a
keep-alive connection opened before.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import resource
import socket
import time
from collections.abc import Iterator

import pytest

from tests.support.server import SERVER_MODES, ServerProcess, spawn_server

from .conftest import address, connect, server_env

#: Connections beyond the lowered limit: some are accepted, the rest wait in the backlog.
EXTRA_CONNECTIONS = 12
WAIT_S = 10.0


@pytest.fixture(params=list(SERVER_MODES))
def server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    proc = spawn_server(server_env(request.param, TOPICS_API_KEYS=""))
    yield proc
    assert proc.stop() == 0, proc.stderr()


def _ready(conn: http.client.HTTPConnection) -> tuple[int, dict[str, object], str | None]:
    conn.request("GET", "/v0/ready")
    r = conn.getresponse()
    body = json.loads(r.read())
    return r.status, body, r.getheader("Retry-After")


@contextlib.contextmanager
def _descriptors_exhausted(server: ServerProcess) -> Iterator[list[socket.socket]]:
    """The server's soft RLIMIT_NOFILE just above its highest open descriptor, and
    connections past it; both undone on exit."""
    pid = server.proc.pid
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    highest = max(int(fd) for fd in os.listdir(f"/proc/{pid}/fd"))
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (highest + 3, hard))
    socks: list[socket.socket] = []
    try:
        for _ in range(EXTRA_CONNECTIONS):
            socks.append(connect(server, timeout=5.0))  # the kernel completes the handshake
        yield socks
    finally:
        for sock in socks:
            sock.close()
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))


def _until(
    conn: http.client.HTTPConnection, status: int
) -> tuple[int, dict[str, object], str | None]:
    deadline = time.monotonic() + WAIT_S
    while True:
        got = _ready(conn)
        if got[0] == status or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_ready_is_503_while_accepts_fail_and_200_once_they_succeed(server: ServerProcess) -> None:
    host, port = address(server)
    conn = http.client.HTTPConnection(host, port, timeout=10.0)
    try:
        assert _ready(conn)[0] == 200  # the probe's connection exists before the shortage
        with _descriptors_exhausted(server):
            status, body, retry_after = _until(conn, 503)
            assert status == 503, body
            error = body["error"]
            assert isinstance(error, dict)
            assert error["code"] == "not_ready"
            assert error["detail"] == {"accepting": "EMFILE"}
            assert retry_after is not None
            assert server.proc.poll() is None, "the server must live through it"
        status, body, _ = _until(conn, 200)
        assert status == 200, body
    finally:
        conn.close()
    with server.client() as http_client:  # new connections are served again
        assert http_client.get("/v0/health").status_code == 200
        r = http_client.post("/v0/topics/after", json={"records": [{"data": 1}]})
        assert r.status_code == 201, r.text
