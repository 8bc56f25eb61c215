"""SSE streams on the real server, where frames go straight to the socket (watch_routes rule 7).

The in-process tests (test_watch_sse.py) run through httpx's ASGI transport, which has no
socket: there every frame goes through ASGI. These run ``topics-server`` (hypercorn) and read
the raw bytes, so the direct path is the one under test: its HTTP/1.1 chunk framing, ids,
resume, the first read when a backlog needs the pump, heartbeats and the final frames of an
idle stream (superseded, server shutdown).
"""

from __future__ import annotations

import contextlib
import re
import signal
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
import trio
import ujson
from hypercorn.config import Config
from hypercorn.trio import serve

from tests.support.http1 import take_chunk, take_head
from topics.engine import open_engine
from topics.frontends.http import HttpSettings, create_app
from topics.frontends.http.serve import serve as serve_with_lane
from topics.wire import cursor
from topics.wire.sse import Comment, Event, Item, SSEDecoder

from .conftest import ServerProcess


@pytest.fixture(scope="module")
def server(server_in_every_mode: ServerProcess) -> ServerProcess:
    """This suite runs once per way the server can carry it (tests.support.server.SERVER_MODES)."""
    return server_in_every_mode


pytestmark = pytest.mark.slow


class RawSse:
    """A raw-socket SSE client that checks the chunked framing of every byte it reads."""

    def __init__(self, server: ServerProcess, wid: str, last_event_id: str | None = None) -> None:
        host, port = server.base_url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=20)
        extra = f"Last-Event-ID: {last_event_id}\r\n" if last_event_id else ""
        self.sock.sendall(
            f"GET /v0/watch/{wid} HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n"
            f"{extra}\r\n".encode()
        )
        self.buf = b""
        self._read_head()
        self.decoder = SSEDecoder()
        self.items: list[Item] = []
        self.ended = False  # the terminating zero-length chunk arrived

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buf += chunk

    def _read_head(self) -> None:
        while (head := take_head(self.buf)) is None:
            self._fill()
        status, headers, self.buf = head
        assert status.startswith(b"HTTP/1.1 200"), status
        assert headers.get(b"transfer-encoding") == b"chunked"

    def _next_chunk(self) -> bytes:
        while (chunk := take_chunk(self.buf)) is None:
            self._fill()
        payload, self.buf = chunk
        return payload

    def read_until(self, pred: Callable[[Item], bool]) -> list[Item]:
        start = len(self.items)
        while True:
            for i in range(start, len(self.items)):
                if pred(self.items[i]):
                    return self.items[start : i + 1]
            start = len(self.items)
            data = self._next_chunk()
            if not data:
                self.ended = True
                raise EOFError("the stream ended")
            self.items.extend(self.decoder.feed(data))

    def read_to_end(self) -> None:
        with contextlib.suppress(EOFError):
            self.read_until(lambda _: False)

    def events(self, name: str) -> list[Event]:
        return [i for i in self.items if isinstance(i, Event) and i.event == name]

    def close(self) -> None:
        self.sock.close()


@contextlib.asynccontextmanager
async def hypercorn_server(
    app: object, *, lane: bool = False
) -> AsyncIterator[tuple[str, str, str]]:
    """``app`` in this trio run: (base url, host, port). On plain hypercorn by default;
    ``lane=True`` serves it as topics-server does (the fast lane in front), where streams
    write to the socket directly."""
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    stop = trio.Event()

    def start(task_status: trio.TaskStatus[list[str]]) -> Any:
        if lane:
            return serve_with_lane(
                app,  # type: ignore[arg-type]
                config,
                shutdown_trigger=stop.wait,
                task_status=task_status,
            )
        return serve(
            app,  # type: ignore[arg-type]  # hypercorn's ASGI typing
            config,
            shutdown_trigger=stop.wait,
            task_status=task_status,
        )

    async with trio.open_nursery() as nursery:
        binds = await nursery.start(start)
        host, port = binds[0].removeprefix("http://").split(":")
        try:
            yield binds[0], host, port
        finally:
            stop.set()


def is_event(name: str) -> Callable[[Item], bool]:
    return lambda i: isinstance(i, Event) and i.event == name


def record_count(events: list[Event]) -> int:
    return sum(len(ujson.loads(e.data)["records"]) for e in events)


