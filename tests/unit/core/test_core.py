"""Tests for topics._core: every test runs against both the pure and the compiled core.

The pure module is the oracle: golden vectors come from it, and the hypothesis tests at
the end check that the compiled module agrees with it on random inputs.
"""

from __future__ import annotations

import importlib
import json
import pickle
import re
import struct
import threading
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Any

import pytest
import ujson

SALT = 0x5A17
LIMITS = (1 << 20, 1 << 14, 64, 256, 128)
SMALL = (1000, 100, 4, 16, 16)  # record, meta bytes, meta keys, tag, node


def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"topics._core.{name}")
    except ImportError:
        return None


PURE = _load("_pure")
EXT = _load("_ext")
assert PURE is not None
needs_ext = pytest.mark.skipif(EXT is None, reason="compiled core (topics._core._ext) not built")


@pytest.fixture(
    params=[pytest.param(PURE, id="pure"), pytest.param(EXT, id="ext", marks=needs_ext)]
)
def core(request: pytest.FixtureRequest) -> ModuleType:
    return request.param  # type: ignore[no-any-return]


def encode(
    core: ModuleType, records: list[Any], first_seq: int = 0, ts: int = 1000, **kw: Any
) -> bytes:
    frames, _ = core.encode_batch(
        records,
        first_seq,
        ts,
        kw.get("node"),
        kw.get("salt", SALT),
        kw.get("limits", LIMITS),
        kw.get("dumps", ujson.dumps),
    )
    return frames  # type: ignore[no-any-return]


def frame_error(core: ModuleType, fn: Any, *args: Any) -> tuple[int, str, str]:
    with pytest.raises(core.FrameError) as info:
        fn(*args)
    return info.value.index, info.value.field, info.value.reason


# --- CRC32C -------------------------------------------------------------------------

# RFC 3720 (iSCSI) test vectors plus the classic check value.
CRC_VECTORS = [
    (b"", 0),
    (b"123456789", 0xE3069283),
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
]


@pytest.mark.parametrize(("data", "expected"), CRC_VECTORS)
def test_crc32c_vectors(core: ModuleType, data: bytes, expected: int) -> None:
    assert core.crc32c(data) == expected
    assert core.crc32c(bytearray(data)) == expected
    assert core.crc32c(memoryview(data)) == expected


def test_crc32c_chains_at_every_split(core: ModuleType) -> None:
    data = bytes((i * 37 + 11) & 0xFF for i in range(300))
    whole = PURE.crc32c(data, 0xDEADBEEF)
    for cut in [*range(0, 40), 150, 299, 300]:
        assert core.crc32c(data[cut:], core.crc32c(data[:cut], 0xDEADBEEF)) == whole


def test_crc32c_lengths_and_alignments_match_pure(core: ModuleType) -> None:
    data = bytes((i * 131 + 7) & 0xFF for i in range(200))
    for start in range(9):
        for length in [0, 1, 3, 7, 8, 9, 15, 16, 17, 63, 64, 65, 150]:
            chunk = memoryview(data)[start : start + length]
            assert core.crc32c(chunk, 7) == PURE.crc32c(chunk, 7)
    strided = memoryview(data)[::3]  # not contiguous: read through a copy
    assert core.crc32c(strided) == PURE.crc32c(data[::3])
    assert core.json_check(memoryview(b"[ 1 , 2 ]")[::2]) == -1


@needs_ext
def test_crc32c_portable_tables_match_pure() -> None:
    assert EXT is not None
    data = bytes((i * 131 + 7) & 0xFF for i in range(200))
    for start in range(9):
        for length in [0, 1, 7, 8, 9, 16, 17, 100, 150]:
            chunk = data[start : start + length]
            assert EXT._crc32c_portable(chunk, 7) == PURE.crc32c(chunk, 7)
    big = bytes(range(256)) * 64  # long enough to release the GIL
    assert EXT._crc32c_portable(big, 3) == EXT.crc32c(big, 3)


def test_crc32c_rejects_out_of_range_seed(core: ModuleType) -> None:
    with pytest.raises(OverflowError):
        core.crc32c(b"x", 1 << 32)
    with pytest.raises(OverflowError):
        core.crc32c(b"x", -1)


# --- json_check ---------------------------------------------------------------------

JSON_OK = [
    (b"{}", 0),
    (b'{"a":1,"b":2}', 2),
    (b'{"a":1,"a":2}', 2),
    (b'{"a":{"b":1,"c":2},"d":[{"e":1}]}', 2),
    (b" \t\r\n{ } \n", 0),
    (b"[]", -1),
    (b"[1, [2, [3]], {}]", -1),
    (b'"x"', -1),
    (b'""', -1),
    (b"0", -1),
    (b"-0", -1),
    (b"1e5", -1),
    (b"1.5E-3", -1),
    (b"-12.50e+10", -1),
    (b"0.0", -1),
    (b"123456789012345678901234567890", -1),
    (b"true", -1),
    (b"false", -1),
    (b"null", -1),
    (b'"\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\uD83D\\uDE00 \\udbff\\uDFFF"', -1),
    (b'"\\\\ud800 \\\\udc00"', -1),  # escaped backslashes, then plain text
    (b"1" * 308, -1),  # integer parts of at most 308 digits (I-JSON)
    (b"-" + b"9" * 308 + b"." + b"9" * 5000, -1),
    (b"1.5e308", -1),  # exponents and fractions parse as floats: not limited
    (b"1e400", -1),
    (b"1e-99999999999999999999", -1),
    (b"0." + b"0" * 5000 + b"1", -1),
    ('"é € 😀 \x7f"'.encode(), -1),
    (b"[" * 512 + b"]" * 512, -1),
    (b'{"k":' * 511 + b"1" + b"}" * 511, 1),
]

JSON_BAD = [
    (b"", 0),
    (b"   ", 3),
    (b"NaN", 0),
    (b"Infinity", 0),
    (b"-Infinity", 1),
    (b"[1, NaN]", 4),
    (b"nan", 1),
    (b"01", 1),
    (b"-01", 2),
    (b"00", 1),
    (b"+1", 0),
    (b".5", 0),
    (b"1.", 2),
    (b"1.e5", 2),
    (b"1e", 2),
    (b"1e+", 3),
    (b"-", 1),
    (b"0x10", 1),
    (b"1 2", 2),
    (b"{} x", 3),
    (b"[1]]", 3),
    (b"true false", 5),
    (b"tru", 3),
    (b"trux", 3),
    (b"nul", 3),
    (b"'a'", 0),
    (b"[1 2]", 3),
    (b"[1,]", 3),
    (b"[,1]", 1),
    (b"[", 1),
    (b"{", 1),
    (b'{"a":1,}', 7),
    (b'{"a":1 "b":2}', 7),
    (b"{1:2}", 1),
    (b'{"a"}', 4),
    (b'{"a" 1}', 5),
    (b'{"a":}', 5),
    (b'"abc', 4),
    (b'"a\x00"', 2),
    (b'"\x1f"', 1),
    (b'"\t"', 1),
    (b'"\n"', 1),
    (b'"\\x"', 2),
    (b'"\\u12G4"', 5),
    (b'"\\u12"', 5),
    (b'"\\', 2),
    (b'"\x80"', 1),
    (b'"\xc0\x80"', 1),
    (b'"\xc1\xbf"', 1),
    (b'"a\xc3"', 2),
    (b'"\xc3', 1),
    (b'"\xe2\x28\xa1"', 1),
    (b'"\xe0\x80\x80"', 1),
    (b'"\xed\xa0\x80"', 1),
    (b'"\xf0\x80\x80\x80"', 1),
    (b'"\xf4\x90\x80\x80"', 1),
    (b'"\xf5\x80\x80\x80"', 1),
    (b'"\xff"', 1),
    (b'"\xe2\x82"', 1),
    (b"\xef\xbb\xbf1", 0),
    (b"1\x00", 1),
    (b"\xc3\xa9", 0),
    (b'"\\ud800"', 2),  # lone surrogates (I-JSON): at the escape's "u"
    (b'"ab\\udc00"', 4),
    (b'"\\ud800\\u0041"', 2),
    (b'"\\ud800\\ud800"', 2),
    (b'"\\uDBFF\\uDbFf"', 2),
    (b'"\\ud800', 2),
    (b'"\\ud800\\', 2),
    (b'"\xc3\\ud800"', 1),  # the first bad byte wins
    (b'"\\ud800\xc3"', 2),
    (b"1" * 309, 308),  # more than 308 integer digits: at the first digit too many
    (b"1" * 5000, 308),
    (b"[1, -" + b"1" * 309 + b".5e-400]", 313),
    (b"1" * 309 + b"x", 308),
    (b"[" * 513 + b"]" * 513, 512),
    (b"[" * 100_000, 512),
    (b'{"a":' * 600, 5 * 512),
]


@pytest.mark.parametrize(("text", "members"), JSON_OK)
def test_json_check_accepts(core: ModuleType, text: bytes, members: int) -> None:
    assert core.json_check(text) == members
    assert core.json_check(bytearray(text)) == members
    assert core.json_check(memoryview(text)) == members


