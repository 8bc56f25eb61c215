"""The JSON WebSocket data plane (/v0/ws, §7.x).

In-process tests drive the real ASGI app with :class:`WsClient` (ASGI websocket messages,
no sockets); one test goes through the real server over TCP with a small wsproto client
(hypercorn's own WebSocket stack).
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
import ujson
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Message, Request, TextMessage

from .conftest import InProc, ServerProcess, settings_with

KEYS = "ka:read+write+admin,kr:read,kw:write,kt:rw:tenant:"


class WsClient:
    """An in-process WebSocket client of the ASGI app."""

    def __init__(self, inproc: InProc, headers: list[tuple[bytes, bytes]]) -> None:
        self.inproc = inproc
        self.headers = headers
        self._to_app, self._app_in = trio.open_memory_channel[dict[str, Any]](100)
        self._app_out, self._from_app = trio.open_memory_channel[dict[str, Any]](100)
        self.accepted = False
        self.status = 0
        self.body = b""
        self.close_code: int | None = None
        self.frames: list[dict[str, Any]] = []

    async def run(self, nursery: trio.Nursery) -> None:
        scope = {
            "type": "websocket",
            "http_version": "1.1",
            "scheme": "ws",
            "path": "/v0/ws",
            "raw_path": b"/v0/ws",
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"topics.test"), *self.headers],
            "subprotocols": [],
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "client": ("127.0.0.1", 40001),
            "server": ("127.0.0.1", 80),
            "extensions": {"websocket.http.response": {}},
        }
        await self._to_app.send({"type": "websocket.connect"})
        app: Any = self.inproc.app
        nursery.start_soon(app, scope, self._app_in.receive, self._app_out.send)
        first = await self._from_app.receive()
        if first["type"] == "websocket.accept":
            self.accepted = True
            return
        assert first["type"] == "websocket.http.response.start", first
        self.status = first["status"]
        while True:
            msg = await self._from_app.receive()
            self.body += msg.get("body", b"")
            if not msg.get("more_body"):
                return

    async def send(self, message: dict[str, Any] | str) -> None:
        text = message if isinstance(message, str) else ujson.dumps(message)
        await self._to_app.send({"type": "websocket.receive", "text": text})

    async def recv(self) -> dict[str, Any]:
        while True:
            msg = await self._from_app.receive()
            if msg["type"] == "websocket.send":
                frame: dict[str, Any] = ujson.loads(msg["text"])
                self.frames.append(frame)
                return frame
            if msg["type"] == "websocket.close":
                self.close_code = msg.get("code", 1000)
                raise EOFError(self.close_code)

    async def recv_until(self, pred: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        got = []
        while True:
            frame = await self.recv()
            got.append(frame)
            if pred(frame):
                return got

    async def disconnect(self) -> None:
        await self._to_app.send({"type": "websocket.disconnect", "code": 1000})


def op_is(op: str, **fields: Any) -> Callable[[dict[str, Any]], bool]:
    return lambda f: f["op"] == op and all(f.get(k) == v for k, v in fields.items())


@asynccontextmanager
async def ws_client(inproc: InProc, key: str | None = None) -> AsyncIterator[WsClient]:
    headers = [(b"authorization", f"Bearer {key}".encode())] if key else []
    client = WsClient(inproc, headers)
    async with trio.open_nursery() as nursery:
        await client.run(nursery)
        try:
            yield client
        finally:
            await client.disconnect()
            nursery.cancel_scope.cancel()


async def test_subscribe_publish_ack_record_caught_up(inproc: InProc) -> None:
    async with ws_client(inproc) as ws:
        assert ws.accepted
        await inproc.engine.put_topic("room")
        await ws.send({"op": "subscribe", "request_id": "s1", "topic": "room", "tail": True})
        sub = await ws.recv()
        assert sub == {
            "op": "subscribed",
            "request_id": "s1",
            "topics": {"room": {"from_seq": 0, "head_seq": 0, "earliest_seq": 1}},
        }
        assert await ws.recv() == {"op": "caught_up", "topic": "room", "head_seq": 0}
        await ws.send(
            '{"op":"publish","request_id":"p1","topic":"room","return_seqs":false,'
            '"records":[{"node":"u018","data":{"packet":1.50}}]}'
        )
        # The record (the subscription's) and the ack (the publish's) are separate frames
        # whose order is not promised: the delivery may leave before the ack is written.
        frames = await ws.recv_until(op_is("record"))
        if not any(f["op"] == "ack" for f in ws.frames):
            await ws.recv_until(op_is("ack"))
        ack = next(f for f in ws.frames if f["op"] == "ack")
    assert ack["request_id"] == "p1"
    assert (ack["topic"], ack["last_seq"], ack["head_seq"]) == ("room", 1, 1)
    assert "seqs" not in ack
    assert "fsync_ms" in ack["performance"]
    record = frames[-1]
    assert (record["from_seq"], record["to_seq"], record["head_seq"]) == (0, 1, 1)
    assert record["records"][0]["$node"] == "u018"
    diff = await inproc.engine.diff("room")
    assert b'"data":{"packet":1.50}' in diff.records_json  # stored verbatim


async def test_topics_map_from_seq_node_filter_and_unsubscribe(inproc: InProc) -> None:
    engine = inproc.engine
    await engine.write("a", [{"data": 1}, {"data": 2}])
    await engine.write("a", [{"data": "mine"}], node="me")
    await engine.write("b", [{"data": 1}])
    async with ws_client(inproc) as ws:
        await ws.send(
            {"op": "subscribe", "topics": {"a": {"from_seq": 1}, "b": {}}, "node": "me", "limit": 1}
        )
        await ws.recv_until(lambda f: sum(x["op"] == "caught_up" for x in ws.frames) == 2)
        records = [
            (f["topic"], r["data"]) for f in ws.frames if f["op"] == "record" for r in f["records"]
        ]
        assert sorted(records) == [("a", 2), ("b", 1)]  # own node filtered, from_seq honoured
        await ws.send({"op": "unsubscribe", "request_id": "u1", "topic": "a"})
        assert await ws.recv() == {"op": "unsubscribed", "request_id": "u1", "topics": ["a"]}
        await engine.write("a", [{"data": "gone"}])
        await engine.write("b", [{"data": "still"}])
        frame = await ws.recv()
        assert frame["topic"] == "b"
        await ws.send({"op": "ping", "request_id": "k"})
        assert await ws.recv() == {"op": "pong", "request_id": "k"}


async def test_bad_commands_answer_errors_and_keep_the_connection(inproc: InProc) -> None:
    async with ws_client(inproc) as ws:
        await ws.send("not json")
        err = await ws.recv()
        assert (err["op"], err["code"]) == ("error", "invalid_request")
        await ws.send({"op": "subscribe", "request_id": "s9", "topic": "ghost"})
        err = await ws.recv()
        assert (err["request_id"], err["code"]) == ("s9", "topic_not_found")
        await ws.send({"op": "publish", "request_id": "p9", "topic": "t", "records": [{"dta": 1}]})
        err = await ws.recv()
        assert (err["request_id"], err["code"]) == ("p9", "invalid_request")
        await ws.send({"op": "ping", "request_id": "alive"})
        assert (await ws.recv())["op"] == "pong"


async def test_publish_with_an_unknown_record_field_is_refused_naming_it(inproc: InProc) -> None:
    await inproc.engine.write("typo", [{"data": 0}])
    async with ws_client(inproc) as ws:
        await ws.send(
            {"op": "publish", "request_id": "p1", "topic": "typo",
             "records": [{"data": 1, "tga": "x"}]}
        )  # fmt: skip
        err = await ws.recv()
    assert (err["op"], err["request_id"], err["code"]) == ("error", "p1", "invalid_request")
    assert err["detail"]["field"] == "records[0].tga"
    assert (await inproc.engine.get_topic("typo")).head_seq == 1


async def test_tombstone_and_topic_deleted_frames(inproc: InProc) -> None:
    engine = inproc.engine
    await engine.put_topic("capped", {"cap_records": 2})
    await engine.write("capped", [{"data": i} for i in range(5)])
    async with ws_client(inproc) as ws:
        await ws.send({"op": "subscribe", "topic": "capped", "from_seq": 0})
        frames = await ws.recv_until(op_is("caught_up"))
        tomb = next(f for f in frames if f["op"] == "tombstone")
        assert (tomb["reason"], tomb["gap_from"], tomb["gap_to"]) == ("from_seq_too_old", 1, 3)
        await engine.delete_topic("capped")
        assert await ws.recv() == {
            "op": "topic_deleted",
            "topic": "capped",
            "head_seq": 5,
            "reason": "deleted",
        }


@pytest.mark.parametrize("http_settings", [settings_with(KEYS)])
async def test_upgrade_needs_a_key_and_commands_need_their_scopes(inproc: InProc) -> None:
    for key in (None, "nope"):
        client = WsClient(inproc, [(b"authorization", f"Bearer {key}".encode())] if key else [])
        async with trio.open_nursery() as nursery:
            await client.run(nursery)
        assert not client.accepted
        assert client.status == 401
        assert ujson.loads(client.body)["error"]["code"] == "unauthorized"
    await inproc.engine.put_topic("t")
    await inproc.engine.put_topic("tenant:x")
    async with ws_client(inproc, "kr") as ws:
        await ws.send({"op": "publish", "request_id": "p", "topic": "t", "records": [{"data": 1}]})
        err = await ws.recv()
        assert (err["request_id"], err["code"]) == ("p", "forbidden")
        await ws.send({"op": "subscribe", "request_id": "s", "topic": "t"})
        assert (await ws.recv())["op"] == "subscribed"
    async with ws_client(inproc, "kw") as ws:
        await ws.send({"op": "subscribe", "request_id": "s", "topic": "t"})
        assert (await ws.recv())["code"] == "forbidden"
        cfg = {
            "op": "publish",
            "request_id": "c",
            "topic": "t",
            "config": {},
            "records": [{"data": 1}],
        }
        await ws.send(cfg)
        assert (await ws.recv())["code"] == "forbidden"  # config needs admin too
    async with ws_client(inproc, "ka") as ws:
        await ws.send(cfg)
        assert (await ws.recv())["op"] == "ack"
    async with ws_client(inproc, "kt") as ws:
        await ws.send({"op": "subscribe", "request_id": "s", "topics": {"tenant:x": {}, "t": {}}})
        assert (await ws.recv())["code"] == "forbidden"  # every topic against the prefixes


@pytest.mark.parametrize("http_settings", [settings_with(max_sse_connections=1)])
async def test_websockets_count_against_the_connection_cap(inproc: InProc) -> None:
    async with ws_client(inproc) as first:
        assert first.accepted
        second = WsClient(inproc, [])
        async with trio.open_nursery() as nursery:
            await second.run(nursery)
        assert second.status == 429
        assert ujson.loads(second.body)["error"]["detail"]["limit"] == "max_sse_connections"


async def test_shutdown_sends_a_final_error_and_closes_1001(inproc: InProc) -> None:
    async with ws_client(inproc) as ws:
        await ws.send({"op": "ping"})
        await ws.recv()
        inproc.app.state.begin_shutdown()
        final = await ws.recv()
        assert (final["op"], final["code"]) == ("error", "shutting_down")
        with pytest.raises(EOFError):
            await ws.recv()
        assert ws.close_code == 1001


async def test_plain_get_is_400(inproc: InProc) -> None:
    async with inproc.client() as http:
        r = await http.get("/v0/ws")
    assert r.status_code == 400
    assert "WebSocket" in r.json()["error"]["message"]


def _ws_roundtrip(port: int, messages: list[str], until: Callable[[list[Any]], bool]) -> list[Any]:
    conn = WSConnection(ConnectionType.CLIENT)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(conn.send(Request(host="127.0.0.1", target="/v0/ws")))
        got: list[Any] = []
        accepted = False
        while not accepted:
            conn.receive_data(sock.recv(65536))
            for event in conn.events():
                if isinstance(event, AcceptConnection):
                    accepted = True
        for text in messages:
            sock.sendall(conn.send(Message(data=text)))
        while not until(got):
            conn.receive_data(sock.recv(65536))
            for event in conn.events():
                if isinstance(event, TextMessage):
                    got.append(ujson.loads(event.data))
        sock.sendall(conn.send(CloseConnection(code=1000)))
    return got


@pytest.mark.slow
def test_real_server_over_tcp(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server()
    port = int(server.base_url.rsplit(":", 1)[1])
    with server.client() as http:
        http.put("/v0/topics/room", json={}).raise_for_status()
    frames = _ws_roundtrip(
        port,
        [
            '{"op":"subscribe","request_id":"s1","topic":"room","tail":true}',
            '{"op":"publish","request_id":"p1","topic":"room","records":[{"data":[1.50]}]}',
        ],
        lambda got: any(f["op"] == "record" for f in got) and any(f["op"] == "ack" for f in got),
    )
    ops = [f["op"] for f in frames]
    assert ops[0] == "subscribed"
    assert "caught_up" in ops
    record = next(f for f in frames if f["op"] == "record")
    assert record["records"][0]["data"] == [1.5]


def test_publish_conditions_on_the_real_server(start_server: Callable[..., ServerProcess]) -> None:
    """expected_head_seq and producer_id + epoch on a publish (issue 19), over TCP."""
    server = start_server()
    port = int(server.base_url.rsplit(":", 1)[1])

    def publish(rid: str, **fields: Any) -> str:
        body = {"op": "publish", "request_id": rid, "topic": "cond", "records": [{"data": rid}]}
        return ujson.dumps({**body, **fields})

    messages = [
        publish("p1", expected_head_seq=0, producer_id="w", epoch=2),
        publish("p2", expected_head_seq=0),
        publish("p3", producer_id="w", epoch=1),
        publish("p4", expected_head_seq=1, producer_id="w", epoch=2, idempotency_key="k"),
        publish("p5", producer_id="w", epoch=3, idempotency_key="k"),
    ]
    frames = _ws_roundtrip(port, messages, lambda got: len(got) == len(messages))
    by_id = {f["request_id"]: f for f in frames}
    assert (by_id["p1"]["op"], by_id["p1"]["last_seq"]) == ("ack", 1)
    assert (by_id["p2"]["code"], by_id["p2"]["detail"]["head_seq"]) == ("head_mismatch", 1)
    assert (by_id["p3"]["code"], by_id["p3"]["detail"]["current_epoch"]) == ("producer_fenced", 2)
    assert (by_id["p4"]["op"], by_id["p4"]["last_seq"]) == ("ack", 2)
    assert (by_id["p5"]["deduped"], by_id["p5"]["last_seq"]) == (True, 2)  # no window needed
    with server.client() as http:
        assert http.get("/v0/topics/cond").json()["head_seq"] == 2