@pytest.fixture
def open_sse(server: ServerProcess) -> Iterator[Callable[..., RawSse]]:
    opened: list[RawSse] = []

    def opener(wid: str, last_event_id: str | None = None) -> RawSse:
        client = RawSse(server, wid, last_event_id)
        opened.append(client)
        return client

    yield opener
    for client in opened:
        client.close()


def watch(server: ServerProcess, body: dict[str, Any]) -> str:
    with server.client() as http:
        r = http.post("/v0/watch", json=body)
        assert r.status_code == 200, r.text
        return str(r.json()["wid"])


def write(server: ServerProcess, topic: str, *values: object) -> None:
    with server.client() as http:
        r = http.post(f"/v0/topics/{topic}", json={"records": [{"data": v} for v in values]})
        assert r.status_code in (200, 201), r.text


def create(server: ServerProcess, *topics: str) -> None:
    with server.client() as http:
        for topic in topics:
            assert http.put(f"/v0/topics/{topic}", json={}).status_code in (200, 201)


def test_live_records_carry_resumable_ids(
    server: ServerProcess, open_sse: Callable[..., RawSse]
) -> None:
    create(server, "d-live")
    wid = watch(server, {"topics": {"d-live": {"tail": True}}})
    client = open_sse(wid)
    client.read_until(is_event("caught-up"))
    for n in range(3):
        write(server, "d-live", n)
        client.read_until(is_event("record"))
    records = client.events("record")
    assert [cursor.decode(e.id) for e in records] == [{"d-live": 1}, {"d-live": 2}, {"d-live": 3}]
    assert [ujson.loads(e.data)["records"][0]["data"] for e in records] == [0, 1, 2]
    client.close()
    # Rewind to the second record: only the third comes again.
    again = open_sse(wid, records[1].id)
    again.read_until(is_event("caught-up"))
    replay = again.events("record")
    assert [cursor.decode(e.id) for e in replay] == [{"d-live": 3}]


def test_multi_topic_stream_ids_are_composite(
    server: ServerProcess, open_sse: Callable[..., RawSse]
) -> None:
    create(server, "d-a", "d-b")
    wid = watch(server, {"topics": {"d-a": {"tail": True}, "d-b": {"tail": True}}})
    client = open_sse(wid)
    client.read_until(lambda _: len(client.events("caught-up")) == 2)
    write(server, "d-a", "x")
    client.read_until(is_event("record"))
    write(server, "d-b", "y")
    client.read_until(lambda _: len(client.events("record")) == 2)
    assert cursor.decode(client.events("record")[-1].id) == {"d-a": 1, "d-b": 1}


def test_backlog_through_the_pump_then_live_directly(
    server: ServerProcess, open_sse: Callable[..., RawSse]
) -> None:
    create(server, "d-backlog")
    write(server, "d-backlog", *range(9))
    wid = watch(server, {"topics": {"d-backlog": {"from_seq": 0}}, "limit": 2})
    client = open_sse(wid)
    client.read_until(is_event("caught-up"))
    assert record_count(client.events("record")) == 9
    write(server, "d-backlog", "live")
    client.read_until(lambda i: isinstance(i, Event) and '"live"' in i.data)
    assert cursor.decode(client.events("record")[-1].id) == {"d-backlog": 10}
    assert len(client.events("caught-up")) == 1


def test_idle_stream_sends_heartbeats(
    server: ServerProcess, open_sse: Callable[..., RawSse]
) -> None:
    create(server, "d-hb")
    wid = watch(server, {"topics": {"d-hb": {"tail": True}}, "heartbeat_ms": 1000})
    client = open_sse(wid)
    client.read_until(is_event("caught-up"))
    client.read_until(lambda i: isinstance(i, Comment) and i.is_heartbeat)
    write(server, "d-hb", 1)
    client.read_until(is_event("record"))


def test_idle_stream_superseded_gets_its_final_frame(
    server: ServerProcess, open_sse: Callable[..., RawSse]
) -> None:
    create(server, "d-sup")
    wid = watch(server, {"topics": {"d-sup": {"tail": True}}})
    first = open_sse(wid)
    first.read_until(is_event("caught-up"))
    second = open_sse(wid)
    second.read_until(is_event("caught-up"))
    first.read_to_end()
    assert first.ended
    (closing,) = first.events("connection-closing")
    assert ujson.loads(closing.data)["reason"] == "superseded"
    write(server, "d-sup", "after")
    second.read_until(is_event("record"))


