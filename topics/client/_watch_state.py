"""The watch client's state machine (contract §7, the watch page), with no I/O.

The sync and async iterators (``watch/hub.py``) own the sockets and the sleeping; this
module decides everything else: the POST body, the stream request's headers, what each
SSE frame means, what the consumer is handed, when a cursor is committed and how long to
wait before reconnecting.

Rules:
1. Nothing is dropped silently. Records are handed over one by one as
   :class:`WatchRecord`; ``tombstone``, ``caught-up``, ``topic-deleted``, ``topic-added``
   and ``backlog-exceeded`` frames become :class:`~topics.watch_types.TombstoneEvent`,
   :class:`~topics.watch_types.CaughtUpEvent`, :class:`~topics.watch_types.TopicDeletedEvent`,
   :class:`~topics.watch_types.TopicAddedEvent` and
   :class:`~topics.watch_types.BacklogExceededEvent` values. Unknown events are ignored
   (EventSource does the same; CONTRACT-NOTES 6).
2. A frame's cursor map is committed (and saved to the cursor store) only when the consumer
   has taken every item of that frame: :class:`Commit` markers follow each frame's items.
   The map is the frame's ``id:`` (base64url JSON) when it decodes; a checkpoint id
   (``ck.N``, more than 64 topics) is opaque, so the map is then advanced from the payloads
   (``to_seq``, ``gap_to``, the caught-up head).
3. A reconnect to the same session sends the last committed id as ``Last-Event-ID`` (the
   encoded committed map when no id was committed yet), so the server rewinds to exactly
   what the consumer has processed.
4. A session that is gone (404 on the GET, an in-stream ``error`` 410) is re-created with a
   POST whose per-topic ``from_seq`` are the committed cursors: no loss beyond what the
   topics' own retention removed (and that arrives as a tombstone).
5. Reconnect waits: the server's ``retry:`` (2 s by contract) after a stream that worked,
   doubling with jitter on consecutive failures up to ``MAX_BACKOFF_S``; a
   ``connection-closing`` or advisory error frame's ``retry_after_ms`` when larger.
6. The liveness watchdog is ``2 x heartbeat_ms + WATCHDOG_SLACK_S`` without a byte: any
   frame (a heartbeat comment too) resets it; on expiry the stream is reopened.
7. A prefix watch (``topic_prefix``) tracks every topic the server hands it (the POST
   answer, ``topic-added``) beside the named ones, and never ends for want of topics. A
   re-created session names every tracked topic with its committed cursor and asks the
   prefixes from the beginning (``tail`` dropped): a topic created while the client was
   away is then read from its first record.
8. ``wait_for_topic``: before the first session, wait until every named topic exists
   (:mod:`topics.client._topic_wait`, the CLI's ``tail --wait`` too); a topic that did not
   exist at first and was to be tailed is read from its first record (it was all written
   after the watch began).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import ujson

from topics._core.scan import BodyError, split_write_body
from topics.types import Record
from topics.watch_types import (
    BacklogExceededEvent,
    CaughtUpEvent,
    EndReachedEvent,
    JoinRefusedEvent,
    TombstoneEvent,
    TopicAddedEvent,
    TopicDeletedEvent,
)
from topics.wire import cursor as cursor_codec
from topics.wire.options import WATCH_OPTIONS
from topics.wire.sse import Event, Retry, SSEDecoder

from . import _protocol as p

__all__ = [
    "Commit",
    "WatchEventValue",
    "WatchRecord",
    "WatchSpec",
    "WatchState",
    "WatchTopics",
    "data_spans",
    "refused_event",
]

WatchTopics = str | Sequence[str] | Mapping[str, int | Mapping[str, Any]]
WATCHDOG_SLACK_S = 5.0
MAX_BACKOFF_S = 30.0
DEFAULT_RETRY_MS = 2000
#: The watch options ``client.watch`` passes on in ``**options`` (topics/wire/options.py);
#: ``node``, ``heartbeat_ms`` and ``topic_prefix`` are arguments of :meth:`WatchSpec.build`.
_OPTIONS = WATCH_OPTIONS.client_names() - {"node", "heartbeat_ms", "topic_prefix"}
#: A topic's own end (issue 18): kept when a re-created session restarts it from a cursor.
_ENDS = ("to_ts", "to_seq")


@dataclass(frozen=True, slots=True)
class WatchRecord:
    """One record of a watched topic (``record`` is the in-process :class:`Record`)."""

    topic: str
    record: Record
    #: The record's ``data`` as the JSON text the server sent (``1.50`` stays ``1.50``),
    #: or None when the frame's text was not at hand.
    data_json: bytes | None = field(default=None, compare=False, repr=False)

    @property
    def seq(self) -> int:
        return self.record.seq

    @property
    def data(self) -> Any:
        return self.record.data


WatchEventValue = (
    WatchRecord
    | TombstoneEvent
    | CaughtUpEvent
    | TopicDeletedEvent
    | TopicAddedEvent
    | JoinRefusedEvent
    | BacklogExceededEvent
    | EndReachedEvent
)


def record_of(obj: dict[str, Any]) -> Record:
    """A record of a frame; with ``format="cloudevents"`` the whole event is its ``data``
    (``seq`` from ``topicsseq``, ``ts`` from ``time``)."""
    if "$seq" in obj or "topicsseq" not in obj:
        return Record.from_json(obj)
    try:
        when = datetime.fromisoformat(str(obj["time"]).replace("Z", "+00:00"))
    except (KeyError, ValueError):
        when = None
    ts = int(when.timestamp() * 1000) if when is not None else 0
    return Record(seq=int(obj["topicsseq"]), ts=ts, data=obj)


def data_spans(text: str, n: int) -> list[bytes] | None:
    """The ``data`` texts of a record frame's records, split with the server's own raw-span
    scanner so nothing is decoded and re-encoded; None if the frame does not split."""
    try:
        records, _ = split_write_body(text.encode("utf-8", "surrogatepass"))
    except BodyError:
        return None
    if records is None or len(records) != n:
        return None
    spans = [r.get("data") for r in records]
    return [d if isinstance(d, bytes) else b"null" for d in spans]


@dataclass(frozen=True, slots=True)
class Commit:
    """Marker: every item before it was taken; ``cursors`` may now be saved."""

    event_id: str | None
    cursors: dict[str, int]


@dataclass(slots=True)
class WatchSpec:
    """What to watch: per-topic starts and the session options of POST /v0/watch."""

    starts: dict[str, dict[str, Any]]
    node: str | None = None
    heartbeat_ms: int = 15_000
    options: dict[str, Any] = field(default_factory=dict)
    #: ``topic_prefix`` as POSTed: prefix -> ``{"tail", "max_backlog"}`` (rule 7).
    prefixes: dict[str, dict[str, Any]] | None = None
    #: Wait for named topics that do not exist yet instead of failing (rule 8).
    wait_for_topic: bool = False

    @classmethod
    def build(
        cls,
        topics: WatchTopics,
        tail: bool,
        node: str | None,
        heartbeat_ms: int,
        options: Mapping[str, Any],
        wait_for_topic: bool = False,
    ) -> WatchSpec:
        options = dict(options)
        # Records carry what was written, as every read of the Python API does; the
        # wire's default (no tags) is the server's.
        options.setdefault("include_tags", True)
        prefixes = _prefixes(options.pop("topic_prefix", None), tail)
        unknown = set(options) - _OPTIONS
        if unknown:
            raise TypeError(f"unknown watch options: {', '.join(sorted(unknown))}")
        default: dict[str, Any] = {"tail": True} if tail else {"from_seq": 0}
        starts: dict[str, dict[str, Any]] = {}
        if isinstance(topics, str):
            topics = [topics]
        if isinstance(topics, Mapping):
            for name, start in topics.items():
                starts[name] = {"from_seq": start} if isinstance(start, int) else dict(start)
        else:
            starts = {name: dict(default) for name in topics}
        if not starts and not prefixes:
            raise ValueError("watch at least one topic or topic_prefix")
        return cls(starts, node, heartbeat_ms, options, prefixes, wait_for_topic)

    def appeared(self, topics: set[str]) -> None:
        """``topics`` did not exist when the watch began (rule 8): one asked to tail is read
        from its first record instead, since everything in it was written after that."""
        for name in topics:
            start = self.starts.get(name)
            if start is not None and start.get("tail"):
                del start["tail"]
                start["from_seq"] = 0


def _prefixes(value: object, tail: bool) -> dict[str, dict[str, Any]] | None:
    """``topic_prefix`` as a map: a prefix, a list of them, or prefix -> options."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if isinstance(value, Mapping):
        return {str(k): dict(v or {}) for k, v in value.items()}
    if isinstance(value, Sequence):
        return {str(k): ({"tail": True} if tail else {}) for k in value}
    raise TypeError("topic_prefix: a prefix, a list of prefixes or prefix -> options")


