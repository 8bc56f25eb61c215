"""``read_diff(..., upto=)``: a diff window bounded below the head (a strong watch read)."""

from __future__ import annotations

from topics._core import RENDER_DATA
from topics.log.reads import read_diff

from ._support import recs


def _log(engine, name):  # type: ignore[no-untyped-def]
    log = engine._registry.get(name)
    assert log is not None
    return log


async def test_upto_at_or_past_the_head_is_the_plain_read(engine) -> None:  # type: ignore[no-untyped-def]
    await engine.write("t", recs("a", "b", "c"))
    log = _log(engine, "t")
    plain = read_diff(log, 0, 10, None, RENDER_DATA, 1 << 20)
    for upto in (None, 3, 99):
        assert read_diff(log, 0, 10, None, RENDER_DATA, 1 << 20, upto) == plain


async def test_upto_below_the_head_ends_the_window_there(engine) -> None:  # type: ignore[no-untyped-def]
    await engine.write("t", recs("a", "b", "c", "d", "e"))
    log = _log(engine, "t")
    res = read_diff(log, 1, 10, None, RENDER_DATA, 1 << 20, 3)
    assert (res.record_count, res.next_from_seq, res.head_seq) == (2, 3, 3)
    assert res.caught_up
    assert res.lag == 0
    behind = read_diff(log, 0, 1, None, RENDER_DATA, 1 << 20, 3)
    assert (behind.record_count, behind.next_from_seq, behind.lag) == (1, 1, 2)
    assert not behind.caught_up


async def test_nothing_visible_yet_is_an_empty_caught_up_window(engine) -> None:  # type: ignore[no-untyped-def]
    await engine.write("t", recs("a", "b", "c"))
    log = _log(engine, "t")
    res = read_diff(log, 2, 10, None, RENDER_DATA, 1 << 20, 2)
    assert (res.records_json, res.record_count, res.next_from_seq) == (b"[]", 0, 2)
    assert res.caught_up
    assert res.tombstone is None


async def test_upto_inside_a_segment_of_several_writes_stops_there(engine) -> None:  # type: ignore[no-untyped-def]
    # Writes share a segment: the bound must cut inside it, or a strong reader would get
    # records that are not committed yet (and get them again once they are).
    for value in ("a", "b", "c"):
        await engine.write("t", recs(value))
    log = _log(engine, "t")
    assert len(log.segments) == 1
    res = read_diff(log, 0, 10, None, RENDER_DATA, 1 << 20, 1)
    assert (res.record_count, res.next_from_seq, res.caught_up) == (1, 1, True)
    assert b'"b"' not in res.records_json


async def test_upto_with_a_deleted_record_inside_the_bound(engine) -> None:  # type: ignore[no-untyped-def]
    # A deleted record does not count against the read's limit: the bound still holds.
    await engine.write("t", recs("a"))
    await engine.write("t", [{"data": "gone", "tag": "x"}])
    for value in ("c", "d"):
        await engine.write("t", recs(value))
    assert (await engine.delete_records("t", match="x")).deleted == 1
    log = _log(engine, "t")
    res = read_diff(log, 0, 10, None, RENDER_DATA, 1 << 20, 3)
    assert (res.record_count, res.next_from_seq) == (2, 3)
    assert b'"d"' not in res.records_json


async def test_upto_with_deleted_records_up_to_the_segment_end(engine) -> None:  # type: ignore[no-untyped-def]
    # Deleted records between the bound and the end of the segment: the walk must still
    # stop at the bound, not run on to the next live record.
    for value in ("a", "b", "c", "d", "e"):
        await engine.write("t", [{"data": value, "tag": "x" if value in "bd" else "k"}])
    assert (await engine.delete_records("t", match="x")).deleted == 2
    log = _log(engine, "t")
    assert len(log.segments) == 1
    res = read_diff(log, 0, 10, None, RENDER_DATA, 1 << 20, 3)
    assert (res.record_count, res.next_from_seq, res.caught_up) == (2, 3, True)
    assert b'"e"' not in res.records_json
    later = read_diff(log, 3, 10, None, RENDER_DATA, 1 << 20, 4)
    assert (later.records_json, later.next_from_seq) == (b"[]", 4)
