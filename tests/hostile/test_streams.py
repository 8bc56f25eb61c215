"""Hostile stream clients (issue 15): an SSE watcher, a WebSocket subscriber or a ``/work``
consumer that never reads, one that sends bytes up its open stream, one that resets in the
middle of a delivery.

Runs in every server mode, which is the point here: on a connection the lane owns, a
stream writes its frames to the socket itself (non-blocking writes, its own pump and queue
when the socket is full); everywhere else every frame goes through ASGI ``send``. Both must
hold the same line: a stuck client costs its own stream, never the writers, the other
clients or the server's memory, and loss is never silent (a lossy topic may tombstone what
a slow watcher missed; nothing else is skipped, and a queue loses no job).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import wsproto
import wsproto.events

from topics.wire.sse import Event, SSEDecoder

from .conftest import (
    FLOOD_BYTES,
    KEY,
    STOPPED_BY,
    Target,
    connect,
    open_ws,
    reset,
    send_until_stalled,
)

pytestmark = pytest.mark.slow

#: Generous bounds for a loaded 2-core CI box; a broken server misses them by far.
DELIVERY_TIMEOUT_S = 30.0
WRITE_STALL_S = 3.0


def _open_stream(
    target: Target, path: str, *, rcvbuf: int | None = None, last_event_id: str | None = None
) -> socket.socket:
    """A raw connection with the GET of an SSE stream sent (``rcvbuf``: see ``connect``)."""
    assert target.server is not None
    sock = connect(target.server, rcvbuf=rcvbuf)
    resume = f"Last-Event-ID: {last_event_id}\r\n" if last_event_id is not None else ""
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n"
        f"Authorization: Bearer {KEY}\r\n{resume}\r\n".encode()
    )
    return sock


class StreamReader:
    """Reads one raw SSE response (chunked HTTP/1.1) in a thread and keeps its events."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.events: list[Event] = []
        self.status: int | None = None
        self.closed = False
        self._cond = threading.Condition()
        self._buf = b""
        self._head_done = False
        self._decoder = SSEDecoder()
        self._thread: threading.Thread | None = None

    def start(self) -> StreamReader:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        self.sock.settimeout(DELIVERY_TIMEOUT_S)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    break
                self._feed(data)
        except OSError:
            pass
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def _feed(self, data: bytes) -> None:
        self._buf += data
        if not self._head_done:
            head, sep, rest = self._buf.partition(b"\r\n\r\n")
            if not sep:
                return
            self.status = int(head.split(b" ", 2)[1])
            self._head_done, self._buf = True, rest
        payload = b""
        while True:  # whole chunks only; a partial one waits for more bytes
            size_line, sep, rest = self._buf.partition(b"\r\n")
            if not sep:
                break
            size = int(size_line, 16)
            if len(rest) < size + 2:
                break
            payload += rest[:size]
            self._buf = rest[size + 2 :]
            if size == 0:
                break
        items = [i for i in self._decoder.feed(payload) if isinstance(i, Event)]
        if items:
            with self._cond:
                self.events.extend(items)
                self._cond.notify_all()

    def wait_for(self, done: Callable[[list[Event]], bool], timeout_s: float) -> bool:
        with self._cond:
            return self._cond.wait_for(
                lambda: self.closed or done(self.events), timeout=timeout_s
            ) and done(self.events)

    def reset(self) -> None:
        """End the connection with a TCP reset. The reading thread is stopped first: a
        socket closed under a blocked ``recv`` stays open until that call returns."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RD)
        if self._thread is not None:
            self._thread.join(5.0)
        reset(self.sock)

    def last_id(self) -> str:
        """The ``id:`` of the last frame that had one: what a client resumes from."""
        return next(e.id for e in reversed(self.events) if e.id is not None)

    def stop(self) -> None:
        # close() alone does not wake a recv blocked in another thread; shutdown does.
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        if self._thread is not None:
            self._thread.join(5.0)


def _watch(http: httpx.Client, topic: str) -> str:
    r = http.post("/v0/watch", json={"topics": {topic: {"tail": True}}})
    assert r.status_code == 200, r.text
    return str(r.json()["wid"])


def _reached(topic: str, head: int) -> Callable[[list[Event]], bool]:
    """Whether the events cover ``topic`` up to ``head`` (records or tombstones)."""

    def done(events: list[Event]) -> bool:
        return _covered_to(events, topic) >= head

    return done


def _covered_to(events: list[Event], topic: str) -> int:
    """The last seq of ``topic`` the events account for, checking on the way that they
    account for every seq from the first one in order: each record the next seq, each
    tombstone starting where the records stopped (loss is never silent)."""
    last: int | None = None
    for event in events:
        if event.event not in ("record", "tombstone"):
            continue
        data = json.loads(event.data)
        if data["topic"] != topic:
            continue
        if event.event == "record":
            for record in data["records"]:
                seq = record["$seq"]
                assert last is None or seq == last + 1, f"seq {seq} after {last}: a silent gap"
                last = seq
        else:
            start, end = data["gap_from"], data["gap_to"]
            assert last is None or start == last + 1, f"tombstone {start}-{end} after {last}"
            last = end
    return last or 0


def _first_seq(events: list[Event], topic: str) -> int:
    """The first seq of ``topic`` the events account for (a record's or a tombstone's)."""
    for event in events:
        if event.event in ("record", "tombstone"):
            data = json.loads(event.data)
            if data["topic"] == topic:
                if event.event == "record":
                    return int(data["records"][0]["$seq"])
                return int(data["gap_from"])
    raise AssertionError(f"no record or tombstone of {topic}")


def _write(http: httpx.Client, topic: str, records: list[dict[str, Any]]) -> tuple[int, float]:
    t0 = time.monotonic()
    r = http.post(f"/v0/topics/{topic}", json={"records": records})
    assert r.status_code in (200, 201), r.text
    return int(r.json()["head_seq"]), time.monotonic() - t0


def _flood_past_a_stuck_client(target: Target, http: httpx.Client, topic: str) -> int:
    """Write ~10 MB to ``topic`` (capped at 500 records) while a stuck client is attached
    and a reading SSE watcher follows it; check that every write is answered promptly, the
    watcher gets every seq and the server's memory stays flat. The head after the writes.

    ~10 MB through a topic that keeps ~0.5 MB grows the server by 1.4-2.6 MiB here; with
    the stuck client's outbound queue made unbounded, by 12-18 MiB (SSE and WebSocket)."""
    good = StreamReader(_open_stream(target, f"/v0/watch/{_watch(http, topic)}")).start()
    try:
        assert good.wait_for(lambda ev: any(e.event == "caught-up" for e in ev), 10.0)
        rss_before = target.rss_kib()
        payload = "x" * 1000
        head, slowest = 0, 0.0
        for _ in range(400):
            head, took = _write(http, topic, [{"data": payload} for _ in range(25)])
            slowest = max(slowest, took)
        grown_kib = target.rss_kib() - rss_before
        assert slowest < WRITE_STALL_S, f"a write took {slowest:.2f} s beside a stuck client"
        assert good.wait_for(_reached(topic, head), DELIVERY_TIMEOUT_S), (
            f"the reading watcher got to {_covered_to(good.events, topic)} of {head}"
        )
        assert grown_kib < 6 * 1024, f"server RSS grew {grown_kib} KiB"
    finally:
        good.stop()
    return head


