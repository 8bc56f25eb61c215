"""The fast lane: plain HTTP/1.1 requests to the hot routes (POSTs and the SSE stream
GETs), served without hypercorn's per-request machinery, in front of hypercorn on the
same listening socket.

Why: hypercorn's HTTP/1.1 path costs ~450 us of CPU per request on the project machine
before the app runs a line (h11 parsing and serialising, a task spawned per request, an
ASGI memory channel, an idle-timeout task restarted through a nursery twice per request,
head and body sent as two shielded socket writes). That is the whole budget of a queue ack
or a one-record write. Every connection therefore starts here; each request this module
accepts (rule 2) is served in the connection's own task by calling the *same* ASGI app
(the dispatcher in ``app.py``: auth, limits, errors, handlers are untouched) with a
one-shot ``receive`` and a ``send`` that writes head and body in one socket write.
docs/ARCHITECTURE.md ("Where the HTTP frontend goes around its stack") has the numbers.

Rules:
1. The lane parses strictly and never answers a malformed request itself: anything it
   does not accept goes to hypercorn (rule 3), whose h11 parser gives the 4xx. Two
   exceptions go to the app instead, whose dispatcher refuses them (400, then close):
   framing two parsers could read differently (two Content-Lengths, or Content-Length
   beside Transfer-Encoding), which h11 would resolve one way and answer unreliably, and
   a case-variant method, which hypercorn would upper-case and run.
2. It accepts only: ``POST`` or ``GET`` + ``HTTP/1.1``; a target of printable ASCII
   without ``%`` (no percent-decoding to get wrong) naming a route the app serves on its
   fast path (``accepts``: write, diff, watch create, claim/ack/nack/extend, and the
   GET streams of a watch and of a queue's ``/work``; a GET carries no body);
   token header names, no obs-fold, no control bytes in values, exactly one ``Host``; at
   most one ``Content-Length`` of at most ``max_body`` bytes (the app's own limit, at most
   :data:`MAX_BODY`; none means 0); no
   ``Transfer-Encoding``, ``Expect`` or ``Upgrade``; a head of at most :data:`MAX_HEAD`.
3. Hand-over: at the first request it does not accept, the connection becomes hypercorn's
   for the rest of its life, starting with the bytes the lane already read (so streams,
   WebSocket upgrades, HTTP/1.0, chunked bodies, GETs all run exactly as before, including
   the SSE direct-socket path of ``watch_routes``). A head that ends in a bare-LF blank
   line is handed over as soon as it is complete (h11 judges it), never waited on.
4. Keep-alive as hypercorn does it: ``keep_alive_timeout`` for the first byte of the next
   request, ``keep_alive_max_requests`` per connection, ``Connection: close`` honoured
   (from the client or from the app's answer); the last response says
   ``connection: close``. Deadlines hypercorn lacks: once a head's first byte is in, the
   whole head must arrive within ``head_timeout`` or the connection closes; the body is
   the dispatcher's to time (``TOPICS_HTTP_BODY_TIMEOUT_MS``, 408), and each read inside
   a request is bounded by ``read_timeout`` besides. A connection closed with input
   still unread (a refusal before its body) shuts its write side first and drains the
   input for a moment, or the close would send a reset that can destroy the answer.
5. Shutdown: connections waiting for a head (idle, or mid-head) close at once, a request
   in progress finishes and its connection then closes (``connection: close``), within
   hypercorn's graceful timeout.
6. The app sees a normal ASGI HTTP scope as soon as the head is in: nothing of the body
   is read before the app asks for it, so the dispatcher authenticates (and applies the
   per-key limits) on the head and an unauthenticated client never makes the server
   buffer its body. The first ``receive`` reads and returns the whole body; an answer
   given while it is unread closes the connection. A later ``receive`` (a stream's or a
   long-poll diff's disconnect watch) reads the socket and reports ``http.disconnect`` at
   EOF, keeping any bytes of a pipelined next request. A send to a vanished client is
   dropped (as hypercorn does); the connection then closes.
   The scope's extensions carry what the lane already knows: ``accepts``' verdict
   (``ROUTED``) and, when the whole body came with the head, ``BODY_BUFFERED`` (its read
   cannot wait, so the dispatcher sets no deadline around it).
   A streamed body is chunked; once its head is out, :meth:`LaneConnection.stream_lock`
   lets a stream write whole chunks to the socket itself (watch rule 7), and every write
   of the lane's own then takes the same lock, so the two never interleave.
7. ``TOPICS_HTTP_LANE=0`` serves everything through hypercorn (to measure, or to rule the
   lane out).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from http import HTTPStatus
from math import inf
from typing import Any
from wsgiref.handlers import format_date_time

import trio

from .asgi import Message
from .connection import CONNECTION_KEY
from .requests import BODY_BUFFERED, FOLDED_HEADERS, ROUTED

__all__ = ["HEAD_TIMEOUT_S", "MAX_BODY", "MAX_HEAD", "Lane", "LaneConnection", "parse_head"]

log = logging.getLogger("topics.http.lane")

AsgiApp = Callable[
    [
        MutableMapping[str, Any],
        Callable[[], Awaitable[Message]],
        Callable[[Message], Awaitable[None]],
    ],
    Awaitable[None],
]

MAX_RECV = 65536
#: h11's default limit for an incomplete head; a longer head goes to hypercorn (431).
MAX_HEAD = 16 * 1024
#: Larger bodies go to hypercorn, which streams them into the app in chunks.
MAX_BODY = 1 << 20
#: Bytes of a pipelined next request the lane reads while a long poll waits for EOF.
MAX_PENDING = 64 * 1024
#: Default deadline for a whole request head, from its first byte (rule 4).
HEAD_TIMEOUT_S = 10.0
#: How long, and how much, a refused connection's unread input is drained before the
#: close, so that the close does not reset the answer away (``_linger``).
LINGER_S = 1.0
LINGER_BYTES = 256 * 1024

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET = re.compile(rb"/[!-$&-~]*")  # printable ASCII, no '%', no space
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # controls other than HTAB
_REFUSED = frozenset((b"expect", b"upgrade"))

#: Every answer the lane writes says who served it (docs/HTTP.md, "Who served a request");
#: hypercorn's say ``hypercorn`` (``hypercorn_server`` rule 2). One constant, no lookup.
_SERVED_BY_LANE = b"x-topics-path: lane\r\n"

_STATUS_LINES = {s.value: b"HTTP/1.1 %d %s\r\n" % (s.value, s.phrase.encode()) for s in HTTPStatus}

Head = tuple[str, str, bytes, bytes, list[tuple[bytes, bytes]], int, bool]

_METHODS = {b"POST": "POST", b"GET": "GET"}
_SERVED = frozenset(_METHODS.values())


def parse_head(head: bytes, max_body: int = MAX_BODY) -> Head | None:
    """``(method, path, raw_path, query, headers, content_length, close)`` of a request
    head (without its closing blank line) when the lane serves it by rule 2, else None.

    ``content_length`` -1 marks framing two parsers could read differently (two
    Content-Lengths, or one beside Transfer-Encoding), -2 an obs-folded header line: the
    lane reads no body and passes the head to the app, whose dispatcher refuses it (400,
    connection closed), rather than handing it to h11, which picks one reading (or
    unfolds the line) and may lose the answer (rule 1).

    Kept whole: the lane's per-request parser, one pass over the head's lines.
    """
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    method = _METHODS.get(parts[0])
    if method is None and parts[0].upper() in _METHODS:
        # ``post``: hypercorn would upper-case it and run it as POST; the app refuses it.
        method = parts[0].decode("ascii")
    if len(parts) != 3 or method is None or parts[2] != b"HTTP/1.1":
        return None
    target = parts[1]
    if _TARGET.fullmatch(target) is None:
        return None
    raw_path, _, query = target.partition(b"?")
    headers: list[tuple[bytes, bytes]] = []
    length = -1
    hosts = 0
    close = False
    conflict = chunked = folded = False
    for line in lines[1:]:
        if line[:1] in (b" ", b"\t") and headers:  # obs-fold (RFC 9112 §5.2)
            folded = True
            continue
        name, colon, value = line.partition(b":")
        if not colon or _TOKEN.fullmatch(name) is None:
            return None
        value = value.strip(b" \t")
        if _BAD_VALUE.search(value) is not None:
            return None
        name = name.lower()
        if name == b"content-length":
            if not value.isdigit() or len(value) > 8:
                return None
            conflict = conflict or length >= 0
            length = int(value)
        elif name == b"host":
            hosts += 1
        elif name == b"transfer-encoding":
            chunked = True
        elif name in _REFUSED:
            return None
        elif name == b"connection":
            tokens = {token.strip().lower() for token in value.split(b",")}
            if b"upgrade" in tokens:
                return None
            close = close or b"close" in tokens
        headers.append((name, value))
    if hosts != 1:
        return None
    if folded:
        return method, raw_path.decode("ascii"), raw_path, query, headers, -2, True
    if conflict or (chunked and length >= 0):
        return method, raw_path.decode("ascii"), raw_path, query, headers, -1, True
    if chunked or length > (max_body if method.upper() == "POST" else 0):
        return None
    return method, raw_path.decode("ascii"), raw_path, query, headers, max(length, 0), close


class Lane:
    """What every lane connection of one server shares (rules 4 and 5).

    Args:
        app: the ASGI app (called directly, without hypercorn's wrapper).
        accepts: ``(method, path) -> verdict``: a true verdict when the app serves the
            request on its fast path (rule 2). The verdict is handed to the app as the
            scope's ``ROUTED`` extension, so an app that matched its route table to answer
            (``serve.lane_routes``: ``(route, param)``) does not match again.
        keep_alive_timeout, read_timeout, max_requests: hypercorn's settings of the same
            names (``keep_alive_max_requests`` for the last).
        head_timeout: seconds from a head's first byte to its end (rule 4).
        root_path: the ASGI ``root_path``.
        lifespan_state: the lifespan state; each request gets a copy (as with hypercorn).
    """

    def __init__(
        self,
        app: AsgiApp,
        accepts: Callable[[str, str], object],
        *,
        keep_alive_timeout: float,
        head_timeout: float = HEAD_TIMEOUT_S,
        read_timeout: float | None,
        max_requests: int,
        max_body: int = MAX_BODY,
        root_path: str = "",
        lifespan_state: dict[str, Any] | None = None,
    ) -> None:
        self.app = app
        self.accepts = accepts
        self.keep_alive_timeout = keep_alive_timeout
        self.head_timeout = head_timeout
        self.read_timeout = read_timeout or inf
        self.max_requests = max_requests
        self.max_body = min(max_body, MAX_BODY)
        self.root_path = root_path
        self.lifespan_state = lifespan_state if lifespan_state is not None else {}
        self.terminated = False
        #: The cancel scopes of connections waiting for a head (rule 5).
        self.idle_scopes: set[trio.CancelScope] = set()
        self._date = (0, b"")

    def terminate(self) -> None:
        """Rule 5: close idle connections now, the busy ones after their response."""
        self.terminated = True
        for scope in self.idle_scopes:
            scope.cancel()

    def date(self) -> bytes:
        now = int(time.time())
        if now != self._date[0]:
            self._date = (now, format_date_time(now).encode("ascii"))
        return self._date[1]


class LaneConnection:
    """One connection while it stays in the lane; ``run`` says how it left."""

    __slots__ = (
        "_body_pending",
        "_chunked",
        "_done",
        "_head_sent",
        "_headers",
        "_status",
        "_stream_lock",
        "buf",
        "client",
        "closing",
        "dead",
        "eof",
        "info",
        "lane",
        "server",
        "stream",
        "unread",
    )

    def __init__(self, lane: Lane, stream: trio.SocketStream, info: object = None) -> None:
        self.lane = lane
        self.stream = stream
        #: The connection guard's record (``connection.ConnectionInfo``), put in each
        #: request's ASGI scope (``connection.connection_of``) for the dispatcher.
        self.info = info
        sock = stream.socket
        try:
            self.client = _address(sock.getpeername())
            self.server = _address(sock.getsockname())
        except OSError:  # reset before we looked: the first read ends the connection
            self.client = self.server = None
        self.buf = b""
        self.eof = False
        self.dead = False
        self.closing = False
        #: Body bytes of the current request not yet read from the socket (rule 6).
        self.unread = 0
        self._reset(0)

    async def run(self) -> bytes | None:
        """Serve requests until the connection is over (None) or one is hypercorn's
        (returns the bytes read so far, from the start of that request; rule 3)."""
        lane = self.lane
        served = 0
        while True:
            end = await self._read_head()
            if end is None:
                return None
            if end < 0:
                return self.buf
            head = parse_head(self.buf[:end], lane.max_body)
            if head is None:
                return self.buf
            method, path, raw_path, query, headers, length, close = head
            # A case-variant method or conflicting framing goes to the app whatever the
            # route: its dispatcher refuses both before routing (rules 1-2).
            routed = None
            if method in _SERVED and length >= 0:
                routed = lane.accepts(method, path)
                if not routed:
                    return self.buf
            self.buf = self.buf[end + 4 :]
            served += 1
            self.closing = close or served >= lane.max_requests
            await self._serve(method, path, raw_path, query, headers, length, routed)
            if self.unread:  # answered without reading the body: no next request to find
                self.closing = True
            if self.closing or self.dead or lane.terminated:
                if (self.unread or self.buf) and not self.dead:
                    await self._linger()
                return None

    async def _linger(self) -> None:
        """Close after a refusal without losing the answer (rule 4). Closing a socket
        with unread bytes in its receive buffer sends a reset, which can destroy the
        answer before the client reads it; so the write side is shut first and what the
        client still sends is read and dropped, for at most ``LINGER_S`` and
        ``LINGER_BYTES``."""
        with trio.move_on_after(LINGER_S):
            try:
                await self.stream.send_eof()
                drained = 0
                while drained < LINGER_BYTES:
                    data = await self.stream.receive_some(MAX_RECV)
                    if not data:
                        break
                    drained += len(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    async def _read_head(self) -> int | None:
        """Read until ``buf`` holds a whole head; the index of its closing CRLFCRLF, -1
        when hypercorn must judge it (too long, or bare LF: rules 1 and 3), or None when
        the connection is over (EOF, a deadline, shutdown).

        One cancel scope serves the whole wait: its deadline is the keep-alive timeout
        until the head's first byte, then the head timeout (rule 4), and shutdown cancels
        it (rule 5). Not a scope per read: every request passes here, and a scope's entry
        and exit are most of the lane's own cost before the app runs."""
        lane = self.lane
        started = bool(self.buf)  # pipelined: the head began arriving with the last request
        timeout = lane.head_timeout if started else lane.keep_alive_timeout
        with trio.CancelScope(deadline=trio.current_time() + timeout) as waiting:
            lane.idle_scopes.add(waiting)
            if lane.terminated and not self.buf:
                return None
            try:
                while True:
                    end = self.buf.find(b"\r\n\r\n")
                    if end >= 0:
                        return end
                    if len(self.buf) > MAX_HEAD or b"\n\n" in self.buf:
                        return -1
                    if not await self._recv():
                        return None
                    if not started:
                        started = True
                        waiting.deadline = trio.current_time() + lane.head_timeout
            finally:
                lane.idle_scopes.discard(waiting)
        self.eof = True  # the deadline passed, or shutdown cancelled the wait (rule 5)
        return None

    async def _fill(self, deadline: float) -> bool:
        """Read more bytes into ``buf``; False at EOF, a broken socket or the deadline."""
        with trio.move_on_at(deadline) as scope:
            return await self._recv()
        assert scope.cancelled_caught
        self.eof = True
        return False

    async def _recv(self) -> bool:
        """One read into ``buf``; False at EOF or a broken socket (the caller's scope
        bounds the wait)."""
        try:
            data = await self.stream.receive_some(MAX_RECV)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def _read_deadline(self) -> float:
        return trio.current_time() + self.lane.read_timeout

    async def _serve(
        self,
        method: str,
        path: str,
        raw_path: bytes,
        query: bytes,
        headers: list[tuple[bytes, bytes]],
        length: int,
        routed: object,
    ) -> None:
        """Call the app for one request; ``length`` < 0 is a refused head (``parse_head``),
        ``routed`` what ``accepts`` said of it (handed to the app: rule 6)."""
        lane = self.lane
        extensions: dict[str, object]
        if length == -2:
            extensions = {FOLDED_HEADERS: True}
        else:
            extensions = {ROUTED: routed}
            if 0 < length <= len(self.buf):
                extensions[BODY_BUFFERED] = True
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.1"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": raw_path,
            "query_string": query,
            "root_path": lane.root_path,
            "headers": headers,
            "client": self.client,
            "server": self.server,
            "state": lane.lifespan_state.copy(),
            CONNECTION_KEY: self.info,
            "extensions": extensions,
        }
        self._reset(max(length, 0))
        try:
            await lane.app(scope, self._receive, self._send)
        except Exception:
            log.exception("the app failed on %s %s", method, path)
            self.closing = True
            if self._status is None:
                await self._write(self._head(500, [], 0))
            self._done = True
        if self._status is None:  # the app returned without answering
            self.closing = True
            if self.unread:  # the body never came (EOF or a deadline): nobody to tell
                self.dead = True
            await self._write(self._head(500, [], 0))
        elif not self._done:  # a streamed body the app never finished: cut it off
            self.closing = True

    def _reset(self, length: int) -> None:
        """The per-response state, for a request with a body of ``length`` bytes."""
        self.unread = length
        self._body_pending = True
        self._status: int | None = None
        self._headers: list[tuple[bytes, bytes]] = []
        self._chunked = False
        self._done = False
        self._head_sent = False
        self._stream_lock: trio.Lock | None = None

    async def _receive(self) -> Message:
        if self._body_pending:  # rule 6: the body is read now, when the app asks for it
            self._body_pending = False
            need = self.unread
            while len(self.buf) < need:
                if not await self._fill(self._read_deadline()):
                    return {"type": "http.disconnect"}
            body, self.buf = self.buf[:need], self.buf[need:]
            self.unread = 0
            return {"type": "http.request", "body": body, "more_body": False}
        # Only a handler that waits for the client to go away asks again (rule 6).
        lean = self.lane.read_timeout == inf
        while not self.eof:
            if len(self.buf) > MAX_PENDING:
                await trio.sleep_forever()
            if lean:
                # A stream waits here for its whole life: readiness first, then a read
                # that returns at once, keeps ~2 KiB of frames and a cancel scope fewer
                # per idle stream than parking inside ``receive_some``
                # (docs/BENCHMARKS_WATCH.md, "Issue 15, second round": the lean idle wait).
                await trio.lowlevel.wait_readable(self.stream.socket)
            await self._fill(self._read_deadline())
        return {"type": "http.disconnect"}

    async def _send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if self._status is not None:
                raise RuntimeError("http.response.start sent twice")
            self._status = int(message["status"])
            self._headers = list(message.get("headers") or ())
            return
        if kind != "http.response.body":
            raise RuntimeError(f"unexpected ASGI message {kind!r}")
        if self._status is None or self._done:
            raise RuntimeError("http.response.body outside a response")
        body = bytes(message.get("body") or b"")
        more = bool(message.get("more_body", False))
        data = b""
        if not self._head_sent:  # the first body message carries the head
            self._head_sent = True
            data = self._head(self._status, self._headers, None if more else len(body))
        if self._chunked:
            if body:
                data += b"%x\r\n%b\r\n" % (len(body), body)
            if not more:
                data += b"0\r\n\r\n"
        else:
            data += body
        if not more:
            self._done = True
        await self._write(data)

    def _head(self, status: int, headers: list[tuple[bytes, bytes]], length: int | None) -> bytes:
        """The response head; ``length`` None means a streamed body of unknown size."""
        parts = [_STATUS_LINES.get(status) or b"HTTP/1.1 %d \r\n" % status]
        has_length = False
        if self.unread:  # rule 6: an answer before the body was read ends the connection
            self.closing = True
        for name, value in headers:
            lowered = name.lower()
            if lowered == b"content-length":
                has_length = True
            elif lowered == b"connection":  # rule 4: the app may end the connection
                if b"close" in value.lower():
                    self.closing = True
                continue  # the lane writes the one connection header below
            parts.append(b"%b: %b\r\n" % (name, value))
        if not has_length:
            if length is None:
                self._chunked = True
                parts.append(b"transfer-encoding: chunked\r\n")
            else:
                parts.append(b"content-length: %d\r\n" % length)
        parts.append(_SERVED_BY_LANE)
        parts.append(b"date: %b\r\n" % self.lane.date())
        if self.closing or self.lane.terminated:
            self.closing = True
            parts.append(b"connection: close\r\n")
        parts.append(b"\r\n")
        return b"".join(parts)

    def stream_lock(self) -> trio.Lock | None:
        """Rule 6: the lock a stream takes to write whole chunks to ``stream`` itself, once
        this response's chunked head is out (None before, or for any other response)."""
        if not (self._head_sent and self._chunked) or self._done or self.dead:
            return None
        if self._stream_lock is None:
            self._stream_lock = trio.Lock()
        return self._stream_lock

    async def _write(self, data: bytes) -> None:
        if self.dead or not data:
            return
        try:
            lock = self._stream_lock
            if lock is None:
                await self.stream.send_all(data)
            else:
                async with lock:
                    await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.dead = True


def _address(addr: Any) -> tuple[str, int] | None:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return str(addr[0]), int(addr[1])
    return None