@pytest.mark.parametrize(("text", "offset"), JSON_BAD)
def test_json_check_rejects_with_offset(core: ModuleType, text: bytes, offset: int) -> None:
    with pytest.raises(core.FrameError) as info:
        core.json_check(text)
    assert (info.value.index, info.value.field, info.value.reason) == (-1, "data", "json")
    assert str(info.value).partition(":")[0] == f"invalid JSON at byte {offset}"


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        (b"[1, " + b"2" * 309 + b"]", "a number with more than 308 integer digits"),
        (b"1" * 5000, "a number with more than 308 integer digits"),
        (b'{"type": "\\ud800"}', "a lone UTF-16 surrogate escape"),
        (b'"\\uDC00\\uD800"', "a lone UTF-16 surrogate escape"),
        (b"1 2", None),
        (b"[1 " + b"2" * 309 + b"]", None),  # the missing comma, not the long number
        (b"[" + b"1" * 308, None),  # the missing "]"
        (b"[\\ud800]", None),  # an escape outside a string is just a bad value
        (b"-01", None),
        (b'"\\u00e9\\x"', None),
    ],
)
def test_json_check_names_the_i_json_rule(core: ModuleType, text: bytes, rule: str | None) -> None:
    """A refusal of valid RFC 8259 says which I-JSON rule refused it (issue #30 finding 3)."""
    with pytest.raises(core.FrameError) as info:
        core.json_check(text)
    message = str(info.value)
    assert (rule in message) if rule else ":" not in message, message


def test_json_check_agrees_with_json_module_on_samples(core: ModuleType) -> None:
    samples = [json.dumps(v).encode() for v in ({"a": [1, 2.5, None]}, "é", [True, {}], -3)]
    for text in samples:
        json.loads(text)
        core.json_check(text)


def test_frame_error_is_a_value_error_and_pickles(core: ModuleType) -> None:
    err = core.FrameError("boom", 3, "tag", "empty")
    assert isinstance(err, ValueError)
    assert str(err) == "boom"
    back = pickle.loads(pickle.dumps(err))
    assert (str(back), back.index, back.field, back.reason) == ("boom", 3, "tag", "empty")
    default = core.FrameError("x")
    assert (default.index, default.field, default.reason) == (-1, "frame", "frame")


# --- encode_batch -------------------------------------------------------------------

GOLDEN = [
    # {"data": None}, seq 0, ts 0, no node, salt 0.
    (
        [{"data": None}],
        0,
        0,
        None,
        0,
        "2d000000b199624501000000000000000000000004000000"
        "00000000000000000000000000000000"
        "6e756c6c00",
    ),
    # Raw data, dict meta, tag and node, salt 0xDEADBEEF.
    (
        [{"data": b"[1,2]", "tag": "a/b", "node": "n1", "meta": {"k": "v"}}],
        7,
        1_700_000_000_000,
        None,
        0xDEADBEEF,
        "3c0000007f7749e401000200030000000900000005000000"
        "0700000000000000" + "0068e5cf8b010000"
        "6e31" + "612f62" + "7b226b223a2276227d" + "5b312c325d" + "00",
    ),
    # str data (dumped, ASCII-escaped), non-ASCII tag, default node, max seq, ts -1.
    (
        [{"data": "hé", "tag": "é"}],
        2**64 - 1,
        -1,
        "n",
        1,
        "350000003ae7d62e010001000200000000000000090000" + "00"
        "ffffffffffffffff" + "ffffffffffffffff"
        "6e" + "c3a9" + "22685c7530306539" + "22" + "00",
    ),
]


@pytest.mark.parametrize(("records", "seq", "ts", "node", "salt", "hexed"), GOLDEN)
def test_golden_frames(
    core: ModuleType, records: list[Any], seq: int, ts: int, node: str | None, salt: int, hexed: str
) -> None:
    frames = encode(core, records, seq, ts, node=node, salt=salt, limits=SMALL)
    assert frames.hex() == hexed


def test_golden_frame_layout_by_hand() -> None:
    frame = bytes.fromhex(GOLDEN[1][5])
    size, crc, kind, r1, nlen, tlen, r2, mlen, dlen, seq, ts = struct.unpack_from(
        "<IIBBHHHIIQq", frame
    )
    assert (size, kind, r1, r2, seq, ts) == (len(frame), 1, 0, 0, 7, 1_700_000_000_000)
    assert (nlen, tlen, mlen, dlen) == (2, 3, 9, 5)
    assert frame[40:] == b'n1a/b{"k":"v"}[1,2]\x00'
    assert crc == PURE.crc32c(frame[8:-1], PURE.crc32c(frame[:4], 0xDEADBEEF))


def test_encode_batch_fields_and_tags(core: ModuleType) -> None:
    records = [
        {"data": {"x": 1}, "tag": "t", "node": "a", "extra": object()},
        {"data": None, "meta": b' {"m": 1} ', "tag": None, "node": None},
        {"data": b" 7 ", "meta": {}},
    ]
    frames, tags = core.encode_batch(records, 5, 99, "dflt", SALT, LIMITS, ujson.dumps)
    assert tags == [b"t", None, None]
    seg = core.SegmentBuffer.from_frames(frames, 5, SALT)
    assert seg.decode(0) == (5, 99, b"a", b"t", None, b'{"x":1}', True)
    assert seg.decode(1) == (6, 99, b"dflt", None, b' {"m": 1} ', b"null", True)
    assert seg.decode(2) == (7, 99, b"dflt", None, b"{}", b" 7 ", True)
    _, tags = core.encode_batch([{"data": 1}], 0, 0, None, 0, LIMITS, ujson.dumps)
    assert tags is None
    assert core.encode_batch([], 0, 0, None, 0, LIMITS, ujson.dumps) == (b"", None)


class ReadOnlyMapping(Mapping[str, object]):
    def __init__(self, items: dict[str, object]) -> None:
        self._items = items

    def __getitem__(self, key: str) -> object:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


class Sub(dict):  # type: ignore[type-arg]
    pass


def test_encode_batch_accepts_any_mapping_and_sequence(core: ModuleType) -> None:
    plain = encode(core, [{"data": 1, "tag": "x"}, {"data": 2}])
    assert encode(core, [ReadOnlyMapping({"data": 1, "tag": "x"}), Sub(data=2)]) == plain
    assert encode(core, ({"data": 1, "tag": "x"}, {"data": 2})) == plain
    assert encode(core, [{"data": b"1", "tag": "x"}, {"data": bytearray(b"2")}]) == plain
    assert encode(core, [{"data": memoryview(b"1"), "tag": "x"}, {"data": "2"}]) != plain


def _raise(exc: type[Exception]) -> Any:
    def dumps(value: object) -> str:
        raise exc("nope")

    return dumps


ENCODE_ERRORS: list[tuple[str, list[Any], dict[str, Any], tuple[int, str, str]]] = [
    ("not a mapping", [{"data": 1}, 5], {}, (1, "record", "type")),
    ("list record", [[("data", 1)]], {}, (0, "record", "type")),
    ("missing data", [{"data": 1}, {"meta": {}}], {}, (1, "data", "missing")),
    ("bad raw data", [{"data": 1}, {"data": 2}, {"data": b"nope"}], {}, (2, "data", "json")),
    ("empty raw data", [{"data": b""}], {}, (0, "data", "json")),
    ("nan data", [{"data": float("nan")}], {}, (0, "data", "json")),
    ("inf in data", [{"data": [1, float("inf")]}], {}, (0, "data", "json")),
    ("unserialisable", [{"data": object()}], {}, (0, "data", "type")),
    ("dumps TypeError", [{"data": 1}], {"dumps": _raise(TypeError)}, (0, "data", "type")),
    ("dumps ValueError", [{"data": 1}], {"dumps": _raise(ValueError)}, (0, "data", "type")),
    ("dumps Overflow", [{"data": 1}], {"dumps": _raise(OverflowError)}, (0, "data", "type")),
    ("dumps non-str", [{"data": 1}], {"dumps": lambda v: 5}, (0, "data", "type")),
    ("dumps surrogate", [{"data": 1}], {"dumps": lambda v: "\ud800"}, (0, "data", "type")),
    ("meta list", [{"data": 1, "meta": [1]}], {}, (0, "meta", "type")),
    ("meta str", [{"data": 1, "meta": "{}"}], {}, (0, "meta", "type")),
    ("meta raw array", [{"data": 1, "meta": b"[1]"}], {}, (0, "meta", "type")),
    ("meta raw bad", [{"data": 1, "meta": b"{"}], {}, (0, "meta", "json")),
    ("meta nan", [{"data": 1, "meta": {"a": float("nan")}}], {}, (0, "meta", "json")),
    ("meta dumps fails", [{"data": 1, "meta": {"a": object()}}], {}, (0, "meta", "type")),
    ("meta too large", [{"data": 1, "meta": {"k": "x" * 100}}], {}, (0, "meta", "too_large")),
    (
        "meta raw too large",
        [{"data": 1, "meta": b"{" + b" " * 99 + b"}"}],
        {},
        (0, "meta", "too_large"),
    ),
    ("meta keys", [{"data": 1, "meta": dict.fromkeys("abcde", 1)}], {}, (0, "meta", "meta_keys")),
    (
        "meta raw keys",
        [{"data": 1, "meta": b'{"a":1,"a":1,"a":1,"a":1,"a":1}'}],
        {},
        (0, "meta", "meta_keys"),
    ),
    ("tag type", [{"data": 1, "tag": b"x"}], {}, (0, "tag", "type")),
    ("tag empty", [{"data": 1, "tag": ""}], {}, (0, "tag", "empty")),
    ("tag long", [{"data": 1, "tag": "x" * 17}], {}, (0, "tag", "too_large")),
    ("tag long utf8", [{"data": 1, "tag": "é" * 9}], {}, (0, "tag", "too_large")),
    ("tag surrogate", [{"data": 1, "tag": "a\udc00"}], {}, (0, "tag", "type")),
    ("node type", [{"data": 1, "node": 3}], {}, (0, "node", "type")),
    ("node empty", [{"data": 1, "node": ""}], {}, (0, "node", "empty")),
    ("node long", [{"data": 1, "node": "n" * 17}], {}, (0, "node", "too_large")),
    (
        "default node empty",
        [{"data": 1, "node": "a"}, {"data": 1}],
        {"node": ""},
        (1, "node", "empty"),
    ),
    ("default node type", [{"data": 1}], {"node": 7}, (0, "node", "type")),
    (
        "record too large",
        [{"data": "x" * 600, "meta": {"k": "y" * 90}}, {"data": "x" * 999}],
        {},
        (1, "record", "too_large"),
    ),
    ("first bad wins", [{"data": 1}, {"tag": ""}, {"data": b"x"}], {}, (1, "data", "missing")),
    ("data before meta", [{"data": b"x", "meta": 5}], {}, (0, "data", "json")),
    ("meta before tag", [{"data": 1, "meta": 5, "tag": 5}], {}, (0, "meta", "type")),
    ("tag before node", [{"data": 1, "tag": 5, "node": 5}], {}, (0, "tag", "type")),
    ("node before size", [{"data": "x" * 2000, "node": 5}], {}, (0, "node", "type")),
]


