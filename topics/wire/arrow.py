"""Diff pages as Arrow: record batches built from rendered records, and the IPC answer.

Role: the one place that turns a diff window (``DiffResult.records_json``, the bytes the
JSON answer splices) into an Arrow record batch, for the Spark data source (path mode)
and for the diff route's Arrow answer (``Accept: application/vnd.apache.arrow.stream``),
which the data source reads in url mode. ``pyarrow`` is imported only here, lazily by
callers: a server without it answers JSON.

Rules:
1. Columns come from ``topics._core.columns.record_columns`` (one C pass, no Python
   object per record): ``seq``/``ts`` int64 and ``node``/``tag``/``data``/``meta``
   strings, NULL when absent; ``data`` is the stored JSON text verbatim (JSON ``null`` is
   the text ``null``). A batch has only the columns asked for, in that order.
2. The IPC answer is one Arrow IPC stream: the schema carries the diff's other fields
   (``topic``, ``next_from_seq``, ``head_seq``, ``earliest_seq``, ``caught_up``,
   ``tombstone``, ``lag``, and ``from_seq``/``end_reached`` when the JSON answer has
   them) as JSON under the metadata key ``topics.diff``, then one record batch per
   window (one, possibly empty, unless the route joined windows). Same records, same
   cursors as the JSON answer(s) for the same range.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from .._core.columns import (
    WANT_DATA,
    WANT_LINES,
    WANT_META,
    WANT_NODE,
    WANT_TAG,
    record_columns,
)

__all__ = [
    "ARROW_STREAM",
    "METADATA_KEY",
    "decode_diff",
    "diff_batch",
    "encode_diff",
    "want_flags",
]

ARROW_STREAM = "application/vnd.apache.arrow.stream"
METADATA_KEY = b"topics.diff"

_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"
_TEXT = (("node", WANT_NODE), ("tag", WANT_TAG), ("data", WANT_DATA), ("meta", WANT_META))


def want_flags(
    *, include_tags: bool = True, include_data: bool = True, include_meta: bool = True
) -> int:
    """The columns of a diff read with these flags (``node`` is always rendered)."""
    return (
        WANT_NODE
        | (WANT_TAG if include_tags else 0)
        | (WANT_DATA if include_data else 0)
        | (WANT_META if include_meta else 0)
    )


def _buf(b: bytes | None) -> Any:
    return None if b is None else pa.py_buffer(b)


def diff_batch(
    records_json: bytes, want: int, *, hi: int = -1, start: int = 0
) -> tuple[pa.RecordBatch, int, bytes | None]:
    """The records array at ``records_json[start:]`` as a record batch (rule 1).

    Returns ``(batch, end, lines)``: ``end`` as in ``record_columns`` (records above
    ``hi`` are left out), ``lines`` the data texts as JSON lines when ``want`` has
    ``WANT_LINES``, else None.
    """
    n, end, cols = record_columns(records_json, start, hi, want)
    arrays = [
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(cols["seq"][1])], 0),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(cols["ts"][1])], 0),
    ]
    names = ["seq", "ts"]
    for name, bit in _TEXT:
        if want & bit:
            valid, offsets, values, nulls = cols[name]
            arrays.append(
                pa.Array.from_buffers(
                    pa.string(), n, [_buf(valid), _buf(offsets), _buf(values)], nulls
                )
            )
            names.append(name)
    lines = cols["lines"] if want & WANT_LINES else None
    return pa.RecordBatch.from_arrays(arrays, names=names), end, lines


def encode_diff(records_json: bytes | list[bytes], want: int, fields: dict[str, Any]) -> bytes:
    """The Arrow IPC answer of a diff (rule 2): ``fields`` are the JSON answer's other
    members (``tombstone`` as its dict or None). Several windows' records (a list) are
    one record batch each, so no window's bytes are copied to join them."""
    windows = records_json if isinstance(records_json, list) else [records_json]
    batches = [diff_batch(w, want & ~WANT_LINES)[0] for w in windows or [b"[]"]]
    schema = batches[0].schema.with_metadata({METADATA_KEY: json.dumps(fields).encode()})
    # The stream's parts written directly (a schema message, the record batch messages,
    # the end-of-stream marker): what ``pa.ipc.new_stream`` writes, without its
    # per-stream setup, which cost a sixth of the answer's time.
    return b"".join(
        (
            schema.serialize().to_pybytes(),
            *(b.serialize().to_pybytes() for b in batches),
            _END_OF_STREAM,
        )
    )


def decode_diff(body: bytes) -> tuple[pa.RecordBatch, dict[str, Any]]:
    """An Arrow IPC diff answer back into ``(batch, fields)`` (rule 2)."""
    reader = pa.ipc.open_stream(body)
    meta = reader.schema.metadata or {}
    fields: dict[str, Any] = json.loads(meta[METADATA_KEY])
    batches = list(reader)
    if len(batches) == 1:
        return batches[0], fields
    table = pa.Table.from_batches(batches, schema=reader.schema)
    return table.combine_chunks().to_batches()[0], fields
