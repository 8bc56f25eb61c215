"""The JSON WebSocket data plane's messages (contract §7.x ``/v0/ws``): pure.

Client commands are a tagged union (:data:`Op`: :class:`Subscribe`, :class:`Unsubscribe`,
:class:`Publish`, :class:`Ping`) with one module-level decoder, :func:`decode_op`; server
frames are built by the ``*_frame`` functions as JSON text.

Rules:
1. Every message is split by ``topics._core.scan.split_write_body`` on its UTF-8 bytes:
   a ``publish`` has exactly the shape of an HTTP write body plus ``op``/``request_id``/
   ``topic``, so its records' ``data`` and ``meta`` come back as the exact bytes the client
   sent and are stored verbatim, like an HTTP write (``1.50`` stays ``1.50``). The other
   ops use the same split (one decoder; a message is parsed once).
2. The decoder checks shape and types only; ranges, clamps and names are the engine's (the
   same checks as HTTP), so both frontends answer the same errors.
3. A message that cannot be decoded raises :class:`OpError`, an ``invalid_request`` that
   carries the message's ``request_id`` when it could be read, so the error frame echoes it.
4. Unknown members are ``invalid_request`` (a typo must not silently change a command).
5. Server frames echo ``request_id`` (when the command had one); record payloads are the
   stored JSON fragments spliced in verbatim (a frame is built once and shared).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from topics._core.scan import BodyError, split_write_body
from topics.errors import InvalidRequestError, TopicsError
from topics.watch_types import FRAMED_EVENT_TYPES, RecordBatch, WatchEvent

from .envelope import json_bytes
from .frame_shapes import WS_ERROR, WS_PONG, WS_SUBSCRIBED, WS_UNSUBSCRIBED, FrameShape
from .requests import (
    WATCH_TOPIC,
    WS_COMMIT,
    WS_PING,
    WS_PUBLISH,
    WS_SUBSCRIBE,
    WS_UNSUBSCRIBE,
)

__all__ = [
    "CursorCommit",
    "Op",
    "OpError",
    "Ping",
    "Publish",
    "Subscribe",
    "TopicStart",
    "Unsubscribe",
    "ack_frame",
    "committed_frame",
    "decode_op",
    "error_frame",
    "frame_for_event",
    "pong_frame",
    "record_frame",
    "subscribed_frame",
    "unsubscribed_frame",
]

MAX_REQUEST_ID_CHARS = 128

# The members each command accepts: declared once, in topics/wire/requests.py.
_COMMON = WS_PING.names
_SUBSCRIBE = WS_SUBSCRIBE.names
_UNSUBSCRIBE = WS_UNSUBSCRIBE.names
_PUBLISH = WS_PUBLISH.names
_START_FIELDS = WATCH_TOPIC.names
_BOUNDS = ("from_ts", "to_ts", "to_seq")


class OpError(InvalidRequestError):
    """A command that cannot be decoded (``invalid_request``); ``request_id`` when known."""

    def __init__(
        self, message: str, *, request_id: str | None = None, detail: Mapping[str, Any] | None
    ) -> None:
        super().__init__(message, detail=detail)
        self.request_id = request_id


@dataclass(frozen=True, slots=True)
class TopicStart:
    """Where a subscription starts: after ``from_seq``, or at the head with ``tail``;
    ``max_backlog`` when the topic sets its own (None: the subscribe's)."""

    from_seq: object = 0
    tail: object = False
    max_backlog: object = None
    #: Start after this named cursor's committed seq; ``commit``: deliveries commit to it.
    cursor: object = None
    commit: object = False
    #: Issue 18: start by time, end by time or seq (None: not given).
    from_ts: object = None
    to_ts: object = None
    to_seq: object = None

    def to_dict(self) -> dict[str, object]:
        out = {"from_seq": self.from_seq, "tail": self.tail}
        if self.cursor is not None or self.commit is not False:
            out = {"cursor": self.cursor, "commit": self.commit}
            if self.from_seq != 0 or self.tail is not False:  # the engine refuses both
                out.update(from_seq=self.from_seq, tail=self.tail)
        if self.max_backlog is not None:
            out["max_backlog"] = self.max_backlog
        for name in _BOUNDS:
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


@dataclass(frozen=True, slots=True)
class Subscribe:
    """``subscribe``: one topic (``topic`` + top-level start) or a ``topics`` map."""

    request_id: str | None
    topics: dict[str, TopicStart]
    node: object = None
    limit: object = 0
    max_batch_bytes: object = 262_144
    include_data: object = True
    include_tags: object = False
    include_meta: object = True
    consistency: object = "eventual"
    topic_prefix: object = None
    max_backlog: object = 0
    on_backlog: object = "jump"
    where: object = None
    format: object = "records"
    ce_type_field: object = None
    op: Literal["subscribe"] = "subscribe"


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    request_id: str | None
    topics: tuple[str, ...]
    topic_prefix: tuple[str, ...] = ()
    op: Literal["unsubscribe"] = "unsubscribe"


@dataclass(frozen=True, slots=True)
class Publish:
    """``publish``: the fields of an HTTP write; ``records`` keep ``data``/``meta`` raw."""

    request_id: str | None
    topic: str
    records: list[dict[str, object]]
    node: object = None
    idempotency_key: object = None
    create: object = None
    config: object = None
    disable_backpressure: object = False
    return_seqs: object = True
    dedupe: object = None
    dedupe_ms: object = None
    replace: object = None
    expected_head_seq: object = None
    producer_id: object = None
    epoch: object = None
    op: Literal["publish"] = "publish"


@dataclass(frozen=True, slots=True)
class Ping:
    request_id: str | None
    op: Literal["ping"] = "ping"


@dataclass(frozen=True, slots=True)
class CursorCommit:
    """``commit``: commit ``seq`` to a named cursor (PUT /v0/topics/:t/cursors/:name)."""

    request_id: str | None
    topic: str
    cursor: object
    seq: object
    expect_seq: object = None
    op: Literal["commit"] = "commit"


Op = Subscribe | Unsubscribe | Publish | Ping | CursorCommit

_COMMIT = WS_COMMIT.names


@dataclass(slots=True)
class _Reader:
    """Field access over one split message, raising OpError with the request id."""

    fields: dict[str, object]
    request_id: str | None = None
    allowed: frozenset[str] = field(default_factory=frozenset)

    def fail(self, name: str, problem: str) -> OpError:
        return OpError(f"{name}: {problem}", request_id=self.request_id, detail={"field": name})

    def check_members(self, op: str) -> None:
        for name in self.fields:
            if name not in self.allowed:
                raise self.fail(name, f"is not a field of {op}")

    def topic_name(self, name: str, value: object) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(name, "must be a topic name (a non-empty string)")
        return value


def decode_op(message: bytes | str) -> Op:
    """Decode one client message into its :data:`Op` (rules 1-4).

    Raises:
        OpError: not a JSON object, an unknown ``op``, a missing or mistyped member.

    Example::

        decode_op(b'{"op":"publish","topic":"t","records":[{"data":1.50}]}').records
        # [{'data': b'1.50'}]
    """
    raw = message.encode("utf-8", "surrogatepass") if isinstance(message, str) else message
    try:
        records, fields = split_write_body(raw)
    except BodyError as exc:
        raise OpError(
            f"malformed message: {exc}",
            detail={"path": exc.path, "offset": exc.offset},
        ) from None
    rid = fields.get("request_id")
    if rid is not None and (not isinstance(rid, str) or len(rid) > MAX_REQUEST_ID_CHARS):
        raise OpError(
            f"request_id: must be a string of at most {MAX_REQUEST_ID_CHARS} characters",
            detail={"field": "request_id"},
        )
    reader = _Reader(fields, rid)
    op = fields.get("op")
    if op == "publish":
        return _publish(reader, records)
    if records is not None:
        raise reader.fail("records", f"is not a field of {op!r}")
    if op == "subscribe":
        return _subscribe(reader)
    if op == "unsubscribe":
        return _unsubscribe(reader)
    if op == "ping":
        reader.allowed = _COMMON
        reader.check_members("ping")
        return Ping(rid)
    if op == "commit":
        reader.allowed = _COMMIT
        reader.check_members("commit")
        f = reader.fields
        topic = reader.topic_name("topic", f.get("topic"))
        return CursorCommit(rid, topic, f.get("cursor"), f.get("seq"), f.get("expect_seq"))
    raise reader.fail("op", f"must be subscribe, unsubscribe, publish, commit or ping, got {op!r}")


def _subscribe(reader: _Reader) -> Subscribe:
    reader.allowed = _SUBSCRIBE
    reader.check_members("subscribe")
    f = reader.fields
    topic, topics = f.get("topic"), f.get("topics")
    starts: dict[str, TopicStart] = {}
    if (topic is None) == (topics is None) and (topic is not None or "topic_prefix" not in f):
        raise reader.fail("topic", "give exactly one of topic and topics (or topic_prefix)")
    if topic is not None:
        name = reader.topic_name("topic", topic)
        starts[name] = TopicStart(
            f.get("from_seq", 0),
            f.get("tail", False),
            cursor=f.get("cursor"),
            commit=f.get("commit", False),
            from_ts=f.get("from_ts"),
            to_ts=f.get("to_ts"),
            to_seq=f.get("to_seq"),
        )
    elif topics is None:
        if "from_seq" in f or "tail" in f:
            raise reader.fail("from_seq", "with topic_prefix, give tail per prefix")
    else:
        starts = _topic_starts(reader, topics)
    return Subscribe(
        reader.request_id,
        starts,
        node=f.get("node"),
        limit=f.get("limit", 0),
        max_batch_bytes=f.get("max_batch_bytes", 262_144),
        include_data=f.get("include_data", True),
        include_tags=f.get("include_tags", False),
        include_meta=f.get("include_meta", True),
        consistency=f.get("consistency", "eventual"),
        topic_prefix=f.get("topic_prefix"),
        max_backlog=f.get("max_backlog", 0),
        on_backlog=f.get("on_backlog", "jump"),
        where=f.get("where"),
        format=f.get("format", "records"),
        ce_type_field=f.get("ce_type_field"),
    )


def _topic_starts(reader: _Reader, topics: object) -> dict[str, TopicStart]:
    """``subscribe``'s ``topics`` object: each topic's own start (and end) options; the
    single-topic start members are refused beside it."""
    f = reader.fields
    if "from_seq" in f or "tail" in f:
        raise reader.fail("from_seq", "with topics, give from_seq/tail per topic")
    for key in (*_BOUNDS, "cursor", "commit"):
        if key in f:
            raise reader.fail(key, f"with topics, give {key} per topic")
    if not isinstance(topics, dict) or (not topics and "topic_prefix" not in f):
        raise reader.fail("topics", "must be a non-empty object of topic -> options")
    starts: dict[str, TopicStart] = {}
    for name, opts in topics.items():
        if opts is None:
            opts = {}
        if not isinstance(opts, dict):
            raise reader.fail(f"topics.{name}", "must be an object {from_seq, tail}")
        for key in opts:
            if key not in _START_FIELDS:
                raise reader.fail(f"topics.{name}.{key}", "is not a per-topic option")
        starts[name] = TopicStart(
            opts.get("from_seq", 0),
            opts.get("tail", False),
            opts.get("max_backlog"),
            opts.get("cursor"),
            opts.get("commit", False),
            opts.get("from_ts"),
            opts.get("to_ts"),
            opts.get("to_seq"),
        )
    return starts


def _unsubscribe(reader: _Reader) -> Unsubscribe:
    reader.allowed = _UNSUBSCRIBE
    reader.check_members("unsubscribe")
    topic, topics = reader.fields.get("topic"), reader.fields.get("topics")
    prefixes = reader.fields.get("topic_prefix")
    if prefixes is not None:
        if topic is not None or topics is not None:
            raise reader.fail("topic_prefix", "give topic_prefix alone")
        if isinstance(prefixes, str):
            prefixes = [prefixes]
        if not isinstance(prefixes, list) or not prefixes:
            raise reader.fail("topic_prefix", "must be a prefix or a non-empty array of them")
        names = tuple(reader.topic_name(f"topic_prefix[{i}]", p) for i, p in enumerate(prefixes))
        return Unsubscribe(reader.request_id, (), names)
    if (topic is None) == (topics is None):
        raise reader.fail("topic", "give exactly one of topic and topics")
    if topic is not None:
        return Unsubscribe(reader.request_id, (reader.topic_name("topic", topic),))
    if isinstance(topics, dict):
        topics = list(topics)
    if not isinstance(topics, list) or not topics:
        raise reader.fail("topics", "must be a non-empty array of topic names")
    names = tuple(reader.topic_name(f"topics[{i}]", t) for i, t in enumerate(topics))
    return Unsubscribe(reader.request_id, names)


def _publish(reader: _Reader, records: list[dict[str, object]] | None) -> Publish:
    reader.allowed = _PUBLISH
    reader.check_members("publish")
    f = reader.fields
    topic = reader.topic_name("topic", f.get("topic"))
    if records is None:
        raise reader.fail("records", "is required (an array of records)")
    return Publish(
        reader.request_id,
        topic,
        records,
        node=f.get("node"),
        idempotency_key=f.get("idempotency_key"),
        create=f.get("create"),
        config=f.get("config"),
        disable_backpressure=f.get("disable_backpressure", False),
        return_seqs=f.get("return_seqs", True),
        dedupe=f.get("dedupe"),
        dedupe_ms=f.get("dedupe_ms"),
        replace=f.get("replace"),
        expected_head_seq=f.get("expected_head_seq"),
        producer_id=f.get("producer_id"),
        epoch=f.get("epoch"),
    )


# -- server frames (rule 5) ---------------------------------------------------------------


def _frame(op: str, request_id: str | None, body: Mapping[str, Any]) -> str:
    out: dict[str, Any] = {"op": op}
    if request_id is not None:
        out["request_id"] = request_id
    out.update(body)
    return json_bytes(out).decode()


def _shaped(shape: FrameShape, members: Mapping[str, Any]) -> str:
    """A frame declared in :mod:`.frame_shapes`: ``op``, then its members."""
    return json_bytes({"op": shape.name, **shape.build(members)}).decode()


def subscribed_frame(
    request_id: str | None,
    topics: Mapping[str, Mapping[str, int]],
    prefixes: Mapping[str, Any] | None = None,
) -> str:
    """``subscribed``: each topic's resolved start and watermarks, and the connection's
    ``topic_prefix`` entries (what each covers) when the subscribe named any."""
    return _shaped(
        WS_SUBSCRIBED, {"request_id": request_id, "topics": topics, "topic_prefix": prefixes}
    )


def unsubscribed_frame(request_id: str | None, topics: Sequence[str]) -> str:
    return _shaped(WS_UNSUBSCRIBED, {"request_id": request_id, "topics": list(topics)})


def pong_frame(request_id: str | None) -> str:
    return _shaped(WS_PONG, {"request_id": request_id})


def committed_frame(request_id: str | None, cursor: Mapping[str, Any]) -> str:
    """``committed``: the answer of a ``commit`` (the cursor as committed, with its lag)."""
    return _frame("committed", request_id, cursor)


def record_frame(topic: str, records_json: bytes, from_seq: int, to_seq: int, head_seq: int) -> str:
    """``record``: a batch of one topic (shared by every subscriber of the same batch)."""
    return b"".join(
        (
            b'{"op":"record","topic":',
            json_bytes(topic),
            b',"from_seq":%d,"to_seq":%d,"head_seq":%d,"records":' % (from_seq, to_seq, head_seq),
            records_json,
            b"}",
        )
    ).decode()


def _shared_record_frame(batch: RecordBatch) -> str:
    return record_frame(
        batch.topic, batch.records_json, batch.from_seq, batch.to_seq, batch.head_seq
    )


def frame_for_event(event: WatchEvent) -> str:
    """The frame of a watch event: ``op`` its ``FRAME`` and its ``to_dict()`` members; a
    record frame is built once per batch and shared."""
    if isinstance(event, RecordBatch):
        return event.encoded("ws", _shared_record_frame)
    if isinstance(event, FRAMED_EVENT_TYPES):
        return _frame(event.FRAME, None, event.to_dict())
    raise TypeError(f"not a watch event: {event!r}")


def ack_frame(
    request_id: str | None, result: Mapping[str, Any], performance: Mapping[str, Any]
) -> str:
    """``ack`` of a publish: the write result (``WriteResult.to_dict()``) + performance."""
    return _frame("ack", request_id, {**result, "performance": performance})


def error_frame(request_id: str | None, exc: TopicsError) -> str:
    """``error``: the wire code, message and detail of ``exc`` (the §0.5 fields)."""
    members = {"request_id": request_id, "code": exc.code, "message": exc.message}
    return _shaped(WS_ERROR, {**members, "detail": exc.detail})
