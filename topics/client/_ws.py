"""A client of the JSON WebSocket data plane (``/v0/ws``, contract §7.x).

Built on wsproto, the sans-IO WebSocket library the server already depends on: no new
dependency, and the same protocol object drives a blocking socket (:class:`WebSocket`)
and an anyio stream (:class:`AsyncWebSocket`, trio or asyncio).

Rules:
1. Commands that answer (``subscribe``, ``unsubscribe``, ``publish``, ``ping``) carry a
   fresh ``request_id`` and wait for the frame that echoes it; frames that arrive
   meanwhile (records of live subscriptions) are queued, in order, for iteration.
2. Iterating yields the watch values: :class:`~topics.client.WatchRecord` per record,
   :class:`~topics.watch_types.TombstoneEvent`, :class:`~topics.watch_types.CaughtUpEvent`,
   :class:`~topics.watch_types.TopicDeletedEvent`; ``subscribe``/``unsubscribe`` return
   :class:`~topics.client.Subscribed`/:class:`~topics.client.Unsubscribed` (typed, and
   still read-only mappings of the frame). An ``error`` frame that answers no
   command (``shutting_down``, ``slow_consumer``) is raised from the iterator.
3. ``publish`` sends records like ``write()``: ``data``/``meta`` bytes spliced verbatim,
   one idempotency key per call unless told otherwise; it returns a
   :class:`~topics.WriteResult`.
4. An ``error`` answer raises the :mod:`topics.errors` class of its code, with the
   command's ``request_id`` as ``exc.request_id``. A refused upgrade raises the class of
   the HTTP error envelope.
"""

from __future__ import annotations

import collections
import itertools
import socket
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.abc
import ujson
import wsproto
from wsproto import events as wse
from wsproto.connection import ConnectionState

from topics.cursor_types import CursorInfo
from topics.errors import error_class_for_code
from topics.types import WriteResult
from topics.watch_types import (
    BacklogExceededEvent,
    CaughtUpEvent,
    EndReachedEvent,
    TombstoneEvent,
    TopicAddedEvent,
    TopicDeletedEvent,
)
from topics.wire.options import WRITE_OPTIONS

from . import _protocol as p
from ._options import write_options
from ._transport import ClientConnectionError, Settings, error_from_response
from ._watch_state import WatchEventValue, WatchRecord, data_spans, record_of, refused_event
from ._ws_types import Subscribed, Unsubscribed

__all__ = ["AsyncWebSocket", "WebSocket"]

PATH = "/v0/ws"
# Where _frame keeps a record frame's data spans (no server member starts with "_").
_SPANS = "_data_json"
_ANSWERS = frozenset({"subscribed", "unsubscribed", "ack", "pong", "committed", "error"})
#: The ``write()`` options a publish takes (topics/wire/options.py).
_PUBLISH_OPTIONS = WRITE_OPTIONS.client_names()


