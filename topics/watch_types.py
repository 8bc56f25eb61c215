"""Types of live delivery (contract §7, §7.x): watch sessions, stream events, settings.

The engine's watch hub (``topics.watch.hub``) produces :data:`WatchEvent` values; frontends
turn each into a frame with ``topics.wire.sse`` / ``topics.wire.ws``. A
:class:`RecordBatch` is shared by every watcher that read the same batch, and it keeps the
frames built from it (:meth:`RecordBatch.encoded`), so a frame is encoded once per batch
and shape however many watchers receive it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from .errors import ConflictError, TopicsError
from .result_fields import Computed, computed, off_wire, wire
from .types import Tombstone

__all__ = [
    "BacklogExceededError",
    "BacklogExceededEvent",
    "CaughtUpEvent",
    "EndReachedEvent",
    "FRAMED_EVENT_TYPES",
    "FramedEvent",
    "JoinRefusedEvent",
    "RecordBatch",
    "SessionGoneError",
    "SlowConsumerError",
    "TombstoneEvent",
    "TopicAddedEvent",
    "TopicDeletedEvent",
    "TopicWatermarks",
    "WatchCreated",
    "WATCH_EVENT_TYPES",
    "WatchEvent",
    "WatchSettings",
    "WatchStatistics",
]

T = TypeVar("T")


class SessionGoneError(TopicsError):
    """A watch session was removed while its stream was open (in-stream ``error`` 410):
    POST /v0/watch again (CONTRACT-NOTES 4)."""

    code = "session_gone"
    status = 410
    stream_only = True


class SlowConsumerError(TopicsError):
    """A stream's outbound queue could not drain for ``slow_consumer_timeout_ms`` (in-stream
    ``error`` 408, then the server closes). The session survives: resume with
    Last-Event-ID."""

    code = "slow_consumer"
    status = 408
    stream_only = True


class BacklogExceededError(ConflictError):
    """A watched topic's backlog (seqs between the start and the head) is larger than its
    ``max_backlog`` and the watch asked ``on_backlog: "error"`` (409 at creation or on a
    WebSocket subscribe). ``detail``: ``topic``, ``from_seq``, ``head_seq``, ``backlog``,
    ``max_backlog``. Re-snapshot, then watch from the head (``tail``)."""

    code = "backlog_exceeded"
    status = 409


@dataclass(frozen=True, slots=True)
class WatchSettings:
    """Tunables of live delivery (contract §7.6 slow consumers, §7.1 session GC).

    Attributes:
        session_ttl_ms: an idle session (no open stream) is reclaimed after this long.
        buffer_grace_ms: an outbound queue full this long turns each lossy topic (cap or
            TTL) into a ``tombstone(from_seq_too_old)`` and a jump to its head.
        slow_consumer_timeout_ms: an outbound queue full this long ends the stream with a
            final ``error`` frame (408); the session survives for resume.
        final_frame_timeout_ms: how long a final frame may take to leave before the
            connection is dropped without it (a client that reads nothing gets nothing).
        queue_frames: capacity of a connection's outbound queue, in frames.
    """

    session_ttl_ms: int = 300_000
    buffer_grace_ms: int = 5_000
    slow_consumer_timeout_ms: int = 30_000
    final_frame_timeout_ms: int = 2_000
    queue_frames: int = 16


@dataclass(frozen=True, slots=True)
class TopicWatermarks:
    """Where a watched topic starts and its current watermarks (lag, fall-off checks)."""

    from_seq: int = wire("Its cursor: records after this seq are delivered.", schema="Seq")
    head_seq: int = wire("Its head when resolved.", schema="Seq")
    earliest_seq: int = wire("Its earliest retained seq when resolved.", schema="Seq")

    def to_dict(self) -> dict[str, int]:
        return {
            "from_seq": self.from_seq,
            "head_seq": self.head_seq,
            "earliest_seq": self.earliest_seq,
        }


@dataclass(frozen=True, slots=True)
class WatchCreated:
    """The answer of ``Engine.create_watch`` (POST /v0/watch without ``stream_url``)."""

    wid: str = wire(
        "Unguessable session capability (>= 128 bits, base64url).",
        schema={"pattern": r"^wid_[A-Za-z0-9_-]+$"},
    )
    session_ttl_ms: int = wire("Idle session lifetime.", schema={"minimum": 0})
    topics: dict[str, TopicWatermarks] = wire(
        "Resolved per-topic positions (unknown topics dropped with ?lenient=true are absent).",
        schema={"additionalProperties": {"$ref": "#/components/schemas/TopicWatermarks"}},
    )
    #: ``topic_prefix`` entries as narrowed to the key's allowlist (None: no prefixes).
    prefixes: dict[str, Any] | None = wire(
        "Each topic_prefix as it applies; absent without topic_prefix.",
        name="topic_prefix",
        schema="WatchPrefixesResolved",
        omitted=True,
        default=None,
    )

    WIRE_COMPUTED: ClassVar[tuple[Computed, ...]] = (
        computed(
            "stream_url",
            "The SSE GET for this session (/v0/watch/{wid}); the HTTP frontend adds it.",
            schema={"type": "string"},
        ),
    )

    def to_dict(self) -> dict[str, Any]:
        out = {
            "wid": self.wid,
            "session_ttl_ms": self.session_ttl_ms,
            "topics": {name: w.to_dict() for name, w in self.topics.items()},
        }
        if self.prefixes is not None:
            out["topic_prefix"] = self.prefixes
        return out


@dataclass(frozen=True, slots=True)
class WatchStatistics:
    """Gauges for /v0/metrics: sessions held and long-lived connections open."""

    sessions: int
    connections: int


# The watch events below are the frames of both streams: ``FRAME`` names the WebSocket op
# (the SSE event name is it with "-" for "_"), the wire fields are the frame's members and
# ``to_dict`` builds them (topics/wire/sse.py and ws.py send it; the OpenAPI document's
# frame schemas are made from the fields). ``cursor`` is where the watcher stands after
# the frame: the SSE ``id:`` line, not a member.
_CURSOR = "where the watcher stands after the frame (the SSE id:), not a member"
_TOPIC = "The watched topic."
_HEAD = "The topic's head."


@dataclass(slots=True, eq=False)
class RecordBatch:
    """Records of one topic after ``from_seq`` up to ``to_seq`` (a ``record`` frame).

    ``records_json`` is the JSON array of the stored fragments. Shared: never mutate it;
    ``cursor`` is where a watcher stands after receiving it. Its frames are built from the
    bytes (``topics.wire.sse.record_frame``, ``topics.wire.ws.record_frame``), not a dict.
    """

    FRAME: ClassVar[str] = "record"

    topic: str = wire(_TOPIC, schema="TopicName")
    from_seq: int = wire("The seq these records follow (exclusive).", schema="Seq")
    to_seq: int = wire("The last seq this batch covers.", schema="Seq")
    head_seq: int = wire(_HEAD, schema="Seq")
    records_json: bytes = wire(
        "The records, in seq order (CloudEvents for a topic whose format is cloudevents).",
        name="records",
        schema={
            "type": "array",
            "items": {
                "anyOf": [
                    {"$ref": "#/components/schemas/Record"},
                    {"$ref": "#/components/schemas/CloudEvent"},
                ]
            },
        },
    )
    record_count: int = off_wire("the length of records")
    _frames: dict[str, Any] = off_wire(
        "the frames built from it (a cache)", default_factory=dict, repr=False
    )

    @property
    def cursor(self) -> int:
        return self.to_seq

    def encoded(self, shape: str, build: Callable[[RecordBatch], T]) -> T:
        """The frame of this batch in ``shape`` ("sse", "ws"), built on first use."""
        frame = self._frames.get(shape)
        if frame is None:
            frame = self._frames[shape] = build(self)
        return frame


@dataclass(frozen=True, slots=True)
class TombstoneEvent:
    """Records ``[gap_from, gap_to]`` are lost to this watcher; ``cursor`` is ``gap_to``."""

    FRAME: ClassVar[str] = "tombstone"

    topic: str = wire(_TOPIC, schema="TopicName")
    tombstone: Tombstone = wire("The lost range.", flatten=True)
    cursor: int = off_wire(_CURSOR)

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, **self.tombstone.to_dict()}


@dataclass(frozen=True, slots=True)
class CaughtUpEvent:
    """The topic is drained to ``head_seq`` (a backlog -> live transition)."""

    FRAME: ClassVar[str] = "caught_up"

    topic: str = wire(_TOPIC, schema="TopicName")
    head_seq: int = wire("The head it is drained to.", schema="Seq")
    cursor: int = off_wire(_CURSOR)

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "head_seq": self.head_seq}


@dataclass(frozen=True, slots=True)
class TopicDeletedEvent:
    """The topic was deleted while watched: terminal for that topic only."""

    FRAME: ClassVar[str] = "topic_deleted"

    topic: str = wire(_TOPIC, schema="TopicName")
    head_seq: int = wire("Its head when it was deleted.", schema="Seq")
    cursor: int = off_wire(_CURSOR)

    WIRE_COMPUTED: ClassVar[tuple[Computed, ...]] = (
        computed("reason", "Why it left the watch.", schema={"type": "string", "const": "deleted"}),
    )

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "head_seq": self.head_seq, "reason": "deleted"}


@dataclass(frozen=True, slots=True)
class TopicAddedEvent:
    """A topic created under a watched ``topic_prefix`` joined the watch after ``cursor``
    (its starting cursor: 0, so its first records are delivered too)."""

    FRAME: ClassVar[str] = "topic_added"

    topic: str = wire("The topic that joined.", schema="TopicName")
    prefix: str = wire("The topic_prefix it joined under.")
    head_seq: int = wire(_HEAD, schema="Seq")
    cursor: int = wire(
        "Its records follow this seq (0: all of them).", name="from_seq", schema="Seq"
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "prefix": self.prefix,
            "from_seq": self.cursor,
            "head_seq": self.head_seq,
        }


@dataclass(frozen=True, slots=True)
class JoinRefusedEvent:
    """A topic created under a watched ``topic_prefix`` did not join: the subscription
    already holds ``max_watch_topics`` topics (``TOPICS_MAX_WATCH_TOPICS``). Nothing of it
    is delivered and no cursor moves (``cursor`` is 0); it joins no later, so a consumer
    that wants it watches it elsewhere or frees room and subscribes again."""

    FRAME: ClassVar[str] = "join_refused"

    topic: str = wire("The topic that did not join.", schema="TopicName")
    prefix: str = wire("The topic_prefix it was created under.")
    head_seq: int = wire(_HEAD, schema="Seq")
    max_watch_topics: int = wire(
        "The topics a watch may hold (TOPICS_MAX_WATCH_TOPICS).", schema={"minimum": 0}
    )
    cursor: int = off_wire("always 0: no cursor moves (the frame has no id:)", default=0)

    WIRE_COMPUTED: ClassVar[tuple[Computed, ...]] = (
        computed(
            "reason",
            "Why it did not join.",
            schema={"type": "string", "enum": ["max_watch_topics"]},
        ),
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "prefix": self.prefix,
            "head_seq": self.head_seq,
            "reason": "max_watch_topics",
            "max_watch_topics": self.max_watch_topics,
        }


@dataclass(frozen=True, slots=True)
class BacklogExceededEvent:
    """The topic was more than ``max_backlog`` seqs behind when the subscription (re)started:
    the records ``(from_seq, head_seq]`` are not replayed and ``cursor`` is ``head_seq``
    (re-snapshot, then take the live records that follow)."""

    FRAME: ClassVar[str] = "backlog_exceeded"

    topic: str = wire(_TOPIC, schema="TopicName")
    from_seq: int = wire("Where the watch asked to start.", schema="Seq")
    head_seq: int = wire("The head it continues from.", schema="Seq")
    backlog: int = wire("Seqs between from_seq and head_seq.", schema="Seq")
    max_backlog: int = wire("The watch's limit.", schema="Seq")
    cursor: int = off_wire(_CURSOR)

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "from_seq": self.from_seq,
            "head_seq": self.head_seq,
            "backlog": self.backlog,
            "max_backlog": self.max_backlog,
        }


@dataclass(frozen=True, slots=True)
class EndReachedEvent:
    """The topic's ``to_seq``/``to_ts`` end was reached at ``cursor`` (issue 18): terminal
    for that topic only; it leaves the session (a resumed stream does not read it again)."""

    FRAME: ClassVar[str] = "end_reached"

    topic: str = wire(_TOPIC, schema="TopicName")
    head_seq: int = wire(_HEAD, schema="Seq")
    cursor: int = wire(
        "Delivered up to this seq: a later read of the topic starts here.",
        name="next_from_seq",
        schema="Seq",
    )

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "next_from_seq": self.cursor, "head_seq": self.head_seq}


#: A watch event whose frame is its ``to_dict`` (every one but the record batch).
FramedEvent = (
    TombstoneEvent
    | CaughtUpEvent
    | TopicDeletedEvent
    | TopicAddedEvent
    | JoinRefusedEvent
    | BacklogExceededEvent
    | EndReachedEvent
)
WatchEvent = RecordBatch | FramedEvent

#: The watch event types framed from ``to_dict``, in the order the document lists them.
FRAMED_EVENT_TYPES: tuple[type[FramedEvent], ...] = (
    TombstoneEvent,
    CaughtUpEvent,
    TopicDeletedEvent,
    EndReachedEvent,
    TopicAddedEvent,
    JoinRefusedEvent,
    BacklogExceededEvent,
)
#: Every watch event type: the frames of the SSE watch stream and the WebSocket.
WATCH_EVENT_TYPES: tuple[type[WatchEvent], ...] = (RecordBatch, *FRAMED_EVENT_TYPES)