@pytest.mark.parametrize(
    ("records", "kw", "expected"), [e[1:] for e in ENCODE_ERRORS], ids=[e[0] for e in ENCODE_ERRORS]
)
def test_encode_batch_errors(
    core: ModuleType, records: list[Any], kw: dict[str, Any], expected: tuple[int, str, str]
) -> None:
    args = (records, 0, 0, kw.get("node"), SALT, SMALL, kw.get("dumps", ujson.dumps))
    assert frame_error(core, core.encode_batch, *args) == expected


def test_encode_batch_limits_edges(core: ModuleType) -> None:
    encode(core, [{"data": "x" * 898, "meta": {"k": "y" * 92}}], limits=SMALL)  # exactly 1000
    encode(core, [{"data": 1, "tag": "x" * 16, "node": "é" * 8}], limits=SMALL)
    encode(core, [{"data": 1, "meta": dict.fromkeys("abcd", 1)}], limits=SMALL)
    encode(core, [{"data": 1, "tag": "t" * 65535}], limits=(1, 1, 1, 1 << 40, 1 << 40))


def test_encode_batch_argument_errors(core: ModuleType) -> None:
    ok = [{"data": 1}]
    with pytest.raises(OverflowError):
        core.encode_batch(ok, -1, 0, None, 0, LIMITS, ujson.dumps)
    with pytest.raises(OverflowError):
        core.encode_batch(ok, 0, 1 << 63, None, 0, LIMITS, ujson.dumps)
    with pytest.raises(OverflowError):
        core.encode_batch(ok, 0, 0, None, 1 << 32, LIMITS, ujson.dumps)
    with pytest.raises(OverflowError):
        core.encode_batch(ok * 2, 2**64 - 1, 0, None, 0, LIMITS, ujson.dumps)
    with pytest.raises(ValueError):
        core.encode_batch(ok, 0, 0, None, 0, LIMITS[:4], ujson.dumps)
    with pytest.raises(ValueError):
        core.encode_batch(ok, 0, 0, None, 0, (-1, 1, 1, 1, 1), ujson.dumps)
    with pytest.raises(TypeError):
        core.encode_batch(ok, 0, 0, None, 0, list(LIMITS), ujson.dumps)


def test_encode_batch_seqs_and_crc(core: ModuleType) -> None:
    frames = encode(core, [{"data": i} for i in range(5)], first_seq=100, ts=-5)
    spans = core.iter_frames(frames, SALT)
    assert [core.frame_seq(frames, off) for off, _ in spans] == [100, 101, 102, 103, 104]
    for off, size in spans:
        frame = frames[off : off + size]
        assert struct.unpack_from("<I", frame, 4)[0] == PURE.crc32c(
            frame[8:-1], PURE.crc32c(frame[:4], SALT)
        )
        assert frame[-1] == 0


# --- encode_batch: one dumps() call per batch -----------------------------------------
#
# With ujson.dumps, encode_batch encodes all data values (and all dict metas) of a batch
# in one call and splits the list text per value; any other dumps is called per value.
# ``per_value`` is ujson.dumps under another identity, so it takes the per-value path
# with the same output: the two paths must agree on every batch, errors included.


def per_value(value: object) -> Any:
    return ujson.dumps(value)


def both_paths(core: ModuleType, records: list[Any], limits: tuple[int, ...] = SMALL) -> Any:
    """encode_batch's outcome through the batched path, checked against the per-value one."""
    args = (records, 0, 0, "nd", SALT, limits)
    batched = outcome(core.encode_batch, *args, ujson.dumps)
    assert batched == outcome(core.encode_batch, *args, per_value)
    assert outcome(core.encode_batch, *args, ujson.encode) == batched
    return batched


def json_error(text: str) -> str:
    """The message json_check gives for ``text``."""
    with pytest.raises(PURE.FrameError) as info:
        PURE.json_check(text.encode())
    return str(info.value)


class Raises(Mapping[str, object]):
    """A mapping whose every read raises ValueError."""

    def __getitem__(self, key: str) -> object:
        raise ValueError("unreadable")

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


NAN, INF = float("nan"), float("inf")


def bad_batch(bad: dict[int, dict[str, Any] | Any], n: int = 10) -> list[Any]:
    """n good records (data, meta, tag), bad[i] updating record i (a dict) or replacing it."""
    records: list[Any] = [{"data": {"i": i}, "meta": {"m": i}, "tag": f"t{i}"} for i in range(n)]
    for i, change in bad.items():
        if isinstance(change, dict):
            records[i] = {**records[i], **change}
        else:
            records[i] = change
    return records


BATCH_ERRORS: list[tuple[str, dict[int, Any], tuple[int, str, str]]] = [
    ("tag before later nan", {3: {"tag": ""}, 7: {"data": NAN}}, (3, "tag", "empty")),
    ("nan before later tag", {3: {"data": [1, NAN]}, 7: {"tag": ""}}, (3, "data", "json")),
    (
        "node before later unserialisable",
        {2: {"node": 5}, 4: {"data": object()}},
        (2, "node", "type"),
    ),
    (
        "unserialisable before later nan",
        {1: {"data": object()}, 3: {"data": NAN}},
        (1, "data", "type"),
    ),
    ("meta nan before non-mapping", {6: {"meta": {"a": INF}}, 8: 5}, (6, "meta", "json")),
    (
        "size before missing data",
        {1: {"data": "x" * 999}, 5: ReadOnlyMapping({"meta": {}})},
        (1, "record", "too_large"),
    ),
    (
        "meta too large beats its nan",
        {4: {"meta": {"k": "x" * 100, "n": NAN}}},
        (4, "meta", "too_large"),
    ),
    ("data nan beats own tag", {5: {"data": -INF, "tag": ""}}, (5, "data", "json")),
    (
        "data type beats own meta nan",
        {3: {"data": object(), "meta": {"a": NAN}}},
        (3, "data", "type"),
    ),
    ("last record", {9: {"data": {"deep": [[INF]]}}}, (9, "data", "json")),
    (
        "meta keys before unreadable",
        {2: {"meta": dict.fromkeys("abcde", 1)}, 6: Raises()},
        (2, "meta", "meta_keys"),
    ),
    (
        "raw meta bad before dict meta nan",
        {2: {"meta": b"{"}, 3: {"meta": {"a": NAN}}},
        (2, "meta", "json"),
    ),
    ("raw data bad before nan", {2: {"data": b"[1,]"}, 3: {"data": NAN}}, (2, "data", "json")),
    (
        "meta type before meta unserialisable",
        {1: {"meta": [1]}, 2: {"meta": {"a": object()}}},
        (1, "meta", "type"),
    ),
    ("non-mapping first", {0: [1], 1: {"data": NAN}}, (0, "record", "type")),
]


@pytest.mark.parametrize(
    ("bad", "expected"), [e[1:] for e in BATCH_ERRORS], ids=[e[0] for e in BATCH_ERRORS]
)
def test_batch_first_failing_record_wins(
    core: ModuleType, bad: dict[int, Any], expected: tuple[int, str, str]
) -> None:
    result = both_paths(core, bad_batch(bad))
    assert result[:4] == ("FrameError", *expected)


