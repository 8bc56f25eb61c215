"""SIGTERM while clients hold connections mid-head and mid-body (issue 14, case 8): the
process drains and exits 0 promptly, within ``TOPICS_DRAIN_TIMEOUT_MS`` plus a few
seconds, instead of waiting on clients that will never finish a request.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import time

import pytest

from tests.support.server import SERVER_MODES, assert_serves_as, spawn_server

from .conftest import DRAIN_TIMEOUT_MS, KEY, connect, server_env

pytestmark = pytest.mark.slow

EXIT_WITHIN_S = 3.0 + DRAIN_TIMEOUT_MS / 1000


@pytest.mark.parametrize("mode", list(SERVER_MODES))
def test_sigterm_with_connections_mid_head_exits_promptly(mode: str) -> None:
    server = spawn_server(server_env(mode))
    socks: list[socket.socket] = []
    try:
        assert_serves_as(server, SERVER_MODES[mode], KEY)
        write = (
            "POST /v0/topics/hostile-shutdown HTTP/1.1\r\nHost: t\r\n"
            f"Authorization: Bearer {KEY}\r\nContent-Length: 100\r\n\r\n"
        ).encode()
        for i in range(30):
            sock = connect(server)
            sock.sendall(write[: 1 + i] if i < 20 else write + b'{"rec')  # mid-head, mid-body
            socks.append(sock)
        socks.append(connect(server))  # and one idle
        time.sleep(0.2)  # let the server accept and read them all
        t0 = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        try:
            code = server.proc.wait(EXIT_WITHIN_S + 10)
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - t0
        assert code == 0, f"exit code {code} after SIGTERM:\n{server.stderr()[-1500:]}"
        assert took < EXIT_WITHIN_S, f"took {took:.1f} s to exit (bound {EXIT_WITHIN_S} s)"
    finally:
        for sock in socks:
            sock.close()
        with contextlib.suppress(AssertionError):
            server.stop(signal.SIGKILL)
