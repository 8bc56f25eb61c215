"""The core's where fast paths (topics/_where.py rules 5-6: needles and the C program)
decide exactly what the predicate itself decides, on records built to trip them: escaped
strings and keys, duplicate keys, nested and non-object data, numbers of every shape."""

from __future__ import annotations

from typing import Any

import pytest
import ujson
from hypothesis import given, settings
from hypothesis import strategies as st

from topics._core import _pure
from topics._where import compile_where

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
        st.sampled_from(["data.kind", "tag", "meta.src"]),
        st.just("In"),
        st.lists(st.sampled_from(["refund", "sale", "web", "a:1", 5]), min_size=1, max_size=3),
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
    big = compile_where(["data.n", "Eq", 2**60])  # not exact as a double: left to Python
    assert big is not None
    assert big.program is None