class WsProtocol:
    """The sans-IO half: wsproto plus frame decoding and the pending-answer bookkeeping."""

    def __init__(self, settings: Settings) -> None:
        parts = urlsplit(settings.base_url())
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.target = parts.path.rstrip("/") + PATH
        self.conn = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
        self.queue: collections.deque[dict[str, Any]] = collections.deque()
        self.answers: dict[str, dict[str, Any]] = {}
        self.accepted = False
        self.closed = False
        self._text: list[str] = []
        self._reject: tuple[int, list[tuple[bytes, bytes]], bytearray] | None = None
        self._ids = itertools.count(1)
        headers = [(b"user-agent", settings.user_agent.encode())]
        if settings.api_key:
            headers.append((b"authorization", f"Bearer {settings.api_key}".encode()))
        self.handshake = self.conn.send(
            wse.Request(host=f"{self.host}:{self.port}", target=self.target, extra_headers=headers)
        )

    def next_id(self, op: str) -> str:
        return f"{op[0]}{next(self._ids)}"

    def message(self, text: str) -> bytes:
        return self.conn.send(wse.TextMessage(data=text))

    def close_bytes(self) -> bytes:
        if self.closed or self.conn.state is not ConnectionState.OPEN:
            return b""
        self.closed = True
        return self.conn.send(wse.CloseConnection(code=1000))

    def receive(self, data: bytes) -> bytes:
        """Feed bytes from the socket; return bytes to send back (pongs, close replies)."""
        self.conn.receive_data(data or None)
        out = b""
        for event in self.conn.events():
            if isinstance(event, wse.AcceptConnection):
                self.accepted = True
            elif isinstance(event, wse.RejectConnection):
                self._reject = (event.status_code, list(event.headers), bytearray())
                if not event.has_body:
                    self._raise_reject()
            elif isinstance(event, wse.RejectData):
                assert self._reject is not None
                self._reject[2].extend(event.data)
                if event.body_finished:
                    self._raise_reject()
            elif isinstance(event, wse.TextMessage):
                self._text.append(event.data)
                if event.message_finished:
                    self._frame("".join(self._text))
                    self._text = []
            elif isinstance(event, wse.Ping):
                out += self.conn.send(event.response())
            elif isinstance(event, wse.CloseConnection):
                self.closed = True
                if self.conn.state is ConnectionState.REMOTE_CLOSING:
                    out += self.conn.send(event.response())
        if not data:
            self.closed = True
        return out

    def _raise_reject(self) -> None:
        assert self._reject is not None
        status, headers, body = self._reject
        hdrs = {k.decode().lower(): v.decode("latin-1") for k, v in headers}
        raise error_from_response(status, hdrs, bytes(body))

    def _frame(self, text: str) -> None:
        try:
            frame = ujson.loads(text)
        except ValueError:
            return
        if not isinstance(frame, dict):
            return
        if frame.get("op") == "record":  # the records' data as sent (WatchRecord.data_json)
            frame[_SPANS] = data_spans(text, len(frame.get("records") or ()))
        rid = frame.get("request_id")
        if frame.get("op") in _ANSWERS and isinstance(rid, str):
            self.answers[rid] = frame
        else:
            self.queue.append(frame)


def answer(frame: Mapping[str, Any]) -> dict[str, Any]:
    """The frame itself, or raise its error (rule 4)."""
    if frame.get("op") != "error":
        return dict(frame)
    code = str(frame.get("code", "internal"))
    exc = error_class_for_code(code)(
        str(frame.get("message", code)), detail=frame.get("detail") or None
    )
    if exc.code != code:
        exc.__dict__["code"] = code
    exc.__dict__["request_id"] = frame.get("request_id")
    raise exc


def events_of(frame: Mapping[str, Any]) -> list[WatchEventValue]:
    """The watch values of one server frame (rule 2)."""
    op, topic = frame.get("op"), frame.get("topic")
    if op == "error":
        answer(frame)
    if not isinstance(topic, str):
        return []
    if op == "record":
        spans = frame.get(_SPANS)
        return [
            WatchRecord(topic, record_of(r), spans[i] if spans and "$seq" in r else None)
            for i, r in enumerate(frame.get("records") or ())
        ]
    head = int(frame.get("head_seq", 0))
    if op == "caught_up":
        return [CaughtUpEvent(topic, head, head)]
    if op == "tombstone":
        tomb = p.tombstone(frame)
        return [TombstoneEvent(topic, tomb, tomb.gap_to)]
    if op == "topic_deleted":
        return [TopicDeletedEvent(topic, head, head)]
    if op == "end_reached":
        return [EndReachedEvent(topic, head, int(frame.get("next_from_seq", 0)))]
    if op == "topic_added":
        start = int(frame.get("from_seq", 0))
        return [TopicAddedEvent(topic, str(frame.get("prefix", "")), head, start)]
    if op == "join_refused":
        return [refused_event(topic, frame)]
    if op == "backlog_exceeded":
        start, backlog = int(frame.get("from_seq", 0)), int(frame.get("backlog", 0))
        limit = int(frame.get("max_backlog", 0))
        return [BacklogExceededEvent(topic, start, head, backlog, limit, head)]
    return []


