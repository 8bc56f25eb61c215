"""Reading one seq range of one topic into Arrow record batches, gaps included.

Role: the one place that turns diff pages into rows, for batch and streaming reads alike.
A task reads ``(lo, hi]`` of a topic page by page and yields one ``pyarrow.RecordBatch``
per page (Spark takes Arrow batches from Python data sources without a per-row step).

Rules:
1. Tombstones never vanish (contract §3.3). With ``on_gap="fail"`` the first one raises
   :class:`GapError` naming the lost range; with ``"emit"`` it becomes a gap row (see
   ``GAP_FIELD``): ``data``/``ts``/``ts_ms``/``node``/``tag``/``meta`` null, ``seq = gap_to``, and
   the ``gap`` struct set. A gap is clipped to the task's range, so a loss that spans
   several partitions shows as one row per partition; together they cover it exactly.
2. ``data`` is the stored JSON text verbatim (JSON ``null`` is the text ``"null"``; only
   gap rows have SQL NULL there); ``meta`` likewise, NULL when the record has none.
3. A task must reach ``hi``. A data-directory Reader older than the plan is refreshed
   once; if the head is still below ``hi`` the topic was recreated under the read, which
   is reported as a ``recreated`` gap (rule 1), never as a silently short read.
4. ``hi < lo`` is a streaming range whose topic head fell below the stored cursor: the
   topic was deleted and recreated (§3.3 ``recreated``). The task reports that gap, then
   reads the new topic's records ``(0, hi]``.
5. The read's schema decides what is built (column pruning): a record column
   (``RECORD_COLUMNS``) absent from it is never rendered nor split, and any other field
   (bar ``gap`` and ``_corrupt_record``) is a typed data field, parsed from ``data`` by
   pyarrow's JSON reader (C++, one call per page) with that field's type.
6. A record whose data does not fit the typed fields (not a JSON object, a value of
   another type, a number out of range) never silently becomes a wrong value: with
   ``mode=PERMISSIVE`` its typed fields are NULL and ``_corrupt_record`` holds its data
   text; with ``FAILFAST`` the read fails with :class:`BadRecordError` naming the record.
   A missing field is NULL, an unknown one is ignored (``from_json``'s rules).
7. ``$ts`` is two columns: ``ts`` a Spark timestamp (what Kafka's source gives, so
   windows and time filters need no cast) and ``ts_ms`` the stored milliseconds, exact.
   A user schema may declare ``ts bigint`` (the layout before ``ts_ms``) and gets the
   milliseconds there.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]

from .._core.columns import (
    KIND_BOOL,
    KIND_FLOAT,
    KIND_INT,
    KIND_STRING,
    KIND_TEXT,
    WANT_DATA,
    WANT_LINES,
    WANT_META,
    WANT_NODE,
    WANT_TAG,
    data_fields,
)
from ..types import Tombstone
from ._options import OnGap, OptionError
from ._sources import Page, Source

__all__ = [
    "BASE_FIELDS",
    "CORRUPT",
    "GAP_FIELD",
    "RECORD_COLUMNS",
    "BadRecordError",
    "GapError",
    "RangeReader",
    "read_schema",
]

BASE_FIELDS = (
    "topic string, seq bigint, ts timestamp, ts_ms bigint, node string, tag string, "
    "data string, meta string"
)
GAP_FIELD = "gap struct<gap_from: bigint, gap_to: bigint, reason: string, missed_estimate: bigint>"
CORRUPT = "_corrupt_record"
RECORD_COLUMNS = ("topic", "seq", "ts", "ts_ms", "node", "tag", "data", "meta")
_WANT = {"node": WANT_NODE, "tag": WANT_TAG, "data": WANT_DATA, "meta": WANT_META}
# Arrow types pyarrow's JSON reader converts to directly; dates and timestamps are read
# as strings and cast (the reader does not parse ISO dates itself).
_DIRECT = (pa.types.is_boolean, pa.types.is_integer, pa.types.is_floating)


def read_schema(on_gap: OnGap, data_schema: str | None = None, failfast: bool = False) -> str:
    """The DDL schema of a read: the record columns (``data``'s typed fields in place of
    ``data`` when ``data_schema`` is given, then ``_corrupt_record`` unless failfast),
    plus ``gap`` when gaps are emitted."""
    fields = BASE_FIELDS
    if data_schema:
        fields = fields.replace(", data string", ", " + data_schema)
        if not failfast:
            fields += f", {CORRUPT} string"
    return fields if on_gap == "fail" else f"{fields}, {GAP_FIELD}"


def check_data_fields(schema: pa.Schema) -> None:
    """Refuse, at planning, typed data fields pyarrow's JSON reader cannot produce."""
    for f in schema:
        if f.name in RECORD_COLUMNS or f.name in ("gap", CORRUPT):
            continue
        bad = _unsupported(f.type)
        if bad is not None:
            raise OptionError(
                f"data_schema: field {f.name!r} has type {bad}, which the data source cannot "
                "parse from JSON (supported: boolean, tinyint..bigint, float, double, "
                "decimal, string, date, timestamp, timestamp_ntz, and arrays and structs "
                "of these)"
            )


