"""The core's where fast paths (topics/query/where.py rules 5-6: needles and the C program)
decide exactly what the predicate itself decides, on records built to trip them: escaped
strings and keys, duplicate keys, nested and non-object data, numbers of every shape."""

from __future__ import annotations

from typing import Any

import pytest
import ujson
from hypothesis import given, settings
from hypothesis import strategies as st

from topics._core import _pure
from topics.query.where import compile_where

try:
    from topics._core import _ext
except ImportError:  # pragma: no cover
    _ext = None  # type: ignore[assignment]

pytestmark = pytest.mark.skipif(_ext is None, reason="compiled core not built")

LIMITS = (1 << 20, 1 << 20, 256, 256, 1 << 20)
RAW_DATA = [
    b'{"kind":"refund","n":5}',
    b'{"kind" : "refund" , "n" : 5.0}',
    b'{"kind":"re\\u0066und","n":-3}',  # an escape spelling "refund"
    b'{"ki\\u006ed":"refund","n":1e2}',  # an escaped key spelling "kind"
    b'{"kind":"sale","kind":"refund"}',  # duplicate: the last wins
    b'{"kind":"refund","kind":"sale"}',
    b'{"nested":{"kind":"refund"},"n":[5]}',
    b'["kind","refund"]',
    b'"refund"',
    b"null",
    b'{"kind":"refunds","n":12345678901234567890}',
    b'{"kind":null,"n":true,"ok":false}',
    b'{"kind":"r\\"x","n":0.1}',
    b"{}",
    b'{"n":1.5e308,"kind":"\xc3\xa9t\xc3\xa9"}',
]
META = [None, {"src": "web"}, {"src": "pos", "type": "x"}, {"type": "refund"}]
TAGS = [None, "a:1", "b:2", "refund"]

leaf = st.one_of(
    st.tuples(
        st.sampled_from(["data.kind", "data.n", "data.ok", "meta.src", "meta.type", "tag", "node"]),
        st.sampled_from(["Eq", "Ne"]),
        st.sampled_from(["refund", "sale", 'r"x', "été", 5, 5.0, 1e2, True, None, -3, "a:1"]),
    ).map(list),
    st.tuples(
        st.sampled_from(["data.n", "meta.type"]),
        st.sampled_from(["Gt", "Ge", "Lt", "Le"]),
        st.sampled_from([0, 5, -3.5, 100, 1e300]),
    ).map(list),
    st.tuples(
        st.sampled_from(["data.kind", "data.n", "meta.src", "tag", "node"]), st.just("Exists")
    ).map(list),
    st.tuples(
        st.sampled_from(["data.kind", "data.n", "data.ok", "tag", "node", "meta.src"]),
        st.just("In"),
        st.lists(
            st.sampled_from(
                [
                    "refund",
                    "sale",
                    "web",
                    "a:1",
                    "w-1",
                    'r"x',
                    "été",
                    5,
                    5.0,
                    -3,
                    1e2,
                    0.1,
                    True,
                    False,
                    None,
                ]
            ),
            min_size=1,
            max_size=6,
        ),
    ).map(list),
    st.tuples(
        st.sampled_from(["data.kind", "tag", "node", "meta.src"]),
        st.just("Glob"),
        st.sampled_from(["re*", "a:*", "*", "w*", "\u00e9*"]),
    ).map(list),
)
expr = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(["and", "or"]), st.lists(inner, min_size=1, max_size=3)).map(
            list
        ),
        st.tuples(st.just("not"), inner).map(list),
    ),
    max_leaves=5,
)


def _segment(module: Any) -> Any:
    records = []
    for i, data in enumerate(RAW_DATA * 2):
        rec: dict[str, Any] = {"data": data}
        if META[i % len(META)] is not None:
            rec["meta"] = META[i % len(META)]
        if TAGS[i % len(TAGS)] is not None:
            rec["tag"] = TAGS[i % len(TAGS)]
        if i % 3 == 0:
            rec["node"] = "w-1"
        records.append(rec)
    frames, _ = module.encode_batch(records, 1, 1000, None, 7, LIMITS, ujson.dumps)
    seg = module.SegmentBuffer(1, 7)
    seg.append(frames)
    return seg


SEGMENTS = {"ext": _segment(_ext), "pure": _segment(_pure)} if _ext is not None else {}


def _kept(seg: Any, pred: Any) -> list[int]:
    frag, _, _, _ = seg.render(0, 1000, 1 << 30, None, 0, -1, pred)
    return [r["$seq"] for r in ujson.loads(b"[" + frag + b"]")]


