"""Records as CloudEvents 1.0 JSON events (``format: "cloudevents"``, issue 18).

Each record becomes one structured-mode event::

    {"specversion":"1.0","id":"orders@42","source":"/v0/topics/orders",
     "type":"refund.created","time":"2026-11-25T17:09:24.123Z",
     "datacontenttype":"application/json","subject":"<$tag>","topicsseq":42,
     "topicsnode":"<$node>","data":<the record's data, verbatim>}

Rules:
1. ``id`` is ``topic@seq``: unique per topic instance, as CloudEvents asks of
   ``source`` + ``id``. ``source`` is the topic's path on the /v0 surface (a URI
   reference, which the spec allows).
2. ``type`` is the string member ``type_field`` (default ``"type"``) of the record's
   ``meta``, else ``DEFAULT_TYPE``. ``time`` is ``$ts`` in RFC 3339 UTC, millisecond
   precision. ``subject``/``topicsnode`` only when the record has a tag/node;
   ``topicsseq`` is the record's ``$seq`` (an extension attribute).
3. ``data`` is spliced from the stored bytes, never re-encoded. Tombstones are not
   events: a diff answer keeps its ``tombstone`` member and a watch its ``tombstone``
   frame, unchanged.
"""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import quote

import ujson

from .._core.scan import split_write_body
from ..errors import InvalidRequestError

__all__ = ["DEFAULT_TYPE", "DEFAULT_TYPE_FIELD", "FORMATS", "check_format", "to_cloudevents"]

DEFAULT_TYPE = "topics.record"
DEFAULT_TYPE_FIELD = "type"
FORMATS = ("records", "cloudevents")
_DEFAULT_TYPE_JSON = b'"' + DEFAULT_TYPE.encode() + b'"'


def check_format(value: object, type_field: object) -> tuple[str, str]:
    """Validate ``format`` and ``ce_type_field``; returns them cleaned."""
    if value is None:
        value = "records"
    if value not in FORMATS:
        raise InvalidRequestError.for_field(
            "format", f'must be "records" or "cloudevents", got {value!r}'
        )
    if type_field is None:
        type_field = DEFAULT_TYPE_FIELD
    if not isinstance(type_field, str) or not type_field:
        raise InvalidRequestError.for_field(
            "ce_type_field", f"must be a non-empty string, got {type_field!r}"
        )
    return str(value), type_field


def _dumps(value: object) -> bytes:
    return ujson.dumps(value, ensure_ascii=False, escape_forward_slashes=False).encode()


def _int(v: object) -> int:
    assert isinstance(v, int)
    return v


def rfc3339(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def _event_type(meta: object, type_field: str) -> bytes:
    """The event's ``type`` as JSON text (rule 2). Meta no reader can decode (a record
    stored before the write check refused lone surrogates and 309-digit integers,
    docs/GUARANTEES.md) gives ``DEFAULT_TYPE``: one such record must not fail the answer
    or the watch that carries every other event."""
    if isinstance(meta, bytes):
        try:
            m = ujson.loads(meta)
            t = m.get(type_field) if isinstance(m, dict) else None
            if isinstance(t, str) and t:
                return _dumps(t)
        except (ValueError, OverflowError):  # UnicodeEncodeError is a ValueError
            pass
    return _DEFAULT_TYPE_JSON


def to_cloudevents(topic: str, records_json: bytes, type_field: str = DEFAULT_TYPE_FIELD) -> bytes:
    """Turn a rendered records array (with data, meta and tags) into an events array."""
    records, _ = split_write_body(b'{"records":' + records_json + b"}")
    if not records:
        return b"[]"
    source = _dumps("/v0/topics/" + quote(topic, safe=":"))
    prefix = _dumps(topic + "@")[:-1]  # the id's opening quote and "topic@"
    out: list[bytes] = []
    for rec in records:
        seq = rec["$seq"]
        parts = [
            b'{"specversion":"1.0","id":',
            prefix,
            str(seq).encode(),
            b'","source":',
            source,
            b',"type":',
            _event_type(rec.get("meta"), type_field),
            b',"time":"',
            rfc3339(_int(rec["$ts"])).encode(),
            b'","datacontenttype":"application/json"',
        ]
        tag, node = rec.get("$tag"), rec.get("$node")
        if tag is not None:
            parts += [b',"subject":', _dumps(tag)]
        parts += [b',"topicsseq":', str(seq).encode()]
        if node is not None:
            parts += [b',"topicsnode":', _dumps(node)]
        data = rec.get("data")
        parts += [b',"data":', data if isinstance(data, bytes) else b"null", b"}"]
        out.append(b"".join(parts))
    return b"[" + b",".join(out) + b"]"
