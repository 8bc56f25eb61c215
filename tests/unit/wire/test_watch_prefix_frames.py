"""The prefix-watch and backlog-guard frames and ops (issue 18 items 3-4): the SSE
``topic-added`` / ``backlog-exceeded`` events, their WebSocket twins, and the ``subscribe``
/ ``unsubscribe`` members that carry ``topic_prefix``, ``max_backlog`` and ``on_backlog``."""

from __future__ import annotations

import pytest
import ujson

from topics.client._watch_state import WatchSpec, WatchState
from topics.client._ws import events_of
from topics.watch_types import BacklogExceededEvent, JoinRefusedEvent, TopicAddedEvent
from topics.wire import cursor, sse, ws
from topics.wire.sse import Event, SSEDecoder

ADDED = TopicAddedEvent("orders.eu", "orders.", 4, 0)
EXCEEDED = BacklogExceededEvent("orders.us", 3, 90, 87, 10, 90)


def test_sse_frames_carry_the_cursor_and_the_payload() -> None:
    cid = cursor.encode({"orders.eu": 0, "orders.us": 90})
    items = SSEDecoder().feed(sse.frame_for_event(cid, ADDED) + sse.frame_for_event(cid, EXCEEDED))
    assert [(i.event, i.id) for i in items if isinstance(i, Event)] == [
        ("topic-added", cid),
        ("backlog-exceeded", cid),
    ]
    assert [ujson.loads(i.data) for i in items if isinstance(i, Event)] == [
        {"topic": "orders.eu", "prefix": "orders.", "from_seq": 0, "head_seq": 4},
        {"topic": "orders.us", "from_seq": 3, "head_seq": 90, "backlog": 87, "max_backlog": 10},
    ]


def test_ws_frames() -> None:
    assert ujson.loads(ws.frame_for_event(ADDED)) == {
        "op": "topic_added",
        "topic": "orders.eu",
        "prefix": "orders.",
        "from_seq": 0,
        "head_seq": 4,
    }
    assert ujson.loads(ws.frame_for_event(EXCEEDED))["op"] == "backlog_exceeded"
    framed = ws.subscribed_frame("r", {}, {"orders.": {"covers": ["orders."]}})
    assert ujson.loads(framed)["topic_prefix"] == {"orders.": {"covers": ["orders."]}}


def test_subscribe_with_a_prefix_and_backlog_options() -> None:
    op = ws.decode_op(
        b'{"op":"subscribe","topic_prefix":{"o.":{"tail":true}},"max_backlog":5,'
        b'"on_backlog":"error","topics":{"a":{"from_seq":2,"max_backlog":0}}}'
    )
    assert isinstance(op, ws.Subscribe)
    assert (op.topic_prefix, op.max_backlog, op.on_backlog) == ({"o.": {"tail": True}}, 5, "error")
    assert op.topics["a"].to_dict() == {"from_seq": 2, "tail": False, "max_backlog": 0}
    alone = ws.decode_op(b'{"op":"subscribe","topic_prefix":["o."]}')
    assert isinstance(alone, ws.Subscribe)
    assert alone.topics == {}
    empty = ws.decode_op(b'{"op":"subscribe","topic_prefix":["o."],"topics":{}}')
    assert isinstance(empty, ws.Subscribe)
    assert empty.topics == {}


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (b'{"op":"subscribe"}', "topic"),
        (b'{"op":"subscribe","topic_prefix":["o."],"tail":true}', "from_seq"),
        (b'{"op":"subscribe","topics":{}}', "topics"),
        (b'{"op":"unsubscribe","topic_prefix":"o.","topic":"a"}', "topic_prefix"),
        (b'{"op":"unsubscribe","topic_prefix":[]}', "topic_prefix"),
    ],
)
def test_malformed_prefix_ops(message: bytes, field: str) -> None:
    with pytest.raises(ws.OpError) as info:
        ws.decode_op(message)
    assert info.value.detail == {"field": field}


def test_unsubscribe_by_prefix() -> None:
    op = ws.decode_op(b'{"op":"unsubscribe","request_id":"u","topic_prefix":"o."}')
    assert isinstance(op, ws.Unsubscribe)
    assert (op.topics, op.topic_prefix) == ((), ("o.",))


def test_join_refused_frames_move_no_cursor() -> None:
    refused = JoinRefusedEvent("orders.x", "orders.", 2, 256)
    raw = sse.frame_for_event("ignored", refused)
    assert b"id:" not in raw  # no id of its own: the client's Last-Event-ID stands
    event = next(i for i in SSEDecoder().feed(raw) if isinstance(i, Event))
    assert event.event == "join-refused"
    payload = {
        "topic": "orders.x",
        "prefix": "orders.",
        "head_seq": 2,
        "reason": "max_watch_topics",
        "max_watch_topics": 256,
    }
    assert ujson.loads(event.data) == payload
    frame = ujson.loads(ws.frame_for_event(refused))
    assert frame == {"op": "join_refused", **payload}
    assert events_of(frame) == [refused]  # the WebSocket client reads it back


def test_the_sse_client_reports_a_refusal_and_commits_nothing() -> None:
    spec = WatchSpec.build({}, False, None, 1000, {"topic_prefix": ["orders."]})
    state = WatchState(spec, None)
    state.on_created({"wid": "w", "topics": {}})
    state.stream_opened()
    refused = JoinRefusedEvent("orders.x", "orders.", 2, 256)
    assert state.feed(sse.frame_for_event("ignored", refused)) == [refused]