@settings(max_examples=400, deadline=None)
@given(expr)
def test_the_core_decides_as_the_predicate(where: Any) -> None:
    pred = compile_where(where)
    assert pred is not None
    expected = []
    seg = SEGMENTS["pure"]
    for i in range(seg.count):
        _, _, node, tag, meta, data, _ = seg.decode(i)
        if pred(node, tag, meta, data):
            expected.append(i + 1)
    assert _kept(SEGMENTS["pure"], pred) == expected
    assert _kept(SEGMENTS["ext"], pred) == expected, (where, pred.program)


def test_programs_cover_the_common_shapes() -> None:
    for where in (
        ["data.kind", "Eq", "refund"],
        ["and", [["data.n", "Ge", 3], ["not", ["meta.src", "Exists"]]]],
        ["tag", "In", ["a", "b"]],
        "tenant:1",
    ):
        pred = compile_where(where)
        assert pred is not None
        assert pred.program is not None, where
    # An In is one instruction per kind of value, whatever its size (issue 30).
    wide = compile_where(["data.kind", "In", [f"v{i}" for i in range(128)] + list(range(128))])
    assert wide is not None
    assert wide.program is not None
    assert len(wide.program) == 3
    # A string needing an escape is left to the predicate, not the whole In (a stored one
    # equal to it holds an escape, which the core never decides).
    quoted = compile_where(["data.kind", "In", ['r"x', "refund"]])
    assert quoted is not None
    assert quoted.program is not None
    kept = _kept(SEGMENTS["ext"], quoted)
    assert kept == _kept(SEGMENTS["pure"], quoted)
    assert kept  # the r"x record and the refunds
    big = compile_where(["data.n", "Eq", 2**60])  # not exact as a double: left to Python
    assert big is not None
    assert big.program is None


# -- a numeric member found without walking the whole object (issue 18) -----------------
# (data, decided in C): every record below must be answered by the compiled core exactly
# as the predicate answers it; those marked True must be answered without calling it.
HOSTILE: list[tuple[bytes, bool]] = [
    (b'{"o":{"n":1000},"n":5}', True),  # the same key nested before the top-level one
    (b'{"o":{"n":1000}}', True),  # only nested
    (b'{"o":[{"n":1000}],"p":{"q":{"n":1000}}}', True),
    (b'{"o":{"a":"}","n":1000},"n":5}', True),  # a brace inside a nested string
    (b'{"o":"{","n":1000}', True),  # a brace inside a top-level string
    (b'{"a":["n",1000],"n":5}', True),
    (b'{"k":"n","n":1000}', True),  # the key's text as a value before the member
    (b'{"k":"n"}', True),
    (b'{"s":"\\"n\\":1000","n":5}', True),  # the key's text inside a string value
    (b'{"s":"\\"n\\":1000"}', True),
    (b'{"s":"a\\"n","n":5}', True),  # an escaped quote then n": a false hit
    (b'{"s\\"n":1000}', False),  # the false hit inside an escaped key
    (b'{"s":"a\\\\","n":1000}', True),  # a string ending in an escaped backslash
    (b'{"\\u006e":1000}', False),  # an escaped key spelling n
    (b'{"n":5,"\\u006e":1000}', False),  # ... after the member: it wins
    (b'{"\\u006e":1000,"n":5}', True),  # ... before it: the member wins
    (b'{"n":1000,"n":5}', True),  # duplicates: the last wins
    (b'{"n":5,"n":1000}', True),
    (b'{"n":5,"o":{"n":1},"n":1000,"p":[{"n":2}]}', True),
    (b'{ "n" : 1000 }', True),
    (b'{\n\t"n"\t:\r\n1000\n}', True),
    (b'{"nn":1000,"xn":1000,"n ":1000,"N":1000}', True),  # near misses
    (b'{"\xc3\xa9":"n","n":1000}', True),
    (b'{"n":"1000"}', True),
    (b'{"n":true}', True),
    (b'{"n":null}', True),
    (b'{"n":[1000]}', True),
    (b'{"n":{"n":1000}}', True),
    (b'["n",1000]', True),
    (b'"n"', True),
    (b"1000", True),
    (b"null", True),
    (b"{}", True),
    (b'{"n":-0}', True),
    (b'{"n":-0.0}', True),
    (b'{"n":0}', True),
    (b'{"n":1e3}', True),
    (b'{"n":1E3}', True),
    (b'{"n":10000e-1}', True),
    (b'{"n":1e-3}', True),
    (b'{"n":-1000}', True),
    (b'{"n":1.0}', True),
    (b'{"n":1}', True),
    (b'{"n":999.5}', True),
    (b'{"n":123456789012345}', True),  # 15 digits: exact as a double
    (b'{"n":-123456789012345}', True),
    (b'{"n":9007199254740993}', False),  # 2**53 + 1: not a double
    (b'{"n":12345678901234567890}', False),  # past int64
    (b'{"n":-12345678901234567890}', False),
    (b'{"n":9999999999999999999}', False),  # 19 digits: past int64 as well
    (b'{"n":999999999999999999}', False),  # 18 digits: an int64, past 2**53
    (b'{"n":9007199254740992}', True),  # 2**53 itself
    (b'{"n":-9007199254740992}', True),
    (b'{"n":899.99999999999999999}', False),  # rounds to 900.0
    (b'{"n":1e400}', False),  # inf: not a number to the predicate
]
NUMERIC_WHERES: list[Any] = [
    ["data.n", "Ge", 900],
    ["data.n", "Gt", 999.5],
    ["data.n", "Ge", 999.5],
    ["data.n", "Lt", 0],
    ["data.n", "Le", -0.0],
    ["data.n", "Le", 0],
    ["data.n", "Ge", 0],
    ["data.n", "Eq", 1000],
    ["data.n", "Eq", 1],
    ["data.n", "Eq", 1.0],
    ["data.n", "Eq", 0],
    ["data.n", "Ne", 5],
    ["data.n", "In", [5, 1000]],
    ["data.n", "Gt", 9007199254740992],
    ["data.n", "Eq", 9007199254740992],
    ["data.n", "Le", -9007199254740992],
    ["data.n", "Ge", 123456789012345],
    ["data.n", "Gt", 123456789012345],
    ["data.n", "Lt", -123456789012344],
    ["data.n", "Ge", -1e300],
    ["data.n", "Lt", 1e300],
    ["data.n", "Exists"],
    ["data.n", "Exists", False],
    ["and", [["data.n", "Ge", 900], ["data.n", "Le", 1000]]],
    ["or", [["data.n", "Lt", 0], ["not", ["data.n", "Exists"]]]],
]
OTHER_WHERES: list[Any] = [
    ["data.n", "Eq", "1000"],
    ["data.n", "Eq", True],
    ["data.n", "Eq", None],
    ["data.n", "Ne", None],
    ["data.k", "Eq", "n"],
    ["data.s", "Glob", "a*"],
    ["data.o", "Exists"],
    ["data.nn", "Ge", 0],  # absent, so an escaped key anywhere could be it
    ["data.n", "Gt", 2**64],  # not exact as a double: the predicate decides it all
]


