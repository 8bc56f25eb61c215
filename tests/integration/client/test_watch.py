"""``client.watch``: the SSE watch as an iterator of values, against the real server and
against a scripted fake (reconnects, watchdog, gone sessions, ``retry:``)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

import topics
from tests.support.server import free_port
from topics.client import FileCursorStore, MemoryCursorStore, WatchRecord
from topics.watch_types import CaughtUpEvent, TombstoneEvent, TopicDeletedEvent
from topics.wire import cursor as cursor_codec

from .conftest import FakeTime, unique


def _take(events: Iterator[Any], n: int, timeout_s: float = 10.0) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    for ev in events:
        out.append(ev)
        if len(out) >= n or time.monotonic() > deadline:
            break
    return out


def _later(delay_s: float, fn: Callable[[], object]) -> threading.Thread:
    def run() -> None:
        time.sleep(delay_s)
        fn()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


# -- the real server ---------------------------------------------------------------------


def test_backlog_then_live_records_and_caught_up(client: topics.Client) -> None:
    name = unique("wt")
    client.write(name, [{"data": i} for i in range(3)])
    writer = _later(0.2, lambda: client.write(name, [{"data": "live", "tag": "t"}]))
    with client.watch(name, include_tags=True) as events:
        got = _take(events, 5)
        cursors = events.cursors
    writer.join()
    assert [e.seq for e in got[:3]] == [1, 2, 3]
    assert all(isinstance(e, WatchRecord) and e.topic == name for e in got[:3])
    assert got[3] == CaughtUpEvent(name, 3, 3)
    assert isinstance(got[4], WatchRecord)
    assert got[4].data == "live"
    assert got[4].record.tag == "t"
    assert cursors == {name: 3}  # the live record was handed out, but not taken back yet


def test_records_carry_their_data_as_the_server_stored_it(client: topics.Client) -> None:
    name = unique("verbatim")
    client.write(name, [{"data": b'{"p":1.50,"e":1E+2}'}, {"data": b"[ 1 ]", "meta": {"k": 1}}])
    with client.watch(name) as events:
        got = [e for e in _take(events, 3) if isinstance(e, WatchRecord)]
    assert [e.data_json for e in got] == [b'{"p":1.50,"e":1E+2}', b"[ 1 ]"]
    assert got[0].data == {"p": 1.5, "e": 100.0}  # decoded as before
    assert got[0] == WatchRecord(name, got[0].record)  # data_json is not part of equality


def test_tail_starts_at_the_head(client: topics.Client) -> None:
    name = unique("tail")
    client.write(name, [{"data": "old"}])
    writer = _later(0.2, lambda: client.write(name, [{"data": "new"}]))
    with client.watch([name], tail=True) as events:
        got = [e for e in _take(events, 2) if isinstance(e, WatchRecord)]
    writer.join()
    assert [e.data for e in got] == ["new"]


def test_loss_is_a_tombstone_value_never_silent(client: topics.Client) -> None:
    name = unique("lossy")
    client.put_topic(name, {"cap_records": 2})
    client.write(name, [{"data": i} for i in range(5)])
    with client.watch({name: 0}) as events:
        got = _take(events, 4)
    tomb = got[0]
    assert isinstance(tomb, TombstoneEvent)
    assert (tomb.tombstone.gap_from, tomb.tombstone.gap_to) == (1, 3)
    assert tomb.tombstone.reason == "from_seq_too_old"
    assert [e.seq for e in got[1:3]] == [4, 5]


def test_topic_deleted_ends_that_topic(client: topics.Client) -> None:
    a, b = unique("wa"), unique("wb")
    client.write(a, [{"data": 1}])
    client.write(b, [{"data": 1}])
    threads = [_later(0.3, lambda: client.delete_topic(a))]
    threads.append(_later(0.6, lambda: client.write(b, [{"data": 2}])))
    with client.watch([a, b]) as events:
        got = _take(events, 6)
        assert list(events.cursors) == [b]
    for t in threads:
        t.join()
    assert TopicDeletedEvent(a, 1, 1) in got
    assert isinstance(got[-1], WatchRecord)
    assert (got[-1].topic, got[-1].data) == (b, 2)


def test_node_filter_and_unknown_topic(client: topics.Client) -> None:
    name = unique("wn")
    client.write(name, [{"data": "mine", "node": "me"}, {"data": "theirs", "node": "them"}])
    with client.watch(name, node="me") as events:
        got = _take(events, 2)
    assert [e.data for e in got if isinstance(e, WatchRecord)] == ["theirs"]
    with pytest.raises(topics.TopicNotFoundError):
        next(iter(client.watch(unique("nowhere"))))


def test_cursor_store_commits_only_what_was_taken(client: topics.Client, tmp_path: Any) -> None:
    name = unique("wc")
    client.write(name, [{"data": i} for i in range(4)])
    client.write(name, [{"data": i} for i in range(4, 6)])
    store = FileCursorStore(tmp_path / "cursors.json")
    with client.watch(name, cursor_store=store, limit=4) as events:
        it = iter(events)
        first = [next(it) for _ in range(4)]  # the whole first frame (seqs 1-4) handed out
        assert store.load() is None  # ... but the consumer has not come back for more yet
        fifth = next(it)
        assert store.load() == {name: 4}
    assert [e.seq for e in first] == [1, 2, 3, 4]
    assert fifth.seq == 5
    # A consumer that restarts resumes from its own saved position: 5 is seen again
    # (at-least-once inside a frame), nothing before it, nothing lost.
    with client.watch(name, cursor_store=store) as events:
        again = [e for e in _take(events, 3) if isinstance(e, WatchRecord)]
    assert [e.seq for e in again] == [5, 6]
    assert store.load() == {name: 6}


@pytest.mark.slow
def test_watch_survives_a_server_restart_without_loss(start_server: Any, tmp_path: Any) -> None:
    port = str(free_port())
    args = ("--data-dir", str(tmp_path / "data"), "--port", port)
    server = start_server({}, *args)
    name = "restart"
    seen: list[int] = []
    errors: list[BaseException] = []
    with topics.Client(server.base_url) as c:
        c.put_topic(name, {"durability": "fsync"})
        c.write(name, [{"data": i} for i in range(1, 6)])
        events = c.watch(name, heartbeat_ms=1000)

        def consume() -> None:
            try:
                for ev in events:
                    if isinstance(ev, WatchRecord):
                        seen.append(ev.seq)
                        if ev.seq == 10:
                            return
            except BaseException as exc:
                errors.append(exc)

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        deadline = time.monotonic() + 10
        while len(seen) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.stop() == 0
        server = start_server({}, *args)  # same port, same data: the session is gone
        c.write(name, [{"data": i} for i in range(6, 11)])
        reader.join(30)
        events.close()
    assert not errors, errors
    assert seen == list(range(1, 11))  # nothing lost, nothing twice


# -- a scripted fake server ------------------------------------------------------------------


class Chunks(httpx.SyncByteStream):
    def __init__(self, chunks: list[bytes], then: type[Exception] | None = None) -> None:
        self.chunks, self.then = chunks, then

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        if self.then is not None:
            raise self.then("injected")


def _record_frame(topic: str, seq: int) -> bytes:
    cid = cursor_codec.encode({topic: seq})
    data = {"topic": topic, "records": [{"$seq": seq, "$ts": 1, "data": seq}],
            "from_seq": seq - 1, "to_seq": seq, "head_seq": seq}  # fmt: skip
    return f"id: {cid}\nevent: record\ndata: {json.dumps(data)}\n\n".encode()


class FakeWatchServer:
    """POST /v0/watch and GET /v0/watch/:wid, scripted per stream attempt."""

    def __init__(self, streams: list[Callable[[httpx.Request], httpx.Response]]) -> None:
        self.streams = streams
        self.posts: list[dict[str, Any]] = []
        self.gets: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            body = json.loads(request.content)
            self.posts.append(body)
            wid = f"wid_{len(self.posts)}"
            marks = {t: {"from_seq": s.get("from_seq", 0), "head_seq": 9, "earliest_seq": 1}
                     for t, s in body["topics"].items()}  # fmt: skip
            return httpx.Response(200, json={"wid": wid, "stream_url": f"/v0/watch/{wid}",
                                             "topics": marks})  # fmt: skip
        self.gets.append(request)
        return self.streams.pop(0)(request)


def _sse(chunks: list[bytes], then: type[Exception] | None = None) -> Callable[..., httpx.Response]:
    def answer(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, headers=headers, stream=Chunks(chunks, then))

    return answer


def _status(code: int, error: str) -> Callable[..., httpx.Response]:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(code, json={"error": {"code": error, "message": error}})

    return answer


@pytest.fixture
def naps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    fake = FakeTime()
    monkeypatch.setattr("topics.client._watch.time", fake)
    return fake.sleeps


def test_reconnects_after_the_watchdog_with_last_event_id(naps: list[float]) -> None:
    fake = FakeWatchServer([
        _sse([b"retry: 50\n\n", _record_frame("a", 1)], then=httpx.ReadTimeout),
        _sse([_record_frame("a", 2)]),
        _status(404, "not_found"),  # the session was collected: POST again
        _sse([_record_frame("a", 3)]),
    ])  # fmt: skip
    store = MemoryCursorStore()
    with topics.Client("http://fake", transport=httpx.MockTransport(fake)) as c:
        events = c.watch(["a"], cursor_store=store, heartbeat_ms=1000)
        assert events._state.watchdog_s == 7.0  # 2 x heartbeat + 5 s slack
        got = _take(iter(events), 3)
        events.close()
    assert [e.seq for e in got] == [1, 2, 3]
    assert fake.gets[1].headers["last-event-id"] == cursor_codec.encode({"a": 1})
    assert fake.posts[0]["topics"] == {"a": {"from_seq": 0}}
    assert fake.posts[1]["topics"] == {"a": {"from_seq": 2}}  # the committed cursor
    assert fake.gets[2].url.path == "/v0/watch/wid_1"
    assert fake.gets[3].url.path == "/v0/watch/wid_2"
    assert "last-event-id" not in fake.gets[3].headers or fake.gets[3].headers["last-event-id"]
    assert 0.04 <= naps[0] <= 0.06  # the server's retry: 50 ms, jittered
    assert store.cursors == {"a": 2}  # 3 was handed out but not yet taken back


def test_in_stream_410_recreates_the_session(naps: list[float]) -> None:
    gone = b'event: error\ndata: {"code":410,"error":"session gone"}\n\n'
    fake = FakeWatchServer([_sse([_record_frame("a", 5), gone]), _sse([_record_frame("a", 6)])])
    with topics.Client("http://fake", transport=httpx.MockTransport(fake)) as c:
        events = c.watch({"a": 4})
        got = _take(iter(events), 2)
        events.close()
    assert [e.seq for e in got] == [5, 6]
    assert fake.posts[1]["topics"] == {"a": {"from_seq": 5}}
    assert naps == []  # a gone session is re-created at once


def test_stored_cursors_override_the_start(naps: list[float]) -> None:
    fake = FakeWatchServer([_sse([_record_frame("a", 8)])])
    store = MemoryCursorStore({"a": 7, "other": 3})
    with topics.Client("http://fake", transport=httpx.MockTransport(fake)) as c:
        events = c.watch(["a"], tail=True, cursor_store=store)
        assert next(iter(events)).seq == 8
        events.close()
    assert fake.posts[0]["topics"] == {"a": {"from_seq": 7}}


def test_stream_errors_that_retry_cannot_fix_are_raised(naps: list[float]) -> None:
    fake = FakeWatchServer([_status(401, "unauthorized")])
    with (
        topics.Client("http://fake", transport=httpx.MockTransport(fake)) as c,
        pytest.raises(topics.UnauthorizedError),
    ):
        next(iter(c.watch(["a"])))