def test_a_watcher_that_never_reads_costs_nothing_but_its_own_stream(target: Target) -> None:
    """A stream whose client never reads a byte (a tiny receive buffer, so it backs up at
    once) while the topic takes ~10 MB: every write is answered promptly, a watcher beside
    it gets every seq, the server does not buffer for it, and once it reads it finds
    every seq accounted for (records, or tombstones of what the cap dropped)."""
    topic = "hostile-slow"
    with target.client() as http:
        http.delete(f"/v0/topics/{topic}")
        assert http.put(f"/v0/topics/{topic}", json={"cap_records": 500}).status_code in (200, 201)
        stuck = _open_stream(target, f"/v0/watch/{_watch(http, topic)}", rcvbuf=4096)
        try:
            head = _flood_past_a_stuck_client(target, http, topic)
            late = StreamReader(stuck).start()
            assert late.wait_for(_reached(topic, head), DELIVERY_TIMEOUT_S), (
                f"the late reader got to {_covered_to(late.events, topic)} of {head}"
            )
            late.stop()
        finally:
            stuck.close()
    target.assert_unharmed(own_topics=(topic,))


def test_bytes_sent_up_an_open_stream_are_not_buffered_and_the_stream_lives(
    target: Target,
) -> None:
    """32 MiB of requests sent up an open stream: nothing may follow a stream's request,
    so the server stops reading after a bounded amount (the lane at ``MAX_PENDING``,
    hypercorn's h11 at its first pipelined request), buffers none of the rest, keeps
    delivering on the stream and lives."""
    topic = "hostile-upstream"
    with target.client() as http:
        http.delete(f"/v0/topics/{topic}")
        http.put(f"/v0/topics/{topic}", json={})
        sock = _open_stream(target, f"/v0/watch/{_watch(http, topic)}")
        reader = StreamReader(sock).start()
        try:
            assert reader.wait_for(lambda ev: any(e.event == "caught-up" for e in ev), 10.0)
            rss_before = target.rss_kib()
            garbage = b"GET /v0/health HTTP/1.1\r\nHost: t\r\n\r\n"
            garbage *= FLOOD_BYTES // len(garbage)
            sent = send_until_stalled(sock, garbage)
            assert sent < STOPPED_BY, f"the server read {sent} bytes up a stream"
            grown_kib = target.rss_kib() - rss_before
            assert grown_kib < 4 * 1024, f"server RSS grew {grown_kib} KiB"
            head, _ = _write(http, topic, [{"data": i} for i in range(3)])
            assert reader.wait_for(_reached(topic, head), DELIVERY_TIMEOUT_S) or reader.closed
        finally:
            reader.stop()
    target.assert_unharmed(own_topics=(topic,))


