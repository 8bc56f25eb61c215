"""The /v0 calls as values: request building and response parsing, with no I/O (STYLE §4).

Every public method of :class:`topics.Client` and :class:`topics.AsyncClient` is one
:class:`Call` built here and run by the sync or async driver, so the two clients cannot
drift apart: same paths, bodies, result types and error mapping.

Rules:
1. Results are the in-process API's types (``topics.types``, ``topics.router_types``,
   ``topics.queue_types``), so code moves between ``topics.open`` and ``Client`` by changing
   one line. Unknown response members are ignored (contract §0.1).
2. A record's ``data``/``meta`` given as ``bytes`` is already-encoded JSON: it is spliced
   into the request body verbatim, never decoded and re-encoded (``1.50`` stays ``1.50``).
   Any other value is encoded once with ujson (NaN/Infinity refused, as the engine does).
3. Names are checked with the engine's own rules before anything is sent, so a bad name
   is the same ``invalid_request`` embedded and remote (and never becomes another path).
4. A diff answer keeps the server's ``records`` bytes as ``records_json`` when the body has
   the server's layout (checked, not trusted: the span must parse as exactly one array);
   otherwise the records are re-encoded from the parsed body.
5. ``idempotent`` says whether a call may be sent again after a lost answer: reads,
   PUT/DELETE upserts, ack/nack/extend, and writes that carry an ``idempotency_key``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import ujson

from topics._cursors import check_cursor_name
from topics._names import check_router_name, check_topic_name
from topics.config import TopicConfig
from topics.cursor_types import CursorInfo, DeleteCursorResult
from topics.errors import InvalidRequestError
from topics.queue_types import (
    AckResult,
    ClaimResult,
    ExtendResult,
    Job,
    NackResult,
    RedriveResult,
)
from topics.router_types import (
    DeleteRouterResult,
    PutRouterResult,
    RouterConfig,
    RouterInfo,
    RouterPage,
    RouterSummary,
)
from topics.types import (
    DeleteRecordsResult,
    DeleteTopicResult,
    DiffResult,
    PutTopicResult,
    Record,
    Tombstone,
    TopicPage,
    TopicState,
    TopicSummary,
    WriteResult,
)

__all__ = ["Call", "Reply", "dumps", "write_body"]

T = TypeVar("T")
_BYTES = (bytes, bytearray, memoryview)


@dataclass(frozen=True, slots=True)
class Reply:
    """A successful HTTP answer: status, raw body and the server's X-Request-ID."""

    status: int
    body: bytes
    request_id: str | None = None

    def json(self) -> dict[str, Any]:
        value = ujson.loads(self.body) if self.body else {}
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request and how to read its answer.

    Attributes:
        idempotent: safe to send again when the answer was lost (rule 5).
        wait_s: extra seconds the server may legitimately hold the request (long polls).
    """

    method: str
    path: str
    parse: Callable[[Reply], T]
    params: Mapping[str, str] | None = None
    body: bytes | None = None
    idempotent: bool = True
    headers: Mapping[str, str] | None = None
    wait_s: float = 0.0


def dumps(value: object, field: str = "body") -> bytes:
    """Compact UTF-8 JSON of ``value``; unencodable values are ``invalid_request``."""
    try:
        return ujson.dumps(
            value, ensure_ascii=False, escape_forward_slashes=False, allow_nan=False
        ).encode()
    except (TypeError, OverflowError, ValueError) as exc:
        raise InvalidRequestError(
            f"{field}: cannot be encoded as JSON ({exc})", detail={"field": field}
        ) from None


def _json_value(value: object, field: str) -> bytes:
    """Rule 2: bytes are JSON text already; anything else is encoded once."""
    if isinstance(value, _BYTES):
        return bytes(value)
    return dumps(value, field)


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _topic_path(topic: str, suffix: str = "") -> str:
    return "/v0/topics/" + quote(check_topic_name(topic), safe="") + suffix


def _router_path(router: str) -> str:
    return "/v0/routers/" + quote(check_router_name(router), safe="")


def _fields(cls: type[Any], obj: Mapping[str, Any]) -> dict[str, Any]:
    """The members of ``obj`` that are fields of dataclass ``cls`` (rule 1)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in obj.items() if k in names}


def _perf(obj: Mapping[str, Any], name: str) -> float:
    perf = obj.get("performance")
    value = perf.get(name, 0.0) if isinstance(perf, dict) else 0.0
    return float(value) if isinstance(value, int | float) else 0.0


