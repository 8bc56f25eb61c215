"""Tests for the write-body splitter: every test runs against both implementations.

``_scan_pure`` is the oracle and ``_scan`` (compiled) must match it exactly, errors
included; the hypothesis tests also hold both to ``json.loads`` of the same body.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"topics._core.{name}")
    except ImportError:
        return None


_pure = _load("_scan_pure")
assert _pure is not None
PURE: ModuleType = _pure
EXT = _load("_scan")
needs_ext = pytest.mark.skipif(EXT is None, reason="compiled topics._core._scan not built")
IMPLS = [pytest.param(PURE, id="pure"), pytest.param(EXT, id="cython", marks=needs_ext)]

EOF = "unexpected end of body"
VALUE = "expected a JSON value"
NUMBER = "invalid number"
LITERAL = "invalid literal"
ESCAPE = "invalid escape in string"
CONTROL = "unescaped control character in string"
UTF8 = "invalid UTF-8"
KEY = "expected a string key"
COLON = "expected ':'"
OBJECT_END = "expected ',' or '}'"
ARRAY_END = "expected ',' or ']'"
DEPTH = "nesting deeper than 512"
TRAILING = "unexpected data after the body"
NOT_OBJECT = "the body must be a JSON object"
RECORDS = "records must be an array"
RECORD = "a record must be a JSON object"
DECODE = "value cannot be decoded"


@pytest.fixture(params=IMPLS)
def scan(request: pytest.FixtureRequest) -> ModuleType:
    return request.param  # type: ignore[no-any-return]


Split = tuple[list[dict[str, object]] | None, dict[str, object]]


def split(scan: ModuleType, body: bytes | bytearray | memoryview) -> Split:
    return scan.split_write_body(body)  # type: ignore[no-any-return]


def failure(scan: ModuleType, body: bytes) -> tuple[str, str, int]:
    with pytest.raises(scan.BodyError) as info:
        scan.split_write_body(body)
    assert isinstance(info.value, ValueError)
    exc: Any = info.value
    assert str(exc) == f"{exc.problem} at {exc.path} (byte {exc.offset})"
    return exc.problem, exc.path, exc.offset


def outcome(scan: ModuleType, body: bytes) -> tuple[str, object]:
    """What split_write_body does with ``body``, comparable across implementations."""
    try:
        return "ok", scan.split_write_body(body)
    except scan.BodyError as exc:
        return "error", (exc.problem, exc.path, exc.offset, str(exc))


def one_record(scan: ModuleType, record_json: bytes) -> dict[str, object]:
    records, fields = split(scan, b'{"records":[' + record_json + b"]}")
    assert fields == {}
    assert records is not None
    assert len(records) == 1
    return records[0]


# --- byte-verbatim spans ------------------------------------------------------------

SPANS = [
    b'{"b":1,"a":[1.50,2e3]}',
    b"1.50",
    b"2e3",
    b"2E+03",
    b"-0",
    b"-0.0e-0",
    b"0",
    b"123456789012345678901234567890",
    b"1" + b"0" * 5000,  # never decoded, so Python's int digit limit does not apply
    b"1e400",
    b"true",
    b"false",
    b'""',
    b'"text"',
    b'"\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\uD83D\\uDE00 \\ud800"',
    '"é € 😀 \x7f"'.encode(),
    '{"ключ":"значение","emoji":"😀"}'.encode(),
    b"[]",
    b"{}",
    b"[ ]",
    b"{ \t\r\n}",
    b"[ 1 , 2 ,\n\t3 ]",
    b'{ "a" : { "b" : [ null , true , false , -1.5e-7 ] } , "c" : "d" }',
    b'{"dup":1,"dup":2}',  # kept verbatim: only the engine's storage sees it
    b'{"a":{"b":{"c":{"d":[[[[{"e":"f"}]]]]}}}}',
    b"[" * 512 + b"]" * 512,
    b'{"k":' * 511 + b"1" + b"}" * 511,
    b'["\\u0000", "\\u001f", "\\\\u0041"]',
]


@pytest.mark.parametrize("span", SPANS)
@pytest.mark.parametrize("ws", [b"", b" ", b" \t\r\n "])
def test_data_and_meta_spans_are_verbatim(scan: ModuleType, span: bytes, ws: bytes) -> None:
    body = b'%s{%s"records"%s:%s[%s{%s"data"%s:%s%s%s,"meta":%s%s%s}%s]%s}%s' % (
        ws,
        ws,
        ws,
        ws,
        ws,
        ws,
        ws,
        ws,
        span,
        ws,
        ws,
        span,
        ws,
        ws,
        ws,
        ws,
    )
    records, fields = split(scan, body)
    assert fields == {}
    assert records == [{"data": span, "meta": span}]
    assert type(records[0]["data"]) is bytes


def test_the_example_body(scan: ModuleType) -> None:
    body = b'{"records":[{"data":{"b":1,"a":[1.50,2e3]},"tag":"t"}],"node":"n"}'
    assert split(scan, body) == ([{"data": b'{"b":1,"a":[1.50,2e3]}', "tag": "t"}], {"node": "n"})


def test_meta_span_of_any_type(scan: ModuleType) -> None:
    # The engine checks that meta is an object; the splitter only keeps its bytes.
    for span in [b"[1, 2]", b'"m"', b"3", b"true", b'{"a": 1}']:
        assert one_record(scan, b'{"data":1,"meta":' + span + b"}") == {"data": b"1", "meta": span}


def test_many_records_keep_their_own_spans(scan: ModuleType) -> None:
    items = [b'{"data":{"i":%d,"s":"%s"},"tag":"t%d"}' % (i, b"x" * (i % 7), i) for i in range(500)]
    records, _ = split(scan, b'{"records":[' + b",\n ".join(items) + b"]}")
    assert records is not None
    assert [r["data"] for r in records] == [
        b'{"i":%d,"s":"%s"}' % (i, b"x" * (i % 7)) for i in range(500)
    ]
    assert [r["tag"] for r in records] == [f"t{i}" for i in range(500)]


# --- decoded members ----------------------------------------------------------------


def test_nulls_are_kept_as_none(scan: ModuleType) -> None:
    rec = one_record(scan, b'{"data":null,"meta":null,"tag":null,"node":null,"x":null}')
    assert rec == {"data": None, "meta": None, "tag": None, "node": None, "x": None}
    assert split(scan, b'{"records":[],"node":null}') == ([], {"node": None})


def test_tag_and_node_are_decoded(scan: ModuleType) -> None:
    rec = one_record(
        scan,
        b'{"data":1,"tag":"a\\n\\"b\\\\c\\/d\\t\\u00e9\\u20ac\\ud83d\\ude00","node":"\xc3\xa9 \xf0\x9f\x98\x80"}',
    )
    assert rec == {"data": b"1", "tag": 'a\n"b\\c/d\té€😀', "node": "é 😀"}


def test_lone_surrogate_escapes_stay_lone(scan: ModuleType) -> None:
    # Like json.loads; the engine then rejects the tag as not UTF-8 encodable.
    for escaped in [b"\\ud800", b"\\udc00", b"\\ud800\\u0041", b"\\udc00\\ud800", b"x\\ud83d"]:
        rec = one_record(scan, b'{"data":1,"tag":"' + escaped + b'"}')
        assert rec["tag"] == json.loads(b'"' + escaped + b'"')
    assert one_record(scan, b'{"data":1,"tag":"\\ud800"}')["tag"] == "\ud800"


def test_long_escaped_strings(scan: ModuleType) -> None:
    # Past the compiled module's on-stack decode buffer.
    text = ("é\\n😀 \\u00e9\\ud83d\\ude00" * 100).encode()
    rec = one_record(scan, b'{"data":1,"tag":"' + text + b'"}')
    assert rec["tag"] == json.loads(b'"' + text + b'"')


def test_non_string_tag_and_node_are_decoded_as_is(scan: ModuleType) -> None:
    # The engine reports the wrong type; the splitter must not hide it.
    rec = one_record(scan, b'{"data":1,"tag":5,"node":["n"],"extra":{"a":[1,2.5,"x"]}}')
    assert rec == {"data": b"1", "tag": 5, "node": ["n"], "extra": {"a": [1, 2.5, "x"]}}


def test_record_without_data_is_passed_on(scan: ModuleType) -> None:
    # "data" is required, but that is the engine's rule to report.
    assert one_record(scan, b"{}") == {}
    assert one_record(scan, b'{"tag":"t"}') == {"tag": "t"}


def test_fields_are_decoded(scan: ModuleType) -> None:
    body = (
        b'{"node":"n1","create":true,"config":{"ttl_ms":1000,"cap":{"n":[1,2.5]},"s":"\\u00e9"},'
        b'"idempotency_key":"k","n":-12,"f":1.5e3,"z":-0,"big":123456789012345678901234567890,'
        b'"no":false,"nothing":null,"list":[],"records":[]}'
    )
    records, fields = split(scan, body)
    assert records == []
    assert fields == {
        "node": "n1",
        "create": True,
        "config": {"ttl_ms": 1000, "cap": {"n": [1, 2.5]}, "s": "é"},
        "idempotency_key": "k",
        "n": -12,
        "f": 1500.0,
        "z": 0,
        "big": 123456789012345678901234567890,
        "no": False,
        "nothing": None,
        "list": [],
    }
    assert type(fields["f"]) is float
    assert type(fields["n"]) is int


@pytest.mark.parametrize(
    "number",
    [
        b"0",
        b"-0",
        b"7",
        b"-7",
        b"999999999999999999",
        b"-999999999999999999",
        b"1000000000000000000",
        b"9223372036854775807",
        b"-9223372036854775808",
        b"18446744073709551616",
        b"0.1",
        b"-0.0",
        b"1e5",
        b"1E-5",
        b"2.5e+10",
        b"1.7976931348623157e308",
        b"5e-324",
        b"1e400",
        b"-1e400",
        b"1e-400",
    ],
)
def test_numbers_decode_like_json_loads(scan: ModuleType, number: bytes) -> None:
    _, fields = split(scan, b'{"v":' + number + b',"w":[' + number + b"]}")
    expected = json.loads(number)
    assert fields == {"v": expected, "w": [expected]}
    assert type(fields["v"]) is type(expected)
    assert str(fields["v"]) == str(expected)  # tells -0.0 from 0.0


def test_body_without_records(scan: ModuleType) -> None:
    assert split(scan, b"{}") == (None, {})
    assert split(scan, b' \n{ "node" : "n" }\t') == (None, {"node": "n"})


def test_empty_records(scan: ModuleType) -> None:
    assert split(scan, b'{"records":[]}') == ([], {})
    assert split(scan, b'{"records":[ \n ]}') == ([], {})


# --- duplicate keys -----------------------------------------------------------------


def test_duplicate_keys_last_wins(scan: ModuleType) -> None:
    body = b'{"a":1,"records":[{"data":1,"tag":"x","data":[2],"tag":"y"}],"a":{"b":2}}'
    records, fields = split(scan, body)
    assert records == [{"data": b"[2]", "tag": "y"}]
    assert fields == {"a": {"b": 2}}


def test_duplicate_records_last_wins(scan: ModuleType) -> None:
    assert split(scan, b'{"records":5,"records":[{"data":1}]}') == ([{"data": b"1"}], {})
    assert split(scan, b'{"records":[1,2],"records":[]}') == ([], {})
    assert failure(scan, b'{"records":[{"data":1}],"records":{}}') == (RECORDS, "$.records", 34)
    assert failure(scan, b'{"records":[],"records":[{},7]}') == (RECORD, "$.records[1]", 28)


def test_escaped_keys_are_unescaped(scan: ModuleType) -> None:
    body = b'{"rec\\u006frds":[{"d\\u0061ta":{"x":1},"t\\u0061g":"t","\\u006eode":"n",'
    body += b'"m\\u0065ta":[],"\\u00e9":1}],"k\\n":2}'
    records, fields = split(scan, body)
    assert records == [{"data": b'{"x":1}', "tag": "t", "node": "n", "meta": b"[]", "é": 1}]
    assert fields == {"k\n": 2}


def test_near_miss_keys_are_plain_members(scan: ModuleType) -> None:
    rec = one_record(scan, b'{"Data":{},"dat":[1],"datas":2,"tags":"x","Node":"n"}')
    assert rec == {"Data": {}, "dat": [1], "datas": 2, "tags": "x", "Node": "n"}
    assert split(scan, b'{"Records":[1],"record":2}') == (None, {"Records": [1], "record": 2})


# --- input types --------------------------------------------------------------------


def test_accepts_bytes_like(scan: ModuleType) -> None:
    body = b'{"records":[{"data":{"x":[1.0]}}],"node":"n"}'
    expected = ([{"data": b'{"x":[1.0]}'}], {"node": "n"})
    assert split(scan, bytearray(body)) == expected
    assert split(scan, memoryview(body)) == expected
    assert split(scan, memoryview(b"xx" + body + b"yy")[2:-2]) == expected
    assert split(scan, memoryview(bytes(b for c in body for b in (c, 0)))[::2]) == expected

    class Sub(bytes):
        pass

    assert split(scan, Sub(body)) == expected
    records, _ = split(scan, bytearray(body))
    assert records is not None
    assert type(records[0]["data"]) is bytes


@pytest.mark.parametrize("bad", ['{"records":[]}', None, 5, [b"{}"]])
def test_rejects_non_bytes(scan: ModuleType, bad: object) -> None:
    with pytest.raises(TypeError, match="body must be bytes"):
        scan.split_write_body(bad)


def test_body_error_pickles(scan: ModuleType) -> None:
    with pytest.raises(scan.BodyError) as info:
        scan.split_write_body(b'{"records":[{"data":x}]}')
    copy = pickle.loads(pickle.dumps(info.value))
    assert type(copy) is scan.BodyError
    assert (copy.problem, copy.path, copy.offset, str(copy)) == (
        VALUE,
        "$.records[0].data",
        20,
        "expected a JSON value at $.records[0].data (byte 20)",
    )


# --- errors -------------------------------------------------------------------------

BIG = b"1" + b"0" * 5000  # over Python's int digit limit: cannot be decoded

ERRORS: list[tuple[bytes, str, str, int]] = [
    # the body itself
    (b"", EOF, "$", 0),
    (b" \n\t\r", EOF, "$", 4),
    (b"[]", NOT_OBJECT, "$", 0),
    (b" 5", NOT_OBJECT, "$", 1),
    (b'"{}"', NOT_OBJECT, "$", 0),
    (b"null", NOT_OBJECT, "$", 0),
    (b"\xef\xbb\xbf{}", NOT_OBJECT, "$", 0),  # no BOM
    (b"\x0c{}", NOT_OBJECT, "$", 0),  # form feed is not JSON whitespace
    (b"{", EOF, "$", 1),
    (b"{ ", EOF, "$", 2),
    (b"{}x", TRAILING, "$", 2),
    (b"{} {}", TRAILING, "$", 3),
    (b"{}\x00", TRAILING, "$", 2),
    (b'{"a":1}}', TRAILING, "$", 7),
    (b'{"a":1,}', KEY, "$", 7),
    (b"{,}", KEY, "$", 1),
    (b"{a:1}", KEY, "$", 1),
    (b"{'a':1}", KEY, "$", 1),
    (b"{1:1}", KEY, "$", 1),
    (b'{"a" 1}', COLON, "$", 5),
    (b'{"a"}', COLON, "$", 4),
    (b'{"a"', EOF, "$", 4),
    (b'{"a', EOF, "$", 3),
    (b'{"a":1 "b":2}', OBJECT_END, "$", 7),
    (b'{"a":1]', OBJECT_END, "$", 6),
    (b'{"a":1', EOF, "$", 6),
    (b'{"a":1,', EOF, "$", 7),
    (b'{"\\x":1}', ESCAPE, "$", 3),
    (b'{"\xff":1}', UTF8, "$", 2),
    # member values
    (b'{"a":}', VALUE, "$.a", 5),
    (b'{"a":', EOF, "$.a", 5),
    (b'{"a": ', EOF, "$.a", 6),
    (b'{"a":NaN}', VALUE, "$.a", 5),
    (b'{"a":Infinity}', VALUE, "$.a", 5),
    (b'{"a":-Infinity}', NUMBER, "$.a", 6),
    (b'{"a":+1}', VALUE, "$.a", 5),
    (b'{"a":.5}', VALUE, "$.a", 5),
    (b'{"a":01}', NUMBER, "$.a", 6),
    (b'{"a":-01}', NUMBER, "$.a", 7),
    (b'{"a":00}', NUMBER, "$.a", 6),
    (b'{"a":1.}', NUMBER, "$.a", 7),
    (b'{"a":1.e3}', NUMBER, "$.a", 7),
    (b'{"a":1e}', NUMBER, "$.a", 7),
    (b'{"a":1e+}', NUMBER, "$.a", 8),
    (b'{"a":1e+', EOF, "$.a", 8),
    (b'{"a":-}', NUMBER, "$.a", 6),
    (b'{"a":-', EOF, "$.a", 6),
    (b'{"a":0x10}', OBJECT_END, "$", 6),
    (b'{"a":1_000}', OBJECT_END, "$", 6),
    (b'{"a":tru}', LITERAL, "$.a", 8),
    (b'{"a":True}', VALUE, "$.a", 5),
    (b'{"a":nul', EOF, "$.a", 8),
    (b'{"a":nulll}', OBJECT_END, "$", 9),
    (b'{"a":"x}', EOF, "$.a", 8),
    (b'{"a":"\x01"}', CONTROL, "$.a", 6),
    (b'{"a":"\t"}', CONTROL, "$.a", 6),
    (b'{"a":"\n"}', CONTROL, "$.a", 6),
    (b'{"a":"\\x"}', ESCAPE, "$.a", 7),
    (b'{"a":"\\U0041"}', ESCAPE, "$.a", 7),
    (b'{"a":"\\u12G4"}', ESCAPE, "$.a", 10),
    (b'{"a":"\\u12"}', ESCAPE, "$.a", 10),
    (b'{"a":"\\u12', EOF, "$.a", 10),
    (b'{"a":"\\', EOF, "$.a", 7),
    (b'{"a":"\x80"}', UTF8, "$.a", 6),
    (b'{"a":"\xc0\xaf"}', UTF8, "$.a", 6),
    (b'{"a":"\xc1\xbf"}', UTF8, "$.a", 6),
    (b'{"a":"\xe0\x80\x80"}', UTF8, "$.a", 6),
    (b'{"a":"\xed\xa0\x80"}', UTF8, "$.a", 6),  # an encoded surrogate
    (b'{"a":"\xf0\x80\x80\x80"}', UTF8, "$.a", 6),
    (b'{"a":"\xf4\x90\x80\x80"}', UTF8, "$.a", 6),  # above U+10FFFF
    (b'{"a":"\xf5\x80\x80\x80"}', UTF8, "$.a", 6),
    (b'{"a":"\xff"}', UTF8, "$.a", 6),
    (b'{"a":"ok\xe2\x82"}', UTF8, "$.a", 8),
    (b'{"a":"ok\xe2\x82', UTF8, "$.a", 8),
    (b'{"a":"\xe2\x28\xa1"}', UTF8, "$.a", 6),
    (b'{"a":"\xc3\xa9\xc3"}', UTF8, "$.a", 8),
    (b'{"a":"\xe2\x82\x01"}', UTF8, "$.a", 6),  # the bad sequence comes first
    (b'{"a":"\x01\xff"}', CONTROL, "$.a", 6),
    (b'{"a":\xc3\xa9}', VALUE, "$.a", 5),
    (b'{"a":[1,]}', VALUE, "$.a", 8),
    (b'{"a":[,1]}', VALUE, "$.a", 6),
    (b'{"a":[1 2]}', ARRAY_END, "$.a", 8),
    (b'{"a":[1}', ARRAY_END, "$.a", 7),
    (b'{"a":[1', EOF, "$.a", 7),
    (b'{"a":{"b":1]}', OBJECT_END, "$.a", 11),
    (b'{"a":{"b":1,}}', KEY, "$.a", 12),
    (b'{"a":{"b"}}', COLON, "$.a", 9),
    (b'{"a":{"b":}}', VALUE, "$.a", 10),
    (b'{"a":{"b":"\\q"}}', ESCAPE, "$.a", 12),
    (b'{"a b":x}', VALUE, '$["a b"]', 7),
    (b'{"\\u00e9":x}', VALUE, '$["\\u00e9"]', 10),
    (b'{"1a":x}', VALUE, '$["1a"]', 6),
    (b'{"_a1":x}', VALUE, "$._a1", 7),
    (b'{"":x}', VALUE, '$[""]', 4),
    (b'{"a":' + BIG + b"}", DECODE, "$.a", 5),
    (b'{"a":[' + BIG + b"]}", DECODE, "$.a", 5),
    (b'{"a":{"b":' + BIG + b"}}", DECODE, "$.a", 5),
    (b'{"a":' + b"[" * 513 + b"]" * 513 + b"}", DEPTH, "$.a", 5 + 512),
    (b'{"a":' + b"[" * 100_000, DEPTH, "$.a", 5 + 512),
    (b'{"a":' + b'{"k":' * 513 + b"1" + b"}" * 513 + b"}", DEPTH, "$.a", 5 + 5 * 512),
    # records
    (b'{"records":{}}', RECORDS, "$.records", 11),
    (b'{"records":null}', RECORDS, "$.records", 11),
    (b'{"records":"[]"}', RECORDS, "$.records", 11),
    (b'{"records":', EOF, "$.records", 11),
    (b'{"records":x}', VALUE, "$.records", 11),
    (b'{"records":{"a"}}', COLON, "$.records", 15),
    (b'{"records":[', EOF, "$.records", 12),
    (b'{"records":[ ', EOF, "$.records", 13),
    (b'{"records":[{}', EOF, "$.records", 14),
    (b'{"records":[{},', EOF, "$.records[1]", 15),
    (b'{"records":[{}, ', EOF, "$.records[1]", 16),
    (b'{"records":[{},]}', VALUE, "$.records[1]", 15),
    (b'{"records":[,]}', VALUE, "$.records[0]", 12),
    (b'{"records":[{} {}]}', ARRAY_END, "$.records", 15),
    (b'{"records":[{}}', ARRAY_END, "$.records", 14),
    (b'{"records":[1]}', RECORD, "$.records[0]", 12),
    (b'{"records":[null]}', RECORD, "$.records[0]", 12),
    (b'{"records":[[{"data":1}]]}', RECORD, "$.records[0]", 12),
    (b'{"records":[{},[],1]}', RECORD, "$.records[1]", 15),
    (b'{"records":[{"data":1},"x"]}', RECORD, "$.records[1]", 23),
    (b'{"records":[{', EOF, "$.records[0]", 13),
    (b'{"records":[{"data"', EOF, "$.records[0]", 19),
    (b'{"records":[{"data":', EOF, "$.records[0].data", 20),
    (b'{"records":[{"data":1', EOF, "$.records[0]", 21),
    (b'{"records":[{"data":1,}]}', KEY, "$.records[0]", 22),
    (b'{"records":[{"data" 1}]}', COLON, "$.records[0]", 20),
    (b'{"records":[{"data":1 "tag":"t"}]}', OBJECT_END, "$.records[0]", 22),
    (b'{"records":[{"data":1]}', OBJECT_END, "$.records[0]", 21),
    (b'{"records":[{"data":}]}', VALUE, "$.records[0].data", 20),
    (b'{"records":[{"data":01}]}', NUMBER, "$.records[0].data", 21),
    (b'{"records":[{"data":{"x":1 "y":2}}]}', OBJECT_END, "$.records[0].data", 27),
    (b'{"records":[{"data":[1,2}]}', ARRAY_END, "$.records[0].data", 24),
    (b'{"records":[{"data":"\xff"}]}', UTF8, "$.records[0].data", 21),
    (b'{"records":[{"data":1},{"meta":[}]}', VALUE, "$.records[1].meta", 32),
    (b'{"records":[{"tag":"\\q"}]}', ESCAPE, "$.records[0].tag", 21),
    (b'{"records":[{"node":tru}]}', LITERAL, "$.records[0].node", 23),
    (b'{"records":[{"$ts":x}]}', VALUE, '$.records[0]["$ts"]', 19),
    (b'{"records":[{"ta\\u0067":x}]}', VALUE, "$.records[0].tag", 24),
    (b'{"records":[{"tag":' + BIG + b"}]}", DECODE, "$.records[0].tag", 19),
    (b'{"records":[{"x":[' + BIG + b"]}]}", DECODE, "$.records[0].x", 17),
    (
        b'{"records":[{"data":' + b"[" * 513 + b"]" * 513 + b"}]}",
        DEPTH,
        "$.records[0].data",
        20 + 512,
    ),
    (
        b'{"records":[{"meta":' + b"[" * 100_000 + b"}]}",
        DEPTH,
        "$.records[0].meta",
        20 + 512,
    ),
    # syntax errors anywhere come before the records' shape errors
    (b'{"records":5,"x":[', EOF, "$.x", 18),
    (b'{"records":[1 x', ARRAY_END, "$.records", 14),
    (b'{"records":[1],"a":01}', NUMBER, "$.a", 20),
    (b'{"records":[1,{"data":}]}', VALUE, "$.records[1].data", 22),
    (b'{"records":5} x', TRAILING, "$", 14),
]


@pytest.mark.parametrize(("body", "problem", "path", "offset"), ERRORS)
def test_errors(scan: ModuleType, body: bytes, problem: str, path: str, offset: int) -> None:
    assert failure(scan, body) == (problem, path, offset)


def test_error_cases_are_invalid_json_or_bad_shape() -> None:
    # Cross-check the table against the standard library.
    for body, problem, _, _ in ERRORS:
        try:
            value = strict_loads(body)
        except (ValueError, RecursionError):
            continue
        assert problem in (RECORDS, RECORD, DECODE, DEPTH) or not isinstance(value, dict), body


def test_depth_limit_is_per_member_value(scan: ModuleType) -> None:
    deep = b"[" * 512 + b"]" * 512
    body = b'{"a":%s,"records":[{"data":%s,"meta":%s,"x":%s}]}' % (deep, deep, deep, deep)
    records, fields = split(scan, body)
    assert records is not None
    assert records[0]["data"] == deep
    assert records[0]["x"] == fields["a"] == json.loads(deep)


def test_huge_numbers_in_spans_are_fine(scan: ModuleType) -> None:
    assert one_record(scan, b'{"data":' + BIG + b"}") == {"data": BIG}


def test_truncated_bodies_fail_at_the_cut(scan: ModuleType) -> None:
    body = (
        b'{"records":[{"data":{"b":1,"a":[1.50,-2e3,true,false,null]},"tag":"t\\u00e9\\n",'
        b'"meta":{"k":"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"}},{"data":"s","node":null}],'
        b'"node":"n","create":true,"config":{"ttl_ms":-0.5E+3}}'
    )
    assert split(scan, body)[0] is not None
    for cut in range(len(body)):
        problem, _, offset = failure(scan, body[:cut])
        # Every byte before the cut can continue a valid body, so the error is the cut
        # itself, or the lead byte of a multi-byte character the cut split.
        if problem == UTF8:
            assert cut - 3 <= offset < cut
        else:
            assert (problem, offset) == (EOF, cut), cut


@pytest.mark.slow
def test_mutated_bodies_match_pure(scan: ModuleType) -> None:
    body = bytearray(
        b'{"records":[{"data":{"b":[1.5,"x\\ny"]},"tag":"t"},{"data":2,"meta":{}}],"node":"n"}'
    )
    for i in range(len(body)):
        for byte in b'{}[],:"\\ 0-.e1tnu\x00\x80\xff':
            mutated = bytes(body[:i] + bytes([byte]) + body[i + 1 :])
            assert outcome(scan, mutated) == outcome(PURE, mutated)
            deleted = bytes(body[:i] + body[i + 1 :])
            assert outcome(scan, deleted) == outcome(PURE, deleted)


# --- the facade ---------------------------------------------------------------------


def test_facade_picks_the_implementation(monkeypatch: pytest.MonkeyPatch) -> None:
    from topics._core import scan

    forced = os.environ.get("TOPICS_PURE_PYTHON", "") not in ("", "0")
    expected = "pure" if forced or EXT is None else "cython"
    chosen = PURE if expected == "pure" else EXT
    assert chosen is not None
    assert expected == scan.IMPLEMENTATION
    assert scan.split_write_body is chosen.split_write_body
    assert scan.BodyError is chosen.BodyError
    assert scan.MAX_DEPTH == 512
    try:
        monkeypatch.setenv("TOPICS_PURE_PYTHON", "1")
        assert importlib.reload(scan).IMPLEMENTATION == "pure"
        assert scan.split_write_body is PURE.split_write_body
        monkeypatch.setenv("TOPICS_PURE_PYTHON", "0")
        assert ("pure" if EXT is None else "cython") == importlib.reload(scan).IMPLEMENTATION
    finally:
        monkeypatch.undo()
        importlib.reload(scan)


# --- hypothesis: random bodies, both implementations, and json.loads ----------------


def _reject_constant(name: str) -> None:
    raise ValueError(f"not JSON: {name}")


def strict_loads(body: bytes) -> Any:
    """The standard library's reading of ``body`` under the same rules: strict UTF-8
    (json.loads of bytes would pass encoded surrogates), no NaN/Infinity."""
    return json.loads(body.decode("utf-8"), parse_constant=_reject_constant)


def check_against_json(body: bytes) -> None:
    """Both implementations agree exactly, and with json.loads where that applies."""
    pure = outcome(PURE, body)
    if EXT is not None:
        assert outcome(EXT, body) == pure
    try:
        doc = strict_loads(body)
    except ValueError:
        assert pure[0] == "error"
        return
    shaped = isinstance(doc, dict) and (
        "records" not in doc
        or (isinstance(doc["records"], list) and all(isinstance(r, dict) for r in doc["records"]))
    )
    if not shaped:
        assert pure[0] == "error"
        return
    assert pure[0] == "ok", pure
    records, fields = PURE.split_write_body(body)
    assert fields == {k: v for k, v in doc.items() if k != "records"}
    if "records" not in doc:
        assert records is None
        return
    assert len(records) == len(doc["records"])
    for rec, want in zip(records, doc["records"], strict=True):
        assert rec.keys() == want.keys()
        for key, value in rec.items():
            if key in ("data", "meta") and value is not None:
                assert isinstance(value, bytes)
                assert value in body
                assert strict_loads(value) == want[key]
            else:
                assert value == want[key]


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(exclude_categories=()), max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4)
    ),
    max_leaves=12,
)
record_members = {
    "meta": json_values,
    "tag": st.text(max_size=8) | json_values,
    "node": st.text(max_size=8),
    "other": json_values,
}
records_strategy = st.lists(
    st.fixed_dictionaries({"data": json_values}, optional=record_members)
    | st.fixed_dictionaries({}, optional=record_members),  # "data" is the engine's to require
    max_size=6,
)
bodies = st.builds(
    lambda fields, records: fields if records is None else {**fields, "records": records},
    st.dictionaries(st.text(max_size=10).filter(lambda k: k != "records"), json_values, max_size=4),
    st.none() | records_strategy,
)
dumps_options = st.fixed_dictionaries(
    {
        "separators": st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t"), (",\r\n", ":")]),
        "indent": st.sampled_from([None, 0, 1, "\t", " \r\n"]),
        "sort_keys": st.booleans(),
        "ensure_ascii": st.booleans(),
    }
)
padding = st.text(alphabet=" \t\r\n", max_size=3)


def encode(doc: object, options: dict[str, Any], before: str, after: str) -> bytes:
    try:
        return (before + json.dumps(doc, **options) + after).encode()
    except UnicodeEncodeError:  # a lone surrogate: only the escaped form is valid UTF-8
        return (before + json.dumps(doc, **{**options, "ensure_ascii": True}) + after).encode()


slow = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.slow
@slow
@given(doc=bodies, options=dumps_options, before=padding, after=padding)
def test_random_bodies(
    doc: dict[str, object], options: dict[str, Any], before: str, after: str
) -> None:
    body = encode(doc, options, before, after)
    check_against_json(body)
    assert outcome(PURE, body)[0] == "ok"


@pytest.mark.slow
@slow
@given(
    doc=bodies,
    options=dumps_options,
    edits=st.lists(
        st.tuples(
            st.integers(min_value=0),
            st.sampled_from(["replace", "insert", "delete"]),
            st.sampled_from(
                list(b'{}[],:" \\0123456789-+.eEtrufalsn\x00\x1f\x7f\x80\xbf\xc3\xed\xf0\xff')
            ),
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_mutated_random_bodies(
    doc: dict[str, object], options: dict[str, Any], edits: list[tuple[int, str, int]]
) -> None:
    body = bytearray(encode(doc, options, "", ""))
    for where, how, byte in edits:
        i = where % (len(body) + 1)
        if how == "insert":
            body[i:i] = bytes([byte])
        elif i < len(body):
            body[i : i + 1] = b"" if how == "delete" else bytes([byte])
    check_against_json(bytes(body))


@pytest.mark.slow
@slow
@given(raw=st.binary(max_size=64))
def test_random_bytes(raw: bytes) -> None:
    check_against_json(raw)
    check_against_json(b'{"records":[{"data":' + raw + b"}]}")


@pytest.mark.slow
@slow
@given(
    text=st.text(alphabet=st.characters(exclude_categories=()), max_size=20),
    ascii_only=st.booleans(),
)
def test_random_strings_decode_like_json(text: str, ascii_only: bool) -> None:
    encoded = json.dumps(text, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    body = b'{"records":[{"data":%s,"tag":%s,%s:1}],%s:%s}' % ((encoded,) * 5)
    check_against_json(body)


def test_same_results_across_implementations_on_samples() -> None:
    samples = [b'{"records":[{"data":%s}]}' % span for span in SPANS] + [e[0] for e in ERRORS]
    for body in samples:
        results = {repr(outcome(m, body)) for m in (PURE, EXT) if m is not None}
        assert len(results) == 1, body