def test_idle_stream_ends_with_server_shutdown(
    start_server: Callable[..., ServerProcess],
) -> None:
    own = start_server()
    create(own, "d-bye")
    wid = watch(own, {"topics": {"d-bye": {"tail": True}}})
    client = RawSse(own, wid)
    try:
        client.read_until(is_event("caught-up"))
        own.proc.send_signal(signal.SIGTERM)
        client.read_to_end()
        (closing,) = client.events("connection-closing")
        assert ujson.loads(closing.data)["reason"] == "server_shutdown"
        assert own.proc.wait(30) == 0
    finally:
        client.close()


async def test_a_connection_hypercorn_owns_never_gives_the_raw_socket() -> None:
    """Direct writes happen only on connections the lane owns: nothing reaches into
    hypercorn's objects for its socket, so a stream there sends through ASGI."""
    from topics.frontends.http.direct import RawSocket

    found: list[bool] = []
    done = trio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                kind = message["type"].removeprefix("lifespan.")
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x", "more_body": True})
        found.append(RawSocket.find(send) is not None)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        done.set()

    async with hypercorn_server(app) as (_, host, port):
        stream = await trio.open_tcp_stream(host, int(port))
        await stream.send_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        await done.wait()
        body = b""
        while not body.endswith(b"0\r\n\r\n"):
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            body += chunk
        await stream.aclose()
    assert found == [False]


async def test_slow_consumer_on_the_raw_socket_frees_its_slot_and_loses_nothing() -> None:
    """A client that stops reading: direct writes fill the socket, the rest queues, the
    queue's slow-consumer rules end the stream (the raw write, unlike hypercorn's, can be
    cancelled), and a resume from the session replays what never left."""
    from topics.watch_types import WatchSettings

    payload = "x" * 40_000
    async with open_engine(None) as engine:
        engine.watch_hub.settings = WatchSettings(
            queue_frames=2,
            buffer_grace_ms=200,
            slow_consumer_timeout_ms=800,
            final_frame_timeout_ms=200,
        )
        # No CPU-pressure 429s on a busy machine: the writes must all land.
        async with (
            hypercorn_server(create_app(engine, HttpSettings(throttle_lag_ms=0)), lane=True) as (
                base,
                host,
                port,
            ),
            httpx.AsyncClient(base_url=base, timeout=30) as http,
        ):
            await http.put("/v0/topics/slow", json={})
            r = await http.post("/v0/watch", json={"topics": {"slow": {"tail": True}}})
            wid = r.json()["wid"]
            sock = trio.socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            await sock.connect((host, int(port)))
            await sock.send(
                f"GET /v0/watch/{wid} HTTP/1.1\r\nHost: t\r\n"
                "Accept: text/event-stream\r\n\r\n".encode()
            )
            buf = b""
            while b"caught-up" not in buf:
                buf += await sock.recv(65536)
            written = 0
            with trio.fail_after(60):
                # Write (and read nothing) until the stream gives up on this client.
                while engine.watch_statistics().connections:
                    body = {"records": [{"data": [written, payload]}]}
                    (await http.post("/v0/topics/slow", json=body)).raise_for_status()
                    written += 1
                    await trio.sleep(0.01)
            session = engine.watch_hub.session(wid)
            assert session is not None
            assert session.stream is None  # the session stays, resumable
            with trio.fail_after(30):
                while True:
                    chunk = await sock.recv(1 << 20)
                    if not chunk:
                        break
                    buf += chunk
            sock.close()
            seen = {int(m) for m in re.findall(rb'"data":\[(\d+),', buf)}
            # Everything the session did not commit is still to come on resume.
            assert session.cursors()["slow"] <= len(seen)
            assert set(range(session.cursors()["slow"])) <= seen


def test_strong_stream_gets_records_once_the_wal_commits_them(
    start_server: Callable[..., ServerProcess], tmp_path: Any
) -> None:
    """A strong read first sees nothing (the WAL frame is not written yet); the WAL's
    progress, not another write, must bring the record to an idle direct stream."""
    own = start_server(None, "--data-dir", str(tmp_path))
    with own.client() as http:
        assert http.put("/v0/topics/d-strong", json={"durability": "fsync"}).status_code in (
            200,
            201,
        )
    wid = watch(own, {"topics": {"d-strong": {"tail": True}}, "consistency": "strong"})
    client = RawSse(own, wid)
    try:
        client.read_until(is_event("caught-up"))
        for n in range(5):
            write(own, "d-strong", n)
            client.read_until(is_event("record"))
        assert record_count(client.events("record")) == 5
    finally:
        client.close()


