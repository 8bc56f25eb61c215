"""A prefix-limited key probes every route and every body field that names a topic outside
its prefix, against a real ``topics-server`` (issue 14).

The key ``ka`` may touch only ``tenA-``; ``kb`` owns ``tenB-``; ``ops`` has no prefixes and
takes the snapshots. Every probe must answer 403 (or a filtered answer), the server must
still answer /v0/health, and nothing stored may change: every topic's state and config,
every router and no new topic. Runs in every server mode (``tests.support.server.SERVER_MODES``).
Fixtures live in this module (``tests/hostile/conftest.py`` belongs to the framing tests).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import ujson
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Message, Request, TextMessage

from tests.support.server import SERVER_MODES, ServerProcess, assert_serves_as, spawn_server

KEYS = "ops,ka::tenA-,kb::tenB-"
SSE = {"accept": "text/event-stream"}
QUEUE = {"type": "queue", "lease_ms": 1000, "max_deliveries": 1}


@pytest.fixture(scope="module", params=list(SERVER_MODES))
def tenant_server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    server = spawn_server({"TOPICS_API_KEYS": KEYS, **SERVER_MODES[request.param]})
    try:
        assert_serves_as(server, SERVER_MODES[request.param], "ops")
        with server.client("ops") as ops:
            for name, config in [
                ("tenB-secret", {}),
                ("tenB-q", QUEUE),
                ("tenB-src", {}),
                ("tenA-src", {}),
                ("tenA-q", QUEUE),
            ]:
                assert ops.put(f"/v0/topics/{name}", json=config).status_code == 201
                records = [{"data": {"n": 1}, "tag": "t"}]
                assert ops.post(f"/v0/topics/{name}", json={"records": records}).is_success
            router = {"source": "tenB-src", "dest": "tenB-dst"}
            assert ops.put("/v0/routers/tenB-r", json=router).status_code == 201
            router = {"source": "tenB-src", "dest": "tenA-src"}  # a cross-tenant router
            assert ops.put("/v0/routers/tenA-cross", json=router).status_code == 201
        yield server
    finally:
        assert server.stop() == 0, server.stderr()


def _snapshot(ops: httpx.Client) -> dict[str, Any]:
    """Every topic's state and config and every router, as the unrestricted key sees them."""
    topics = {}
    for summary in ops.get("/v0/topics", params={"page_size": 1000}).json()["topics"]:
        state = ops.get(f"/v0/topics/{summary['topic']}", params={"touch": "false"}).json()
        state.pop("performance", None)
        state.pop("effective_priority", None)  # decays with time
        topics[summary["topic"]] = state
    routers = ops.get("/v0/routers").json()["routers"]
    return {"topics": topics, "routers": routers}


