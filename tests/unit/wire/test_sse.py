"""SSE framing and the incremental decoder (topics.wire.sse): bytes in, values out."""

from __future__ import annotations

import pytest
import ujson

from topics.errors import ThrottledError
from topics.types import Tombstone
from topics.watch_types import CaughtUpEvent, RecordBatch, TombstoneEvent, TopicDeletedEvent
from topics.wire import sse
from topics.wire.sse import Comment, Event, Retry, SSEDecoder


def test_encode_event_with_id_event_and_data() -> None:
    assert sse.encode_event("abc", "record", b'{"a":1}') == (
        b'id: abc\nevent: record\ndata: {"a":1}\n\n'
    )


def test_encode_event_splits_multiline_data_into_data_lines() -> None:
    assert sse.encode_event(None, None, "a\r\nb\rc\nd") == (
        b"data: a\ndata: b\ndata: c\ndata: d\n\n"
    )


@pytest.mark.parametrize(("id_", "event"), [("a\nb", None), (None, "x\ry"), ("a\0b", None)])
def test_encode_event_refuses_fields_that_would_split_the_frame(
    id_: str | None, event: str | None
) -> None:
    with pytest.raises(ValueError, match="cannot contain"):
        sse.encode_event(id_, event, b"{}")


def test_heartbeat_is_exactly_colon_hb() -> None:
    assert sse.encode_heartbeat() == b": hb\n\n"


def test_retry_line_opens_with_two_seconds() -> None:
    assert sse.encode_retry() == b"retry: 2000\n\n"
    assert sse.encode_comment("x") == b": x\n\n"


def test_record_frame_splices_records_verbatim_and_shares_bytes() -> None:
    batch = RecordBatch("orders", 4096, 4098, 5210, b'[{"$seq":4097,"data":1.50}]', 1)
    frame = sse.frame_for_event("ID1", batch)
    assert frame == (
        b"id: ID1\nevent: record\n"
        b'data: {"topic":"orders","records":[{"$seq":4097,"data":1.50}],'
        b'"from_seq":4096,"to_seq":4098,"head_seq":5210}\n\n'
    )
    shared = batch.encoded("sse", lambda b: b"unused")
    # The shared part is built once and reused for every watcher (only id: differs).
    assert sse.frame_for_event("ID2", batch) == b"id: ID2\n" + shared


def test_control_frames_have_the_contract_payloads() -> None:
    dec = SSEDecoder()
    tomb = Tombstone(80000, 83000, "cap", 3001, 83001, 88130)
    frames = (
        sse.frame_for_event("c1", TombstoneEvent("n", tomb, 83000))
        + sse.frame_for_event("c2", CaughtUpEvent("n", 88130, 88130))
        + sse.frame_for_event("c3", TopicDeletedEvent("n", 12, 12))
    )
    events = [i for i in dec.feed(frames) if isinstance(i, Event)]
    assert [(e.event, e.id) for e in events] == [
        ("tombstone", "c1"),
        ("caught-up", "c2"),
        ("topic-deleted", "c3"),
    ]
    assert ujson.loads(events[0].data) == {
        "topic": "n",
        "reason": "cap",
        "gap_from": 80000,
        "gap_to": 83000,
        "missed_estimate": 3001,
        "earliest_seq": 83001,
        "head_seq": 88130,
    }
    assert ujson.loads(events[1].data) == {"topic": "n", "head_seq": 88130}
    assert ujson.loads(events[2].data) == {"topic": "n", "head_seq": 12, "reason": "deleted"}


def test_error_frame_has_numeric_code_and_no_id() -> None:
    frame = sse.error_frame(
        ThrottledError("paced"), request_id="r1", retry_after_ms=1500, topics=["events"]
    )
    assert not frame.startswith(b"id:")
    (event,) = SSEDecoder().feed(frame)
    assert isinstance(event, Event)
    assert event.event == "error"
    assert ujson.loads(event.data) == {
        "code": 429,
        "error": "paced",
        "error_code": "throttled",
        "retry_after_ms": 1500,
        "topics": ["events"],
        "request_id": "r1",
    }


def test_lifecycle_frames_carry_the_request_id() -> None:
    dec = SSEDecoder()
    items = dec.feed(
        sse.connection_established_frame("rid", "wid_x", {"a": {"from_seq": 1}})
        + sse.connection_closing_frame("server_shutdown", "rid", 2000)
    )
    assert [ujson.loads(i.data)["request_id"] for i in items if isinstance(i, Event)] == [
        "rid",
        "rid",
    ]


def test_decoder_handles_split_chunks_crlf_bom_and_comments() -> None:
    stream = (
        b"\xef\xbb\xbfretry: 2000\r\n\r\n: hb\r\nid: a\r\nevent: x\r\ndata: 1\r\ndata: 2\r\n\r\n"
    )
    dec = SSEDecoder()
    out: list[object] = []
    for i in range(len(stream)):  # one byte at a time: every split point
        out.extend(dec.feed(stream[i : i + 1]))
    assert out == [Retry(2000), Comment("hb"), Event("x", "1\n2", "a")]
    assert dec.last_event_id == "a"


def test_decoder_keeps_last_event_id_and_skips_dataless_events() -> None:
    dec = SSEDecoder()
    out = dec.feed(b"id: 7\n\ndata: x\n\nretry: soon\n\nid: bad\0id\ndata: y\n\n")
    assert out == [Event("message", "x", "7"), Event("message", "y", "7")]


def test_decoder_accepts_heartbeat_followed_by_anything() -> None:
    (c1, c2, c3) = SSEDecoder().feed(b": hb\n\n: hb 1748467205000\n\n: other\n\n")
    assert isinstance(c1, Comment)
    assert c1.is_heartbeat
    assert isinstance(c2, Comment)
    assert c2.is_heartbeat
    assert isinstance(c3, Comment)
    assert not c3.is_heartbeat


def test_decoder_cr_at_chunk_end_then_lf() -> None:
    dec = SSEDecoder()
    assert dec.feed(b"data: a\r") == []
    assert dec.feed(b"\n\r\n") == [Event("message", "a", "")]
