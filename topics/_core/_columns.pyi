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
