"""A real topics-server started with ``TOPICS_MAX_WHERE_COST`` refuses a ``where`` over it,
on HTTP (diff, watch) and on the WebSocket, naming the budget and its variable (issue 30);
one within it reads as before."""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request, TextMessage

from tests.support.server import ServerProcess, servers


def _terms(n: int) -> list[Any]:
    return ["and", [[f"data.k{i}", "Exists"] for i in range(n)]]


def _ws_subscribe(server: ServerProcess, where: object) -> dict[str, Any]:
    """The first answer to a ``subscribe`` with ``where`` on a fresh ``/v0/ws``."""
    host, port = server.base_url.removeprefix("http://").rsplit(":", 1)
    client = WSConnection(ConnectionType.CLIENT)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(client.send(Request(host="t", target="/v0/ws")))
        command = {"op": "subscribe", "topic": "t", "tail": True, "where": where}
        while True:
            client.receive_data(sock.recv(65536))
            for event in client.events():
                if isinstance(event, AcceptConnection):
                    sock.sendall(client.send(TextMessage(json.dumps(command))))
                elif isinstance(event, TextMessage):
                    return dict(json.loads(event.data))


def test_a_where_over_the_configured_budget_is_400_naming_it() -> None:
    with servers() as start:
        server = start({"TOPICS_MAX_WHERE_COST": "5"})
        with httpx.Client(base_url=server.base_url, timeout=30) as http:
            assert http.post("/v0/topics/t", json={"records": [{"data": {"k0": 1}}]}).is_success
            ok = http.post("/v0/topics/t/diff", json={"where": _terms(4)})  # 4 tests + 1 decode
            assert ok.status_code == 200, ok.text
            assert len(ok.json()["records"]) == 0
            for path, body in [
                ("/v0/topics/t/diff", {"where": _terms(5)}),
                ("/v0/watch", {"topics": {"t": {}}, "where": _terms(5)}),
            ]:
                r = http.post(path, json=body)
                assert r.status_code == 400, (path, r.text)
                error = r.json()["error"]
                assert error["code"] == "invalid_request"
                assert "TOPICS_MAX_WHERE_COST" in error["message"]
                assert error["detail"] == {"field": "where", "cost": 6, "max_cost": 5}
        frame = _ws_subscribe(server, _terms(5))
        assert frame["op"] == "error", frame
        assert frame["code"] == "invalid_request"
        assert "TOPICS_MAX_WHERE_COST" in frame["message"]
