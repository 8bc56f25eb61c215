"""Server-owned meta (issue #30, finding 5), against a real server in every mode.

A client used to write ``$deliver_at`` into a job's meta itself (a 401-digit one made every
``/work`` stream of the queue close and reconnect every 2 s), or forge ``$dead_letter_from``
naming another tenant's queue and probe it with a redrive. Top-level meta keys beginning
with ``$`` are now ``400 invalid_request`` on every surface (topics/_meta_keys.py), nothing
is stored, and the documented request option ``deliver_at`` still schedules a job.
"""

from __future__ import annotations

import json
import time

import pytest

from .conftest import Target, open_ws
from .test_poison_records import _receive, _send

QUEUE = {"type": "queue", "lease_ms": 60_000}
FORGED = {
    "huge $deliver_at": b'{"$deliver_at": ' + b"9" * 401 + b"}",
    "plain $deliver_at": b'{"$deliver_at": 1}',
    "escaped $": b'{"\\u0024deliver_at": 1}',
    "forged dead letter": b'{"$dead_letter_from": "tenB-q", "$dead_letter_src_seq": 1}',
}


@pytest.mark.parametrize("forged", list(FORGED))
def test_server_owned_meta_is_refused_over_http(target: Target, forged: str) -> None:
    topic = "reserved-q"
    with target.client() as http:
        assert http.put(f"/v0/topics/{topic}", json=QUEUE).is_success
        body = b'{"records": [{"data": 1}, {"data": 2, "meta": ' + FORGED[forged] + b"}]}"
        r = http.post(
            f"/v0/topics/{topic}", content=body, headers={"content-type": "application/json"}
        )
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert (error["code"], error["detail"]["field"]) == ("invalid_request", "records[1].meta")
        assert http.get(f"/v0/topics/{topic}").json()["head_seq"] == 0
    target.assert_unharmed(own_topics=(topic,))


def test_server_owned_meta_is_refused_over_websocket(target: Target) -> None:
    topic = "reserved-ws"
    assert target.server is not None
    sock, client = open_ws(target.server)
    with sock:
        for i, meta in enumerate(FORGED.values()):
            publish = b'{"op": "publish", "request_id": "p%d", "topic": "%s", "records": [%s]}'
            record = b'{"data": 1, "meta": ' + meta + b"}"
            _send(sock, client, (publish % (i, topic.encode(), record)).decode())
            error = _receive(sock, client, lambda m, i=i: m.get("request_id") == f"p{i}")
            assert (error["op"], error["code"]) == ("error", "invalid_request"), error
        _send(sock, client, json.dumps({"op": "ping", "request_id": "alive"}))
        assert _receive(sock, client, lambda m: m.get("request_id") == "alive")["op"] == "pong"
    target.assert_unharmed(own_topics=(topic,))


def test_the_documented_deliver_at_option_still_schedules(target: Target) -> None:
    topic = "reserved-scheduled"
    with target.client() as http:
        assert http.put(f"/v0/topics/{topic}", json=QUEUE).is_success
        at = int(time.time() * 1000) + 3_600_000
        record = {"data": 1, "meta": {"trace": "t"}, "deliver_at": at}
        r = http.post(f"/v0/topics/{topic}", json={"records": [record]})
        assert r.is_success, r.text
        assert http.get(f"/v0/topics/{topic}").json()["queue"]["scheduled"] == 1
        diff = http.post(f"/v0/topics/{topic}/diff", json={}).json()["records"]
        assert diff[0]["meta"] == {"trace": "t", "$deliver_at": at}
    target.assert_unharmed(own_topics=(topic,))