async def test_stream_is_idle_again_after_its_backlog() -> None:
    """The backlog at open goes through the writer and the pump; once it is drained they
    end (an idle stream keeps no task but the request's), and live records still arrive
    directly, with their ids."""

    def helpers() -> list[str]:
        root = trio.lowlevel.current_root_task()
        assert root is not None
        names = []
        todo = [root]
        while todo:
            task = todo.pop()
            names.append(task.name)
            todo.extend(t for n in task.child_nurseries for t in n.child_tasks)
        return [n for n in names if n.endswith(("run_writer", "_pump"))]

    async with (
        open_engine(None) as engine,
        hypercorn_server(create_app(engine, HttpSettings()), lane=True) as (base, host, port),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        await http.post("/v0/topics/idle", json={"records": [{"data": i} for i in range(5)]})
        r = await http.post("/v0/watch", json={"topics": {"idle": {"from_seq": 0}}, "limit": 2})
        wid = r.json()["wid"]
        stream = await trio.open_tcp_stream(host, int(port))
        await stream.send_all(
            f"GET /v0/watch/{wid} HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        buf = b""
        with trio.fail_after(10):
            while b"caught-up" not in buf:
                buf += await stream.receive_some(65536)
            # The writer and the pump retire once drained (polling trio's task tree).
            while helpers():  # noqa: ASYNC110
                await trio.sleep(0.01)
        await http.post("/v0/topics/idle", json={"records": [{"data": "live"}]})
        with trio.fail_after(10):
            while b'"live"' not in buf:
                buf += await stream.receive_some(65536)
        assert not helpers()  # delivered directly, without them
        # Frames queued together leave in one chunk, not as chunks inside a chunk.
        assert not re.search(rb"\r\n[0-9a-f]+\r\n[0-9a-f]+\r\n", buf)
        ids = re.findall(rb"id: (\S+)", buf)
        assert cursor.decode(ids[-1].decode()) == {"idle": 6}
        await stream.aclose()


async def test_watchers_of_one_topic_share_one_write_pass_and_a_dead_one_drops_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Idle one-topic streams at one cursor are written in one group (hub rule 8): every
    live watcher gets every record once, with its resumable id, whether it stands alone at
    its cursor or not; a watcher whose socket died drops out without disturbing the rest."""
    from topics.frontends.http import watch_routes

    group_sizes: list[int] = []
    write_group = watch_routes._SseConnection.write_group

    def counted(batch: Any, sinks: list[Any]) -> list[Any]:
        group_sizes.append(len(sinks))
        return write_group(batch, sinks)

    monkeypatch.setattr(watch_routes._SseConnection, "write_group", staticmethod(counted))
    async with (
        open_engine(None) as engine,
        hypercorn_server(create_app(engine, HttpSettings(throttle_lag_ms=0)), lane=True) as (
            base,
            host,
            port,
        ),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        await http.put("/v0/topics/many", json={})
        streams = []
        for _ in range(8):
            r = await http.post("/v0/watch", json={"topics": {"many": {"tail": True}}})
            stream = await trio.open_tcp_stream(host, int(port))
            await stream.send_all(
                f"GET /v0/watch/{r.json()['wid']} HTTP/1.1\r\nHost: t\r\n"
                "Accept: text/event-stream\r\n\r\n".encode()
            )
            buf = b""
            with trio.fail_after(10):
                while b"caught-up" not in buf:
                    buf += await stream.receive_some(65536)
            streams.append(stream)
        await streams.pop().aclose()  # gone without a word: its write fails or is dropped
        bufs = [b""] * len(streams)
        for n in range(20):
            await http.post("/v0/topics/many", json={"records": [{"data": n}]})
        with trio.fail_after(20):
            for i, stream in enumerate(streams):
                while b'"data":19' not in bufs[i]:
                    bufs[i] += await stream.receive_some(65536)
        for buf in bufs:
            assert [int(m) for m in re.findall(rb'"data":(\d+)', buf)] == list(range(20))
            ids = re.findall(rb"id: (\S+)", buf)
            assert cursor.decode(ids[-1].decode()) == {"many": 20}
        with trio.fail_after(10):
            while engine.watch_statistics().connections != len(streams):  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert max(group_sizes) >= len(streams)  # the live ones were written as one group
        for stream in streams:
            await stream.aclose()