# -- topics (§1) ---------------------------------------------------------------------------


def topic_config(obj: Mapping[str, Any]) -> TopicConfig:
    return TopicConfig(**_fields(TopicConfig, obj))


def put_topic(topic: str, config: Mapping[str, Any] | None) -> Call[PutTopicResult]:
    def parse(reply: Reply) -> PutTopicResult:
        obj = reply.json()
        return PutTopicResult(obj["topic"], bool(obj["created"]), topic_config(obj["config"]))

    body = dumps(dict(config), "config") if config is not None else None
    return Call("PUT", _topic_path(topic), parse, body=body)


def topic_state(obj: Mapping[str, Any]) -> TopicState:
    queue = obj.get("queue")
    return TopicState(
        topic=obj["topic"],
        type=obj.get("type", "log"),
        head_seq=obj["head_seq"],
        earliest_seq=obj["earliest_seq"],
        next_seq=obj.get("next_seq", obj["head_seq"] + 1),
        count=obj["count"],
        bytes=obj["bytes"],
        config=topic_config(obj.get("config") or {}),
        effective_priority=obj.get("effective_priority", 0),
        last_write_ts=obj.get("last_write_ts"),
        last_read_ts=obj.get("last_read_ts"),
        queue=dict(queue) if isinstance(queue, dict) else None,
    )


def get_topic(topic: str, touch: bool) -> Call[TopicState]:
    params = None if touch else {"touch": "false"}
    return Call("GET", _topic_path(topic), lambda r: topic_state(r.json()), params=params)


def _summary(obj: Mapping[str, Any]) -> TopicSummary:
    durable = bool(obj.get("durable", False))
    return TopicSummary(
        topic=obj["topic"],
        type=obj.get("type", "log"),
        head_seq=obj["head_seq"],
        earliest_seq=obj["earliest_seq"],
        count=obj["count"],
        bytes=obj["bytes"],
        durable=durable,
        durability=obj.get("durability", "fsync" if durable else "disk"),
        effective_priority=obj.get("effective_priority", 0),
    )


def list_topics(
    prefix: str | None, page_size: int, cursor: str | None, touch: bool
) -> Call[TopicPage]:
    params = {"page_size": str(page_size)}
    if prefix:
        params["prefix"] = prefix
    if cursor:
        params["cursor"] = cursor
    if touch:
        params["touch"] = "true"

    def parse(reply: Reply) -> TopicPage:
        obj = reply.json()
        return TopicPage([_summary(t) for t in obj["topics"]], obj.get("next_cursor"))

    return Call("GET", "/v0/topics", parse, params=params)


def delete_topic(topic: str, if_empty: bool) -> Call[DeleteTopicResult]:
    def parse(reply: Reply) -> DeleteTopicResult:
        obj = reply.json()
        return DeleteTopicResult(
            obj["topic"], bool(obj["deleted"]), list(obj.get("routers_removed", []))
        )

    params = {"if_empty": "true"} if if_empty else None
    return Call("DELETE", _topic_path(topic), parse, params=params)


# -- writes (§2) ---------------------------------------------------------------------------


def _record_json(record: object, index: int) -> bytes:
    if not isinstance(record, Mapping):
        raise InvalidRequestError.for_field(f"records[{index}]", "must be an object")
    parts = []
    for key, value in record.items():
        field = f"records[{index}].{key}"
        raw = _json_value(value, field) if key in ("data", "meta") else dumps(value, field)
        parts.append(dumps(key, field) + b":" + raw)
    return b"{" + b",".join(parts) + b"}"


def write_body(records: Sequence[Mapping[str, Any]], options: Mapping[str, object]) -> bytes:
    """The write body, spliced (rule 2): ``{"records":[...],<options>}``.

    ``options`` with a None value are left out.
    """
    if not isinstance(records, list | tuple):
        raise InvalidRequestError.for_field("records", "must be an array of records")
    parts = [b'{"records":[', b",".join(_record_json(r, i) for i, r in enumerate(records)), b"]"]
    for name, value in options.items():
        if value is not None:
            parts.append(b',"' + name.encode() + b'":' + _json_value(value, name))
    parts.append(b"}")
    return b"".join(parts)


