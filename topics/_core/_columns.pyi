"""Type stubs for the compiled diff-page column builder (``topics._core._columns``);
``_columns_pure`` matches them exactly.

A diff page's records, as the engine renders them and the HTTP diff route sends them::

    [{"$seq":7,"$ts":1700000000000,"$node":"n1","$tag":"c-1","data":{"sku":"A1"},"meta":{}}]

become Arrow-layout buffers, so ``pyarrow.Array.from_buffers`` can wrap them without a
Python object per record.
"""

from typing import Any, Final

Buffer = bytes | bytearray | memoryview

WANT_NODE: Final[int]  # 1: build the "node" column ($node)
WANT_TAG: Final[int]  # 2: build the "tag" column ($tag)
WANT_DATA: Final[int]  # 4: build the "data" column (the JSON text verbatim)
WANT_META: Final[int]  # 8: build the "meta" column (the JSON text verbatim)
WANT_LINES: Final[int]  # 16: also the data texts as JSON lines (key "lines")
WANT_ALL: Final[int]  # 15: node, tag, data and meta
KIND_BOOL: Final[int]  # 1: true/false -> one byte per row
KIND_INT: Final[int]  # 2: an integer in int64's range -> int64
KIND_FLOAT: Final[int]  # 3: any JSON number -> float64
KIND_STRING: Final[int]  # 4: a string (unescaped), or any other value's JSON text
KIND_TEXT: Final[int]  # 5: a string only (dates and timestamps, cast by the caller)

def record_columns(
    buf: Buffer, start: int = 0, hi: int = -1, want: int = 15
) -> tuple[int, int, dict[str, Any]]:
    """Split the JSON array of rendered records at ``buf[start:]`` into columns.

    Returns ``(rows, end, columns)``. ``end`` is the offset after the array's ``]``, or
    the offset of the first record whose ``$seq`` is above ``hi`` (``hi >= 0``): that
    record and the rest are left out. ``columns`` maps
    ``"seq"``/``"ts"`` to ``(None, int64 values)`` and each wanted text column
    (``"node"``, ``"tag"``, ``"data"``, ``"meta"``) to ``(validity or None, int32
    offsets, values, null_count)``: Arrow's buffers for a ``string`` array, all
    ``bytes``. A missing member, or JSON ``null`` for node/tag/meta, is a null; ``data``
    keeps the text ``null``. ``"lines"`` (with ``WANT_LINES``) is every record's data
    text followed by ``\\n``, with raw CR/LF bytes turned into spaces (JSON lines);
    a data text that is not a JSON object is written as ``{}``.

    Member order does not matter and unknown members are skipped; values are not
    validated. Raises ValueError naming the byte offset for a buffer that is not such an
    array.
    """

def data_fields(
    offsets: Buffer, values: Buffer, first: int, rows: int, spec: list[tuple[str, int]]
) -> tuple[bytes, list[tuple[bytes, bytes, bytes | None]]]:
    """Typed columns of chosen top-level members of JSON object texts.

    The texts are rows ``first .. first + rows - 1`` of an Arrow string array: ``offsets``
    (int32, Arrow's offsets buffer) into ``values``. ``spec`` lists ``(member name,
    KIND_*)``; names match the raw key bytes (a key written with escapes never matches).

    Returns ``(bad, columns)``: ``bad`` is an int32 per row, -1 when the row is fine,
    -2 when its text is not a JSON object, else the index in ``spec`` of a member whose
    value has the wrong type for its kind (the first one met); a bad row is NULL in
    every column. ``columns`` has per field ``(valid, values, offsets)``: one byte per
    row (1 = a value, 0 = NULL: a missing member, JSON ``null``, or a bad row), the
    values (one byte per row for KIND_BOOL, int64/float64 per row for KIND_INT/FLOAT,
    zero under a NULL; the UTF-8 texts for the text kinds), and int32 offsets (text
    kinds only, else None). A repeated member: the last one wins.
    """