def test_a_stream_reset_mid_delivery_costs_that_stream_alone(target: Target) -> None:
    """One of four watchers resets while writes flow: the other three get every seq, and
    a new stream on the reset watch resumes with nothing silently skipped."""
    topic = "hostile-reset"
    with target.client() as http:
        http.delete(f"/v0/topics/{topic}")
        http.put(f"/v0/topics/{topic}", json={})
        wids = [_watch(http, topic) for _ in range(4)]
        readers = [StreamReader(_open_stream(target, f"/v0/watch/{w}")).start() for w in wids]
        try:
            for reader in readers:
                assert reader.wait_for(lambda ev: any(e.event == "caught-up" for e in ev), 10.0)
            head = 0
            for i in range(300):
                if i == 100:
                    readers[3].reset()
                head, _ = _write(http, topic, [{"data": "y" * 200} for _ in range(5)])
            for reader in readers[:3]:
                assert reader.wait_for(_reached(topic, head), DELIVERY_TIMEOUT_S)
            # The session's cursor is what the kernel took, which the client may not have
            # read; its Last-Event-ID rewinds to what it did read (WATCH.md "Resume
            # order"), so the resumed stream starts exactly after that.
            got_before_reset = _covered_to(readers[3].events, topic)
            resumed_sock = _open_stream(
                target, f"/v0/watch/{wids[3]}", last_event_id=readers[3].last_id()
            )
            resumed = StreamReader(resumed_sock).start()
            assert resumed.wait_for(_reached(topic, head), DELIVERY_TIMEOUT_S)
            resumed.stop()
            first = _first_seq(resumed.events, topic)
            assert first == got_before_reset + 1, (
                f"resumed at {first} after a stream that had read to {got_before_reset}"
            )
        finally:
            for reader in readers:
                reader.stop()
    target.assert_unharmed(own_topics=(topic,))