def _http_probes(wid_of_b: str) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(what, method, path, request kwargs): each must answer 403 forbidden."""
    dl = {"type": "queue", "max_deliveries": 1, "dead_letter": "tenB-secret"}
    return [
        ("write inline config.dead_letter", "POST", "/v0/topics/tenA-new",
         {"json": {"records": [{"data": 1}], "config": dl}}),
        ("write config to an existing topic", "POST", "/v0/topics/tenA-q",
         {"json": {"records": [{"data": 1}], "config": dl}}),
        ("PUT topic dead_letter", "PUT", "/v0/topics/tenA-q", {"json": {"dead_letter": "tenB-x"}}),
        ("PUT new topic dead_letter", "PUT", "/v0/topics/tenA-new", {"json": dl}),
        ("router source", "PUT", "/v0/routers/tenA-r",
         {"json": {"source": "tenB-src", "dest": "tenA-d"}}),
        ("router dest (auto-create)", "PUT", "/v0/routers/tenA-r",
         {"json": {"source": "tenA-src", "dest": "tenB-new"}}),
        ("router name", "PUT", "/v0/routers/tenB-r2",
         {"json": {"source": "tenA-src", "dest": "tenA-d"}}),
        ("get router", "GET", "/v0/routers/tenB-r", {}),
        ("delete router", "DELETE", "/v0/routers/tenB-r", {}),
        ("get cross-tenant router", "GET", "/v0/routers/tenA-cross", {}),
        ("delete cross-tenant router", "DELETE", "/v0/routers/tenA-cross", {}),
        ("replace cross-tenant router", "PUT", "/v0/routers/tenA-cross",
         {"json": {"source": "tenA-src", "dest": "tenA-d"}}),
        ("watch create", "POST", "/v0/watch",
         {"json": {"topics": {"tenA-src": {}, "tenB-secret": {}}}}),
        ("work stream", "GET", "/v0/topics/tenB-q/work",
         {"params": {"node": "w"}, "headers": SSE}),
        ("claim", "POST", "/v0/topics/tenB-q/claim", {"json": {"node": "w"}}),
        ("ack", "POST", "/v0/topics/tenB-q/ack", {"json": {"node": "w", "seqs": [1]}}),
        ("nack", "POST", "/v0/topics/tenB-q/nack", {"json": {"node": "w", "seqs": [1]}}),
        ("extend", "POST", "/v0/topics/tenB-q/extend", {"json": {"node": "w", "seqs": [1]}}),
        ("diff", "POST", "/v0/topics/tenB-secret/diff", {"json": {}}),
        ("write", "POST", "/v0/topics/tenB-secret", {"json": {"records": [{"data": 1}]}}),
        ("delete records", "POST", "/v0/topics/tenB-secret/delete", {"json": {"before_seq": 9}}),
        ("delete topic", "DELETE", "/v0/topics/tenB-secret", {}),
        ("get topic", "GET", "/v0/topics/tenB-secret", {}),
        ("put topic", "PUT", "/v0/topics/tenB-secret", {"json": {"ttl_ms": 1}}),
        ("another key's watch stream", "GET", f"/v0/watch/{wid_of_b}", {"headers": SSE}),
    ]  # fmt: skip


def test_every_http_probe_is_refused_and_changes_nothing(tenant_server: ServerProcess) -> None:
    with (
        tenant_server.client("ka") as ka,
        tenant_server.client("kb") as kb,
        tenant_server.client("ops") as ops,
        tenant_server.client() as anon,
    ):
        wid_of_b = kb.post("/v0/watch", json={"topics": {"tenB-secret": {}}}).json()["wid"]
        before = _snapshot(ops)
        for what, method, path, kwargs in _http_probes(wid_of_b):
            r = ka.request(method, path, **kwargs)
            # the session of another key is 401 (it is bound to its creator, §0.2)
            expected = 401 if "watch stream" in what else 403
            assert r.status_code == expected, (what, r.text)
            assert anon.get("/v0/health").status_code == 200, what
            assert _snapshot(ops) == before, what


def test_listings_and_metrics_are_filtered(tenant_server: ServerProcess) -> None:
    with tenant_server.client("ka") as ka, tenant_server.client("ops") as ops:
        before = _snapshot(ops)
        names = [t["topic"] for t in ka.get("/v0/topics").json()["topics"]]
        assert names == ["tenA-q", "tenA-src"]
        assert ka.get("/v0/topics", params={"prefix": "tenB-"}).json()["topics"] == []
        routers = ka.get("/v0/routers", params={"source": "tenB-src"}).json()["routers"]
        assert routers == []
        assert ka.get("/v0/routers").json()["routers"] == []  # tenA-cross reads tenB-src
        text = ka.get("/v0/metrics").text
        assert 'topic="tenA-q"' in text
        assert "tenB" not in text
        snapshot = ka.get("/v0/metrics", headers={"accept": "application/json"}).json()
        assert sorted(snapshot["topics_topic_head_seq"]) == ["tenA-q", "tenA-src"]
        assert "tenB" not in ujson.dumps(snapshot)
        assert _snapshot(ops) == before


def _ws_exchange(server: ServerProcess, key: str, commands: list[dict[str, Any]]) -> list[Any]:
    """Send ``commands`` over one WebSocket and collect one answer frame per command."""
    port = int(server.base_url.rsplit(":", 1)[1])
    conn = WSConnection(ConnectionType.CLIENT)
    got: list[Any] = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        auth = [(b"authorization", f"Bearer {key}".encode())]
        sock.sendall(conn.send(Request(host="127.0.0.1", target="/v0/ws", extra_headers=auth)))
        accepted = False
        while not accepted:
            conn.receive_data(sock.recv(65536))
            accepted = any(isinstance(e, AcceptConnection) for e in conn.events())
        for command in commands:
            sock.sendall(conn.send(Message(data=ujson.dumps(command))))
        while len(got) < len(commands):
            conn.receive_data(sock.recv(65536))
            got += [ujson.loads(e.data) for e in conn.events() if isinstance(e, TextMessage)]
        sock.sendall(conn.send(CloseConnection(code=1000)))
    return got


def test_websocket_commands_are_refused_and_change_nothing(tenant_server: ServerProcess) -> None:
    dl = {"type": "queue", "max_deliveries": 1, "dead_letter": "tenB-secret"}
    one = [{"data": 1}]
    commands: list[dict[str, Any]] = [
        {"op": "subscribe", "request_id": "s1", "topic": "tenB-secret"},
        {"op": "subscribe", "request_id": "s2", "topics": {"tenA-src": {}, "tenB-secret": {}}},
        {"op": "publish", "request_id": "p1", "topic": "tenB-secret", "records": one},
        {"op": "publish", "request_id": "p2", "topic": "tenA-new", "config": dl, "records": one},
        {"op": "publish", "request_id": "p3", "topic": "tenA-q", "config": dl, "records": one},
    ]
    check: Callable[[dict[str, Any]], bool] = lambda f: f["code"] == "forbidden"  # noqa: E731
    with tenant_server.client("ops") as ops, tenant_server.client() as anon:
        before = _snapshot(ops)
        frames = _ws_exchange(tenant_server, "ka", commands)
        assert [f["request_id"] for f in frames] == [c["request_id"] for c in commands]
        assert all(f["op"] == "error" and check(f) for f in frames), frames
        assert anon.get("/v0/health").status_code == 200
        assert _snapshot(ops) == before