def test_batch_unreadable_mapping_raises_after_earlier_records(core: ModuleType) -> None:
    assert both_paths(core, bad_batch({6: Raises()}))[0] == "ValueError"
    with pytest.raises(ValueError, match="unreadable"):
        encode(core, bad_batch({6: Raises(), 8: {"tag": ""}}))


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
@pytest.mark.parametrize(
    "shape",
    [
        lambda v: v,
        lambda v: [1, v],
        lambda v: {"a": {"b": [0, v]}},
        lambda v: {"x": "s", "y": [True, None, {"z": v}], "w": 2},
    ],
)
def test_batch_nan_and_infinity_anywhere(core: ModuleType, bad: float, shape: Any) -> None:
    value = shape(bad)
    message = json_error(ujson.dumps(value))
    for k in (0, 1, 50, 99):
        records: list[Any] = [{"data": {"i": i, "s": "v"}} for i in range(100)]
        records[k] = {"data": value}
        assert both_paths(core, records, LIMITS) == ("FrameError", k, "data", "json", message)
        records[k] = {"data": 1, "meta": {"m": value}}
        meta_message = json_error(ujson.dumps({"m": value}))
        assert both_paths(core, records, LIMITS) == ("FrameError", k, "meta", "json", meta_message)


def test_batch_unserialisable_value_reports_its_index(core: ModuleType) -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    for bad in (object(), [1, {"a": object()}], cyclic, {"b": b"bytes nested"}):
        for k in (0, 1, 7, 19):
            records: list[Any] = [{"data": [i], "meta": {"i": i}} for i in range(20)]
            records[k] = {"data": bad}
            assert both_paths(core, records, LIMITS)[:4] == ("FrameError", k, "data", "type")
            records[k] = {"data": 1, "meta": {"m": bad}}
            assert both_paths(core, records, LIMITS)[:4] == ("FrameError", k, "meta", "type")


def test_batch_mixed_data_kinds(core: ModuleType) -> None:
    values: list[Any] = [
        b' {"raw": 1} ',
        {"k": "v"},
        None,
        bytearray(b"[1,2]"),
        "é\u2028",
        memoryview(b'"mv"'),
        3,
        None,
        [{"n": [None, True]}, 2.5],
        b"7",
        -(2**63),
        {},
    ]
    expected = []
    for v in values:
        if v is None:
            expected.append(b"null")
        elif isinstance(v, bytes | bytearray | memoryview):
            expected.append(bytes(v))
        else:
            expected.append(ujson.dumps(v).encode())
    records = [{"data": v} for v in values]
    frames = both_paths(core, records, LIMITS)[1][0]
    seg = core.SegmentBuffer.from_frames(frames, 0, SALT)
    assert [seg.decode(i)[5] for i in range(len(values))] == expected


def test_batch_meta_dicts_mixed_with_raw_meta(core: ModuleType) -> None:
    metas: list[Any] = [
        {"a": 1},
        b' {"raw": true} ',
        None,
        bytearray(b"{}"),
        {"b": [1, {"c": 2}], "d": "é"},
        memoryview(b'{"m":1}'),
        {},
        dict.fromkeys("abcd", None),
    ]
    expected = [
        None if m is None else bytes(m) if not isinstance(m, dict) else ujson.dumps(m).encode()
        for m in metas
    ]
    records = [{"data": i, "meta": m} for i, m in enumerate(metas)]
    frames = both_paths(core, records)[1][0]
    seg = core.SegmentBuffer.from_frames(frames, 0, SALT)
    assert [seg.decode(i)[4] for i in range(len(metas))] == expected
    # Key counts come from the batch split for dict metas and from json_check for raw ones.
    too_many = dict.fromkeys("abcde", 1)
    assert both_paths(core, [*records, {"data": 1, "meta": too_many}])[1:4] == (
        8,
        "meta",
        "meta_keys",
    )
    raw_many = b'{"a":1,"b":2,"c":3,"d":4,"e":5}'
    assert both_paths(core, [*records, {"data": 1, "meta": raw_many}])[1:4] == (
        8,
        "meta",
        "meta_keys",
    )


def test_batch_nesting_limits(core: ModuleType) -> None:
    def nested(depth: int) -> Any:
        value: Any = 1
        for _ in range(depth):
            value = [value]
        return value

    # Each value's nesting counts from the value, not from the list around the batch.
    ok = both_paths(core, [{"data": 1}, {"data": nested(512)}, {"data": "x"}], LIMITS)
    assert ok[0] == "ok"
    too_deep = ("FrameError", 1, "data", "json", "invalid JSON at byte 512")
    assert both_paths(core, [{"data": 1}, {"data": nested(513)}], LIMITS) == too_deep
    # ujson takes 1024 levels alone but not inside the batch's list: per-value path.
    assert both_paths(core, [{"data": 1}, {"data": nested(1024)}], LIMITS) == too_deep
    assert both_paths(core, [{"data": 1}, {"data": nested(1025)}], LIMITS)[1:4] == (
        1,
        "data",
        "type",
    )