def _queue_counts(
    http: httpx.Client, topic: str, done: Callable[[dict[str, Any]], bool], timeout_s: float = 10.0
) -> dict[str, Any]:
    """The queue's counts once ``done`` holds for them (the server notices a reset or an
    expiry a moment after the client acts), or the last ones seen at the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        counts: dict[str, Any] = http.get(f"/v0/topics/{topic}").json()["queue"]
        if done(counts) or time.monotonic() > deadline:
            return counts
        time.sleep(0.02)


def test_a_work_consumer_that_never_reads_loses_no_job(target: Target) -> None:
    """A ``/work`` consumer with a tiny receive buffer takes leases and never reads them:
    they expire and another worker gets every job; its reset releases what it still
    holds."""
    topic = "hostile-work"
    jobs = 300
    with target.client() as http:
        http.delete(f"/v0/topics/{topic}")
        r = http.put(f"/v0/topics/{topic}", json={"type": "queue", "lease_ms": 500})
        assert r.status_code in (200, 201), r.text
        stuck = _open_stream(target, f"/v0/topics/{topic}/work?node=stuck&max=50", rcvbuf=4096)
        try:
            for start in range(0, jobs, 50):
                _write(http, topic, [{"data": "z" * 500} for _ in range(start, start + 50)])
            held = http.get(f"/v0/topics/{topic}").json()["queue"]["in_flight"]
            assert held == 50, f"the stuck consumer holds {held} leases, not its max of 50"
            acked: set[int] = set()
            deadline = time.monotonic() + DELIVERY_TIMEOUT_S
            while len(acked) < jobs and time.monotonic() < deadline:
                claim = http.post(f"/v0/topics/{topic}/claim", json={"node": "good", "max": 100})
                assert claim.status_code == 200, claim.text
                claimed = claim.json()["claimed"]
                if not claimed:
                    time.sleep(0.05)
                    continue
                ack = {
                    "node": "good",
                    "seqs": [j["$seq"] for j in claimed],
                    "lease_ids": [j["lease_id"] for j in claimed],
                }
                assert http.post(f"/v0/topics/{topic}/ack", json=ack).status_code == 200
                acked.update(j["$seq"] for j in claimed)
            assert len(acked) == jobs, f"{jobs - len(acked)} jobs never reached the good worker"
        finally:
            reset(stuck)
        counts = _queue_counts(http, topic, lambda c: c["ready"] == c["in_flight"] == 0)
        assert (counts["ready"], counts["in_flight"]) == (0, 0), counts
    target.assert_unharmed(own_topics=(topic,))


def _open_ws_subscriber(target: Target, topic: str, rcvbuf: int) -> socket.socket:
    """A ``/v0/ws`` connection (``rcvbuf``: see ``connect``) subscribed at the tail of
    ``topic``; read up to the ``subscribed`` answer, and no further on purpose."""
    assert target.server is not None
    sock, client = open_ws(target.server, rcvbuf=rcvbuf)
    command = json.dumps({"op": "subscribe", "topic": topic, "tail": True})
    sock.sendall(client.send(wsproto.events.TextMessage(command)))
    subscribed = False
    while not subscribed:
        data = sock.recv(4096)
        assert data, "closed before the subscription was answered"
        client.receive_data(data)
        for event in client.events():
            assert isinstance(event, wsproto.events.TextMessage), event
            op = json.loads(event.data)["op"]
            # ``caught_up`` may come in the same read as ``subscribed``
            assert op == "subscribed" or (subscribed and op == "caught_up"), event.data
            subscribed = True
    return sock


def test_a_websocket_subscriber_that_never_reads_costs_nothing_but_its_own_socket(
    target: Target,
) -> None:
    """The WebSocket twin of the stuck watcher: subscribed, then never reads while the
    topic takes ~10 MB. Writes are answered promptly, an SSE watcher beside it gets every
    seq, and the server does not buffer the subscriber's share."""
    topic = "hostile-ws-slow"
    with target.client() as http:
        http.delete(f"/v0/topics/{topic}")
        assert http.put(f"/v0/topics/{topic}", json={"cap_records": 500}).status_code in (200, 201)
        stuck = _open_ws_subscriber(target, topic, rcvbuf=4096)
        try:
            _flood_past_a_stuck_client(target, http, topic)
        finally:
            reset(stuck)
    target.assert_unharmed(own_topics=(topic,))


def test_a_work_consumer_reset_mid_batch_releases_its_leases_at_once(target: Target) -> None:
    """A ``/work`` consumer resets while a batch larger than its socket takes is still
    being written: every lease it held comes back at once (release on disconnect), not
    at the end of its ten-minute lease."""
    topic = "hostile-work-reset"
    with target.client() as http:
        http.delete(f"/v0/topics/{topic}")
        r = http.put(f"/v0/topics/{topic}", json={"type": "queue", "lease_ms": 600_000})
        assert r.status_code in (200, 201), r.text
        _write(http, topic, [{"data": "j" * 8000} for _ in range(100)])
        stuck = _open_stream(target, f"/v0/topics/{topic}/work?node=stuck&max=100", rcvbuf=4096)
        counts = _queue_counts(http, topic, lambda c: c["in_flight"] == 100)
        assert counts["in_flight"] == 100, counts
        stuck.recv(1000)  # a little of the ~800 KB batch, then the reset
        reset(stuck)
        counts = _queue_counts(http, topic, lambda c: c["in_flight"] == 0)
        assert (counts["in_flight"], counts["ready"]) == (0, 100), counts
        claim = http.post(f"/v0/topics/{topic}/claim", json={"node": "good", "max": 100})
        assert len(claim.json()["claimed"]) == 100, claim.text
    target.assert_unharmed(own_topics=(topic,))
