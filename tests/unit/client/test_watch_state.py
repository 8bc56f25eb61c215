"""The watch state machine, bytes in and values out (no sockets)."""

from __future__ import annotations

import json

import pytest
import ujson

from topics.client import WatchRecord
from topics.client._watch_state import Commit, WatchSpec, WatchState
from topics.watch_types import CaughtUpEvent, TombstoneEvent, TopicDeletedEvent
from topics.wire import cursor
from topics.wire.sse import encode_event, event_frame, record_frame, with_id


def _state(
    topics: object = ("a", "b"), stored: dict[str, int] | None = None, **kw: object
) -> WatchState:
    spec = WatchSpec.build(topics, False, None, 1000, kw)  # type: ignore[arg-type]
    return WatchState(spec, stored)


def test_spec_forms() -> None:
    assert WatchSpec.build("a", True, None, 15000, {}).starts == {"a": {"tail": True}}
    assert WatchSpec.build({"a": 5, "b": {"tail": True}}, False, "n", 1, {}).starts == {
        "a": {"from_seq": 5},
        "b": {"tail": True},
    }
    with pytest.raises(TypeError, match="unknown watch options"):
        WatchSpec.build("a", False, None, 1, {"limitt": 1})
    with pytest.raises(ValueError):
        WatchSpec.build([], False, None, 1, {})


def test_create_call_uses_committed_cursors_first() -> None:
    state = _state(stored={"a": 9, "zzz": 1}, include_tags=True)
    body = ujson.loads(state.create_call().body or b"")
    assert body == {"topics": {"a": {"from_seq": 9}, "b": {"from_seq": 0}}, "heartbeat_ms": 1000,
                    "include_tags": True}  # fmt: skip
    state.on_created({"wid": "wid_x", "topics": {"a": {"from_seq": 9}}})  # ?lenient dropped b
    assert (state.stream_path, state.topics, state.committed) == (
        "/v0/watch/wid_x",
        ["a"],
        {"a": 9},
    )
    assert state.stream_headers()["Last-Event-ID"] == cursor.encode({"a": 9})


def test_frames_become_values_then_a_commit() -> None:
    state = _state()
    state.on_created({"wid": "w", "topics": {"a": {"from_seq": 0}, "b": {"from_seq": 0}}})
    state.stream_opened()
    rec = with_id(cursor.encode({"a": 2, "b": 0}),
                  record_frame("a", b'[{"$seq":1,"$ts":1,"data":1},{"$seq":2,"$ts":1,"data":2}]', 0, 2, 2))  # fmt: skip
    up = event_frame(cursor.encode({"a": 2, "b": 0}), CaughtUpEvent("b", 0, 0))
    raw = b"retry: 100\n\n" + b": hb\n\n" + rec + up
    items = state.feed(raw[:17]) + state.feed(raw[17:])  # split anywhere
    assert state.retry_ms == 100
    assert [type(i) for i in items] == [WatchRecord, WatchRecord, Commit, CaughtUpEvent, Commit]
    assert items[2] == Commit(cursor.encode({"a": 2, "b": 0}), {"a": 2, "b": 0})
    assert state.committed == {"a": 0, "b": 0}  # nothing taken yet
    state.commit(items[2])  # type: ignore[arg-type]
    assert state.committed == {"a": 2, "b": 0}
    assert state.stream_headers()["Last-Event-ID"] == cursor.encode({"a": 2, "b": 0})


def test_checkpoint_ids_advance_from_payloads() -> None:
    state = _state(["a"])
    state.on_created({"wid": "w", "topics": {"a": {"from_seq": 0}}})
    state.stream_opened()
    tomb = {
        "topic": "a",
        "reason": "cap",
        "gap_from": 1,
        "gap_to": 4,
        "earliest_seq": 5,
        "head_seq": 9,
    }
    items = state.feed(encode_event("ck.7", "tombstone", json.dumps(tomb)))
    assert isinstance(items[0], TombstoneEvent)
    assert items[0].tombstone.missed_estimate == 4
    assert items[1] == Commit("ck.7", {"a": 4})
    gone = encode_event("ck.8", "topic-deleted", '{"topic":"a","head_seq":9,"reason":"deleted"}')
    items = state.feed(gone)
    assert items[0] == TopicDeletedEvent("a", 9, 9)
    assert state.topics == []  # terminal for that topic: the watch is over


def test_errors_and_unknown_events() -> None:
    state = _state(["a"])
    state.on_created({"wid": "w", "topics": {"a": {"from_seq": 0}}})
    state.stream_opened()
    assert state.feed(b'event: something-new\ndata: {"topic":"a"}\n\n') == []
    assert (
        state.feed(b'event: error\ndata: {"code":429,"retry_after_ms":1500,"topics":["a"]}\n\n')
        == []
    )
    assert state.wid == "w"  # advisory: the stream goes on
    state.retry_ms = 100
    assert 1.2 <= state.reconnect_delay_s(failed=False) <= 1.8  # the longer wait wins, once
    assert state.reconnect_delay_s(failed=False) <= 0.12
    state.feed(b'event: error\ndata: {"code":410,"error":"gone"}\n\n')
    assert state.wid is None
    assert state.last_id is None


def test_reconnect_backoff_doubles_on_failures_and_is_capped() -> None:
    state = _state(["a"])
    delays = [state.reconnect_delay_s(failed=True) for _ in range(12)]
    assert 1.6 <= delays[0] <= 2.4
    assert 3.2 <= delays[1] <= 4.8
    assert max(delays) <= 30 * 1.2
    assert 1.6 <= state.reconnect_delay_s(failed=False) <= 2.4
