"""``client.ws()``: publish/subscribe over the JSON WebSocket (/v0/ws), blocking client."""

from __future__ import annotations

import pytest

import topics
from topics.client import Client, Subscribed, Unsubscribed, WatchRecord, request_id_of
from topics.watch_types import CaughtUpEvent, TopicWatermarks

from .conftest import ServerProcess, unique


def test_subscribe_publish_and_iterate(client: Client) -> None:
    room = unique("room")
    client.write(room, [{"data": "before"}])
    with client.ws() as ws:
        sub = ws.subscribe(room, from_seq=0, include_tags=True)
        assert sub["topics"][room]["head_seq"] == 1
        ack = ws.publish(room, [{"data": b'{"t":1.50}', "tag": "m"}], node="u1")
        assert isinstance(ack, topics.WriteResult)
        assert (ack.first_seq, ack.last_seq, ack.count) == (2, 2, 1)
        ws.ping()
        got = []
        for ev in ws:
            got.append(ev)
            if isinstance(ev, WatchRecord) and ev.seq == 2:
                break
        assert got[0] == WatchRecord(room, got[0].record)
        assert got[0].data == "before"
        assert CaughtUpEvent(room, 1, 1) in got
        assert (got[-1].data, got[-1].record.tag, got[-1].record.node) == ({"t": 1.5}, "m", "u1")
        assert got[-1].data_json == b'{"t":1.50}'  # the text the server stored, verbatim
        assert client.diff(room, from_seq=1).records_json.count(b"1.50") == 1
        assert ws.unsubscribe(room)["op"] == "unsubscribed"


def test_subscribe_and_unsubscribe_answers_are_typed(client: Client) -> None:
    """Typed like the HTTP client's results, and still mappings of the frame."""
    room = unique("typed")
    client.write(room, [{"data": 1}, {"data": 2}])
    with client.ws() as ws:
        sub = ws.subscribe(room, from_seq=1)
        assert isinstance(sub, Subscribed)
        assert sub.topics == {room: TopicWatermarks(from_seq=1, head_seq=2, earliest_seq=1)}
        assert sub.request_id is not None
        assert sub.prefixes is None
        assert (sub["op"], sub["request_id"]) == ("subscribed", sub.request_id)
        assert sub["topics"][room]["head_seq"] == 2
        assert dict(sub) == sub.to_dict()
        gone = ws.unsubscribe(room)
        assert isinstance(gone, Unsubscribed)
        assert (gone.topics, gone["op"]) == ([room], "unsubscribed")


def test_command_errors_raise_with_the_request_id(client: Client) -> None:
    with client.ws() as ws:
        with pytest.raises(topics.InvalidRequestError) as err:
            ws.publish(unique("t"), [])
        assert request_id_of(err.value) == "p1"
        with pytest.raises(topics.TopicNotFoundError):
            ws.subscribe(unique("nowhere"))
        ws.ping()  # the connection survives a failed command


@pytest.mark.slow
def test_refused_upgrade_maps_the_http_error(start_server) -> None:  # type: ignore[no-untyped-def]
    server: ServerProcess = start_server({"TOPICS_API_KEYS": "sekrit"})
    with (
        topics.Client(server.base_url, api_key="wrong") as bad,
        pytest.raises(topics.UnauthorizedError),
    ):
        bad.ws()
    with topics.Client(server.base_url, api_key="sekrit") as good, good.ws() as ws:
        ws.ping()