def write(
    topic: str, records: Sequence[Mapping[str, Any]], options: Mapping[str, object]
) -> Call[WriteResult]:
    def parse(reply: Reply) -> WriteResult:
        obj = reply.json()
        seqs = obj.get("seqs")
        return WriteResult(
            topic=obj["topic"],
            first_seq=obj["first_seq"],
            last_seq=obj["last_seq"],
            seqs=list(seqs) if seqs is not None else None,
            head_seq=obj["head_seq"],
            count=obj["count"],
            created=bool(obj.get("created", False)),
            deduped=bool(obj.get("deduped", False)),
            wal_append_ms=_perf(obj, "wal_append_ms"),
            fsync_ms=_perf(obj, "fsync_ms"),
            dedupe=obj.get("dedupe"),
        )

    body = write_body(records, options)
    keyed = options.get("idempotency_key") is not None
    return Call("POST", _topic_path(topic), parse, body=body, idempotent=keyed)


# -- reads (§3) ----------------------------------------------------------------------------


def tombstone(obj: Mapping[str, Any]) -> Tombstone:
    gap_from, gap_to = obj["gap_from"], obj["gap_to"]
    return Tombstone(
        gap_from=gap_from,
        gap_to=gap_to,
        reason=obj.get("reason", "cap"),
        missed_estimate=obj.get("missed_estimate", max(0, gap_to - gap_from + 1)),
        earliest_seq=obj.get("earliest_seq", gap_to + 1),
        head_seq=obj.get("head_seq", gap_to),
    )


def split_array(
    body: bytes, key: str, head: bytes, next_key: bytes
) -> tuple[dict[str, Any], bytes, list[Any]]:
    """``(other members, array bytes, array values)`` of member ``key`` of a JSON body the
    server lays out as ``head [...] next_key ...``.

    Rule 4: the array's bytes are kept verbatim when the body starts with ``head`` and the
    span up to the last ``next_key`` parses as exactly one array (a wrong guess cannot
    parse: "trailing data" or a truncated value); otherwise the body is parsed whole and
    the array re-encoded.
    """
    if body.startswith(head):
        end = body.rfind(next_key)
        if end > len(head):
            span = body[len(head) : end]
            try:
                values = ujson.loads(span)
                rest = ujson.loads(body[: len(head)] + b"null" + body[end:])
            except ValueError:
                values = rest = None
            if isinstance(values, list) and isinstance(rest, dict):
                return rest, span, values
    obj = ujson.loads(body)
    values = obj.get(key) or []
    return obj, dumps(values), values


def diff(topic: str, args: Mapping[str, object], wait_ms: int) -> Call[DiffResult]:
    head = b'{"topic":"' + topic.encode() + b'","records":'

    def parse(reply: Reply) -> DiffResult:
        obj, records_json, values = split_array(reply.body, "records", head, b',"next_from_seq":')
        tomb = obj.get("tombstone")
        perf = obj.get("performance")
        scanned = perf.get("records_scanned", 0) if isinstance(perf, dict) else 0
        fmt = "cloudevents" if args.get("format") == "cloudevents" else "records"
        records = [Record.from_json(v) for v in values] if fmt == "records" else []
        return DiffResult(
            topic=obj.get("topic", topic),
            records_json=records_json,
            record_count=len(values),
            next_from_seq=obj["next_from_seq"],
            head_seq=obj["head_seq"],
            earliest_seq=obj["earliest_seq"],
            caught_up=bool(obj["caught_up"]),
            tombstone=tombstone(tomb) if isinstance(tomb, dict) else None,
            lag=obj.get("lag", obj["head_seq"] - obj["next_from_seq"]),
            records_scanned=scanned,
            _decoded=records,
            from_seq=obj.get("from_seq"),
            end_reached=obj.get("end_reached"),
            format=fmt,
        )

    body = dumps({k: v for k, v in args.items() if v is not None}, "diff")
    # A committing read is not sent again after a lost answer: the retry would skip what
    # the first commit covered.
    return Call(
        "POST",
        _topic_path(topic, "/diff"),
        parse,
        body=body,
        wait_s=wait_ms / 1000,
        idempotent=args.get("commit") is not True,
    )


# -- named cursors -------------------------------------------------------------------------


def _cursor_path(topic: str, cursor: str | None = None) -> str:
    tail = "" if cursor is None else "/" + quote(check_cursor_name(cursor), safe="")
    return _topic_path(topic, "/cursors" + tail)


def cursor_info(obj: Mapping[str, Any]) -> CursorInfo:
    return CursorInfo(**_fields(CursorInfo, obj))