def _unsupported(t: pa.DataType) -> str | None:
    if any(check(t) for check in _DIRECT) or pa.types.is_string(t) or pa.types.is_decimal(t):
        return None
    if pa.types.is_date32(t) or pa.types.is_timestamp(t):
        return None
    if pa.types.is_list(t):
        return _unsupported(t.value_type)
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            bad = _unsupported(t.field(i).type)
            if bad is not None:
                return bad
        return None
    return str(t)


def _as_read(t: pa.DataType) -> pa.DataType:
    """The type the JSON reader is asked for: dates and timestamps as strings."""
    if pa.types.is_date32(t) or pa.types.is_timestamp(t):
        return pa.string()
    if pa.types.is_list(t):
        return pa.list_(_as_read(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _as_read(f.type)) for f in t])
    return t


class GapError(RuntimeError):
    """A read crossed records lost to cap/TTL (or a recreated topic) with ``on_gap=fail``.

    Attributes: ``topic``, ``gap_from``, ``gap_to`` (the lost seqs, inclusive), ``reason``.
    """

    def __init__(self, topic: str, gap_from: int, gap_to: int, reason: str) -> None:
        self.topic, self.gap_from, self.gap_to, self.reason = topic, gap_from, gap_to, reason
        super().__init__(
            f"topic {topic!r}: seqs {gap_from}..{gap_to} were lost (tombstone reason "
            f"{reason!r}) before this read reached them. Read with option on_gap=emit to "
            f"get a gap row instead, or start after the gap (from_seq >= {gap_to})."
        )


class BadRecordError(RuntimeError):
    """A record's data does not fit ``data_schema`` and the read's mode is FAILFAST.

    Attributes: ``topic``, ``seq``, ``data`` (the record's data text), ``reason``.
    """

    def __init__(self, topic: str, seq: int, data: str | None, reason: str) -> None:
        self.topic, self.seq, self.data, self.reason = topic, seq, data, reason
        shown = data if data is None or len(data) <= 200 else data[:200] + "..."
        super().__init__(
            f"topic {topic!r}, seq {seq}: data {shown} does not match data_schema "
            f"({reason}). Read with mode=PERMISSIVE to get it in {CORRUPT} instead."
        )


@dataclass(frozen=True, slots=True)
class _Gap:
    gap_from: int
    gap_to: int
    reason: str

    def as_struct(self) -> dict[str, Any]:
        return {
            "gap_from": self.gap_from,
            "gap_to": self.gap_to,
            "reason": self.reason,
            "missed_estimate": max(0, self.gap_to - self.gap_from + 1),
        }