class _Counting:
    """A predicate the core sees as itself, counting the records it had to be asked about."""

    def __init__(self, pred: Any) -> None:
        self.pred = pred
        self.parts, self.needles, self.program = pred.parts, pred.needles, pred.program
        self.calls = 0

    def __call__(self, *parts: Any) -> bool:
        self.calls += 1
        return bool(self.pred(*parts))


def _hostile_segment(module: Any, datas: list[bytes]) -> Any:
    # The same bytes as meta where meta may hold them (an object), to test meta.<name> too.
    records = [{"data": d, "meta": d} if d.startswith(b"{") else {"data": d} for d in datas]
    frames, _ = module.encode_batch(records, 1, 1000, None, 7, LIMITS, ujson.dumps)
    seg = module.SegmentBuffer(1, 7)
    seg.append(frames)
    return seg


@pytest.mark.parametrize("where", NUMERIC_WHERES + OTHER_WHERES, ids=repr)
def test_hostile_members_decide_as_the_predicate(where: Any) -> None:
    datas = [d for d, _ in HOSTILE]
    pred = compile_where(where)
    assert pred is not None
    pure, ext = _hostile_segment(_pure, datas), _hostile_segment(_ext, datas)
    expected = []
    for i in range(pure.count):
        _, _, node, tag, meta, data, _ = pure.decode(i)
        if pred(node, tag, meta, data):
            expected.append(i + 1)
    assert _kept(pure, pred) == expected
    assert _kept(ext, pred) == expected, (where, [datas[s - 1] for s in expected])
    meta_where = ujson.loads(ujson.dumps(where).replace('"data.', '"meta.'))
    meta_pred = compile_where(meta_where)
    assert _kept(ext, meta_pred) == _kept(pure, meta_pred)


@pytest.mark.parametrize("where", NUMERIC_WHERES, ids=repr)
def test_plain_numeric_members_are_decided_in_the_core(where: Any) -> None:
    pred = compile_where(where)
    assert pred is not None
    assert pred.program is not None
    counting = _Counting(pred)
    seg = _hostile_segment(_ext, [d for d, in_core in HOSTILE if in_core])
    _kept(seg, counting)
    assert counting.calls == 0


