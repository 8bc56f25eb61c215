"""encode_batch's ``server_meta``: a client's meta may not hold a top-level "$" key.

Every test runs against the pure and the compiled core, and through the batched dumps
path (one ujson call per batch, split per value) as well as the per-value one, which
find the key in different scans (_split_array's against json_check's).
"""

from __future__ import annotations

import importlib
import json
from types import ModuleType
from typing import Any

import pytest
import ujson
from hypothesis import given, settings
from hypothesis import strategies as st

LIMITS = (1 << 20, 1 << 14, 4, 256, 128)  # record, meta bytes, meta keys, tag, node
REFUSAL = 'top-level meta keys beginning with "$" are the server\'s'


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


class Stamped(bytes):
    """Meta the server stamped itself (the engine's ServerMeta plays this part)."""

    __slots__ = ()


def per_value(value: object) -> str:
    """ujson's text, but not ujson.dumps itself: encode_batch calls it once per value."""
    return ujson.dumps(value)


def outcome(
    core: ModuleType, records: list[Any], dumps: Any, server_meta: type | None = Stamped
) -> tuple[Any, ...]:
    try:
        frames, _ = core.encode_batch(records, 1, 0, None, 7, LIMITS, dumps, server_meta)
    except core.FrameError as exc:
        return ("error", exc.index, exc.field, exc.reason, str(exc))
    return ("ok", frames)


def refused(core: ModuleType, records: list[Any]) -> tuple[Any, ...]:
    """The outcome, the same through the batched and the per-value dumps."""
    batched = outcome(core, records, ujson.dumps)
    assert outcome(core, records, per_value) == batched
    return batched


@pytest.mark.parametrize(
    ("meta", "key"),
    [
        (b'{"$deliver_at": 1}', "$deliver_at"),
        (b' { "a" : 1 , "$x" : [1] } ', "$x"),
        (b'{"\\u0024escaped": 1}', "$escaped"),  # the escape decodes to "$"
        (b'{"$": 1}', "$"),
        (b'{"a": 1, "$b": 2, "$c": 3}', "$b"),  # the first one is named
        (bytearray(b'{"$ba": 1}'), "$ba"),
        (memoryview(b'{"$mv": 1}'), "$mv"),
        ({"a": 1, "$dict": 2}, "$dict"),
        ({"$é": 1}, "$é"),
    ],
)
def test_a_top_level_dollar_key_is_refused_naming_it(core: ModuleType, meta: Any, key: str) -> None:
    records = [{"data": 1, "meta": b'{"ok": 1}'}, {"data": 2, "meta": meta}]
    assert refused(core, records) == (
        "error",
        1,
        "meta",
        "meta_reserved",
        f'has the key "{key}": {REFUSAL}',
    )


@pytest.mark.parametrize(
    "meta",
    [
        b'{"a": {"$nested": 1}}',  # only top-level keys are the server's
        b'{"a": "$value", "b": ["$"]}',
        b'{"\\u0025x": 1, "x$": 2}',
        b'{"\\\\u0024": 1}',  # an escaped backslash, then "u0024": not a "$"
        {"a": {"$deep": 1}, "b": "$"},
    ],
)
def test_dollars_elsewhere_are_the_clients(core: ModuleType, meta: Any) -> None:
    assert refused(core, [{"data": 1, "meta": meta}])[0] == "ok"


def test_data_may_hold_dollar_keys(core: ModuleType) -> None:
    assert refused(core, [{"data": {"$x": 1}}, {"data": b'{"$y": 2}'}])[0] == "ok"


def test_meta_of_the_server_meta_type_passes_and_is_stored_verbatim(core: ModuleType) -> None:
    stamped = Stamped(b'{"$dead_letter_from": "q"}')
    got = refused(core, [{"data": 1, "meta": stamped}])
    assert got[0] == "ok"
    seg = core.SegmentBuffer.from_frames(got[1], 1, 7)
    assert seg.decode(0)[4] == bytes(stamped)


def test_without_server_meta_nothing_is_refused(core: ModuleType) -> None:
    """Routers, redrive and dead-lettering copy stamped meta below the client's check."""
    records = [{"data": 1, "meta": b'{"$x": 1}'}, {"data": 1, "meta": {"$y": 1}}]
    assert outcome(core, records, ujson.dumps, None)[0] == "ok"
    assert outcome(core, records, per_value, None)[0] == "ok"


def test_the_refusal_keeps_the_record_order_of_checks(core: ModuleType) -> None:
    """An earlier record's error wins; within a record: data, then meta's JSON and type,
    then the reserved key, then the key count."""
    bad_data = {"data": b"{", "meta": b'{"$x": 1}'}
    assert refused(core, [bad_data])[1:4] == (0, "data", "json")
    assert refused(core, [{"data": 1, "meta": b'{"$x": 1'}])[1:4] == (0, "meta", "json")
    many = b'{"$a": 1, "b": 2, "c": 3, "d": 4, "e": 5}'
    assert refused(core, [{"data": 1, "meta": many}])[1:4] == (0, "meta", "meta_reserved")
    later = [{"data": 1, "tag": ""}, {"data": 1, "meta": b'{"$x": 1}'}]
    assert refused(core, later)[1:4] == (0, "tag", "empty")


def test_server_meta_must_be_a_type(core: ModuleType) -> None:
    with pytest.raises(TypeError):
        core.encode_batch([{"data": 1}], 1, 0, None, 7, LIMITS, ujson.dumps, "yes")


def test_json_check_is_unchanged_by_dollar_keys(core: ModuleType) -> None:
    assert core.json_check(b'{"$x": 1, "y": 2}') == 2


keys = st.text(alphabet='$a\\u0024"é', max_size=6)
metas = st.dictionaries(keys, st.integers(0, 3), max_size=4)


@settings(max_examples=200, deadline=None)
@given(meta=metas, ensure_ascii=st.booleans(), escape=st.booleans())
def test_both_cores_agree_with_a_key_walk(
    meta: dict[str, int], ensure_ascii: bool, escape: bool
) -> None:
    """Either core refuses exactly the metas whose decoded keys include one beginning
    with "$", however the text spells it (plain, or as the escape \\u0024)."""
    raw = json.dumps(meta, ensure_ascii=ensure_ascii).encode()
    if escape:  # the values are ints, so every '"$' opens a key (or follows a \")
        raw = raw.replace(b'"$', b'"\\u0024')
    assert json.loads(raw) == meta
    first = next((k for k in meta if k.startswith("$")), None)
    for impl in (PURE, EXT):
        if impl is None:
            continue
        got = outcome(impl, [{"data": 1, "meta": raw}], ujson.dumps)
        if first is None:
            assert got[0] == "ok"
        else:
            assert got[3:] == ("meta_reserved", f'has the key "{first}": {REFUSAL}')
