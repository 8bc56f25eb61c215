"""Hostile-client fixtures: one real ``topics-server`` per server mode, raw sockets, and the
check every attack ends with.

Each test module that uses ``target`` runs once per way the server can carry a request
(``tests.support.server.SERVER_MODES``): the fast lane with stream frames written to the
socket directly, the lane with every frame through ASGI (``TOPICS_SSE_DIRECT=0``), and
hypercorn alone (``TOPICS_HTTP_LANE=0``); each server is checked to serve as its mode says
(``assert_serves_as``) before an attack. The server is shared by a module's tests of one mode (starting
one costs ~1-2 s); it runs with keys
(:data:`KEYS`) and short connection deadlines (:data:`HEAD_TIMEOUT_MS`,
:data:`BODY_TIMEOUT_MS`, :data:`KEEP_ALIVE_MS`, :data:`WS_CLOSE_TIMEOUT_MS`) so slowloris
cases finish in about a second.

Rules:
1. An attack that kills the server fails its own test, not the rest: ``target`` starts a
   fresh server when the previous one died (and the dead one's stderr goes into the
   failure message of the test that killed it, through :meth:`Target.assert_unharmed`).
2. Every attack ends with :meth:`Target.assert_unharmed`: the process is alive, a fresh
   connection gets 200 from ``GET /v0/health``, and what is stored equals the snapshot
   taken when the test started (the seed topic's records and head, and every topic's head
   and count), except for topics a test names as its own.
3. Attacks carry the valid key when a request that slipped through would store something
   (a smuggled or mis-parsed write then shows up in the snapshot); otherwise no key.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest
import wsproto
import wsproto.events

from tests.support.server import SERVER_MODES, ServerProcess, assert_serves_as, spawn_server

KEY = "hostile-admin"
KEYS = KEY
HEAD_TIMEOUT_MS = 1000
BODY_TIMEOUT_MS = 1000
DRAIN_TIMEOUT_MS = 500
#: An idle connection (no byte of a next request) is closed after this long; longer than
#: the head deadline + slack, so a head test cannot pass on the idle timeout instead.
KEEP_ALIVE_MS = 4000
#: How long a WebSocket client may leave the server's close frame unanswered.
WS_CLOSE_TIMEOUT_MS = 1000
#: How late past a deadline a close may come (2 shared cores, a loaded CI box).
SLACK_S = 2.0
SEED_TOPIC = "hostile-seed"
SEED_RECORDS = 7


def server_env(mode: str, **extra: str) -> dict[str, str]:
    """The environment of a hostile-suite server in ``mode`` (a ``SERVER_MODES`` name)."""
    return {
        **SERVER_MODES[mode],
        "TOPICS_API_KEYS": KEYS,
        "TOPICS_HTTP_HEAD_TIMEOUT_MS": str(HEAD_TIMEOUT_MS),
        "TOPICS_HTTP_BODY_TIMEOUT_MS": str(BODY_TIMEOUT_MS),
        "TOPICS_DRAIN_TIMEOUT_MS": str(DRAIN_TIMEOUT_MS),
        "TOPICS_HTTP_KEEP_ALIVE_MS": str(KEEP_ALIVE_MS),
        "TOPICS_WS_CLOSE_TIMEOUT_MS": str(WS_CLOSE_TIMEOUT_MS),
        **extra,
    }


def address(server: ServerProcess) -> tuple[str, int]:
    host, port = server.base_url.removeprefix("http://").rsplit(":", 1)
    return host.strip("[]"), int(port)


def connect(
    server: ServerProcess, timeout: float = 10.0, *, rcvbuf: int | None = None
) -> socket.socket:
    """A connection to ``server``; ``rcvbuf`` shrinks the kernel's receive buffer before
    the connect (after it, the window is already advertised), so a client that never reads
    backs the server up after a few KiB."""
    if rcvbuf is None:
        return socket.create_connection(address(server), timeout=timeout)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(timeout)
    sock.connect(address(server))
    return sock


#: What a flood offers: far more than one loopback connection's kernel buffers hold
#: (~3 MB here), so a server that kept reading takes visibly more than ``STOPPED_BY``.
FLOOD_BYTES = 32 * 1024 * 1024
STOPPED_BY = 12 * 1024 * 1024


def send_until_stalled(
    sock: socket.socket, data: bytes, stall_s: float = 1.0, total_s: float = 15.0
) -> int:
    """Send ``data`` until it is gone, one send waits ``stall_s`` (the server stopped
    reading and the kernel's buffers are full) or ``total_s`` pass; the bytes sent."""
    sock.settimeout(stall_s)
    sent = 0
    deadline = time.monotonic() + total_s
    with contextlib.suppress(TimeoutError):
        while sent < len(data) and time.monotonic() < deadline:
            sent += sock.send(data[sent : sent + 65536])
    return sent


def reset(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0) instead of a FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def open_ws(
    server: ServerProcess, *, rcvbuf: int | None = None
) -> tuple[socket.socket, wsproto.WSConnection]:
    """A ``/v0/ws`` connection with the valid key, its upgrade accepted; the socket and
    the client-side protocol state (for sending well-formed frames after it)."""
    sock = connect(server, rcvbuf=rcvbuf)
    client = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    request = wsproto.events.Request(
        host="t", target="/v0/ws", extra_headers=[(b"authorization", f"Bearer {KEY}".encode())]
    )
    sock.sendall(client.send(request))
    accepted = False
    while not accepted:
        data = sock.recv(65536)
        assert data, "closed during the WebSocket handshake"
        client.receive_data(data)
        for event in client.events():
            assert isinstance(event, wsproto.events.AcceptConnection), event
            accepted = True
    return sock, client


def read_until_closed(sock: socket.socket, timeout: float) -> tuple[bytes, bool]:
    """Everything the server sends within ``timeout`` s, and whether it closed (EOF or
    reset) by then."""
    deadline = time.monotonic() + timeout
    data = b""
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return data, False
        except (ConnectionResetError, BrokenPipeError):
            return data, True
        if not chunk:
            return data, True
        data += chunk
    return data, False


def read_head(sock: socket.socket, timeout: float) -> tuple[int | None, bytes]:
    """The status of the first response head within ``timeout`` s (None: no head; the
    connection closed or went quiet), and every byte read."""
    deadline = time.monotonic() + timeout
    data = b""
    while b"\r\n\r\n" not in data and (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, ConnectionResetError, BrokenPipeError):
            break
        if not chunk:
            break
        data += chunk
    if b"\r\n\r\n" not in data or not data.startswith(b"HTTP/"):
        return None, data
    return int(data.split(b" ", 2)[1]), data


def exchange(server: ServerProcess, payload: bytes, timeout: float = 5.0) -> tuple[bytes, bool]:
    """Send ``payload`` on a fresh connection (shutting down nothing), then read until the
    server closes or ``timeout`` s pass: ``(bytes read, closed)``."""
    with connect(server) as sock:
        sock.sendall(payload)
        return read_until_closed(sock, timeout)


def status_of(data: bytes) -> int | None:
    if not data.startswith(b"HTTP/") or b"\r\n" not in data:
        return None
    return int(data.split(b" ", 2)[1])


def health_status(server: ServerProcess, timeout: float = 10.0) -> int | None:
    """``GET /v0/health`` on a fresh connection: the status, or None with no answer."""
    with contextlib.suppress(OSError), connect(server, timeout) as sock:
        sock.sendall(b"GET /v0/health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        status, _ = read_head(sock, timeout)
        return status
    return None


@dataclass
class Target:
    """The mode's server, restarted when an attack killed it (rule 1)."""

    mode: str
    server: ServerProcess | None = None
    #: More of the server's environment (``server_env`` extras), e.g. a smaller cap.
    env: dict[str, str] = field(default_factory=dict)
    snapshot: dict[str, object] = field(default_factory=dict)
    dead: list[str] = field(default_factory=list)

    @property
    def lane(self) -> str:
        """``TOPICS_HTTP_LANE`` of this mode: "1" when the lane reads every head first."""
        return SERVER_MODES[self.mode]["TOPICS_HTTP_LANE"]

    def ensure(self) -> ServerProcess:
        if self.server is not None and self.server.proc.poll() is None:
            return self.server
        server = spawn_server(server_env(self.mode, **self.env))
        try:
            assert_serves_as(server, SERVER_MODES[self.mode], KEY)
        except AssertionError:  # not this mode's server: no test may run against it
            server.stop()
            raise
        self.server = server
        with self.client() as http:
            body = {"records": [{"data": {"i": i}, "tag": f"t:{i}"} for i in range(SEED_RECORDS)]}
            r = http.post(f"/v0/topics/{SEED_TOPIC}", json=body)
            assert r.status_code == 201, r.text
        self.snapshot = self.stored()
        return self.server

    def client(self) -> httpx.Client:
        assert self.server is not None
        return self.server.client(KEY)

    def stored(self) -> dict[str, object]:
        """What the check compares: every topic's name and head, the seed's records."""
        with self.client() as http:
            listing = http.get("/v0/topics", params={"page_size": 1000})
            assert listing.status_code == 200, listing.text
            heads = {t["topic"]: [t["head_seq"], t["count"]] for t in listing.json()["topics"]}
            diff = http.post(f"/v0/topics/{SEED_TOPIC}/diff", json={"include_tags": True})
            assert diff.status_code == 200, diff.text
            records = diff.json()["records"]
        return {"heads": heads, "records": json.dumps(records, sort_keys=True)}

    def assert_unharmed(self, *, own_topics: tuple[str, ...] = ()) -> None:
        """Rule 2: alive, healthy on a fresh connection, nothing stored changed."""
        server = self.server
        assert server is not None
        healthy = health_status(server) == 200
        code = server.proc.poll()
        if code is None and not healthy:  # not listening: maybe on its way out
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = server.proc.wait(3.0)
        if code is not None:
            self.dead.append(server.stderr())
            pytest.fail(
                f"topics-server ({self.mode}) died with exit code {code}; stderr tail:\n"
                f"{server.stderr()[-1500:]}"
            )
        assert healthy, "GET /v0/health on a fresh connection must answer 200"
        now = self.stored()
        heads = dict(now["heads"])  # type: ignore[call-overload]
        before = dict(self.snapshot["heads"])  # type: ignore[call-overload]
        for topic in own_topics:
            heads.pop(topic, None)
            before.pop(topic, None)
        assert heads == before, "topics or heads changed under attack"
        assert now["records"] == self.snapshot["records"], "the seed topic's records changed"

    def rss_kib(self) -> int:
        assert self.server is not None
        with open(f"/proc/{self.server.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def stop(self) -> None:
        if self.server is not None and self.server.proc.poll() is None:
            with contextlib.suppress(AssertionError):
                self.server.stop()


@pytest.fixture(scope="module", params=list(SERVER_MODES))
def mode_target(request: pytest.FixtureRequest) -> Iterator[Target]:
    target = Target(request.param)
    yield target
    target.stop()


@pytest.fixture
def target(mode_target: Target) -> Target:
    """The module's server for this mode, alive (rule 1)."""
    mode_target.ensure()
    mode_target.snapshot = mode_target.stored()  # a failed test's writes are not the next's
    return mode_target
