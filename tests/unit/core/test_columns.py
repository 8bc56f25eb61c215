"""The diff-page column builder: compiled and pure agree, and the buffers are Arrow's.

``_columns_pure`` is the oracle; every case runs through both implementations.
"""

from __future__ import annotations

import importlib
import json
import os
import struct
from types import ModuleType

import pytest

from topics._core import columns as selector


def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"topics._core.{name}")
    except ImportError:
        return None


PURE = _load("_columns_pure")
EXT = _load("_columns")
needs_ext = pytest.mark.skipif(EXT is None, reason="compiled topics._core._columns not built")
IMPLS = [pytest.param(PURE, id="pure"), pytest.param(EXT, id="cython", marks=needs_ext)]

PAGE = (
    b' [{"$seq":7,"$ts":-5,"$node":"n\\u00e9\\ud83d\\ude00","$tag":"a\\"b\\n",'
    b'"data":{"a":[1,"]}"],"b":null},"meta":{"m":1}} , '
    b'{"$seq":8,"$ts":2,"data":null,"meta":null},'
    b'{"$seq":9,"$ts":3,"data":"x\\ny","$tag":"\\ud800","extra":[{"k":"}"}]},'
    b'{"$seq":10,"$ts":4,"data":{\n"multi":\r\n1}}] tail'
)


def _texts(col: tuple[bytes | None, bytes, bytes, int], n: int) -> list[str | None]:
    valid, offsets, values, nulls = col
    offs = struct.unpack(f"<{n + 1}i", offsets)
    out: list[str | None] = []
    for i in range(n):
        ok = valid is None or valid[i // 8] >> (i % 8) & 1
        out.append(values[offs[i] : offs[i + 1]].decode() if ok else None)
    assert nulls == out.count(None)
    return out


@pytest.mark.parametrize("impl", IMPLS)
def test_columns_of_a_page(impl: ModuleType) -> None:
    n, end, cols = impl.record_columns(PAGE, 0, -1, impl.WANT_ALL | impl.WANT_LINES)
    assert (n, PAGE[end:]) == (4, b" tail")
    assert struct.unpack("<4q", cols["seq"][1]) == (7, 8, 9, 10)
    assert struct.unpack("<4q", cols["ts"][1]) == (-5, 2, 3, 4)
    assert _texts(cols["node"], n) == ["n\u00e9\U0001f600", None, None, None]
    assert _texts(cols["tag"], n) == ['a"b\n', None, "\ufffd", None]
    assert _texts(cols["data"], n) == [
        '{"a":[1,"]}"],"b":null}',
        "null",  # JSON null data stays the text "null"
        '"x\\ny"',
        '{\n"multi":\r\n1}',  # verbatim
    ]
    assert _texts(cols["meta"], n) == ['{"m":1}', None, None, None]
    lines = cols["lines"].decode().splitlines()
    assert lines == ['{"a":[1,"]}"],"b":null}', "{}", "{}", '{ "multi":  1}']
    assert [json.loads(line) for line in lines][3] == {"multi": 1}


@pytest.mark.parametrize("impl", IMPLS)
def test_hi_cuts_the_page_and_want_prunes_columns(impl: ModuleType) -> None:
    n, end, cols = impl.record_columns(PAGE, 0, 8, impl.WANT_TAG)
    assert n == 2
    assert PAGE[end:].startswith(b'{"$seq":9')
    assert set(cols) == {"seq", "ts", "tag"}
    assert impl.record_columns(b"[]", 0) == (0, 2, impl.record_columns(b"[]", 0)[2])


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("bad", [b"{}", b"[1]", b'[{"$ts":1}]', b'[{"$seq":1,"data":{"a":1]', b"["])
def test_malformed_pages_raise(impl: ModuleType, bad: bytes) -> None:
    with pytest.raises(ValueError, match="malformed diff records"):
        impl.record_columns(bad)


@needs_ext
def test_compiled_matches_pure_on_a_real_page(tmp_path: object) -> None:
    import topics

    path = str(tmp_path)
    with topics.open(path) as db:
        db.write(
            "t",
            [
                {
                    "data": {"i": i, "s": "é" * (i % 3), "l": [i, None]},
                    "tag": f"t{i}",
                    "meta": {"m": i},
                }
                if i % 4
                else {"data": i, "node": "n\x01"}
                for i in range(300)
            ],
        )
    page = topics.Reader(path).diff("t", limit=1000, include_tags=True).records_json
    assert PURE is not None
    assert EXT is not None
    for want in (PURE.WANT_ALL | PURE.WANT_LINES, PURE.WANT_DATA, 0):
        assert EXT.record_columns(page, 0, 150, want) == PURE.record_columns(page, 0, 150, want)


def test_selector_exports_the_same_names() -> None:
    assert PURE is not None
    for name in selector.__all__:
        if name != "IMPLEMENTATION":
            assert getattr(selector, name) is not None
            assert hasattr(PURE, name)
            assert EXT is None or hasattr(EXT, name)
    forced = os.environ.get("TOPICS_PURE_PYTHON", "") not in ("", "0")
    assert ("pure" if EXT is None or forced else "cython") == selector.IMPLEMENTATION


DATA = [
    b'{"a":1,"b":"x\\u00e9","c":true,"d":2.5,"e":"2024-01-02","f":{"z":[1]}}',
    b"null",
    b'{"a":1.5}',
    b'{"a":-9223372036854775808,"b":7,"d":1,"c":null}',
    b'{"a":9223372036854775808}',
    b"{}",
    b'{"a":2,"a":3,"e":5}',
    b'  {"b":[1, 2]} ',
    b'"s"',
    b'{"c":1}',
    b'{"d":-1e3,"b":"\\ud800"}',
]
SPEC = [("a", 2), ("b", 4), ("c", 1), ("d", 3), ("e", 5), ("f", 4)]


def _data_buffers() -> tuple[bytes, bytes]:
    offsets = [0]
    for text in DATA:
        offsets.append(offsets[-1] + len(text))
    return struct.pack(f"<{len(offsets)}i", *offsets), b"".join(DATA)


@pytest.mark.parametrize("impl", IMPLS)
def test_data_fields(impl: ModuleType) -> None:
    offsets, values = _data_buffers()
    bad, cols = impl.data_fields(offsets, values, 0, len(DATA), SPEC)
    assert struct.unpack(f"<{len(DATA)}i", bad) == (-1, -2, 0, -1, 0, -1, 4, -1, -2, 2, -1)
    a_valid, a_values, _ = cols[0]
    assert list(a_valid) == [1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]
    assert struct.unpack("<11q", a_values)[3] == -(1 << 63)
    b_valid, b_values, b_offsets = cols[1]
    ends = struct.unpack("<12i", b_offsets)
    texts = [b_values[ends[i] : ends[i + 1]] if b_valid[i] else None for i in range(11)]
    assert texts[0] == "xé".encode()
    assert texts[3] == b"7"  # a string field keeps another value's JSON text
    assert texts[7] == b"[1, 2]"
    assert texts[10] == "\ufffd".encode()
    assert struct.unpack("<11d", cols[3][1])[10] == -1000.0
    assert cols[5][1] == b'{"z":[1]}'


@needs_ext
def test_data_fields_compiled_matches_pure() -> None:
    assert PURE is not None
    assert EXT is not None
    offsets, values = _data_buffers()
    for first, rows in ((0, len(DATA)), (2, 5), (4, 0)):
        assert EXT.data_fields(offsets, values, first, rows, SPEC) == PURE.data_fields(
            offsets, values, first, rows, SPEC
        )