def test_hostile_expectations() -> None:
    """Spot checks that the cases above mean what they say (Python's own answers)."""
    ge = compile_where(["data.n", "Ge", 900])
    assert ge is not None
    cases = {
        b'{"o":{"n":1000},"n":5}': False,
        b'{"s":"\\"n\\":1000","n":5}': False,
        b'{"n":5,"\\u006e":1000}': True,
        b'{"\\u006e":1000,"n":5}': False,
        b'{"s\\"n":1000}': False,
        b'{"n":899.99999999999999999}': True,
        b'{"n":1e3}': True,
    }
    for data, kept in cases.items():
        assert ge(None, None, None, data) is kept, data
    gt = compile_where(["data.n", "Gt", 9007199254740992])
    assert gt is not None
    assert gt(None, None, None, b'{"n":9007199254740993}') is True


# Random objects written as JSON text a serializer would not produce: duplicate keys,
# keys and strings escaped at random, whitespace anywhere, the key's text in values.
_KEYS = ["n", "nn", "k", 's"n', '"n":1', "\u00e9", "{"]
_STRINGS = ["n", '"n":1000', 'a"n', "\\", "}", "x" * 20, "\u00e9"]
_NUMBERS = ["1000", "5", "-0", "1e3", "9007199254740993", "-1000.5", "900", "899.9999999999999999"]
_json_value = st.recursive(
    st.one_of(
        st.sampled_from(_NUMBERS).map(lambda n: ("num", n)),
        st.sampled_from(_STRINGS).map(lambda s: ("str", s)),
        st.sampled_from(["true", "false", "null"]).map(lambda s: ("lit", s)),
    ),
    lambda inner: st.one_of(
        st.lists(st.tuples(st.sampled_from(_KEYS), inner), max_size=4).map(lambda m: ("obj", m)),
        st.lists(inner, max_size=3).map(lambda a: ("arr", a)),
    ),
    max_leaves=8,
)


def _text(s: str, escapes: Any) -> str:
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif escapes.draw(st.integers(0, 5)) == 0:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _write(value: Any, draw: Any) -> str:
    def ws() -> str:
        out: str = draw.draw(st.sampled_from(["", "", " ", "\n\t"]))
        return out

    kind, body = value
    if kind == "obj":
        members = [f"{ws()}{_text(k, draw)}{ws()}:{ws()}{_write(v, draw)}{ws()}" for k, v in body]
        return "{" + ",".join(members) + ws() + "}"
    if kind == "arr":
        return "[" + ",".join(_write(v, draw) for v in body) + "]"
    return _text(body, draw) if kind == "str" else body


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(_KEYS), _json_value), max_size=5),
    st.data(),
)
def test_random_objects_decide_as_the_predicate(members: Any, draw: Any) -> None:
    datas = [_write(("obj", members), draw).encode() for _ in range(3)]
    ext, pure = _hostile_segment(_ext, datas), _hostile_segment(_pure, datas)
    for where in (
        ["data.n", "Ge", 900],
        ["data.n", "Lt", 0],
        ["data.n", "Eq", 1000],
        ["data.n", "Exists"],
        ["data.k", "Eq", "n"],
        ["data.nn", "Glob", "x*"],
        ["meta.n", "Gt", 899.5],
    ):
        pred = compile_where(where)
        assert _kept(ext, pred) == _kept(pure, pred), (where, datas)


def test_needles_and_keys_are_found_at_every_offset() -> None:
    """The core's substring search (16 offsets a step, then one block ending at the end)
    finds a needle and a key wherever they sit in spans of every length near a step."""
    datas, keys = [], []
    for pad in range(40):
        for size in range(1, 7):
            value = "v" * (size - 1) + "w"
            datas.append(f'{{"p":"{"x" * pad}","k{size}":"{value}","z":{pad}}}'.encode())
            keys.append(f"data.k{size}")
    records = [{"data": d, "tag": "t" * (1 + i % 20)} for i, d in enumerate(datas)]
    segs = {}
    for name, module in (("ext", _ext), ("pure", _pure)):
        frames, _ = module.encode_batch(records, 1, 1000, None, 7, LIMITS, ujson.dumps)
        segs[name] = module.SegmentBuffer(1, 7)
        segs[name].append(frames)
    for size in range(1, 7):
        key, value = f"data.k{size}", "v" * (size - 1) + "w"
        expected = [i + 1 for i, k in enumerate(keys) if k == key]
        for where in (
            [key, "Eq", value],
            [key, "Exists"],
            ["and", [[key, "Exists"], ["data.z", "Ge", 0]]],
        ):
            assert _kept(segs["ext"], compile_where(where)) == expected, where
        miss = compile_where([key, "Eq", "v" * size])  # all but its last byte match
        assert _kept(segs["ext"], miss) == _kept(segs["pure"], miss) == []
    for size in range(1, 21):  # tags of every length: the needle is the whole tag
        tag_eq = compile_where(["tag", "Eq", "t" * size])
        expected = [i + 1 for i in range(len(records)) if 1 + i % 20 == size]
        assert _kept(segs["ext"], tag_eq) == _kept(segs["pure"], tag_eq) == expected
