"""WebSocket ops (topics.wire.ws): the tagged union, its decoder, the server frames."""

from __future__ import annotations

import pytest
import ujson

from topics.errors import ForbiddenError
from topics.types import Tombstone
from topics.watch_types import RecordBatch, TombstoneEvent
from topics.wire import ws
from topics.wire.ws import OpError, Ping, Publish, Subscribe, TopicStart, Unsubscribe


def test_publish_keeps_record_data_verbatim() -> None:
    op = ws.decode_op(
        '{"op":"publish","request_id":"p1","topic":"room","return_seqs":false,'
        '"records":[{"node":"u017","data":{"packet":1.50,"b":[1e3]},"meta":{"k":"v"}}]}'
    )
    assert isinstance(op, Publish)
    assert op.request_id == "p1"
    assert op.topic == "room"
    assert op.return_seqs is False
    assert op.records == [
        {"node": "u017", "data": b'{"packet":1.50,"b":[1e3]}', "meta": b'{"k":"v"}'}
    ]


def test_subscribe_single_topic_with_top_level_start() -> None:
    op = ws.decode_op(
        b'{"op":"subscribe","request_id":"s1","topic":"room","tail":true,"node":"u017",'
        b'"limit":1000,"max_batch_bytes":8388608,"include_meta":false}'
    )
    assert isinstance(op, Subscribe)
    assert op.topics == {"room": TopicStart(0, True)}
    assert (op.node, op.limit, op.max_batch_bytes, op.include_meta) == (
        "u017",
        1000,
        8388608,
        False,
    )


def test_subscribe_topics_map() -> None:
    op = ws.decode_op(b'{"op":"subscribe","topics":{"a":{"from_seq":5},"b":{"tail":true},"c":{}}}')
    assert isinstance(op, Subscribe)
    assert op.request_id is None
    assert op.topics == {"a": TopicStart(5), "b": TopicStart(0, True), "c": TopicStart()}


def test_unsubscribe_and_ping() -> None:
    assert ws.decode_op('{"op":"unsubscribe","request_id":"u1","topic":"a"}') == Unsubscribe(
        "u1", ("a",)
    )
    assert ws.decode_op('{"op":"unsubscribe","topics":["a","b"]}') == Unsubscribe(None, ("a", "b"))
    assert ws.decode_op('{"op":"ping","request_id":"ping-1"}') == Ping("ping-1")


@pytest.mark.parametrize(
    ("message", "rid", "field"),
    [
        (b'{"op":"nope","request_id":"x"}', "x", "op"),
        (b'{"request_id":"x"}', "x", "op"),
        (b'{"op":"subscribe","request_id":"s"}', "s", "topic"),
        (b'{"op":"subscribe","topic":"a","topics":{}}', None, "topic"),
        (b'{"op":"subscribe","topics":{"a":{"from":1}}}', None, "topics.a.from"),
        (b'{"op":"subscribe","topic":"a","lmit":3}', None, "lmit"),
        (b'{"op":"publish","request_id":"p","topic":"a"}', "p", "records"),
        (b'{"op":"publish","topic":"","records":[]}', None, "topic"),
        (b'{"op":"ping","records":[]}', None, "records"),
    ],
)
def test_bad_commands_raise_op_error_with_request_id(
    message: bytes, rid: str | None, field: str
) -> None:
    with pytest.raises(OpError) as info:
        ws.decode_op(message)
    assert info.value.code == "invalid_request"
    assert info.value.request_id == rid
    assert info.value.detail == {"field": field}


def test_malformed_json_is_invalid_request_with_path() -> None:
    with pytest.raises(OpError) as info:
        ws.decode_op(b'{"op":"publish","records":[{"data":nope}]}')
    assert info.value.detail is not None
    assert info.value.detail["path"] == "$.records[0].data"


def test_server_frames() -> None:
    batch = RecordBatch("room", 42, 43, 43, b'[{"$seq":43,"$ts":1,"data":{"packet":1}}]', 1)
    assert ujson.loads(ws.frame_for_event(batch)) == {
        "op": "record",
        "topic": "room",
        "from_seq": 42,
        "to_seq": 43,
        "head_seq": 43,
        "records": [{"$seq": 43, "$ts": 1, "data": {"packet": 1}}],
    }
    assert ws.frame_for_event(batch) is ws.frame_for_event(batch)  # built once, shared
    tomb = ws.frame_for_event(TombstoneEvent("room", Tombstone(1, 10, "cap", 10, 11, 43), 10))
    assert ujson.loads(tomb)["op"] == "tombstone"
    err = ujson.loads(ws.error_frame("p2", ForbiddenError("api key lacks write scope")))
    assert err == {
        "op": "error",
        "request_id": "p2",
        "code": "forbidden",
        "message": "api key lacks write scope",
    }
    assert ujson.loads(ws.subscribed_frame("s1", {"a": {"from_seq": 1}})) == {
        "op": "subscribed",
        "request_id": "s1",
        "topics": {"a": {"from_seq": 1}},
    }


def test_commit_and_subscribe_from_a_cursor() -> None:
    op = ws.decode_op(
        '{"op":"commit","request_id":"c1","topic":"t","cursor":"g","seq":4,"expect_seq":2}'
    )
    assert op == ws.CursorCommit("c1", "t", "g", 4, 2)
    sub = ws.decode_op('{"op":"subscribe","topic":"t","cursor":"g","commit":true}')
    assert isinstance(sub, Subscribe)
    assert sub.topics["t"].to_dict() == {"cursor": "g", "commit": True}
    many = ws.decode_op('{"op":"subscribe","topics":{"t":{"cursor":"g"},"u":{"from_seq":3}}}')
    assert isinstance(many, Subscribe)
    assert many.topics["t"].to_dict() == {"cursor": "g", "commit": False}
    assert many.topics["u"].to_dict() == {"from_seq": 3, "tail": False}
    with pytest.raises(OpError, match="commit"):
        ws.decode_op('{"op":"subscribe","topics":{"t":{}},"commit":true}')
    with pytest.raises(OpError, match="topic"):
        ws.decode_op('{"op":"commit","cursor":"g","seq":1}')
    with pytest.raises(OpError, match="is not a field of commit"):
        ws.decode_op('{"op":"commit","topic":"t","cursor":"g","seq":1,"expected":0}')
    frame = ujson.loads(ws.committed_frame("c1", {"topic": "t", "cursor": "g", "seq": 4}))
    assert frame == {"op": "committed", "request_id": "c1", "topic": "t", "cursor": "g", "seq": 4}
