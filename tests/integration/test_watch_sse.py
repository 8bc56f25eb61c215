"""The SSE watch over HTTP (§7): POST /v0/watch and GET /v0/watch/:wid.

Most tests drive the real ASGI app in-process with :class:`SseClient` (a tiny ASGI
client that hands the stream's body messages to an ``SSEDecoder`` one at a time and can
stop reading, disconnect or hold back), on trio's autojump clock where timers matter
(heartbeats, slow consumers), so nothing sleeps. The real server (subprocess) checks the
socket-level promises: TCP_NODELAY, a flush per frame, the final frame on SIGTERM.
"""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
import trio.testing
import ujson

from topics.frontends.http import TopicsHttpApp
from topics.frontends.server import _hypercorn_config, _parser, load_config
from topics.watch_types import WatchSettings
from topics.wire import cursor
from topics.wire.sse import Comment, Event, Item, Retry, SSEDecoder

from .conftest import InProc, ServerProcess, settings_with

KEYS = "ka:read+write,kb:read,kt:read:tenant:"


class SseClient:
    """An in-process SSE client of the ASGI app (see the module docstring)."""

    def __init__(self, app: TopicsHttpApp, path: str, headers: Sequence[tuple[str, str]]) -> None:
        self.app = app
        self.path, _, query = path.partition("?")
        self.query = query.encode()
        self.headers = [(k.lower().encode(), v.encode()) for k, v in headers]
        self.decoder = SSEDecoder()
        self.items: list[Item] = []
        self.chunks: list[bytes] = []
        self.status = 0
        self.response_headers: dict[bytes, bytes] = {}
        self.ended = False
        self._send, self._recv = trio.open_memory_channel[dict[str, Any]](0)
        self._gone = trio.Event()
        self._requested = False
        self.shielded = False

    async def _app_send(self, message: dict[str, Any]) -> None:
        if self.shielded:
            with trio.CancelScope(shield=True):
                await self._send.send(message)
        else:
            await self._send.send(message)

    async def _receive(self) -> dict[str, Any]:
        if not self._requested:
            self._requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def _app(self) -> None:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": self.path,
            "raw_path": self.path.encode(),
            "query_string": self.query,
            "root_path": "",
            "headers": [(b"host", b"topics.test"), *self.headers],
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 80),
        }
        try:
            app: Any = self.app
            await app(scope, self._receive, self._app_send)
        finally:
            await self._send.aclose()

    async def start(self, nursery: trio.Nursery) -> None:
        nursery.start_soon(self._app)
        start = await self._recv.receive()
        self.status = start["status"]
        self.response_headers = dict(start["headers"])

    async def next_chunk(self) -> bytes | None:
        try:
            message = await self._recv.receive()
        except trio.EndOfChannel:
            self.ended = True
            return None
        if not message.get("more_body", False):
            self.ended = True
        body: bytes = message.get("body", b"")
        if body:
            self.chunks.append(body)
            self.items.extend(self.decoder.feed(body))
        return body

    async def read_until(self, pred: Callable[[Item], bool], limit: int = 1000) -> list[Item]:
        """Read chunks until an item satisfies ``pred``; return the items read meanwhile."""
        start = len(self.items)
        for _ in range(limit):
            for item in self.items[start:]:
                if pred(item):
                    return self.items[start:]
            if self.ended or await self.next_chunk() is None:
                break
        raise AssertionError(f"stream ended without the item; got {self.items[start:]}")

    async def until(self, cond: Callable[[], bool], limit: int = 1000) -> None:
        """Read chunks until ``cond()`` holds (checked before each read)."""
        for _ in range(limit):
            if cond():
                return
            if self.ended or await self.next_chunk() is None:
                break
        raise AssertionError(f"stream ended before the condition held; got {self.items}")

    async def read_body(self) -> bytes:
        """Everything until the response ends."""
        while not self.ended:
            await self.next_chunk()
        return b"".join(self.chunks)

    def disconnect(self) -> None:
        self._gone.set()

    def events(self, name: str | None = None) -> list[Event]:
        return [i for i in self.items if isinstance(i, Event) and (name is None or i.event == name)]