class RangeReader:
    """Turns pages of one source into batches of the requested Arrow schema (rule 5)."""

    def __init__(
        self,
        source: Source,
        arrow_schema: pa.Schema,
        on_gap: OnGap,
        failfast: bool = False,
        where: object = None,
    ) -> None:
        self.source = source
        self.where = where
        self.schema = arrow_schema
        self.on_gap = on_gap
        self.failfast = failfast
        names = set(arrow_schema.names)
        self.typed = pa.schema(
            [f for f in arrow_schema if f.name not in (*RECORD_COLUMNS, "gap", CORRUPT)]
        )
        self.want = sum(bit for name, bit in _WANT.items() if name in names)
        self.flat = [(f, _kind(f.type)) for f in self.typed if _kind(f.type)]
        self.complex = pa.schema([f for f in self.typed if not _kind(f.type)])
        if len(self.typed) or CORRUPT in names:
            self.want |= WANT_DATA | (WANT_LINES if len(self.complex) else 0)
        self.json_schema = pa.schema([pa.field(f.name, _as_read(f.type)) for f in self.complex])

    def read(self, topic: str, lo: int, hi: int) -> Iterator[pa.RecordBatch]:
        """Yield the rows of ``(lo, hi]`` (rules 1-4)."""
        if hi < lo:
            first = self.source.page(topic, lo, hi, self.want, self.where)
            gap_to = first.earliest_seq - 1
            yield from self._gap(topic, _Gap(1, gap_to, "recreated"))
            lo = max(0, gap_to)  # the new topic's records after what it already lost
        cursor, refreshed = lo, False
        while cursor < hi:
            page = self.source.page(topic, cursor, hi, self.want, self.where)
            tomb = page.tombstone
            if tomb is not None:
                if tomb.reason == "recreated":
                    yield from self._gap(topic, _Gap(tomb.gap_from, tomb.gap_to, "recreated"))
                    return
                yield from self._gap(topic, _clip(tomb, hi))
            if page.count:
                yield self._batch(topic, page)
            if page.next_from_seq >= hi:
                return
            if page.caught_up:
                if refreshed:  # rule 3: the head is below what the plan saw
                    yield from self._gap(topic, _Gap(page.head_seq + 1, hi, "recreated"))
                    return
                self.source.refresh()
                refreshed = True
            cursor = page.next_from_seq

    def _gap(self, topic: str, gap: _Gap) -> Iterator[pa.RecordBatch]:
        if self.on_gap == "fail":
            raise GapError(topic, gap.gap_from, gap.gap_to, gap.reason)
        columns: dict[str, Any] = {
            "topic": [topic],
            "seq": [gap.gap_to],
            "gap": [gap.as_struct()],
        }
        arrays = [pa.array(columns.get(f.name, [None]), type=f.type) for f in self.schema]
        yield pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _batch(self, topic: str, page: Page) -> pa.RecordBatch:
        records = page.batch
        n = records.num_rows
        typed = corrupt = None
        if len(self.typed) or CORRUPT in self.schema.names:
            typed, corrupt = self._typed(topic, records, page.lines or b"")
        arrays = []
        for f in self.schema:
            name = f.name
            if name == "topic":
                arr = _repeat(topic, n)
            elif name in ("ts", "ts_ms"):
                arr = _ts(records.column(records.schema.get_field_index("ts")), f.type)
            elif name in ("seq", "node", "tag", "data", "meta"):
                arr = records.column(records.schema.get_field_index(name))
            elif name == CORRUPT:
                arr = corrupt
            elif name == "gap":
                arr = pa.nulls(n, type=f.type)
            else:
                assert typed is not None
                arr = typed.column(typed.schema.get_field_index(name))
            if arr.type != f.type:
                arr = arr.cast(f.type)
            arrays.append(arr)
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _typed(
        self, topic: str, records: pa.RecordBatch, lines: bytes
    ) -> tuple[pa.RecordBatch, pa.Array]:
        """The typed data fields of a page, and its ``_corrupt_record`` column (rule 6).

        Flat fields come from ``data_fields`` (one C pass over the data texts, which
        also finds the texts that are not objects); decimals, arrays and structs from
        pyarrow's JSON reader over the page's JSON lines.
        """
        n = records.num_rows
        data = records.column(records.schema.get_field_index("data"))
        buffers = data.buffers()
        spec = [(f.name, kind) for f, kind in self.flat]
        bad, flat = data_fields(buffers[1], buffers[2], data.offset, n, spec)
        codes = np.frombuffer(bad, dtype=np.int32)
        reasons: dict[int, str] = {}
        for at in np.flatnonzero(codes != -1):
            code = int(codes[at])
            reasons[int(at)] = "not a JSON object" if code < 0 else _wrong(self.flat[code][0])
        cols: dict[str, pa.Array] = {}
        for (f, kind), (valid, values, offsets) in zip(self.flat, flat, strict=True):
            cols[f.name] = _flat_array(f, kind, n, valid, values, offsets, reasons)
        if len(self.complex):
            ends = np.flatnonzero(np.frombuffer(lines, dtype=np.uint8) == 0x0A) + 1
            starts = np.concatenate(([0], ends[:-1]))
            pieces: list[pa.RecordBatch] = []
            self._parse(lines, starts, ends, 0, n, pieces, reasons)
            table = pa.Table.from_batches(pieces, schema=self.complex).combine_chunks()
            for f in self.complex:
                cols[f.name] = pa.concat_arrays(table.column(f.name).chunks)
        if reasons and self.failfast:
            row = min(reasons)
            seq = records.column(records.schema.get_field_index("seq"))[row].as_py()
            raise BadRecordError(topic, seq, data[row].as_py(), reasons[row])
        arrays = [cols[f.name] for f in self.typed]
        if not reasons:
            return pa.RecordBatch.from_arrays(arrays, schema=self.typed), pa.nulls(n, pa.string())
        import pyarrow.compute as pc  # type: ignore[import-untyped]  # (_sources rule 6)

        mask = np.ones(n, dtype=bool)
        mask[list(reasons)] = False
        keep = pa.array(mask)
        arrays = [pc.if_else(keep, a, pa.nulls(n, a.type)) for a in arrays]
        return (
            pa.RecordBatch.from_arrays(arrays, schema=self.typed),
            pc.if_else(keep, pa.nulls(n, pa.string()), data),
        )

    def _parse(
        self,
        lines: bytes,
        starts: Any,
        ends: Any,
        lo: int,
        hi: int,
        out: list[pa.RecordBatch],
        reasons: dict[int, str],
    ) -> None:
        """Parse lines ``[lo, hi)`` into ``out``; a block that fails is halved until the
        records at fault are found alone (each then becomes a row of NULLs)."""
        if lo >= hi:
            return
        import pyarrow.json as pa_json  # type: ignore[import-untyped]  # (_sources rule 6)

        chunk = lines[starts[lo] : ends[hi - 1]]
        try:
            table = pa_json.read_json(
                io.BytesIO(chunk),
                read_options=pa_json.ReadOptions(use_threads=False, block_size=len(chunk) + 1),
                parse_options=pa_json.ParseOptions(
                    explicit_schema=self.json_schema, unexpected_field_behavior="ignore"
                ),
            )
            if table.num_rows != hi - lo:  # never expected: one object per line
                raise pa.ArrowInvalid(f"{table.num_rows} rows for {hi - lo} lines")
            out.extend(table.cast(self.complex).combine_chunks().to_batches())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            if hi - lo == 1:
                reasons.setdefault(lo, str(exc).splitlines()[0])
                out.append(_empty(self.complex, 1))
                return
            mid = (lo + hi) // 2
            self._parse(lines, starts, ends, lo, mid, out, reasons)
            self._parse(lines, starts, ends, mid, hi, out, reasons)


