"""Prefix watches and the backlog guard on the real server (issue 18 items 3-4): POST
/v0/watch and its SSE stream over a raw socket, and /v0/ws over TCP (wsproto), in
dev mode (in every server mode) and with a tenant key whose allowlist narrows a prefix."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import ujson
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Message, Request, TextMessage

from topics.wire import cursor
from topics.wire.sse import Event

from .conftest import ServerProcess
from .test_watch_sse_direct import RawSse, create, is_event, watch, write

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(server_in_every_mode: ServerProcess) -> ServerProcess:
    """Every way the server can carry a stream (tests.support.server.SERVER_MODES): the joins and the
    guard's frames go through direct writes, the lane's ASGI path and hypercorn alike."""
    return server_in_every_mode


KEYS = "kall:read+write+admin,kt:read+write:tenA-orders."


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


def payload(event: Event) -> dict[str, Any]:
    data: dict[str, Any] = ujson.loads(event.data)
    return data


# -- SSE -------------------------------------------------------------------------------------


def test_a_prefix_watch_joins_new_topics_and_resumes_them_exactly(
    server: ServerProcess, open_sse: Callable[..., RawSse]
) -> None:
    write(server, "pw.orders.eu", "e1")
    with server.client() as http:
        r = http.post("/v0/watch", json={"topic_prefix": {"pw.orders.": {}}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["topics"] == {"pw.orders.eu": {"from_seq": 0, "head_seq": 1, "earliest_seq": 1}}
    assert body["topic_prefix"] == {
        "pw.orders.": {"covers": ["pw.orders."], "tail": False, "max_backlog": 0}
    }
    client = open_sse(body["wid"])
    client.read_until(is_event("caught-up"))
    before_join = client.events("record")[-1].id
    assert cursor.decode(before_join) == {"pw.orders.eu": 1}
    write(server, "pw.orders.us", "u1", "u2")  # created by its first write
    write(server, "pw.other", "x")  # not under the prefix
    client.read_until(lambda i: is_event("caught-up")(i) and "pw.orders.us" in i.data)  # type: ignore[union-attr]
    added = client.events("topic-added")
    assert [payload(e) for e in added] == [
        {"topic": "pw.orders.us", "prefix": "pw.orders.", "from_seq": 0, "head_seq": 2}
    ]
    assert cursor.decode(added[0].id) == {"pw.orders.eu": 1, "pw.orders.us": 0}
    last = client.events("record")[-1]
    assert payload(last)["topic"] == "pw.orders.us"
    assert cursor.decode(last.id) == {"pw.orders.eu": 1, "pw.orders.us": 2}
    client.close()
    # A consumer whose last processed id predates the join gets the joined topic again,
    # from its first record (the session had already sent it).
    again = open_sse(body["wid"], before_join)
    again.read_until(lambda _: len(again.events("caught-up")) == 2)
    replay = [payload(e) for e in again.events("record")]
    assert [(p["topic"], [r["data"] for r in p["records"]]) for p in replay] == [
        ("pw.orders.us", ["u1", "u2"])
    ]
    assert [payload(e)["topic"] for e in again.events("topic-added")] == ["pw.orders.us"]


def test_a_topic_deleted_while_watched_by_prefix_ends_and_a_new_one_rejoins(
    server: ServerProcess, open_sse: Callable[..., RawSse]
) -> None:
    create(server, "pd.a")
    wid = watch(server, {"topic_prefix": ["pd."]})
    client = open_sse(wid)
    client.read_until(is_event("caught-up"))
    with server.client() as http:
        assert http.delete("/v0/topics/pd.a").status_code == 200
    client.read_until(is_event("topic-deleted"))
    write(server, "pd.a", "again")
    client.read_until(is_event("record"))
    assert [payload(e)["from_seq"] for e in client.events("topic-added")] == [0]
    assert payload(client.events("record")[-1])["records"][0]["data"] == "again"


def test_a_backlog_over_max_backlog_is_a_frame_with_the_head(
    server: ServerProcess, open_sse: Callable[..., RawSse]
) -> None:
    write(server, "bl.big", *range(50))
    write(server, "bl.small", 1, 2)
    wid = watch(server, {"topics": {"bl.big": {}, "bl.small": {}}, "max_backlog": 10})
    client = open_sse(wid)
    client.read_until(lambda _: len(client.events("caught-up")) == 2)
    exceeded = client.events("backlog-exceeded")
    assert [payload(e) for e in exceeded] == [
        {"topic": "bl.big", "from_seq": 0, "head_seq": 50, "backlog": 50, "max_backlog": 10}
    ]
    assert cursor.decode(exceeded[0].id)["bl.big"] == 50
    assert [payload(e)["topic"] for e in client.events("record")] == ["bl.small"]
    write(server, "bl.big", "live")
    client.read_until(lambda i: is_event("record")(i) and "bl.big" in i.data)  # type: ignore[union-attr]
    assert payload(client.events("record")[-1])["records"][0]["$seq"] == 51


def test_on_backlog_error_is_409_and_bad_options_are_400(server: ServerProcess) -> None:
    write(server, "be.t", *range(20))
    with server.client() as http:
        r = http.post(
            "/v0/watch",
            json={"topics": {"be.t": {"max_backlog": 5}}, "on_backlog": "error"},
        )
        assert r.status_code == 409, r.text
        err = r.json()["error"]
        assert err["code"] == "backlog_exceeded"
        assert err["detail"] == {
            "topic": "be.t",
            "from_seq": 0,
            "head_seq": 20,
            "backlog": 20,
            "max_backlog": 5,
        }
        for body in (
            {"topic_prefix": {"be.": {"bogus": 1}}},
            {"topic_prefix": "be."},
            {"topics": {"be.t": {}}, "on_backlog": "maybe"},
            {"topics": {"be.t": {"max_backlog": "x"}}},
        ):
            r = http.post("/v0/watch", json=body)
            assert r.status_code == 400, (body, r.text)
            assert r.json()["error"]["code"] == "invalid_request"


def test_a_prefix_is_narrowed_to_the_key_allowlist(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server({"TOPICS_API_KEYS": KEYS})
    with server.client("kall") as admin:
        for name in ("tenA-orders.1", "tenA-audit", "tenB-orders.1"):
            assert admin.post(f"/v0/topics/{name}", json={"records": [{"data": 1}]}).is_success
    with server.client("kt") as tenant:
        r = tenant.post("/v0/watch", json={"topic_prefix": ["tenA-"]})
        assert r.status_code == 200, r.text
        assert list(r.json()["topics"]) == ["tenA-orders.1"]
        assert r.json()["topic_prefix"]["tenA-"]["covers"] == ["tenA-orders."]
        r = tenant.post("/v0/watch", json={"topic_prefix": ["tenB-"]})
        assert r.status_code == 403
        assert r.json()["error"]["detail"] == {"topic_prefix": "tenB-"}


# -- WebSocket -------------------------------------------------------------------------------


class WsTcp:
    """A blocking wsproto client of the real server's /v0/ws."""

    def __init__(self, server: ServerProcess) -> None:
        host, port = server.base_url.removeprefix("http://").split(":")
        self.conn = WSConnection(ConnectionType.CLIENT)
        self.sock = socket.create_connection((host, int(port)), timeout=20)
        self.sock.sendall(self.conn.send(Request(host=host, target="/v0/ws")))
        self.frames: list[dict[str, Any]] = []
        accepted = False
        while not accepted:
            self.conn.receive_data(self.sock.recv(65536))
            accepted = any(isinstance(e, AcceptConnection) for e in self.conn.events())

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(self.conn.send(Message(data=ujson.dumps(message))))

    def until(self, pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        seen = 0
        while True:
            for frame in self.frames[seen:]:
                if pred(frame):
                    return frame
            seen = len(self.frames)
            self.conn.receive_data(self.sock.recv(65536))
            for event in self.conn.events():
                if isinstance(event, TextMessage):
                    self.frames.append(ujson.loads(event.data))

    def ops(self, op: str) -> list[dict[str, Any]]:
        return [f for f in self.frames if f["op"] == op]

    def close(self) -> None:
        self.sock.sendall(self.conn.send(CloseConnection(code=1000)))
        self.sock.close()


def op_is(op: str, **fields: Any) -> Callable[[dict[str, Any]], bool]:
    return lambda f: f["op"] == op and all(f.get(k) == v for k, v in fields.items())


def test_websocket_prefix_subscribe_joins_and_unsubscribes(server: ServerProcess) -> None:
    write(server, "wp.a", "a1")
    ws = WsTcp(server)
    try:
        ws.send({"op": "subscribe", "request_id": "s", "topic_prefix": {"wp.": {"tail": True}}})
        sub = ws.until(op_is("subscribed"))
        assert sub["topics"] == {"wp.a": {"from_seq": 1, "head_seq": 1, "earliest_seq": 1}}
        assert sub["topic_prefix"]["wp."]["covers"] == ["wp."]
        ws.until(op_is("caught_up", topic="wp.a"))
        write(server, "wp.b", "b1", "b2")
        added = ws.until(op_is("topic_added"))
        assert added == {
            "op": "topic_added",
            "topic": "wp.b",
            "prefix": "wp.",
            "from_seq": 0,
            "head_seq": 2,
        }
        rec = ws.until(op_is("record", topic="wp.b"))
        assert [r["data"] for r in rec["records"]] == ["b1", "b2"]
        ws.send({"op": "unsubscribe", "request_id": "u", "topic_prefix": "wp."})
        assert sorted(ws.until(op_is("unsubscribed"))["topics"]) == ["wp.a", "wp.b"]
        write(server, "wp.c", "c1")
        ws.send({"op": "ping", "request_id": "p"})
        ws.until(op_is("pong"))
        assert not [f for f in ws.frames if f.get("topic") == "wp.c"]
    finally:
        ws.close()


def test_websocket_backlog_guard_frame_and_error(server: ServerProcess) -> None:
    write(server, "wb.t", *range(30))
    ws = WsTcp(server)
    try:
        ws.send(
            {
                "op": "subscribe",
                "request_id": "e",
                "topics": {"wb.t": {"from_seq": 0}},
                "max_backlog": 5,
                "on_backlog": "error",
            }
        )
        err = ws.until(op_is("error", request_id="e"))
        assert err["code"] == "backlog_exceeded"
        assert err["detail"]["head_seq"] == 30
        ws.send({"op": "subscribe", "request_id": "j", "topics": {"wb.t": {"max_backlog": 5}}})
        exceeded = ws.until(op_is("backlog_exceeded"))
        assert exceeded == {
            "op": "backlog_exceeded",
            "topic": "wb.t",
            "from_seq": 0,
            "head_seq": 30,
            "backlog": 30,
            "max_backlog": 5,
        }
        ws.until(op_is("caught_up", topic="wb.t"))
        assert not ws.ops("record")
    finally:
        ws.close()