def is_event(name: str) -> Callable[[Item], bool]:
    return lambda item: isinstance(item, Event) and item.event == name


@asynccontextmanager
async def sse(
    inproc: InProc, wid: str, key: str | None = None, **headers: str
) -> AsyncIterator[SseClient]:
    hdrs = [("accept", "text/event-stream")]
    if key:
        hdrs.append(("authorization", f"Bearer {key}"))
    hdrs.extend((k.replace("_", "-"), v) for k, v in headers.items())
    async with running(SseClient(inproc.app, f"/v0/watch/{wid}", hdrs)) as client:
        yield client


@asynccontextmanager
async def running(client: SseClient) -> AsyncIterator[SseClient]:
    """``client``'s request running for the block; the client disconnects at its end."""
    async with trio.open_nursery() as nursery:
        await client.start(nursery)
        try:
            yield client
        finally:
            client.disconnect()
            nursery.cancel_scope.cancel()


async def post_watch(
    http: httpx.AsyncClient, body: dict[str, Any], **params: str
) -> dict[str, Any]:
    r = await http.post("/v0/watch", json=body, params=params)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


async def write(http: httpx.AsyncClient, topic: str, *values: Any, **extra: Any) -> None:
    r = await http.post(
        f"/v0/topics/{topic}", json={"records": [{"data": v} for v in values], **extra}
    )
    assert r.status_code in (200, 201), r.text


def durable_seqs(client: SseClient) -> list[int]:
    return [
        r["$seq"]
        for e in client.events("record")
        if '"durable"' in e.data
        for r in ujson.loads(e.data)["records"]
    ]


def records_of(client: SseClient) -> list[int]:
    return [r["$seq"] for e in client.events("record") for r in ujson.loads(e.data)["records"]]


# -- POST /v0/watch ------------------------------------------------------------------------