def _kind(t: pa.DataType) -> int:
    """The ``data_fields`` kind of a flat type; 0 for the JSON reader's types."""
    if pa.types.is_boolean(t):
        return KIND_BOOL
    if pa.types.is_integer(t):
        return KIND_INT
    if pa.types.is_floating(t):
        return KIND_FLOAT
    if pa.types.is_string(t):
        return KIND_STRING
    if pa.types.is_date32(t) or pa.types.is_timestamp(t):
        return KIND_TEXT
    return 0


def _wrong(f: pa.Field) -> str:
    return f"field {f.name!r} is not a {f.type}"


def _flat_array(
    f: pa.Field,
    kind: int,
    n: int,
    valid: bytes,
    values: bytes,
    offsets: bytes | None,
    reasons: dict[int, str],
) -> pa.Array:
    """One ``data_fields`` column as an Arrow array of ``f``'s type; rows whose value
    does not fit it (an integer out of a narrower type's range, an unparsable date or
    timestamp) are added to ``reasons``."""
    ok = np.frombuffer(valid, dtype=np.uint8).astype(bool)
    bitmap = pa.py_buffer(np.packbits(ok, bitorder="little").tobytes())
    nulls = n - int(ok.sum())
    if kind == KIND_BOOL:
        return pa.array(np.frombuffer(values, dtype=np.uint8).astype(bool), mask=~ok)
    if kind in (KIND_INT, KIND_FLOAT):
        wide = pa.int64() if kind == KIND_INT else pa.float64()
        arr = pa.Array.from_buffers(wide, n, [bitmap, pa.py_buffer(values)], nulls)
        if kind == KIND_INT and f.type != wide:
            info = np.iinfo(f.type.to_pandas_dtype())
            v = np.frombuffer(values, dtype=np.int64)
            for at in np.flatnonzero(ok & ((v < info.min) | (v > info.max))):
                reasons.setdefault(int(at), _wrong(f))
        return arr if f.type == wide else arr.cast(f.type, safe=False)
    assert offsets is not None
    text = pa.Array.from_buffers(
        pa.string(), n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(values)], nulls
    )
    if kind == KIND_STRING:
        return text
    import pyarrow.compute as pc  # (_sources rule 6)

    try:
        return pc.cast(text, f.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # find the rows at fault
        out = []
        for row, value in enumerate(text.to_pylist()):
            try:
                out.append(pc.cast(pa.array([value]), f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                reasons.setdefault(row, _wrong(f))
                out.append(pa.nulls(1, f.type))
        return pa.concat_arrays(out)


def _ts(ms: pa.Array, t: pa.DataType) -> pa.Array:
    """``$ts`` (int64 ms since the epoch) as column type ``t`` (rule 7): a timestamp, or
    the milliseconds themselves for an integer column (``ts_ms``, or ``ts bigint`` in a
    user schema written for the old layout)."""
    if not pa.types.is_timestamp(t):
        return ms
    return ms.view(pa.timestamp("ms", tz=t.tz)).cast(t)


def _empty(schema: pa.Schema, n: int = 0) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.nulls(n, f.type) for f in schema], schema=schema)


def _repeat(text: str, n: int) -> pa.Array:
    """``n`` copies of one string, built from buffers (no list of ``n`` objects)."""
    raw = text.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(raw * n)], 0
    )


def _clip(tomb: Tombstone, hi: int) -> _Gap:
    return _Gap(tomb.gap_from, min(tomb.gap_to, hi), tomb.reason)