def subscribe_message(
    rid: str, topics: str | Sequence[str] | Mapping[str, Any], options: Mapping[str, Any]
) -> str:
    # Records carry what was written, as every read of the Python API does (the
    # frame's own default is no tags); include_tags=False in ``options`` says otherwise.
    msg: dict[str, Any] = {"op": "subscribe", "request_id": rid, "include_tags": True}
    if isinstance(topics, str):
        msg["topic"] = topics
    elif isinstance(topics, Mapping):
        msg["topics"] = {
            t: ({"from_seq": s} if isinstance(s, int) else dict(s)) for t, s in topics.items()
        }
    else:
        msg["topics"] = {t: {} for t in topics}
    if not msg.get("topics", True) and options.get("topic_prefix") is not None:
        del msg["topics"]  # a prefix alone: no topics named
    msg.update({k: v for k, v in options.items() if v is not None})
    return p.dumps(msg).decode()


def unsubscribe_message(
    rid: str, topics: str | Sequence[str], topic_prefix: str | Sequence[str] | None = None
) -> str:
    msg: dict[str, Any] = {"op": "unsubscribe", "request_id": rid}
    if topic_prefix is not None:  # the prefixes and every topic they brought in
        msg["topic_prefix"] = (
            [topic_prefix] if isinstance(topic_prefix, str) else list(topic_prefix)
        )
    elif isinstance(topics, str):
        msg["topic"] = topics
    else:
        msg["topics"] = list(topics)
    return p.dumps(msg).decode()


def publish_message(
    rid: str, topic: str, records: Sequence[Mapping[str, Any]], options: Mapping[str, object]
) -> str:
    body = p.write_body(records, options)  # rule 3: spliced, never re-encoded
    head = b'{"op":"publish","request_id":' + p.dumps(rid) + b',"topic":' + p.dumps(topic) + b","
    return (head + body[1:]).decode("utf-8")


def commit_message(rid: str, topic: str, cursor: str, seq: int, expect_seq: int | None) -> str:
    msg: dict[str, Any] = {"op": "commit", "request_id": rid, "topic": topic, "cursor": cursor}
    msg["seq"] = seq
    if expect_seq is not None:
        msg["expect_seq"] = expect_seq
    return p.dumps(msg).decode()


def cursor_info(frame: Mapping[str, Any]) -> CursorInfo:
    return p.cursor_info(frame)


def write_result(frame: Mapping[str, Any]) -> WriteResult:
    seqs = frame.get("seqs")
    last = frame.get("last_seq", 0)
    return WriteResult(
        topic=frame["topic"],
        first_seq=frame.get("first_seq", last),
        last_seq=last,
        seqs=list(seqs) if seqs is not None else None,
        head_seq=frame.get("head_seq", last),
        count=frame.get("count", 0),
        created=bool(frame.get("created", False)),
        deduped=bool(frame.get("deduped", False)),
        fsync_ms=float((frame.get("performance") or {}).get("fsync_ms", 0.0)),
        dedupe=frame.get("dedupe"),
    )


def publish_options(settings: Settings, options: Mapping[str, Any]) -> dict[str, object]:
    """The ``write()`` options of a publish (unknown names are a TypeError, as there)."""
    unknown = set(options) - _PUBLISH_OPTIONS
    if unknown:
        raise TypeError(f"unknown publish options: {', '.join(sorted(unknown))}")
    args: dict[str, Any] = {name: None for name in ("node", "idempotency_key", "create", "config")}
    args.update(return_seqs=True, disable_backpressure=False)
    args.update(options)
    return write_options(settings, **args)