async def test_post_returns_wid_stream_url_and_watermarks(inproc: InProc) -> None:
    async with inproc.client() as http:
        await write(http, "orders", 1, 2, 3)
        await write(http, "audit", 1)
        r = await http.post(
            "/v0/watch", json={"topics": {"orders": {"from_seq": 1}, "audit": {"tail": True}}}
        )
    assert r.status_code == 200
    body = r.json()
    assert list(body) == ["wid", "stream_url", "session_ttl_ms", "topics", "performance"]
    assert body["stream_url"] == f"/v0/watch/{body['wid']}"
    assert body["session_ttl_ms"] == 300_000
    assert body["topics"] == {
        "orders": {"from_seq": 1, "head_seq": 3, "earliest_seq": 1},
        "audit": {"from_seq": 1, "head_seq": 1, "earliest_seq": 1},
    }


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({}, 400, "invalid_request"),
        ({"topics": {}}, 400, "invalid_request"),
        ({"topics": {"orders": {}}, "limt": 1}, 400, "invalid_request"),
        ({"topics": {"ghost": {}}}, 404, "topic_not_found"),
        ({"topics": {"orders": {}, "ghost": {}}}, 404, "topic_not_found"),
    ],
)
async def test_post_errors(inproc: InProc, body: dict[str, Any], status: int, code: str) -> None:
    async with inproc.client() as http:
        await write(http, "orders", 1)
        r = await http.post("/v0/watch", json=body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code


async def test_post_lenient_drops_unknown_topics(inproc: InProc) -> None:
    async with inproc.client() as http:
        await write(http, "orders", 1)
        body = await post_watch(http, {"topics": {"orders": {}, "ghost": {}}}, lenient="true")
    assert list(body["topics"]) == ["orders"]


@pytest.mark.parametrize("http_settings", [settings_with(max_watch_topics=2)])
async def test_post_over_max_watch_topics_is_400(inproc: InProc) -> None:
    async with inproc.client() as http:
        r = await http.post("/v0/watch", json={"topics": {"a": {}, "b": {}, "c": {}}})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_request"


@pytest.mark.parametrize("http_settings", [settings_with(max_watch_sessions=1)])
async def test_post_over_max_watch_sessions_is_429(inproc: InProc) -> None:
    async with inproc.client() as http:
        await write(http, "a", 1)
        await post_watch(http, {"topics": {"a": {}}})
        r = await http.post("/v0/watch", json={"topics": {"a": {}}})
    assert r.status_code == 429
    assert r.json()["error"]["detail"] == {"limit": "max_watch_sessions", "max": 1}
    assert r.headers["retry-after"] == "1"


@pytest.mark.parametrize("http_settings", [settings_with(KEYS)])
async def test_post_checks_the_prefix_allowlist_of_every_topic(inproc: InProc) -> None:
    async with inproc.client("ka") as http:
        await write(http, "tenant:a", 1)
        await write(http, "other", 1)
    async with inproc.client("kt") as http:
        r = await http.post("/v0/watch", json={"topics": {"tenant:a": {}, "other": {}}})
        assert r.status_code == 403
        assert r.json()["error"]["code"] == "forbidden"
        await post_watch(http, {"topics": {"tenant:a": {}}})
    async with inproc.client() as anonymous:
        r = await anonymous.post("/v0/watch?token=kt", json={"topics": {"tenant:a": {}}})
        assert r.status_code == 401  # ?token= only on the SSE GETs


# -- GET /v0/watch/:wid: establishment -------------------------------------------------------


async def test_stream_headers_and_opening_frames(inproc: InProc) -> None:
    async with inproc.client() as http:
        await write(http, "orders", 1, 2)
        body = await post_watch(http, {"topics": {"orders": {"from_seq": 1}}})
    async with sse(inproc, body["wid"], x_request_id="req-42") as client:
        assert client.status == 200
        h = client.response_headers
        assert h[b"content-type"] == b"text/event-stream; charset=utf-8"
        assert h[b"cache-control"] == b"no-store"
        assert h[b"connection"] == b"keep-alive"
        assert h[b"x-accel-buffering"] == b"no"
        assert h[b"x-request-id"] == b"req-42"
        assert b"content-length" not in h
        await client.read_until(is_event("caught-up"))
    first, second, *_ = client.items
    assert first == Retry(2000)
    assert isinstance(second, Event)
    assert second.event == "connection-established"
    assert ujson.loads(second.data) == {
        "request_id": "req-42",
        "wid": body["wid"],
        "topics": {"orders": {"from_seq": 1, "head_seq": 2, "earliest_seq": 1}},
    }
    (record,) = client.events("record")
    assert cursor.decode(record.id) == {"orders": 2}
    assert ujson.loads(record.data)["from_seq"] == 1
    assert records_of(client) == [2]


@pytest.mark.parametrize(
    ("path", "headers", "status", "code"),
    [
        ("/v0/watch/WID", [("accept", "application/json")], 406, "not_acceptable"),
        ("/v0/watch/wid_nope", [("accept", "text/event-stream")], 400, "invalid_request"),
        ("/v0/watch/wid_" + "A" * 22, [("accept", "text/event-stream")], 404, "not_found"),
    ],
)
async def test_stream_establishment_errors(
    inproc: InProc, path: str, headers: list[tuple[str, str]], status: int, code: str
) -> None:
    async with inproc.client() as http:
        await write(http, "a", 1)
        wid = (await post_watch(http, {"topics": {"a": {}}}))["wid"]
        r = await http.get(path.replace("WID", wid), headers=dict(headers))
    assert r.status_code == status
    assert r.json()["error"]["code"] == code
    assert r.json()["error"]["request_id"] == r.headers["x-request-id"]


@pytest.mark.parametrize("http_settings", [settings_with(KEYS)])
async def test_stream_is_bound_to_the_creating_key(inproc: InProc) -> None:
    async with inproc.client("ka") as http:
        await write(http, "a", 1)
        wid = (await post_watch(http, {"topics": {"a": {}}}))["wid"]
    accept = {"accept": "text/event-stream"}
    async with inproc.client("kb") as other:  # a different valid key
        r = await other.get(f"/v0/watch/{wid}", headers=accept)
        assert r.status_code == 401
        assert r.json()["error"]["code"] == "unauthorized"
    async with inproc.client() as anonymous:  # the wid alone
        r = await anonymous.get(f"/v0/watch/{wid}", headers=accept)
        assert r.status_code == 401
    async with sse(inproc, f"{wid}?token=ka") as client:  # the dev-only ?token= works here
        assert client.status == 200
        await client.read_until(is_event("caught-up"))


@pytest.mark.parametrize("http_settings", [settings_with(max_sse_connections=1)])
async def test_connection_cap_is_429_and_frees_on_close(inproc: InProc) -> None:
    async with inproc.client() as http:
        await write(http, "a", 1)
        w1 = (await post_watch(http, {"topics": {"a": {}}}))["wid"]
        w2 = (await post_watch(http, {"topics": {"a": {}}}))["wid"]
        async with sse(inproc, w1) as client:
            await client.read_until(is_event("caught-up"))
            r = await http.get(f"/v0/watch/{w2}", headers={"accept": "text/event-stream"})
            assert r.status_code == 429
            assert r.json()["error"]["detail"]["limit"] == "max_sse_connections"
            metrics = (await http.get("/v0/metrics")).text
            assert "topics_sse_connections 1" in metrics
            assert "topics_watch_sessions 2" in metrics
        await trio.testing.wait_all_tasks_blocked()
        async with sse(inproc, w2) as client:
            assert client.status == 200


# -- the stream -------------------------------------------------------------------------------


async def test_records_batched_per_topic_with_composite_ids_then_live(inproc: InProc) -> None:
    async with inproc.client() as http:
        await write(http, "a", *range(5))
        await write(http, "b", "x")
        body = await post_watch(http, {"topics": {"a": {}, "b": {}}, "limit": 2})
        async with sse(inproc, body["wid"]) as client:
            await client.until(lambda: len(client.events("caught-up")) == 2)
            await write(http, "a", "live")
            await client.read_until(
                lambda i: isinstance(i, Event) and i.event == "record" and '"live"' in i.data
            )
    sizes = [
        len(ujson.loads(e.data)["records"]) for e in client.events("record") if '"a"' in e.data
    ]
    assert sizes == [2, 2, 1, 1]
    last = client.events("record")[-1]
    assert cursor.decode(last.id) == {"a": 6, "b": 1}
    assert len(client.events("caught-up")) == 2  # live records bring no new caught-up
    # One frame per body message: each is flushed on its own.
    assert all(chunk.count(b"\n\n") == 1 for chunk in client.chunks[1:])


async def test_heartbeat_after_idle_and_suppressed_by_data(
    inproc: InProc, autojump_clock: trio.testing.MockClock
) -> None:
    async with inproc.client() as http:
        await write(http, "a", 1)
        body = await post_watch(http, {"topics": {"a": {}}, "heartbeat_ms": 1000})
        async with sse(inproc, body["wid"]) as client:
            await client.read_until(is_event("caught-up"))
            t0 = trio.current_time()
            await client.read_until(lambda i: isinstance(i, Comment))
            assert trio.current_time() - t0 == pytest.approx(1.0, abs=0.01)
            await trio.sleep(0.6)
            await write(http, "a", 2)
            await client.read_until(is_event("record"))
            t1 = trio.current_time()
            hb = await client.read_until(lambda i: isinstance(i, Comment))
            assert trio.current_time() - t1 == pytest.approx(1.0, abs=0.01)
    assert hb[-1] == Comment("hb")
    assert b": hb\n\n" in client.chunks


async def test_heartbeat_ms_is_clamped(inproc: InProc) -> None:
    async with inproc.client() as http:
        await write(http, "a", 1)
        body = await post_watch(http, {"topics": {"a": {}}, "heartbeat_ms": 5})
    session = inproc.engine.watch_hub.session(body["wid"])
    assert session is not None
    assert session.heartbeat_ms == 1000


async def test_tombstone_from_seq_too_old_on_connect(inproc: InProc) -> None:
    async with inproc.client() as http:
        r = await http.put("/v0/topics/capped", json={"cap_records": 3})
        assert r.status_code == 201
        await write(http, "capped", *range(10))
        body = await post_watch(http, {"topics": {"capped": {"from_seq": 0}}})
    async with sse(inproc, body["wid"]) as client:
        await client.read_until(is_event("caught-up"))
    tomb = client.events("tombstone")[0]
    assert ujson.loads(tomb.data) == {
        "topic": "capped",
        "reason": "from_seq_too_old",
        "gap_from": 1,
        "gap_to": 7,
        "missed_estimate": 7,
        "earliest_seq": 8,
        "head_seq": 10,
    }
    assert cursor.decode(tomb.id) == {"capped": 7}  # the id already points past the gap
    assert records_of(client) == [8, 9, 10]


async def test_topic_deleted_is_terminal_for_that_topic_only(inproc: InProc) -> None:
    async with inproc.client() as http:
        await write(http, "a", 1)
        await write(http, "b", 1)
        body = await post_watch(http, {"topics": {"a": {}, "b": {}}})
        async with sse(inproc, body["wid"]) as client:
            await client.until(lambda: len(client.events("caught-up")) == 2)
            assert (await http.delete("/v0/topics/a")).status_code == 200
            await client.read_until(is_event("topic-deleted"))
            await write(http, "a", "recreated")  # a new instance: not this watch's topic
            await write(http, "b", 2)
            await client.read_until(
                lambda i: isinstance(i, Event) and '"b","records"' in i.data and "2" in i.data
            )
    deleted = client.events("topic-deleted")[0]
    assert ujson.loads(deleted.data) == {"topic": "a", "head_seq": 1, "reason": "deleted"}
    assert not any('"recreated"' in e.data for e in client.events("record"))


async def test_resume_from_session_cursors_and_last_event_id_only_rewinds(
    inproc: InProc,
) -> None:
    async with inproc.client() as http:
        await write(http, "a", *range(6))
        body = await post_watch(http, {"topics": {"a": {}}, "limit": 2})
        wid = body["wid"]
        async with sse(inproc, wid) as client:
            await client.read_until(is_event("caught-up"))
        ids = [e.id for e in client.events("record")]
        await trio.testing.wait_all_tasks_blocked()
        # No Last-Event-ID: the session cursor (everything sent) is authoritative.
        await write(http, "a", "new")
        async with sse(inproc, wid) as client:
            await client.read_until(is_event("caught-up"))
        assert records_of(client) == [7]
        await trio.testing.wait_all_tasks_blocked()
        # Last-Event-ID from the first batch: rewinds to seq 2 exactly.
        async with sse(inproc, wid, last_event_id=ids[0]) as client:
            await client.read_until(is_event("caught-up"))
        assert records_of(client) == [3, 4, 5, 6, 7]
        await trio.testing.wait_all_tasks_blocked()
        # A Last-Event-ID ahead of the session never advances it; a garbled one is ignored.
        session = inproc.engine.watch_hub.session(wid)
        assert session is not None
        session.topics["a"].cursor = 5
        async with sse(inproc, wid, last_event_id=cursor.encode({"a": 7})) as client:
            await client.read_until(is_event("caught-up"))
        assert records_of(client) == [6, 7]
        await trio.testing.wait_all_tasks_blocked()
        session.topics["a"].cursor = 6
        async with sse(inproc, wid, last_event_id="%%%") as client:
            assert client.status == 200
            await client.read_until(is_event("caught-up"))
        assert records_of(client) == [7]


async def test_more_than_64_topics_use_checkpoint_ids(inproc: InProc) -> None:
    async with inproc.client() as http:
        names = [f"t{i}" for i in range(70)]
        for name in names:
            await write(http, name, 1)
        body = await post_watch(http, {"topics": {n: {} for n in names}})
        async with sse(inproc, body["wid"]) as client:
            await client.until(lambda: len(client.events("caught-up")) == 70)
        ids = [e.id for e in client.events("record")]
        assert all(cursor.is_checkpoint(i) for i in ids)
        await trio.testing.wait_all_tasks_blocked()
        # Rewind to the 10th frame: the frames after it come again, nothing before.
        async with sse(inproc, body["wid"], last_event_id=ids[9]) as client:
            await client.until(lambda: len(client.events("caught-up")) == 70)
    assert len(client.events("record")) == 70 - 10


# -- the server ends a stream: always a final frame ------------------------------------------


async def test_shutdown_sends_connection_closing(inproc: InProc) -> None:
    async with inproc.client() as http:
        await write(http, "a", 1)
        body = await post_watch(http, {"topics": {"a": {}}})
    async with sse(inproc, body["wid"], x_request_id="rq") as client:
        await client.read_until(is_event("caught-up"))
        inproc.app.state.begin_shutdown()
        await client.read_body()
    final = client.events()[-1]
    assert final.event == "connection-closing"
    assert ujson.loads(final.data) == {
        "reason": "server_shutdown",
        "request_id": "rq",
        "retry_after_ms": 2000,
    }
    assert client.ended


async def test_session_removed_while_streaming_is_error_410(inproc: InProc) -> None:
    async with inproc.client() as http:
        await write(http, "a", 1)
        body = await post_watch(http, {"topics": {"a": {}}})
    async with sse(inproc, body["wid"]) as client:
        await client.read_until(is_event("caught-up"))
        assert inproc.engine.close_watch(body["wid"])
        await client.read_body()
    final = client.events()[-1]
    assert final.event == "error"
    assert ujson.loads(final.data)["code"] == 410


async def test_a_newer_stream_supersedes_the_older_one(inproc: InProc) -> None:
    async with inproc.client() as http:
        await write(http, "a", 1)
        body = await post_watch(http, {"topics": {"a": {}}})
    async with sse(inproc, body["wid"]) as old:
        await old.read_until(is_event("caught-up"))
        async with sse(inproc, body["wid"]) as new:
            await old.read_body()
            await new.read_until(is_event("connection-established"))
    assert ujson.loads(old.events()[-1].data)["reason"] == "superseded"


async def test_cpu_pressure_sends_one_advisory_429_and_paces(
    inproc: InProc, autojump_clock: trio.testing.MockClock
) -> None:
    async with inproc.client() as http:
        await write(http, "a", 1)
        body = await post_watch(http, {"topics": {"a": {}}})
        async with sse(inproc, body["wid"]) as client:
            await client.read_until(is_event("caught-up"))
            inproc.app.state.pressure.inject(500)
            await write(http, "a", 2, disable_backpressure=True)
            await client.read_until(is_event("record"))
            await write(http, "a", 3, disable_backpressure=True)
            await client.read_until(lambda i: isinstance(i, Event) and '"$seq":3' in i.data)
            inproc.app.state.pressure.inject(None)
    (err,) = client.events("error")
    assert ujson.loads(err.data) | {"request_id": None} == {
        "code": 429,
        "error": "watch throttled under CPU pressure; frames are paced",
        "error_code": "throttled",
        "retry_after_ms": 1000,
        "topics": ["a"],
        "request_id": None,
    }
    assert records_of(client) == [1, 2, 3]


# -- slow consumers ---------------------------------------------------------------------------


def slow_settings(inproc: InProc) -> None:
    inproc.engine.watch_hub.settings = WatchSettings(
        queue_frames=2, buffer_grace_ms=5_000, slow_consumer_timeout_ms=30_000
    )


async def test_slow_consumer_coalesces_then_degrades_lossy_topics(
    inproc: InProc, autojump_clock: trio.testing.MockClock
) -> None:
    slow_settings(inproc)
    async with inproc.client() as http:
        await http.put("/v0/topics/lossy", json={"ttl_ms": 3_600_000})
        await http.put("/v0/topics/durable", json={})
        body = await post_watch(http, {"topics": {"lossy": {}, "durable": {}}})
        async with sse(inproc, body["wid"]) as client:
            await client.until(lambda: len(client.events("caught-up")) == 2)
            for i in range(20):  # the client reads nothing meanwhile
                await write(http, "lossy", i)
                await write(http, "durable", i)
                await trio.testing.wait_all_tasks_blocked()
            await trio.sleep(6)  # past buffer_grace_ms with the queue full
            await client.read_until(is_event("tombstone"))
            await client.until(lambda: 20 in durable_seqs(client))
    tomb = ujson.loads(client.events("tombstone")[0].data)
    assert (tomb["topic"], tomb["reason"], tomb["gap_to"]) == ("lossy", "from_seq_too_old", 20)
    durable = [
        r["$seq"]
        for e in client.events("record")
        for r in ujson.loads(e.data)["records"]
        if '"durable"' in e.data
    ]
    assert durable == list(range(1, 21))  # the durable topic lags and replays: no loss
    # Coalescing: far fewer durable frames than writes.
    assert len([e for e in client.events("record") if '"durable"' in e.data]) < 20


async def test_slow_consumer_timeout_sends_final_error_and_keeps_the_session(
    inproc: InProc, autojump_clock: trio.testing.MockClock
) -> None:
    slow_settings(inproc)
    async with inproc.client() as http:
        await write(http, "a", 0)
        wid = (await post_watch(http, {"topics": {"a": {}}}))["wid"]
        async with sse(inproc, wid) as client:
            await client.read_until(is_event("caught-up"))
            for i in range(10):
                await write(http, "a", i)
                await trio.testing.wait_all_tasks_blocked()
            await trio.sleep(31)  # past slow_consumer_timeout_ms; then the client reads again
            await client.read_body()
        final = client.events()[-1]
        assert final.event == "error"
        assert ujson.loads(final.data)["code"] == 408
        delivered = records_of(client)
        await trio.testing.wait_all_tasks_blocked()
        async with sse(inproc, wid) as again:  # the session survived: resume, no loss
            await again.read_until(is_event("caught-up"))
    assert sorted(delivered + records_of(again)) == list(range(1, 12))


# -- socket-level promises (the real server) -------------------------------------------------


def test_server_sockets_have_tcp_nodelay() -> None:
    cfg = load_config(_parser().parse_args(["--memory", "--port", "0"]), {})
    sockets = _hypercorn_config(cfg).create_sockets()
    try:
        (listener,) = sockets.insecure_sockets
        assert listener.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        for s in sockets.insecure_sockets:
            s.close()

    async def accepted_stream_sets_it() -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.open_tcp_stream, "127.0.0.1", port)
            stream = await listeners[0].accept()  # what hypercorn gets per connection
            assert stream.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            await stream.aclose()
        for listener in listeners:
            await listener.aclose()

    trio.run(accepted_stream_sets_it)


