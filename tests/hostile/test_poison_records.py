"""Poison records (issue #30, finding 3), against a real server in every mode.

A record no reader could hold — a 5,000-digit integer in ``data``, a lone surrogate as
``meta.type`` — used to be stored; afterwards every ``where`` that fell back to Python
answered 500, every CloudEvents read covering it 500, an SSE watch closed after
``connection-established`` and a WebSocket subscription took its whole connection down.
Write access to a shared topic was enough to cut off its filtered readers. Now the write is
``400 invalid_request`` (I-JSON, docs/GUARANTEES.md) on every surface, nothing is stored,
and the readers of the topic carry on.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import httpx
import pytest
import wsproto
import wsproto.events

from .conftest import Target, open_ws

#: Raw JSON texts of records (the HTTP body and the WebSocket message carry them verbatim).
POISON = {
    "5000-digit integer": b'{"data": {"n": ' + b"1" * 5000 + b"}}",
    "lone surrogate meta.type": b'{"data": 1, "meta": {"type": "\\ud800"}}',
    "309-digit integer in meta": b'{"data": 1, "meta": {"n": ' + b"9" * 309 + b"}}",
}
#: Falls back to Python (an operand beyond 2**53 has no exact double: topics/query/where.py).
WHERE = ["data.n", "Lt", 9007199254740993]
TIMEOUT_S = 15.0


def _body(record: bytes) -> bytes:
    return b'{"records": [' + record + b"]}"


def _post(http: httpx.Client, topic: str, record: bytes) -> httpx.Response:
    return http.post(
        f"/v0/topics/{topic}", content=_body(record), headers={"content-type": "application/json"}
    )


@pytest.mark.parametrize("poison", list(POISON))
def test_a_poison_write_is_refused_and_filtered_readers_carry_on(
    target: Target, poison: str
) -> None:
    topic = "poison-http"
    with target.client() as http:
        assert _post(http, topic, b'{"data": {"n": 1}, "meta": {"type": "a"}}').is_success
        r = _post(http, topic, POISON[poison])
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "invalid_request", r.text
        assert "I-JSON" in r.text, r.text
        diff = http.post(f"/v0/topics/{topic}/diff", json={"where": WHERE})
        assert diff.status_code == 200, diff.text
        ce = http.post(f"/v0/topics/{topic}/diff", json={"format": "cloudevents"})
        assert ce.status_code == 200, ce.text
    target.assert_unharmed(own_topics=(topic,))


def test_an_sse_watch_outlives_a_poison_write(target: Target) -> None:
    topic = "poison-sse"
    with target.client() as http:
        assert _post(http, topic, b'{"data": {"n": 1}}').is_success
        body = {"topics": {topic: {"tail": True}}, "where": WHERE, "format": "cloudevents"}
        r = http.post("/v0/watch", json=body)
        assert r.status_code == 200, r.text
        path = f"/v0/watch/{r.json()['wid']}"
        with http.stream("GET", path, headers={"accept": "text/event-stream"}) as stream:
            lines = stream.iter_lines()
            _until(lines, "connection-established")
            for record in POISON.values():
                assert _post(http, topic, record).status_code == 400
            assert _post(http, topic, b'{"data": {"n": 2, "after": true}}').is_success
            _until(lines, '"after"')
    target.assert_unharmed(own_topics=(topic,))


def _until(lines: Any, needle: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    for line in lines:
        if needle in line:
            return
        assert time.monotonic() < deadline, f"no {needle!r} within {TIMEOUT_S} s"
    raise AssertionError(f"the stream ended before {needle!r}")


def test_a_websocket_subscription_outlives_a_poison_publish(target: Target) -> None:
    """A filtered CloudEvents subscription, then every poison published on the same
    connection: each publish gets an error frame, and the subscription (and the
    connection) deliver the next good record."""
    topic = "poison-ws"
    assert target.server is not None
    with target.client() as http:
        assert _post(http, topic, b'{"data": {"n": 1}}').is_success
    sock, client = open_ws(target.server)
    with sock:
        sub = {"op": "subscribe", "topic": topic, "tail": True, "where": WHERE}
        _send(sock, client, json.dumps({**sub, "format": "cloudevents", "request_id": "s"}))
        _receive(sock, client, lambda m: m.get("op") == "subscribed")
        for i, record in enumerate(POISON.values()):
            publish = b'{"op": "publish", "request_id": "p%d", "topic": "%s", "records": [%s]}'
            _send(sock, client, (publish % (i, topic.encode(), record)).decode())
            error = _receive(sock, client, lambda m, i=i: m.get("request_id") == f"p{i}")
            assert (error["op"], error["code"]) == ("error", "invalid_request"), error
        good = {"op": "publish", "topic": topic, "records": [{"data": {"n": 2, "after": 1}}]}
        _send(sock, client, json.dumps(good))
        got = _receive(sock, client, lambda m: m.get("op") == "record")
        assert [e["data"] for e in got["records"]] == [{"n": 2, "after": 1}], got
    target.assert_unharmed(own_topics=(topic,))


def _send(sock: socket.socket, client: wsproto.WSConnection, text: str) -> None:
    sock.sendall(client.send(wsproto.events.TextMessage(text)))


def _receive(sock: socket.socket, client: wsproto.WSConnection, want: Any) -> dict[str, Any]:
    """The first message ``want`` accepts (others are skipped); fails on a close."""
    deadline = time.monotonic() + TIMEOUT_S
    text = ""
    while time.monotonic() < deadline:
        for event in client.events():
            if isinstance(event, wsproto.events.CloseConnection):
                raise AssertionError(f"the server closed the WebSocket: {event}")
            if isinstance(event, wsproto.events.TextMessage):
                text += event.data
                if event.message_finished:
                    message, text = json.loads(text), ""
                    if want(message):
                        return message
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        data = sock.recv(65536)
        if not data:
            raise AssertionError("the server closed the connection")
        client.receive_data(data)
    raise AssertionError(f"no wanted message within {TIMEOUT_S} s")