class WebSocket:
    """A blocking ``/v0/ws`` connection (``client.ws()``); close it or use ``with``."""

    def __init__(self, proto: WsProtocol, sock: socket.socket, settings: Settings) -> None:
        self._proto = proto
        self._sock = sock
        self._settings = settings

    @classmethod
    def connect(cls, settings: Settings) -> WebSocket:
        proto = WsProtocol(settings)
        try:
            sock = socket.create_connection((proto.host, proto.port), timeout=settings.timeout_s)
        except OSError as exc:
            raise ClientConnectionError(
                f"could not connect to {settings.url}: {exc}", sent=False
            ) from None
        ws = cls(proto, sock, settings)
        try:
            sock.sendall(proto.handshake)
            while not proto.accepted:
                ws._pump()
        except BaseException:
            sock.close()
            raise
        return ws

    def _pump(self, timeout_s: float | None = None) -> None:
        if self._proto.closed:
            raise ClientConnectionError("the WebSocket is closed", sent=True)
        self._sock.settimeout(timeout_s if timeout_s is not None else self._settings.timeout_s)
        try:
            data = self._sock.recv(65536)
        except OSError as exc:
            raise ClientConnectionError(f"WebSocket read failed: {exc}", sent=True) from None
        reply = self._proto.receive(data)
        if reply:
            self._sock.sendall(reply)

    def _request(self, rid: str, text: str) -> dict[str, Any]:
        self._sock.sendall(self._proto.message(text))
        while rid not in self._proto.answers:
            self._pump()
        return answer(self._proto.answers.pop(rid))

    def subscribe(
        self, topics: str | Sequence[str] | Mapping[str, Any], **options: Any
    ) -> Subscribed:
        """Subscribe (``from_seq``/``tail`` for one topic, or a ``topics`` map of starts;
        ``node``, ``limit``, ``include_*`` (tags included unless ``include_tags=False``),
        ``topic_prefix`` (topics may then be empty), ``max_backlog``, ``on_backlog``);
        returns the typed ``subscribed`` answer (still a mapping of the frame)."""
        rid = self._proto.next_id("subscribe")
        return Subscribed.from_frame(self._request(rid, subscribe_message(rid, topics, options)))

    def unsubscribe(
        self, topics: str | Sequence[str] = (), *, topic_prefix: str | Sequence[str] | None = None
    ) -> Unsubscribed:
        """Unsubscribe topics, or (``topic_prefix``) prefixes and the topics they cover."""
        rid = self._proto.next_id("unsubscribe")
        return Unsubscribed.from_frame(
            self._request(rid, unsubscribe_message(rid, topics, topic_prefix))
        )

    def publish(
        self, topic: str, records: Sequence[Mapping[str, Any]], **options: Any
    ) -> WriteResult:
        """Append records (the options of :meth:`Client.write`); waits for the ack."""
        rid = self._proto.next_id("publish")
        opts = publish_options(self._settings, options)
        return write_result(self._request(rid, publish_message(rid, topic, records, opts)))

    def ping(self) -> None:
        rid = self._proto.next_id("ping")
        self._request(rid, p.dumps({"op": "ping", "request_id": rid}).decode())

    def commit(
        self, topic: str, cursor: str, seq: int, *, expect_seq: int | None = None
    ) -> CursorInfo:
        """Commit ``seq`` to a named cursor over this connection (``Client.put_cursor``)."""
        rid = self._proto.next_id("commit")
        return cursor_info(self._request(rid, commit_message(rid, topic, cursor, seq, expect_seq)))

    def __iter__(self) -> Iterator[WatchEventValue]:
        while True:
            while not self._proto.queue:
                if self._proto.closed:
                    return
                self._pump(timeout_s=None)
            yield from events_of(self._proto.queue.popleft())

    def receive(self, timeout_s: float | None = None) -> list[WatchEventValue]:
        """The values of the next server frame (waits up to ``timeout_s``)."""
        while not self._proto.queue:
            self._pump(timeout_s)
        return events_of(self._proto.queue.popleft())

    def close(self) -> None:
        try:
            data = self._proto.close_bytes()
            if data:
                self._sock.sendall(data)
        except OSError:
            pass
        finally:
            self._sock.close()

    def __enter__(self) -> WebSocket:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncWebSocket:
    """An async ``/v0/ws`` connection (``await client.ws()``); trio or asyncio."""

    def __init__(self, proto: WsProtocol, stream: anyio.abc.ByteStream, settings: Settings) -> None:
        self._proto = proto
        self._stream = stream
        self._settings = settings
        self._pending: collections.deque[WatchEventValue] = collections.deque()

    @classmethod
    async def connect(cls, settings: Settings) -> AsyncWebSocket:
        proto = WsProtocol(settings)
        try:
            with anyio.fail_after(settings.timeout_s):
                stream = await anyio.connect_tcp(proto.host, proto.port)
        except (OSError, TimeoutError) as exc:
            raise ClientConnectionError(
                f"could not connect to {settings.url}: {exc}", sent=False
            ) from None
        ws = cls(proto, stream, settings)
        try:
            await stream.send(proto.handshake)
            while not proto.accepted:
                await ws._pump()
        except BaseException:
            await stream.aclose()
            raise
        return ws

    async def _pump(self) -> None:
        if self._proto.closed:
            raise ClientConnectionError("the WebSocket is closed", sent=True)
        try:
            data = await self._stream.receive(65536)
        except anyio.EndOfStream:
            data = b""
        except (OSError, anyio.BrokenResourceError) as exc:
            raise ClientConnectionError(f"WebSocket read failed: {exc}", sent=True) from None
        reply = self._proto.receive(data)
        if reply:
            await self._stream.send(reply)

    async def _request(self, rid: str, text: str) -> dict[str, Any]:
        await self._stream.send(self._proto.message(text))
        with anyio.fail_after(self._settings.timeout_s):
            while rid not in self._proto.answers:
                await self._pump()
        return answer(self._proto.answers.pop(rid))

    async def subscribe(
        self, topics: str | Sequence[str] | Mapping[str, Any], **options: Any
    ) -> Subscribed:
        rid = self._proto.next_id("subscribe")
        frame = await self._request(rid, subscribe_message(rid, topics, options))
        return Subscribed.from_frame(frame)

    async def unsubscribe(
        self, topics: str | Sequence[str] = (), *, topic_prefix: str | Sequence[str] | None = None
    ) -> Unsubscribed:
        rid = self._proto.next_id("unsubscribe")
        frame = await self._request(rid, unsubscribe_message(rid, topics, topic_prefix))
        return Unsubscribed.from_frame(frame)

    async def publish(
        self, topic: str, records: Sequence[Mapping[str, Any]], **options: Any
    ) -> WriteResult:
        rid = self._proto.next_id("publish")
        opts = publish_options(self._settings, options)
        return write_result(await self._request(rid, publish_message(rid, topic, records, opts)))

    async def ping(self) -> None:
        rid = self._proto.next_id("ping")
        await self._request(rid, p.dumps({"op": "ping", "request_id": rid}).decode())

    async def commit(
        self, topic: str, cursor: str, seq: int, *, expect_seq: int | None = None
    ) -> CursorInfo:
        """Commit ``seq`` to a named cursor over this connection (``Client.put_cursor``)."""
        rid = self._proto.next_id("commit")
        msg = commit_message(rid, topic, cursor, seq, expect_seq)
        return cursor_info(await self._request(rid, msg))

    def __aiter__(self) -> AsyncWebSocket:
        return self

    async def __anext__(self) -> WatchEventValue:
        while not self._pending:
            while not self._proto.queue:
                if self._proto.closed:
                    raise StopAsyncIteration
                await self._pump()
            self._pending.extend(events_of(self._proto.queue.popleft()))
        return self._pending.popleft()

    async def aclose(self) -> None:
        try:
            data = self._proto.close_bytes()
            if data:
                await self._stream.send(data)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            await self._stream.aclose()

    async def __aenter__(self) -> AsyncWebSocket:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