class RawJSON:
    """ujson writes what __json__ returns verbatim."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __json__(self) -> str:
        return self.text


def test_batch_keeps_verbatim_json_hook_output(core: ModuleType) -> None:
    records = [{"data": RawJSON(" 1 ")}, {"data": [RawJSON('{"a" : 2}')]}, {"data": 3}]
    frames = both_paths(core, records)[1][0]
    seg = core.SegmentBuffer.from_frames(frames, 0, SALT)
    assert [seg.decode(i)[5] for i in range(3)] == [b" 1 ", b'[{"a" : 2}]', b"3"]
    # Text that is not one JSON value is reported as it always was (here the split finds
    # three elements for two values and leaves the rest to the per-value path).
    for text in ("1,2", "", "[", "1 2", "NaN"):
        result = both_paths(core, [{"data": 0}, {"data": RawJSON(text)}, {"data": 2}])
        assert result == ("FrameError", 1, "data", "json", json_error(text))


def test_batch_dumps_raising_other_errors(core: ModuleType) -> None:
    class Boom:
        def __json__(self) -> str:
            raise RuntimeError("boom")

    records: list[Any] = [{"data": 1}, {"data": 2, "tag": ""}, {"data": Boom()}]
    assert frame_error(core, encode, core, records) == (1, "tag", "empty")
    with pytest.raises(RuntimeError, match="boom"):
        encode(core, [{"data": 1}, {"data": Boom()}, {"data": 2, "tag": ""}])


def test_other_dumps_are_called_per_value(core: ModuleType) -> None:
    import functools

    indented = functools.partial(json.dumps, indent=1)
    values: list[Any] = [{"a": [1, 2]}, "x", {"b": {}}]
    frames = encode(core, [{"data": v, "meta": {"v": v}} for v in values], dumps=indented)
    seg = core.SegmentBuffer.from_frames(frames, 0, SALT)
    for i, v in enumerate(values):
        assert seg.decode(i)[4:6] == (indented({"v": v}).encode(), indented(v).encode())
    calls: list[object] = []

    def counting(value: object) -> str:
        calls.append(value)
        return json.dumps(value)

    encode(core, [{"data": v} for v in values], dumps=counting)
    assert calls == values


def test_batch_large_texts(core: ModuleType) -> None:
    # Over the GIL-release threshold for the split; values with escapes and non-ASCII.
    records = [
        {"data": {"k": 'x\u00e9\n"' * 300, "i": i}, "meta": {"m": "é" * 200}, "tag": "t"}
        for i in range(40)
    ]
    ok = both_paths(core, records, LIMITS)
    assert ok[0] == "ok"
    assert ok == outcome(PURE.encode_batch, records, 0, 0, "nd", SALT, LIMITS, ujson.dumps)


class StrKey(str):
    pass


def test_record_key_variants(core: ModuleType) -> None:
    def built(text: str) -> str:  # an equal str that is not the interned literal
        return "".join(list(text))

    records: list[Any] = [
        {built("data"): 1, built("tag"): "t", built("node"): "n", built("meta"): {"a": 1}},
        {StrKey("data"): 2, StrKey("tag"): "u"},
        {1: "x", None: "y", "data": 3},
        {"dat\u00e4": 0, "d\u00e4ta": 1, "data": 4, "tags": "no", "ta": "no"},
        {**{f"k{i}": i for i in range(20)}, "data": 5, "tag": "many"},
        {"data": 6, "tag": "x", "node": "y", "meta": None, "extra": [1]},
    ]
    frames, tags = core.encode_batch(records, 0, 0, "dn", SALT, LIMITS, ujson.dumps)
    assert tags == [b"t", b"u", None, None, b"many", b"x"]
    assert (frames, tags) == PURE.encode_batch(records, 0, 0, "dn", SALT, LIMITS, ujson.dumps)
    seg = core.SegmentBuffer.from_frames(frames, 0, SALT)
    assert seg.decode(0)[2:6] == (b"n", b"t", b'{"a":1}', b"1")
    assert frame_error(core, encode, core, [{StrKey("date"): 1}]) == (0, "data", "missing")


# --- frames -------------------------------------------------------------------------


def sample_frames(core: ModuleType, n: int = 4, first_seq: int = 10) -> bytes:
    records = [{"data": {"i": i}, "tag": f"t{i % 2}", "node": f"n{i % 3}"} for i in range(n)]
    return encode(core, records, first_seq)


def test_iter_frames_and_frame_seq(core: ModuleType) -> None:
    frames = sample_frames(core)
    spans = core.iter_frames(frames, SALT)
    assert [off for off, _ in spans] == [0, *[sum(s for _, s in spans[:k]) for k in range(1, 4)]]
    assert sum(s for _, s in spans) == len(frames)
    assert core.iter_frames(memoryview(frames), SALT, False) == spans
    assert core.iter_frames(b"", SALT) == []
    assert core.frame_seq(frames, spans[2][0]) == 12
    with pytest.raises(core.FrameError):
        core.frame_seq(frames, len(frames) - 10)
    with pytest.raises(IndexError):
        core.frame_seq(frames, -1)


def test_iter_frames_detects_every_corrupted_byte(core: ModuleType) -> None:
    frames = sample_frames(core, 2)
    size = core.iter_frames(frames, SALT)[0][1]
    for pos in range(size):
        bad = bytearray(frames)
        bad[pos] ^= 0x40
        if pos == size - 1:  # the trailer is not covered by the CRC: a garbled flag
            assert len(core.iter_frames(bytes(bad), SALT)) == 2  # reads as deleted, not corrupt
            seg = core.SegmentBuffer.from_frames(bytes(bad), 10, SALT)
            assert not seg.is_live(0)
            assert seg.is_live(1)
            continue
        with pytest.raises(core.FrameError) as info:
            core.iter_frames(bytes(bad), SALT)
        assert info.value.index == 0
        assert info.value.reason in {"crc", "truncated", "kind"}
        assert str(0) in str(info.value)


def test_iter_frames_truncation_and_salt(core: ModuleType) -> None:
    frames = sample_frames(core, 3)
    spans = core.iter_frames(frames, SALT)
    for cut in [1, 10, 40, spans[1][0] + 5, len(frames) - 1]:
        index, _, reason = frame_error(core, core.iter_frames, frames[:cut], SALT)
        assert reason == "truncated"
        assert index == max(i for i, (off, _) in enumerate(spans) if off < cut)
    assert frame_error(core, core.iter_frames, frames, SALT + 1) == (0, "frame", "crc")
    assert len(core.iter_frames(frames, SALT + 1, False)) == 3


def test_iter_frames_structure_checks(core: ModuleType) -> None:
    frame = bytearray(sample_frames(core, 1))

    def reframe(mutate: Any) -> bytes:
        bad = bytearray(frame)
        mutate(bad)
        crc = PURE.crc32c(bytes(bad[8:-1]), PURE.crc32c(bytes(bad[:4]), SALT))
        struct.pack_into("<I", bad, 4, crc)
        return bytes(bad)

    cases = [
        lambda b: b.__setitem__(8, 2),  # kind
        lambda b: b.__setitem__(9, 1),  # reserved
        lambda b: b.__setitem__(14, 1),  # reserved
        lambda b: struct.pack_into("<H", b, 10, 3),  # lengths do not add up
    ]
    for mutate in cases:
        assert frame_error(core, core.iter_frames, reframe(mutate), SALT) == (0, "frame", "kind")
        assert frame_error(core, core.iter_frames, reframe(mutate), SALT, False) == (
            0,
            "frame",
            "kind",
        )
    tiny = struct.pack("<I", 20) + bytes(40)
    assert frame_error(core, core.iter_frames, tiny, SALT) == (0, "frame", "kind")


def test_frame_offsets_walk_like_iter_frames(core: ModuleType) -> None:
    frames = sample_frames(core, 5)
    spans = core.iter_frames(frames, SALT)
    offsets = core.frame_offsets(frames, SALT)
    assert offsets.typecode == "I"
    assert offsets.tolist() == [off for off, _ in spans]
    assert core.frame_offsets(memoryview(frames), SALT, False, 1000).tolist() == [
        1000 + off for off, _ in spans
    ]
    assert core.frame_offsets(b"", SALT).tolist() == []
    cut = frames[: spans[3][0] + 5]
    assert frame_error(core, core.frame_offsets, cut, SALT) == frame_error(
        core, core.iter_frames, cut, SALT
    )
    assert frame_error(core, core.frame_offsets, frames, SALT + 1) == (0, "frame", "crc")
    assert len(core.frame_offsets(frames, SALT + 1, False)) == 5
    with pytest.raises(ValueError, match="negative start"):
        core.frame_offsets(frames, SALT, True, -1)
    with pytest.raises(OverflowError, match="4 GiB"):
        core.frame_offsets(frames, SALT, True, (1 << 32) - len(frames))
    assert len(core.frame_offsets(frames, SALT, True, (1 << 32) - 1 - len(frames))) == 5


def _wal_frames_reference(frames: list[tuple[int, int, bytes]], salt: int) -> bytes:
    """The WAL frame layout of docs/STORAGE_FORMATS.md, spelled out."""
    out = b""
    for lsn, kind, payload in frames:
        body = struct.pack("<QB3x", lsn, kind) + payload
        length = struct.pack("<I", len(payload))
        crc = PURE.crc32c(body, PURE.crc32c(length, salt))
        out += length + struct.pack("<I", crc) + body
    return out


def test_encode_wal_frames_layout_and_errors(core: ModuleType) -> None:
    frames = [(1, 3, b"abc"), (2, 7, b""), ((1 << 64) - 1, 255, bytes(range(256)) * 20)]
    encoded = core.encode_wal_frames(frames, SALT)
    assert type(encoded) is bytearray
    assert encoded == _wal_frames_reference(frames, SALT)
    assert core.encode_wal_frames(iter(frames[:1]), 0) == _wal_frames_reference(frames[:1], 0)
    assert core.encode_wal_frames([], SALT) == bytearray()
    bad: list[tuple[Any, type[Exception], str]] = [
        ((-1, 1, b""), ValueError, "lsn -1 is not a u64"),
        ((1 << 64, 1, b""), ValueError, "is not a u64"),
        ((1, 256, b""), ValueError, "entry_type 256 is not a u8"),
        ((1, -1, b""), ValueError, "entry_type -1 is not a u8"),
        ((1, 1, bytearray(b"x")), TypeError, "payload must be bytes, not bytearray"),
        ((1, 1), TypeError, "(lsn, entry_type, payload) tuple"),
        ([1, 1, b""], TypeError, "(lsn, entry_type, payload) tuple"),
    ]
    for item, exc, message in bad:
        with pytest.raises(exc, match=re.escape(message)):
            core.encode_wal_frames([(1, 1, b"ok"), item], SALT)


@needs_ext
def test_encode_wal_frames_ext_matches_pure() -> None:
    import random

    rng = random.Random(7)
    for _ in range(50):
        frames = [
            (rng.randrange(1, 1 << 64), rng.randrange(256), rng.randbytes(rng.randrange(600)))
            for _ in range(rng.randrange(8))
        ]
        salt = rng.randrange(1 << 32)
        assert EXT.encode_wal_frames(frames, salt) == PURE.encode_wal_frames(frames, salt)


# --- SegmentBuffer ------------------------------------------------------------------


def build_segment(core: ModuleType, batches: list[tuple[int, list[Any]]], base: int = 100) -> Any:
    seg = core.SegmentBuffer(base, SALT)
    for ts, records in batches:
        assert seg.append(encode(core, records, base + seg.count, ts)) == len(records)
    return seg


def test_segment_basics(core: ModuleType) -> None:
    seg = core.SegmentBuffer(100, SALT)
    assert (seg.base_seq, seg.salt, seg.count, seg.nbytes, seg.last_ts) == (100, SALT, 0, 0, -1)
    assert (seg.live_count, seg.live_bytes, seg.retired, seg.sealed) == (0, 0, 0, False)
    frames = sample_frames(core, 4, 100)
    assert seg.append(frames) == 4
    assert seg.append(b"") == 0
    assert (seg.count, seg.nbytes, seg.live_count, seg.live_bytes) == (
        4,
        len(frames),
        4,
        len(frames),
    )
    assert bytes(seg.view()) == frames
    assert seg.view().readonly
    spans = core.iter_frames(frames, SALT)
    for i, (off, size) in enumerate(spans):
        assert (seg.offset_of(i), seg.frame_len(i), seg.ts_at(i)) == (off, size, 1000)
        assert seg.frame(i) == frames[off : off + size]
        assert seg.tag_at(i) == f"t{i % 2}".encode()
        assert seg.node_at(i) == f"n{i % 3}".encode()
        assert seg.is_live(i)
    for method in [
        "frame_len",
        "ts_at",
        "tag_at",
        "node_at",
        "is_live",
        "offset_of",
        "frame",
        "decode",
        "mark_deleted",
    ]:
        for bad in [-1, 4]:
            with pytest.raises(IndexError):
                getattr(seg, method)(bad)


def test_segment_append_checks(core: ModuleType) -> None:
    seg = build_segment(core, [(50, [{"data": 1}])])
    gap = encode(core, [{"data": 1}], 102, 50)
    assert frame_error(core, seg.append, gap) == (0, "frame", "seq")
    older = encode(core, [{"data": 1}], 101, 49)
    assert frame_error(core, seg.append, older) == (0, "frame", "seq")
    mixed = encode(core, [{"data": 1}], 101, 60) + encode(core, [{"data": 1}], 102, 59)
    assert frame_error(core, seg.append, mixed) == (1, "frame", "seq")
    assert frame_error(core, seg.append, mixed[:-3]) == (1, "frame", "truncated")
    assert (seg.count, seg.last_ts) == (1, 50)
    assert seg.append(bytearray(encode(core, [{"data": 1}] * 2, 101, 50))) == 2
    seg.seal()
    assert seg.sealed
    with pytest.raises(ValueError):
        seg.append(encode(core, [{"data": 1}], 103, 50))
    assert seg.count == 3


def test_segment_seq_cannot_wrap(core: ModuleType) -> None:
    top = 2**64 - 1
    seg = core.SegmentBuffer(top, SALT)
    assert seg.append(encode(core, [{"data": 1}], top)) == 1
    assert frame_error(core, seg.append, encode(core, [{"data": 1}], 0)) == (0, "frame", "seq")
    pair = encode(core, [{"data": 1}], top) + encode(core, [{"data": 1}], 0)
    assert frame_error(core, core.SegmentBuffer.from_frames, pair, top, SALT) == (1, "frame", "seq")


def test_segment_view_survives_growth(core: ModuleType) -> None:
    seg = core.SegmentBuffer(0, SALT)
    first = encode(core, [{"data": "x" * 100}])
    seg.append(first)
    view = seg.view()
    for k in range(1, 200):  # force reallocations while the view is held
        seg.append(encode(core, [{"data": "x" * 100}], k))
    assert bytes(view) == first
    assert seg.count == 200
    seg.seal()
    assert bytes(seg.view()) == b"".join(seg.frame(i) for i in range(200))
    view.release()


def test_mark_deleted_and_retire_accounting(core: ModuleType) -> None:
    seg = build_segment(
        core,
        [(10, [{"data": i, "tag": "t"} for i in range(3)]), (20, [{"data": i} for i in range(3)])],
    )
    trie = core.TagTrie()
    trie.add_batch([b"t", b"t", b"t"], 100)
    sizes = [seg.frame_len(i) for i in range(6)]
    assert seg.mark_deleted(1, trie) == sizes[1]
    assert seg.mark_deleted(1, trie) == 0
    assert trie.count_exact(b"t") == 2
    assert not seg.is_live(1)
    assert seg.frame(1)[-1] == 1
    assert (seg.live_count, seg.live_bytes) == (5, sum(sizes) - sizes[1])
    assert seg.first_live(1) == 2
    assert seg.retire_to(3, trie) == (2, sizes[0] + sizes[2], 2)
    assert (len(trie), seg.retired, seg.live_count) == (0, 3, 3)
    assert seg.retire_to(1) == (0, 0, -1)  # never moves backwards
    assert seg.retired == 3
    assert seg.mark_deleted(0) == 0  # retired frames are not live
    assert seg.first_live(0) == 3
    assert seg.mark_deleted(5) == sizes[5]
    assert seg.retire_to(99) == (2, sizes[3] + sizes[4], 4)
    assert (seg.retired, seg.live_count, seg.live_bytes, seg.first_live(0)) == (6, 0, 0, 6)
    assert seg.decode(3)[6] is False
    assert seg.frame(3)[-1] == 0  # retiring leaves the trailer alone


def test_first_ts_at_least(core: ModuleType) -> None:
    seg = build_segment(
        core, [(10, [{"data": 1}] * 2), (20, [{"data": 1}] * 3), (30, [{"data": 1}])]
    )
    expected = {-(2**63): 0, 9: 0, 10: 0, 11: 2, 20: 2, 21: 5, 30: 5, 31: 6, 2**63 - 1: 6}
    for ts, index in expected.items():
        assert seg.first_ts_at_least(ts) == index
    assert core.SegmentBuffer(0, 0).first_ts_at_least(5) == 0


def test_from_frames_round_trip_and_corruption(core: ModuleType) -> None:
    seg = build_segment(core, [(5, [{"data": i, "tag": "a"} for i in range(4)])])
    seg.mark_deleted(2)
    disk = bytes(seg.view())
    again = core.SegmentBuffer.from_frames(disk, 100, SALT)
    assert (again.count, again.live_count, again.live_bytes) == (4, 3, seg.live_bytes)
    assert [again.decode(i) for i in range(4)] == [seg.decode(i) for i in range(4)]
    assert not again.sealed
    assert again.append(encode(core, [{"data": 9}], 104, 5)) == 1
    assert frame_error(core, core.SegmentBuffer.from_frames, disk, 101, SALT) == (0, "frame", "seq")
    assert frame_error(core, core.SegmentBuffer.from_frames, disk[:-1], 100, SALT) == (
        3,
        "frame",
        "truncated",
    )
    flipped = bytearray(disk)
    flipped[seg.offset_of(1) + 41] ^= 1
    assert frame_error(core, core.SegmentBuffer.from_frames, bytes(flipped), 100, SALT) == (
        1,
        "frame",
        "crc",
    )
    assert core.SegmentBuffer.from_frames(bytes(flipped), 100, SALT, False).count == 4
    assert core.SegmentBuffer.from_frames(b"", 7, SALT).count == 0


def test_threads_read_while_appending(core: ModuleType) -> None:
    # Renders and views of more than a few KiB run without the GIL while the writer
    # grows the buffer; neither may see freed memory or torn output.
    seg = core.SegmentBuffer(0, SALT)
    seg.append(encode(core, [{"data": "x" * 200}] * 100))
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                frag, emitted, _, _ = seg.render(0, 10**6, 10**9, None, 1)
                assert len(json.loads(b"[" + frag + b"]")) == emitted
                view = seg.view()
                assert core.iter_frames(view, SALT)
                view.release()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    for seq in range(100, 400):
        seg.append(encode(core, [{"data": "y" * 100}], seq))
        if seq % 7 == 0:
            seg.mark_deleted(seq - 50)
    stop.set()
    for thread in threads:
        thread.join()
    assert errors == []
    assert seg.count == 400


# --- render -------------------------------------------------------------------------

NASTY = ['q"uote', "back\\slash", "ctl\x00\x01\x1f\x7f", "nl\n\r\t\b\f", "é€😀", "/x"]


def render_records() -> list[tuple[int, list[dict[str, Any]]]]:
    batches = []
    for b in range(4):
        records = []
        for k in range(5):
            i = b * 5 + k
            rec: dict[str, Any] = {
                "data": {"i": i, "s": NASTY[i % 6]} if i % 3 else b'{"raw": [1, 2]}'
            }
            if i % 2:
                rec["tag"] = NASTY[i % 6] if i % 4 == 1 else f"tag{i}"
            if i % 3 != 1:
                rec["node"] = f"n{i % 4}" if i % 5 else NASTY[i % 6]
            if i % 4 == 0:
                rec["meta"] = {"m": i}
            records.append(rec)
        batches.append(((-(2**63) if b == 0 else 10**15 * b), records))
    return batches


def expected_render(
    batches: list[tuple[int, list[dict[str, Any]]]], base: int, flags: int
) -> list[dict[str, Any]]:
    out = []
    i = 0
    for ts, records in batches:
        for rec in records:
            node = rec.get("node", "default")
            item: dict[str, Any] = {"$seq": base + i, "$ts": ts, "$node": node}
            if flags & 4 and "tag" in rec:
                item["$tag"] = rec["tag"]
            if flags & 1:
                data = rec["data"]
                item["data"] = json.loads(data) if isinstance(data, bytes) else data
            if flags & 2 and "meta" in rec:
                item["meta"] = rec["meta"]
            out.append(item)
            i += 1
    return out


def model_walk(
    items: list[dict[str, Any]],
    live: list[bool],
    start: int,
    limit: int,
    max_bytes: int,
    skip: frozenset[bytes] | None,
    sizes: list[int],
) -> tuple[list[dict[str, Any]], int, int]:
    """The render walk rules, on the expected items and their rendered sizes."""
    out: list[dict[str, Any]] = []
    examined, size, i = 0, -1, start
    while i < len(items) and examined < limit:
        i += 1
        if not live[i - 1]:
            continue
        examined += 1
        if skip and items[i - 1]["$node"].encode() in skip:
            continue
        out.append(items[i - 1])
        size += sizes[i - 1] + 1
        if size >= max_bytes:
            break
    return out, examined, i


@pytest.mark.parametrize("flags", range(8))
def test_render_combinations(core: ModuleType, flags: int) -> None:
    batches = render_records()
    seg = core.SegmentBuffer(2**64 - 30, SALT)
    for ts, records in batches:
        seg.append(encode(core, records, seg.base_seq + seg.count, ts, node="default"))
    for i in [3, 4, 11]:
        seg.mark_deleted(i)
    seg.retire_to(2)
    live = [seg.is_live(i) for i in range(seg.count)]
    items = expected_render(batches, seg.base_seq, flags)
    sizes = [len(seg.render(i, 1, 0, None, flags)[0]) if live[i] else 0 for i in range(seg.count)]
    skips = [None, frozenset(), frozenset({b"n1"}), frozenset({b"n1", b"default", b"zz"})]
    skips.append(frozenset({f"n{k}".encode() for k in range(2, 40)}))
    for skip in skips:
        for start in [0, 2, 3, 7, 19, 20, 25]:
            for limit in [0, 1, 2, 5, 100]:
                for max_bytes in [-1, 0, 1, 120, 400, 10**9]:
                    frag, emitted, examined, nxt = seg.render(start, limit, max_bytes, skip, flags)
                    got = json.loads(b"[" + frag + b"]")
                    want, want_examined, want_next = model_walk(
                        items, live, min(max(start, 2), 20), limit, max_bytes, skip, sizes
                    )
                    assert got == want
                    assert (emitted, examined, nxt) == (len(want), want_examined, want_next)


@pytest.mark.parametrize("flags", [0, 7])
def test_render_stops_at_a_mid_segment_index(core: ModuleType, flags: int) -> None:
    # ``stop`` bounds the walk inside a segment (a strong watch read ends at the WAL's
    # committed seq, which can fall between two writes of one segment).
    batches = render_records()
    seg = core.SegmentBuffer(1000, SALT)
    for ts, records in batches:
        seg.append(encode(core, records, seg.base_seq + seg.count, ts, node="default"))
    for i in [3, 4, 11]:
        seg.mark_deleted(i)
    live = [seg.is_live(i) for i in range(seg.count)]
    items = expected_render(batches, seg.base_seq, flags)
    sizes = [len(seg.render(i, 1, 0, None, flags)[0]) if live[i] else 0 for i in range(seg.count)]
    for stop in [0, 1, 4, 5, 12, seg.count - 1, seg.count, seg.count + 5, -1]:
        bound = seg.count if stop < 0 else min(stop, seg.count)
        for start in [0, 2, 4, 11, 19]:
            for limit in [1, 3, 100]:
                for max_bytes in [0, 400, 10**9]:
                    frag, emitted, examined, nxt = seg.render(
                        start, limit, max_bytes, None, flags, stop
                    )
                    want, want_examined, want_next = model_walk(
                        items[:bound],
                        live[:bound],
                        min(start, bound),
                        limit,
                        max_bytes,
                        None,
                        sizes,
                    )
                    assert json.loads(b"[" + frag + b"]") == want
                    assert (emitted, examined, nxt) == (len(want), want_examined, want_next)


def test_render_format_is_exact(core: ModuleType) -> None:
    seg = core.SegmentBuffer(0, SALT)
    seg.append(
        encode(core, [{"data": b" [1] ", "meta": b'{"a":1}', "tag": "t", "node": 'n"'}], 0, -7)
    )
    frag = seg.render(0, 10, 10**6, None, 7)[0]
    assert frag == b'{"$seq":0,"$ts":-7,"$node":"n\\"","$tag":"t","data": [1] ,"meta":{"a":1}}'
    assert seg.render(0, 10, 10**6, None, 0)[0] == b'{"$seq":0,"$ts":-7,"$node":"n\\""}'
    control = core.SegmentBuffer(0, SALT)
    control.append(encode(core, [{"data": 1, "node": "\x00\x1f\b\f\n\r\t\x7f"}]))
    assert (
        control.render(0, 1, 1, None, 0)[0]
        == b'{"$seq":0,"$ts":1000,"$node":"\\u0000\\u001f\\b\\f\\n\\r\\t\x7f"}'
    )


def test_render_extreme_integers(core: ModuleType) -> None:
    for seq, ts in [(0, 0), (2**64 - 1, -(2**63)), (10**19, 2**63 - 1), (9, -1), (10, 10)]:
        seg = core.SegmentBuffer(seq, SALT)
        seg.append(encode(core, [{"data": 1}], seq, ts))
        assert json.loads(seg.render(0, 1, 1, None, 0)[0]) == {"$seq": seq, "$ts": ts}


# --- TagTrie ------------------------------------------------------------------------


class TrieOracle:
    def __init__(self) -> None:
        self.seqs: dict[bytes, list[int]] = {}

    def add(self, tag: bytes, seq: int) -> None:
        if seq not in self.seqs.setdefault(tag, []):
            self.seqs[tag] = sorted([*self.seqs[tag], seq])

    def discard(self, tag: bytes, seq: int) -> bool:
        found = seq in self.seqs.get(tag, [])
        if found:
            self.seqs[tag].remove(seq)
        return found

    def pop(self, match: Any, below: int) -> list[int]:
        out = []
        for tag, seqs in self.seqs.items():
            if match(tag):
                out += [s for s in seqs if s < below]
                self.seqs[tag] = [s for s in seqs if s >= below]
        return sorted(out)

    def count(self, match: Any) -> int:
        return sum(len(s) for t, s in self.seqs.items() if match(t))

    def __len__(self) -> int:
        return self.count(lambda t: True)

    @property
    def ntags(self) -> int:
        return sum(1 for s in self.seqs.values() if s)


def check_trie(trie: Any, oracle: TrieOracle, probes: list[bytes]) -> None:
    assert len(trie) == len(oracle)
    assert trie.ntags == oracle.ntags
    for p in probes:
        assert trie.count_exact(p) == oracle.count(lambda t, p=p: t == p)
        assert trie.count_prefix(p) == oracle.count(lambda t, p=p: t.startswith(p))
    if hasattr(trie, "_root"):  # pure: the tree stays compressed
        stack = [(trie._root, True)]
        while stack:
            node, is_root = stack.pop()
            assert is_root or node.size() or len(node.children) >= 2
            assert node.total == node.size() + sum(c.total for c in node.children.values())
            stack.extend((c, False) for c in node.children.values())


def test_trie_basics(core: ModuleType) -> None:
    trie = core.TagTrie()
    oracle = TrieOracle()
    tags = [b"a/b", b"a/c", b"a", b"b", b"a/b", b"a/bc", b"", b"abc", b"ab"]
    for seq, tag in enumerate(tags):
        trie.add(tag, seq)
        oracle.add(tag, seq)
    probes = [b"", b"a", b"a/", b"a/b", b"a/bc", b"a/bcd", b"ab", b"abc", b"b", b"c", b"a/c"]
    check_trie(trie, oracle, probes)
    assert trie.discard(b"a/b", 4)
    assert oracle.discard(b"a/b", 4)
    assert not trie.discard(b"a/b", 4)
    assert not trie.discard(b"zz", 0)
    check_trie(trie, oracle, probes)
    assert trie.pop_prefix(b"a/", 5) == oracle.pop(lambda t: t.startswith(b"a/"), 5) == [0, 1]
    check_trie(trie, oracle, probes)
    assert trie.pop_exact(b"a", 3) == oracle.pop(lambda t: t == b"a", 3) == [2]
    check_trie(trie, oracle, probes)
    assert trie.pop_prefix(b"", 2**70) == oracle.pop(lambda t: True, 2**70)
    check_trie(trie, oracle, probes)
    assert len(trie) == 0
    trie.add_batch([b"x", None, b"y"], 10)
    assert (len(trie), trie.count_exact(b"y")) == (2, 1)
    assert trie.pop_exact(b"y", 12) == []
    assert trie.pop_exact(b"y", 13) == [12]
    trie.clear()
    assert (len(trie), trie.ntags, trie.count_prefix(b"")) == (0, 0, 0)
    with pytest.raises(TypeError):
        trie.add("str", 1)


def test_trie_out_of_order_and_duplicate_adds(core: ModuleType) -> None:
    trie = core.TagTrie()
    for seq in [5, 3, 9, 3, 7, 5]:
        trie.add(b"t", seq)
    assert len(trie) == 4
    assert trie.discard(b"t", 7)
    assert trie.pop_exact(b"t", 100) == [3, 5, 9]


def test_trie_many_smallest_discards_are_cheap(core: ModuleType) -> None:
    trie = core.TagTrie()
    n = 20_000
    for seq in range(n):
        trie.add(b"hot", seq)
    for seq in range(n):
        assert trie.discard(b"hot", seq)
    assert (len(trie), trie.ntags) == (0, 0)


# --- hypothesis: random operations, and _pure vs _ext -------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

tag_bytes = st.binary(max_size=4).map(lambda b: bytes(b"ab/"[x % 3] for x in b))
trie_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), tag_bytes, st.integers(0, 60)),
        st.tuples(st.just("discard"), tag_bytes, st.integers(0, 60)),
        st.tuples(st.just("pop_exact"), tag_bytes, st.integers(-1, 62)),
        st.tuples(st.just("pop_prefix"), tag_bytes, st.integers(-1, 62)),
    ),
    max_size=60,
)


@pytest.mark.slow
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=trie_ops)
def test_trie_against_oracle(core: ModuleType, ops: list[tuple[str, bytes, int]]) -> None:
    trie, oracle = core.TagTrie(), TrieOracle()
    probes = [b"", b"a", b"b", b"/", b"ab", b"a/", b"aa", b"ab/"]
    for op, tag, n in ops:
        if op == "add":
            trie.add(tag, n)
            oracle.add(tag, n)
        elif op == "discard":
            assert trie.discard(tag, n) == oracle.discard(tag, n)
        elif op == "pop_exact":
            assert trie.pop_exact(tag, n) == oracle.pop(lambda t, tag=tag: t == tag, n)
        else:
            assert trie.pop_prefix(tag, n) == oracle.pop(lambda t, tag=tag: t.startswith(tag), n)
        check_trie(trie, oracle, probes)


FRAME_ERRORS = tuple(m.FrameError for m in (PURE, EXT) if m is not None)


def outcome(fn: Any, *args: Any) -> Any:
    try:
        return ("ok", fn(*args))
    except FRAME_ERRORS as exc:
        return ("FrameError", exc.index, exc.field, exc.reason, str(exc))
    except (TypeError, ValueError, OverflowError, IndexError) as exc:
        return (type(exc).__name__,)


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.text(max_size=6),
    st.floats(allow_nan=True),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=8,
)
raw_json = st.one_of(
    st.binary(max_size=10),
    st.sampled_from(
        [b"{}", b'{"a":1}', b"[1]", b"NaN", b'"x"', b" 1 ", b'{"a":1,"b":2,"c":3,"d":4,"e":5}']
    ),
    json_value.map(lambda v: json.dumps(v, allow_nan=True).encode()),
)
name = st.one_of(st.none(), st.text(max_size=5), st.just("\ud800"), st.just(""), st.integers(0, 2))
record = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "data": st.one_of(json_value, raw_json),
            "meta": st.one_of(
                st.none(),
                st.dictionaries(st.text(max_size=3), json_value, max_size=5),
                raw_json,
                st.integers(),
            ),
            "tag": name,
            "node": name,
        },
    ),
    st.integers(),
)


def mutate(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    buf = bytearray(data)
    for kind, pos, value in edits:
        pos = pos % (len(buf) + 1)
        if kind == 0:
            buf.insert(pos, value)
        elif kind == 1 and pos < len(buf):
            del buf[pos]
        elif pos < len(buf):
            buf[pos] = value
    return bytes(buf)


@pytest.mark.slow
@needs_ext
@settings(max_examples=400, deadline=None)
@given(
    value=json_value,
    edits=st.lists(
        st.tuples(
            st.integers(0, 2),
            st.integers(0, 200),
            st.sampled_from(b'"\\{}[],:0123456789.eE+-tfnul \x00\x1f\x80\xc3\xa9\xed\xf0\xffu'),
        ),
        max_size=3,
    ),
)
def test_json_check_pure_vs_ext(value: Any, edits: list[tuple[int, int, int]]) -> None:
    text = mutate(
        json.dumps(value, ensure_ascii=False, allow_nan=True).encode("utf-8", "surrogatepass"),
        edits,
    )
    assert outcome(EXT.json_check, text) == outcome(PURE.json_check, text)


@pytest.mark.slow
@needs_ext
@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(record, max_size=6),
    first_seq=st.integers(0, 2**64 - 1),
    ts=st.integers(-(2**63), 2**63 - 1),
    default_node=name,
    salt=st.integers(0, 2**32 - 1),
    limits=st.tuples(
        st.integers(0, 200),
        st.integers(0, 60),
        st.integers(0, 6),
        st.integers(0, 6),
        st.integers(0, 6),
    ),
)
def test_encode_batch_pure_vs_ext(
    records: list[Any],
    first_seq: int,
    ts: int,
    default_node: Any,
    salt: int,
    limits: tuple[int, ...],
) -> None:
    args = (records, first_seq, ts, default_node, salt, limits, ujson.dumps)
    assert outcome(EXT.encode_batch, *args) == outcome(PURE.encode_batch, *args)


segment_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("append"),
            st.lists(
                record.filter(lambda r: isinstance(r, dict) and "data" in r), min_size=1, max_size=4
            ),
            st.integers(0, 3),
        ),
        st.tuples(st.just("delete"), st.integers(-1, 30)),
        st.tuples(st.just("retire"), st.integers(-2, 30)),
        st.tuples(
            st.just("render"),
            st.integers(-1, 30),
            st.integers(0, 8),
            st.integers(0, 300),
            st.sampled_from([None, frozenset(), frozenset({b"a"}), frozenset({b"a", b"b", b""})]),
            st.integers(0, 7),
        ),
        st.tuples(st.just("query"), st.integers(-1, 30), st.integers(0, 4)),
        st.tuples(st.just("reload"), st.booleans()),
    ),
    max_size=25,
)


@pytest.mark.slow
@needs_ext
@settings(max_examples=200, deadline=None)
@given(ops=segment_ops)
def test_segment_pure_vs_ext(ops: list[tuple[Any, ...]]) -> None:
    assert EXT is not None
    segs = {m: m.SegmentBuffer(1000, SALT) for m in (PURE, EXT)}
    tries = {m: m.TagTrie() for m in (PURE, EXT)}
    ts = 0
    for op in ops:
        results = []
        if op[0] == "append":
            ts += op[2]
        for m, seg in segs.items():
            if op[0] == "append":
                batch = outcome(
                    m.encode_batch,
                    op[1],
                    1000 + seg.count,
                    ts,
                    "a",
                    SALT,
                    (500, 60, 6, 6, 6),
                    ujson.dumps,
                )
                if batch[0] == "ok":
                    results.append(outcome(seg.append, batch[1][0]))
                    if batch[1][1]:
                        tries[m].add_batch(batch[1][1], 1000 + seg.count - len(op[1]))
                else:
                    results.append(batch)
            elif op[0] == "delete":
                results.append(outcome(seg.mark_deleted, op[1], tries[m]))
            elif op[0] == "retire":
                results.append(outcome(seg.retire_to, op[1], tries[m]))
            elif op[0] == "render":
                results.append(outcome(seg.render, *op[1:]))
            elif op[0] == "query":
                i = op[1]
                results.append(
                    (
                        outcome(seg.first_live, i),
                        outcome(seg.first_ts_at_least, op[2] * 3),
                        outcome(seg.decode, i),
                    )
                )
            else:
                copy = m.SegmentBuffer.from_frames(seg.view(), seg.base_seq, SALT, op[1])
                copy.retire_to(seg.retired)
                segs[m] = seg = copy
            results.append(
                (seg.count, seg.nbytes, seg.live_count, seg.live_bytes, seg.retired, seg.last_ts)
            )
            results.append((len(tries[m]), tries[m].ntags, tries[m].count_prefix(b"")))
        assert results[: len(results) // 2] == results[len(results) // 2 :]
    assert bytes(segs[PURE].view()) == bytes(segs[EXT].view())


finite_value = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),
        st.text(max_size=8),
        st.floats(allow_nan=False, allow_infinity=False),
    ),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=8,
)
bad_leaf = st.sampled_from([NAN, INF, -INF]) | st.builds(object)
bad_value = bad_leaf.flatmap(lambda b: st.sampled_from([b, [1, b], {"k": [{"j": b}]}]))
good_record = st.fixed_dictionaries(
    {
        "data": st.one_of(
            finite_value,
            finite_value,
            st.none(),
            finite_value.map(lambda v: json.dumps(v).encode()),
        )
    },
    optional={
        "meta": st.one_of(
            st.none(),
            st.dictionaries(st.text(max_size=3), finite_value, max_size=4),
            st.sampled_from([b"{}", b' {"a": 1} ', bytearray(b'{"b":[]}')]),
        ),
        "tag": st.none() | st.text(min_size=1, max_size=4),
        "node": st.none() | st.text(min_size=1, max_size=4),
    },
)
# Changes that may break a record: a bad data or meta value, a bad raw text, a bad name,
# "drop" (remove its data) or "replace" (not a mapping). Many are still valid.
bad_change = st.one_of(
    bad_value.map(lambda v: {"data": v}),
    bad_value.map(lambda v: {"meta": {"m": v}}),
    raw_json.map(lambda b: {"data": b}),
    raw_json.map(lambda b: {"meta": b}),
    name.map(lambda n: {"tag": n}),
    name.map(lambda n: {"node": n}),
    st.sampled_from(["drop", "replace"]),
)


@pytest.mark.slow
@needs_ext
@settings(max_examples=400, deadline=None)
@given(
    good=st.lists(good_record, max_size=12),
    changes=st.lists(st.tuples(st.integers(0, 11), bad_change), max_size=3),
    limits=st.sampled_from([LIMITS, LIMITS, SMALL, (300, 40, 3, 6, 6)]),
    default_node=st.sampled_from([None, "nd", ""]),
)
def test_encode_batch_batched_vs_per_value_pure_vs_ext(
    good: list[dict[str, Any]],
    changes: list[tuple[int, Any]],
    limits: tuple[int, ...],
    default_node: str | None,
) -> None:
    records: list[Any] = [dict(r) for r in good]
    for i, change in changes:
        if i >= len(records) or not isinstance(records[i], dict):
            continue
        if change == "drop":
            records[i].pop("data", None)
        elif change == "replace":
            records[i] = i
        else:
            records[i].update(change)
    # The same frames and tags, or the same error (index, field, reason and message), from
    # both cores, each with the batched dumps (ujson.dumps) and with one call per value.
    results = [
        outcome(core.encode_batch, records, 5, 7, default_node, SALT, limits, dumps)
        for core in (PURE, EXT)
        for dumps in (ujson.dumps, per_value)
    ]
    assert results == [results[0]] * 4
