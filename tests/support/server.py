"""The real ``topics-server`` in a subprocess, for every suite that needs one.

``spawn_server(env, *args)`` starts ``python -m topics.frontends.server`` on a free loopback
port (memory-only unless ``args`` holds ``--data-dir``), waits for its "listening on" line
and returns a :class:`ServerProcess`. ``servers()`` hands out a ``start`` function and, when
its block ends, stops every server it started and requires exit code 0 (graceful shutdown
is part of what the suites check): the ``start_server`` fixtures of tests/integration (one
set per module) and tests/integration/client (one set per session) are that block, and
the CLI's server is one ``start()`` of it. Tests that kill or restart a server call
``spawn_server`` directly.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import httpx

__all__ = [
    "LISTENING",
    "MODE_CHECK_TOPIC",
    "SERVER_MODES",
    "START_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "ServerProcess",
    "assert_serves_as",
    "free_port",
    "servers",
    "spawn_server",
]

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
LISTENING = "topics-server listening on "

#: The ways topics-server can carry a request (settings read at start), each serving
#: differently: the fast lane with streams writing to its sockets, the lane with every
#: stream frame through ASGI, and hypercorn alone (where ``TOPICS_SSE_DIRECT`` has nothing
#: to act on: direct writes exist only on lane connections;
#: tests/integration/test_http_lane.py checks that once). The integration suites of
#: writes, watch and queues and the hostile suite run in every mode, and every mode's
#: server is checked to serve as its mode says (:func:`assert_serves_as`).
SERVER_MODES: dict[str, dict[str, str]] = {
    "lane": {"TOPICS_HTTP_LANE": "1", "TOPICS_SSE_DIRECT": "1"},
    "lane-asgi": {"TOPICS_HTTP_LANE": "1", "TOPICS_SSE_DIRECT": "0"},
    "hypercorn": {"TOPICS_HTTP_LANE": "0", "TOPICS_SSE_DIRECT": "1"},
}
#: The topic :func:`assert_serves_as` writes to and watches.
MODE_CHECK_TOPIC = "server-mode-check"


def assert_serves_as(server: ServerProcess, env: Mapping[str, str], key: str | None = None) -> None:
    """Fail unless ``server`` carries requests as ``env`` (a :data:`SERVER_MODES` entry, or
    any such pair of settings) says: a write is answered by the lane or by hypercorn
    (``X-Topics-Path``), and a watch stream on a lane connection writes to its socket
    itself exactly when ``TOPICS_SSE_DIRECT`` is on (``topics_sse_direct_streams``).
    Writes one record to :data:`MODE_CHECK_TOPIC` and leaves a watch session behind."""
    lane = env.get("TOPICS_HTTP_LANE", "1") == "1"
    direct = lane and env.get("TOPICS_SSE_DIRECT", "1") == "1"
    path = "lane" if lane else "hypercorn"
    with server.client(key) as http:
        written = http.post(f"/v0/topics/{MODE_CHECK_TOPIC}", json={"records": [{"data": 1}]})
        assert written.status_code in (200, 201), written.text
        assert written.headers.get("x-topics-path") == path, dict(written.headers)
        watch = http.post("/v0/watch", json={"topics": {MODE_CHECK_TOPIC: {"from_seq": 0}}})
        assert watch.status_code == 200, watch.text
        stream_path = f"/v0/watch/{watch.json()['wid']}"
        with http.stream("GET", stream_path, headers={"Accept": "text/event-stream"}) as stream:
            assert stream.headers.get("x-topics-path") == path, dict(stream.headers)
            # A record frame comes after the stream chose its way of writing. The line
            # iterator is kept: one dropped unfinished closes the response, and the stream.
            lines = stream.iter_lines()
            assert "event: record" in lines
            metrics = http.get("/v0/metrics", headers={"Accept": "application/json"})
            del lines
        assert metrics.json()["topics_sse_direct_streams"] == int(direct), (env, metrics.text)


_log_dir: str | None = None


def _server_log_dir() -> str:
    """One directory per test process for the servers' stderr files, removed when the
    process exits: a suite starts hundreds of servers, and each failure message already
    carries the tail it needs."""
    global _log_dir
    if _log_dir is None:
        _log_dir = tempfile.mkdtemp(prefix="topics-server-logs-")
        atexit.register(shutil.rmtree, _log_dir, True)
    return _log_dir


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


def free_port() -> int:
    """A loopback port free right now: for a server restarted on the same port (pass
    ``--port`` to :func:`spawn_server`), so its clients find it again."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn_server(env: Mapping[str, str] | None = None, *args: str) -> ServerProcess:
    """Start a server on a free loopback port and wait until it listens (memory-only
    unless ``args`` holds ``--data-dir``)."""
    full_env = dict(os.environ)
    full_env.pop("TOPICS_API_KEYS", None)
    full_env.update({"TOPICS_LOG_LEVEL": "WARNING", "PYTHONUNBUFFERED": "1"})
    full_env.update(env or {})
    err = tempfile.NamedTemporaryFile(  # noqa: SIM115
        prefix="topics-server-", suffix=".log", dir=_server_log_dir(), delete=False
    )
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


@contextlib.contextmanager
def servers() -> Iterator[Callable[..., ServerProcess]]:
    """``start(env, *args)`` spawns a server; when the block ends every one started gets
    SIGTERM and must exit 0."""
    started: list[ServerProcess] = []

    def start(env: Mapping[str, str] | None = None, *args: str) -> ServerProcess:
        server = spawn_server(env, *args)
        started.append(server)
        return server

    yield start
    for server in started:
        code = server.stop()
        assert code == 0, f"topics-server exited {code} on SIGTERM:\n{server.stderr()}"
