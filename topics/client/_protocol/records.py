"""A topic's records: writes (contract §2), reads (§3, the diff) and deletes (§5)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ujson

from topics.errors import InvalidRequestError
from topics.types import DeleteRecordsResult, DiffResult, Record, Tombstone, WriteResult

from .call import Call, Reply, dumps, json_value, perf_ms, topic_path

__all__ = ["delete_records", "diff", "split_array", "tombstone", "write", "write_body"]


# -- writes (§2) ---------------------------------------------------------------------------


def _record_json(record: object, index: int) -> bytes:
    if not isinstance(record, Mapping):
        raise InvalidRequestError.for_field(f"records[{index}]", "must be an object")
    parts = []
    for key, value in record.items():
        field = f"records[{index}].{key}"
        raw = json_value(value, field) if key in ("data", "meta") else dumps(value, field)
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
            parts.append(b',"' + name.encode() + b'":' + json_value(value, name))
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
            wal_append_ms=perf_ms(obj, "wal_append_ms"),
            fsync_ms=perf_ms(obj, "fsync_ms"),
            dedupe=obj.get("dedupe"),
        )

    body = write_body(records, options)
    keyed = options.get("idempotency_key") is not None
    return Call("POST", topic_path(topic), parse, body=body, idempotent=keyed)


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
        topic_path(topic, "/diff"),
        parse,
        body=body,
        wait_s=wait_ms / 1000,
        idempotent=args.get("commit") is not True,
    )


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
            perf_ms(obj, "fsync_ms"),
        )

    body: dict[str, object] = {}
    if before_seq is not None:
        body["before_seq"] = before_seq
    if match is not None:
        body["match"] = list(match) if isinstance(match, tuple) else match
    # A seq bound is idempotent; a tag match is bounded by the head at call time, so a
    # repeat could delete records written in between: not retried after a lost answer.
    return Call(
        "POST", topic_path(topic, "/delete"), parse, body=dumps(body), idempotent=match is None
    )