def put_cursor(topic: str, cursor: str, seq: int, expect_seq: int | None) -> Call[CursorInfo]:
    body: dict[str, object] = {"seq": seq}
    if expect_seq is not None:
        body["expect_seq"] = expect_seq
    # With expect_seq a repeat after a lost answer would be a 409 against its own commit.
    return Call(
        "PUT",
        _cursor_path(topic, cursor),
        lambda r: cursor_info(r.json()),
        body=dumps(body),
        idempotent=expect_seq is None,
    )


def get_cursor(topic: str, cursor: str) -> Call[CursorInfo]:
    return Call("GET", _cursor_path(topic, cursor), lambda r: cursor_info(r.json()))


def list_cursors(topic: str) -> Call[list[CursorInfo]]:
    def parse(reply: Reply) -> list[CursorInfo]:
        return [cursor_info(c) for c in reply.json().get("cursors", [])]

    return Call("GET", _cursor_path(topic), parse)


def delete_cursor(topic: str, cursor: str) -> Call[DeleteCursorResult]:
    def parse(reply: Reply) -> DeleteCursorResult:
        obj = reply.json()
        return DeleteCursorResult(obj["topic"], obj["cursor"], bool(obj["deleted"]))

    return Call("DELETE", _cursor_path(topic, cursor), parse)


# -- deletes (§5) --------------------------------------------------------------------------


def delete_records(topic: str, before_seq: int | None, match: object) -> Call[DeleteRecordsResult]:
    if before_seq is None and match is None:
        raise InvalidRequestError("give before_seq, match, or both", detail={"field": "before_seq"})

    def parse(reply: Reply) -> DeleteRecordsResult:
        obj = reply.json()
        return DeleteRecordsResult(
            obj["topic"],
            obj["deleted"],
            obj["earliest_seq"],
            obj["head_seq"],
            obj["count"],
            obj["bytes"],
            _perf(obj, "fsync_ms"),
        )

    body: dict[str, object] = {}
    if before_seq is not None:
        body["before_seq"] = before_seq
    if match is not None:
        body["match"] = list(match) if isinstance(match, tuple) else match
    # A seq bound is idempotent; a tag match is bounded by the head at call time, so a
    # repeat could delete records written in between: not retried after a lost answer.
    return Call(
        "POST", _topic_path(topic, "/delete"), parse, body=dumps(body), idempotent=match is None
    )


# -- routers (§6) --------------------------------------------------------------------------


def router_config(obj: Mapping[str, Any]) -> RouterConfig:
    fields = _fields(RouterConfig, obj)
    flt = fields.get("filter")
    if isinstance(flt, list):
        fields["filter"] = tuple(flt)
    return RouterConfig(**fields)


def put_router(router: str, body: Mapping[str, Any] | None) -> Call[PutRouterResult]:
    def parse(reply: Reply) -> PutRouterResult:
        obj = reply.json()
        return PutRouterResult(obj["router"], bool(obj["created"]), router_config(obj))

    raw = dumps(dict(body), "router") if body is not None else None
    return Call("PUT", _router_path(router), parse, body=raw)


def router_info(obj: Mapping[str, Any]) -> RouterInfo:
    return RouterInfo(
        router=obj["router"],
        config=router_config(obj),
        cursor=obj.get("cursor", 0),
        forwarded_total=obj.get("forwarded_total", 0),
        dropped_total=obj.get("dropped_total", 0),
        lag=obj.get("lag", 0),
    )


def get_router(router: str) -> Call[RouterInfo]:
    return Call("GET", _router_path(router), lambda r: router_info(r.json()))


def list_routers(
    prefix: str | None, source: str | None, dest: str | None, page_size: int, cursor: str | None
) -> Call[RouterPage]:
    params = {"page_size": str(page_size)}
    for name, value in (("prefix", prefix), ("source", source), ("dest", dest), ("cursor", cursor)):
        if value:
            params[name] = value

    def parse(reply: Reply) -> RouterPage:
        obj = reply.json()
        routers = [
            RouterSummary(
                router=r["router"],
                source=r["source"],
                dest=r["dest"],
                guarantee=r.get("guarantee", "at_least_once"),
                forwarded_total=r.get("forwarded_total", 0),
            )
            for r in obj["routers"]
        ]
        return RouterPage(routers, obj.get("next_cursor"))

    return Call("GET", "/v0/routers", parse, params=params)