class WatchState:
    """Everything a watch knows between frames (module rules 1-6)."""

    def __init__(self, spec: WatchSpec, stored: Mapping[str, int] | None) -> None:
        self.spec = spec
        self.committed: dict[str, int] = {}
        #: Topics a prefix brought in (rule 7); their cursors are in ``committed``.
        self.joined: set[str] = set()
        if stored:  # the consumer's own saved positions win over the watch's starts
            self.committed = {t: s for t, s in stored.items() if self._ours(t)}
            self.joined = {t for t in self.committed if t not in spec.starts}
        self.last_id: str | None = None
        self.wid: str | None = None
        self.stream_path: str | None = None
        self.retry_ms = DEFAULT_RETRY_MS
        self.failures = 0
        self.pause_s: float = 0.0
        self._pending: dict[str, int] = {}
        self._decoder = SSEDecoder()
        self._frame_text = ""  # the frame being parsed (_record)

    @property
    def topics(self) -> list[str]:
        return [*self.spec.starts, *sorted(self.joined)]

    @property
    def active(self) -> bool:
        """Something is left to watch: a named or joined topic, or a prefix (rule 7)."""
        return bool(self.spec.starts or self.joined or self.spec.prefixes)

    def _ours(self, topic: str) -> bool:
        prefixes = self.spec.prefixes
        return topic in self.spec.starts or (
            prefixes is not None and topic.startswith(tuple(prefixes))
        )

    @property
    def watchdog_s(self) -> float:
        return 2 * self.spec.heartbeat_ms / 1000 + WATCHDOG_SLACK_S

    # -- the session -------------------------------------------------------------------

    def create_call(self) -> p.Call[dict[str, Any]]:
        """POST /v0/watch (rule 4: committed cursors first)."""
        topics: dict[str, dict[str, Any]] = {}
        for name, start in self.spec.starts.items():
            seq = self.committed.get(name)
            if seq is not None:
                start = {"from_seq": seq, **{k: v for k, v in start.items() if k in _ENDS}}
            topics[name] = start
        for name in self.joined:
            topics[name] = {"from_seq": self.committed.get(name, 0)}
        body: dict[str, Any] = {"topics": topics, "heartbeat_ms": self.spec.heartbeat_ms}
        prefixes = self.spec.prefixes
        if prefixes is not None:
            if self.committed or self.joined:  # a re-creation: new topics from their start
                prefixes = {
                    k: {o: v for o, v in opts.items() if o != "tail"}
                    for k, opts in prefixes.items()
                }
            body["topic_prefix"] = prefixes
        if self.spec.node is not None:
            body["node"] = self.spec.node
        body.update(self.spec.options)
        # A prefix watch names the topics it holds; one deleted meanwhile is dropped, not 404.
        params = {"lenient": "true"} if prefixes is not None and self.joined else None
        return p.Call("POST", "/v0/watch", lambda r: r.json(), params=params, body=p.dumps(body))

    def on_created(self, answer: Mapping[str, Any]) -> None:
        self.wid = str(answer["wid"])
        self.stream_path = str(answer.get("stream_url") or f"/v0/watch/{self.wid}")
        marks = answer.get("topics")
        if not isinstance(marks, dict):
            return
        for name, mark in marks.items():
            if name not in self.spec.starts:
                if self.spec.prefixes is None:
                    continue
                self.joined.add(name)  # covered by a prefix (rule 7)
            if name not in self.committed:
                self.committed[name] = int(mark["from_seq"])
        for name in list(self.spec.starts):  # dropped by ?lenient=true: not watched
            if name not in marks:
                del self.spec.starts[name]
        for name in list(self.joined):  # a prefix topic deleted while away
            if name not in marks:
                self.joined.discard(name)
                self.committed.pop(name, None)

    def session_gone(self) -> None:
        self.wid = self.stream_path = None
        self.last_id = None  # an id of the old session means nothing to a new one

    def stream_headers(self) -> dict[str, str]:
        """Headers of the SSE GET (rule 3)."""
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-store"}
        if self.last_id is not None:
            headers["Last-Event-ID"] = self.last_id
        elif self.committed:
            headers["Last-Event-ID"] = cursor_codec.encode(self.committed)
        return headers

    def stream_opened(self) -> None:
        self._decoder = SSEDecoder()
        self._pending = dict(self.committed)

    # -- frames ------------------------------------------------------------------------

    def feed(self, chunk: bytes) -> list[WatchEventValue | Commit]:
        """The consumer's items and commit markers for the frames ``chunk`` completed."""
        out: list[WatchEventValue | Commit] = []
        for item in self._decoder.feed(chunk):
            if isinstance(item, Retry):
                self.retry_ms = item.ms
            elif isinstance(item, Event):
                self._event(item, out)
        return out

    def _event(self, ev: Event, out: list[WatchEventValue | Commit]) -> None:
        kind = ev.event
        if kind in ("connection-established", "message"):
            return
        try:
            payload = ujson.loads(ev.data)
        except ValueError:
            return
        self._frame_text = ev.data  # for the records' verbatim data (data_spans)
        if not isinstance(payload, dict):
            return
        if kind == "error":
            self._error(payload)
            return
        if kind == "connection-closing":
            wait_ms = payload.get("retry_after_ms")
            if isinstance(wait_ms, int | float):
                self.pause_s = max(self.pause_s, float(wait_ms) / 1000)
            return
        topic = payload.get("topic")
        if not isinstance(topic, str):
            return
        if kind == "join-refused":  # the topic did not join: no cursor, nothing to commit
            out.append(refused_event(topic, payload))
            return
        if kind not in _FRAMES:
            return
        cursor = _FRAMES[kind](self, topic, payload, out)
        ends = kind in ("topic-deleted", "end-reached")
        self._commit(ev.id, topic, cursor, deleted=ends, out=out)

    def _record(self, topic: str, payload: dict[str, Any], out: list[Any]) -> int:
        records = payload.get("records") or ()
        spans = data_spans(self._frame_text, len(records))
        for i, obj in enumerate(records):
            # A CloudEvents record is the whole event, not its data member: no span.
            raw = spans[i] if spans and "$seq" in obj else None
            out.append(WatchRecord(topic, record_of(obj), raw))
        return int(payload.get("to_seq", self._pending.get(topic, 0)))

    def _tombstone(self, topic: str, payload: dict[str, Any], out: list[Any]) -> int:
        tomb = p.tombstone(payload)
        out.append(TombstoneEvent(topic, tomb, tomb.gap_to))
        return tomb.gap_to

    def _caught_up(self, topic: str, payload: dict[str, Any], out: list[Any]) -> int:
        head = int(payload.get("head_seq", 0))
        out.append(CaughtUpEvent(topic, head, head))
        return head

    def _deleted(self, topic: str, payload: dict[str, Any], out: list[Any]) -> int:
        head = int(payload.get("head_seq", 0))
        out.append(TopicDeletedEvent(topic, head, head))
        return head

    def _ended(self, topic: str, payload: dict[str, Any], out: list[Any]) -> int:
        cursor = int(payload.get("next_from_seq", 0))
        out.append(EndReachedEvent(topic, int(payload.get("head_seq", 0)), cursor))
        return cursor

    def _added(self, topic: str, payload: dict[str, Any], out: list[Any]) -> int:
        start = int(payload.get("from_seq", 0))
        head = int(payload.get("head_seq", 0))
        out.append(TopicAddedEvent(topic, str(payload.get("prefix", "")), head, start))
        if topic not in self.spec.starts:
            self.joined.add(topic)
        return start

    def _backlog(self, topic: str, payload: dict[str, Any], out: list[Any]) -> int:
        head = int(payload.get("head_seq", 0))
        out.append(
            BacklogExceededEvent(
                topic,
                int(payload.get("from_seq", 0)),
                head,
                int(payload.get("backlog", 0)),
                int(payload.get("max_backlog", 0)),
                head,
            )
        )
        return head

    def _commit(
        self, event_id: str, topic: str, cursor: int, *, deleted: bool, out: list[Any]
    ) -> None:
        decoded: dict[str, int] | None = None
        if event_id and not cursor_codec.is_checkpoint(event_id):
            try:
                decoded = cursor_codec.decode(event_id)
            except ValueError:
                decoded = None
        if decoded is not None:
            self._pending = {t: s for t, s in decoded.items() if t in self.spec.starts}
            for t in self.joined:
                if t in decoded:
                    self._pending[t] = decoded[t]
        else:
            self._pending[topic] = cursor
        if deleted:  # terminal for that topic only (§7.5)
            self._pending.pop(topic, None)
            self.spec.starts.pop(topic, None)
            self.joined.discard(topic)
        out.append(Commit(event_id or None, dict(self._pending)))

    def _error(self, payload: Mapping[str, Any]) -> None:
        code = payload.get("code")
        wait_ms = payload.get("retry_after_ms")
        if isinstance(wait_ms, int | float):
            self.pause_s = max(self.pause_s, float(wait_ms) / 1000)
        if code == 410:
            self.session_gone()

    def commit(self, marker: Commit) -> dict[str, int]:
        """The consumer took everything before ``marker``: it is the new position."""
        self.committed = dict(marker.cursors)
        if marker.event_id is not None:
            self.last_id = marker.event_id
        self.failures = 0
        return self.committed

    # -- reconnecting ------------------------------------------------------------------

    def reconnect_delay_s(self, *, failed: bool) -> float:
        """How long to wait before the next attempt (rule 5)."""
        self.failures = self.failures + 1 if failed else 0
        base = self.retry_ms / 1000 * float(2 ** min(max(self.failures - 1, 0), 10))
        delay = min(MAX_BACKOFF_S, max(base, self.pause_s)) * random.uniform(0.8, 1.2)
        self.pause_s = 0.0
        return delay


def refused_event(topic: str, frame: Mapping[str, Any]) -> JoinRefusedEvent:
    """A ``join-refused`` (SSE) or ``join_refused`` (WS) frame's event."""
    head, limit = int(frame.get("head_seq", 0)), int(frame.get("max_watch_topics", 0))
    return JoinRefusedEvent(topic, str(frame.get("prefix", "")), head, limit)


_FRAMES = {
    "record": WatchState._record,
    "tombstone": WatchState._tombstone,
    "caught-up": WatchState._caught_up,
    "topic-deleted": WatchState._deleted,
    "topic-added": WatchState._added,
    "backlog-exceeded": WatchState._backlog,
    "end-reached": WatchState._ended,
}