@pytest.mark.slow
def test_real_server_flushes_each_frame_and_closes_with_a_final_frame(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server()
    with server.client() as http:
        http.post("/v0/topics/a", json={"records": [{"data": 1}]}).raise_for_status()
        wid = http.post("/v0/watch", json={"topics": {"a": {}}}).json()["wid"]
        host, port = server.base_url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(
                f"GET /v0/watch/{wid} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n".encode()
            )
            buf = b""
            while b"caught-up" not in buf:
                buf += sock.recv(65536)
            t0 = time.monotonic()
            http.post("/v0/topics/a", json={"records": [{"data": "live"}]}).raise_for_status()
            while b'"live"' not in buf:
                buf += sock.recv(65536)
            assert time.monotonic() - t0 < 2.0  # delivered at once, not held in a buffer
            server.stop()
            sock.settimeout(10)
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                buf += chunk
    assert b"event: connection-closing" in buf
    assert b'"reason":"server_shutdown"' in buf


async def test_a_client_that_reads_nothing_still_frees_its_session_and_slot(
    inproc: InProc, autojump_clock: trio.testing.MockClock
) -> None:
    slow_settings(inproc)
    async with inproc.client() as http:
        await write(http, "a", 0)
        wid = (await post_watch(http, {"topics": {"a": {}}}))["wid"]
        client = SseClient(inproc.app, f"/v0/watch/{wid}", [("accept", "text/event-stream")])
        client.shielded = True  # like hypercorn: a socket write cannot be cancelled
        async with trio.open_nursery() as nursery:
            await client.start(nursery)
            await client.until(lambda: len(client.events("caught-up")) == 1)
            for i in range(10):
                await write(http, "a", i)
                await trio.testing.wait_all_tasks_blocked()
            await trio.sleep(40)  # slow_consumer_timeout + final_frame_timeout, no reads
            assert inproc.engine.watch_statistics().connections == 0
            session = inproc.engine.watch_hub.session(wid)
            assert session is not None
            assert session.stream is None  # idle again: resumable, and collectable
            client.disconnect()
            await client.read_body()  # the stuck send completes; the task ends