def delete_router(router: str) -> Call[DeleteRouterResult]:
    def parse(reply: Reply) -> DeleteRouterResult:
        obj = reply.json()
        return DeleteRouterResult(obj["router"], bool(obj["deleted"]))

    return Call("DELETE", _router_path(router), parse)


# -- queues (§10) --------------------------------------------------------------------------


def claim_result(obj: Mapping[str, Any], topic: str) -> ClaimResult:
    jobs = [Job.from_json(j) for j in obj.get("claimed", [])]
    return ClaimResult(
        topic=obj.get("topic", topic),
        fragments=tuple(dumps(j) for j in obj.get("claimed", [])),
        seqs=tuple(j.seq for j in jobs),
        lease_ids=tuple(j.lease_id for j in jobs),
        ready=obj.get("ready", 0),
        fsync_ms=_perf(obj, "fsync_ms"),
        _decoded=jobs,
    )


def claim(topic: str, node: str, max: int, lease_ms: int | None) -> Call[ClaimResult]:
    body: dict[str, object] = {"node": node, "max": max}
    if lease_ms is not None:
        body["lease_ms"] = lease_ms
    # Not idempotent: a repeat after a lost answer would lease more jobs (they come back
    # when their lease expires, but that is a delay, not a retry).
    return Call(
        "POST",
        _topic_path(topic, "/claim"),
        lambda r: claim_result(r.json(), topic),
        body=dumps(body),
        idempotent=False,
    )


def _lease_body(
    node: str, seqs: Sequence[int], lease_ids: Sequence[str] | None, **extra: object
) -> bytes:
    body: dict[str, object] = {"node": node, "seqs": list(seqs)}
    if lease_ids is not None:
        body["lease_ids"] = list(lease_ids)
    body.update({k: v for k, v in extra.items() if v is not None})
    return dumps(body)


def ack(
    topic: str, node: str, seqs: Sequence[int], lease_ids: Sequence[str] | None
) -> Call[AckResult]:
    def parse(reply: Reply) -> AckResult:
        o = reply.json()
        return AckResult(
            o["topic"], o["acked"], list(o["skipped"]), o["ready"], o["in_flight"],
            _perf(o, "fsync_ms"),
        )  # fmt: skip

    return Call("POST", _topic_path(topic, "/ack"), parse, body=_lease_body(node, seqs, lease_ids))


def nack(
    topic: str, node: str, seqs: Sequence[int], delay_ms: int, lease_ids: Sequence[str] | None
) -> Call[NackResult]:
    def parse(reply: Reply) -> NackResult:
        o = reply.json()
        return NackResult(
            o["topic"], o["nacked"], list(o["skipped"]), o["ready"], o["in_flight"],
            _perf(o, "fsync_ms"),
        )  # fmt: skip

    body = _lease_body(node, seqs, lease_ids, delay_ms=delay_ms)
    return Call("POST", _topic_path(topic, "/nack"), parse, body=body)


def extend(
    topic: str, node: str, seqs: Sequence[int], lease_ms: int, lease_ids: Sequence[str] | None
) -> Call[ExtendResult]:
    def parse(reply: Reply) -> ExtendResult:
        o = reply.json()
        deadlines = {int(k): v for k, v in (o.get("deadlines") or {}).items()}
        return ExtendResult(
            o["topic"], o["extended"], list(o["skipped"]), deadlines, _perf(o, "fsync_ms")
        )

    body = _lease_body(node, seqs, lease_ids, lease_ms=lease_ms)
    return Call("POST", _topic_path(topic, "/extend"), parse, body=body)


def redrive(
    topic: str, to: str | None, max: int | None, where: Mapping[str, Any] | None
) -> Call[RedriveResult]:
    def parse(reply: Reply) -> RedriveResult:
        o = reply.json()
        return RedriveResult(
            o["topic"], o["moved"], o["skipped"], o["remaining"], list(o["batches"]),
            _perf(o, "fsync_ms"),
        )  # fmt: skip

    body = {k: v for k, v in (("to", to), ("max", max), ("where", where)) if v is not None}
    # Not retried: a repeat after a lost answer would move up to max more jobs.
    return Call("POST", _topic_path(topic, "/redrive"), parse, body=dumps(body), idempotent=False)


# -- probes (§8) ---------------------------------------------------------------------------


def probe(path: str) -> Call[dict[str, Any]]:
    return Call("GET", path, lambda r: r.json())


def metrics() -> Call[dict[str, Any]]:
    return Call("GET", "/v0/metrics", lambda r: r.json(), headers={"Accept": "application/json"})
