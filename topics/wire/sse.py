"""Server-Sent Events framing for the watch stream (contract §7, the watch page): pure.

Values in, bytes out (the ``encode_*`` functions and the watch frame builders), and bytes
in, values out (:class:`SSEDecoder`, used by the tests and the Python client). No
sockets, no trio, no web framework (STYLE §4).

Rules:
1. A frame is optional ``id:`` and ``event:`` lines, one ``data:`` line per line of the
   payload, and a blank line. Every line ends in ``\\n``. An id or event name holding CR,
   LF (or, for ids, NUL) is a bug in the caller: ``ValueError``, never a split frame.
2. The heartbeat is exactly ``: hb`` (CONTRACT-NOTES 1): a comment, no ``id:``, so it never
   moves a client's Last-Event-ID. The decoder accepts ``: hb`` followed by anything.
3. ``retry: 2000`` opens every stream (a deliberate 2 s reconnect backoff).
4. The watch frames (``record``, ``tombstone``, ``caught-up``, ``topic-deleted``, ``error``
   and the two lifecycle events ``connection-established`` / ``connection-closing``) are
   built here, so a route never decides a frame's shape. A ``record`` frame is built in
   two parts: :func:`record_frame` (event + data, identical for every watcher that read
   the same batch, so it is encoded once and shared) and :func:`with_id` (the watcher's
   own composite cursor in front).
5. Record payloads are spliced in as the stored JSON bytes (``records_json``), never
   decoded and re-encoded. Our JSON never contains a raw newline (``json_bytes`` and the
   stored fragments are compact), so a payload is always one ``data:`` line.
6. The decoder follows the WHATWG "interpreting an event stream" algorithm: CRLF, CR or LF
   line ends (also split across chunks), a leading BOM, comments, ``retry`` with digits
   only, an ``id`` with NUL ignored, the last event id carried across events, and no
   dispatch for an event with no ``data`` lines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from topics.errors import TopicsError
from topics.watch_types import (
    FRAMED_EVENT_TYPES,
    FramedEvent,
    JoinRefusedEvent,
    RecordBatch,
    WatchEvent,
)

from .envelope import json_bytes
from .frame_shapes import SSE_CONNECTION_CLOSING, SSE_CONNECTION_ESTABLISHED, SSE_ERROR

__all__ = [
    "HEARTBEAT",
    "RETRY_MS",
    "Comment",
    "Event",
    "Retry",
    "SSEDecoder",
    "connection_closing_frame",
    "connection_established_frame",
    "encode_comment",
    "encode_event",
    "encode_heartbeat",
    "encode_retry",
    "error_frame",
    "event_frame",
    "frame_for_event",
    "record_frame",
    "join_refused_frame",
    "with_id",
]

#: The reconnect backoff every stream opens with (§7.5).
RETRY_MS = 2000
#: The heartbeat comment, exactly (CONTRACT-NOTES 1).
HEARTBEAT = b": hb\n\n"

_BAD_FIELD = frozenset("\r\n")


# -- encoding ---------------------------------------------------------------------------


def _field(name: str, value: str, *, nul_ok: bool = True) -> bytes:
    if _BAD_FIELD.intersection(value) or (not nul_ok and "\0" in value):
        raise ValueError(f"an SSE {name} cannot contain CR, LF or NUL: {value!r}")
    return f"{name}: {value}\n".encode()


def _data_lines(data: bytes) -> bytes:
    if b"\n" not in data and b"\r" not in data:
        return b"data: " + data + b"\n"
    lines = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    return b"".join(b"data: " + line + b"\n" for line in lines)


def encode_event(id: str | None, event: str | None, data: bytes | str) -> bytes:
    """One SSE frame: ``id:`` and ``event:`` when given, the data lines, a blank line.

    Args:
        id: the event id (the client's Last-Event-ID from then on); None for none.
        event: the event name; None for the default ``message``.
        data: the payload; each of its lines becomes a ``data:`` line.

    Raises:
        ValueError: ``id`` or ``event`` holds CR/LF (or ``id`` a NUL) (rule 1).

    Example::

        encode_event("eyJhIjoxfQ", "caught-up", b'{"topic":"a","head_seq":1}')
        # b'id: eyJhIjoxfQ\\nevent: caught-up\\ndata: {"topic":"a","head_seq":1}\\n\\n'
    """
    raw = data.encode() if isinstance(data, str) else data
    head = b""
    if id is not None:
        head += _field("id", id, nul_ok=False)
    if event is not None:
        head += _field("event", event)
    return head + _data_lines(raw) + b"\n"


def encode_comment(text: str = "") -> bytes:
    """A comment frame (``: text``); clients ignore it, proxies see traffic."""
    if _BAD_FIELD.intersection(text):
        raise ValueError(f"an SSE comment cannot contain CR or LF: {text!r}")
    return b": " + text.encode() + b"\n\n" if text else b":\n\n"


def encode_heartbeat() -> bytes:
    """The heartbeat: exactly ``: hb`` (rule 2)."""
    return HEARTBEAT


def encode_retry(ms: int = RETRY_MS) -> bytes:
    """The ``retry:`` line that sets the client's reconnect delay (rule 3)."""
    if ms < 0:
        raise ValueError(f"retry must be a non-negative number of milliseconds, got {ms}")
    return b"retry: %d\n\n" % ms


def with_id(cursor_id: str, frame: bytes) -> bytes:
    """Put the watcher's composite cursor (``id:``) in front of a shared frame (rule 4)."""
    return _field("id", cursor_id, nul_ok=False) + frame


# -- the watch frames (§7.5) -------------------------------------------------------------


def record_frame(
    topic: str, records_json: bytes, from_seq: int, to_seq: int, head_seq: int
) -> bytes:
    """``event: record`` without its ``id:`` line (shared by every watcher, rule 4).

    ``records_json`` is the JSON array of the stored record fragments, spliced verbatim.
    """
    return b"".join(
        (
            b'event: record\ndata: {"topic":',
            json_bytes(topic),
            b',"records":',
            records_json,
            b',"from_seq":%d,"to_seq":%d,"head_seq":%d}\n\n' % (from_seq, to_seq, head_seq),
        )
    )


def _shared_record_frame(batch: RecordBatch) -> bytes:
    return record_frame(
        batch.topic, batch.records_json, batch.from_seq, batch.to_seq, batch.head_seq
    )


def frame_for_event(cursor_id: str, event: WatchEvent) -> bytes:
    """The frame of a watch event, with the watcher's composite cursor as its ``id:``.

    A record frame is built once per batch (``RecordBatch.encoded``) and shared. The
    others are ``event:`` the event's ``FRAME`` (``-`` for ``_``) and ``data:`` its
    ``to_dict()``; a ``join-refused`` has no ``id:`` (:func:`join_refused_frame`).
    """
    if isinstance(event, RecordBatch):
        return with_id(cursor_id, event.encoded("sse", _shared_record_frame))
    if isinstance(event, JoinRefusedEvent):
        return join_refused_frame(event)
    if isinstance(event, FRAMED_EVENT_TYPES):
        return event_frame(cursor_id, event)
    raise TypeError(f"not a watch event: {event!r}")


def event_frame(cursor_id: str | None, event: FramedEvent) -> bytes:
    """``event: <FRAME with - for _>``, ``data:`` the event's members (``to_dict``)."""
    return encode_event(cursor_id, event.FRAME.replace("_", "-"), json_bytes(event.to_dict()))


def join_refused_frame(event: JoinRefusedEvent) -> bytes:
    """``event: join-refused``: a topic created under a watched prefix did not join, the
    stream holding ``max_watch_topics`` topics already. No ``id:``: no cursor moved, so
    the client's Last-Event-ID stays what the previous frame made it."""
    return event_frame(None, event)


def error_frame(
    exc: TopicsError,
    *,
    request_id: str | None = None,
    topics: Sequence[str] | None = None,
    retry_after_ms: int | None = None,
) -> bytes:
    """``event: error``: an in-stream error with an HTTP-aligned numeric ``code`` (§7.5).

    The payload is ``{"code": <status>, "error": <message>, "error_code": <wire code>}``
    plus ``retry_after_ms``/``topics`` for the advisory 429 and the ``request_id``
    (CONTRACT-NOTES 5). No ``id:``: an error never moves the resume cursor.
    """
    payload = SSE_ERROR.build(
        {
            "code": exc.status,
            "error": exc.message,
            "error_code": exc.code,
            "retry_after_ms": retry_after_ms,
            "topics": list(topics) if topics is not None else None,
            "detail": exc.detail or None,
            "request_id": request_id,
        }
    )
    return encode_event(None, SSE_ERROR.name, json_bytes(payload))


def connection_established_frame(
    request_id: str, wid: str, topics: Mapping[str, Mapping[str, int]]
) -> bytes:
    """The opening event (CONTRACT-NOTES 6): the request id and the resolved cursors.

    ``topics`` maps each watched topic to ``{"from_seq", "head_seq", "earliest_seq"}``:
    where this stream resumes and the current watermarks. No ``id:`` (not data-bearing).
    """
    payload = SSE_CONNECTION_ESTABLISHED.build(
        {"request_id": request_id, "wid": wid, "topics": topics}
    )
    return encode_event(None, SSE_CONNECTION_ESTABLISHED.name, json_bytes(payload))


def connection_closing_frame(reason: str, request_id: str, retry_after_ms: int) -> bytes:
    """The final event of a stream the server ends on purpose (CONTRACT-NOTES 7).

    ``reason`` is ``server_shutdown`` or ``superseded`` (another stream took the session);
    the client reconnects with Last-Event-ID after ``retry_after_ms``.
    """
    payload = SSE_CONNECTION_CLOSING.build(
        {"reason": reason, "request_id": request_id, "retry_after_ms": retry_after_ms}
    )
    return encode_event(None, SSE_CONNECTION_CLOSING.name, json_bytes(payload))


# -- decoding (rule 6) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Event:
    """A dispatched event. ``id`` is the last event id in force when it was dispatched
    (what EventSource reports as ``lastEventId``); ``event`` defaults to ``message``."""

    event: str
    data: str
    id: str


@dataclass(frozen=True, slots=True)
class Comment:
    """A comment line (``: hb`` arrives as ``Comment("hb")``)."""

    text: str

    @property
    def is_heartbeat(self) -> bool:
        return self.text == "hb" or self.text.startswith("hb ")


@dataclass(frozen=True, slots=True)
class Retry:
    """A valid ``retry:`` field (milliseconds)."""

    ms: int


Item = Event | Comment | Retry


class SSEDecoder:
    """Incremental event-stream parser: push bytes with :meth:`feed`, get items back.

    Example::

        dec = SSEDecoder()
        items = dec.feed(b"retry: 2000\\n\\nid: x\\nevent: record\\ndata: {}\\n\\n")
        # [Retry(2000), Event("record", "{}", "x")]
    """

    def __init__(self) -> None:
        self._buf = b""
        self._started = False
        self._skip_lf = False  # the previous chunk ended in CR: a leading LF is its pair
        self.last_event_id = ""
        self.retry_ms: int | None = None
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[Item]:
        """Parse ``chunk``; return the events, comments and retries it completed."""
        out: list[Item] = []
        if self._skip_lf and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._skip_lf = False
        buf = self._buf + chunk
        if not self._started:
            if len(buf) < 3 and b"\xef\xbb\xbf".startswith(buf):
                self._buf = buf
                return out
            if buf.startswith(b"\xef\xbb\xbf"):
                buf = buf[3:]
            self._started = True
        start = 0
        n = len(buf)
        while True:
            cr = buf.find(b"\r", start)
            lf = buf.find(b"\n", start)
            if cr < 0 and lf < 0:
                break
            end = lf if cr < 0 else cr if lf < 0 else min(cr, lf)
            line = buf[start:end]
            if buf[end] == 0x0D:  # CR, maybe followed by LF
                if end + 1 < n:
                    start = end + 2 if buf[end + 1] == 0x0A else end + 1
                else:
                    start = end + 1
                    self._skip_lf = True
            else:
                start = end + 1
            self._line(line.decode("utf-8", "replace"), out)
        self._buf = buf[start:]
        return out

    def _line(self, line: str, out: list[Item]) -> None:
        if not line:
            self._dispatch(out)
            return
        if line[0] == ":":
            out.append(Comment(line[1:].removeprefix(" ")))
            return
        name, colon, value = line.partition(":")
        if colon:
            value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self.last_event_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry_ms = int(value)
            out.append(Retry(self.retry_ms))

    def _dispatch(self, out: list[Item]) -> None:
        if self._data:
            out.append(Event(self._event or "message", "\n".join(self._data), self.last_event_id))
        self._event = ""
        self._data = []
