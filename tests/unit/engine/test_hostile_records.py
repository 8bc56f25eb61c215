"""Hostile data at the engine (issue #30 findings 3 and 5).

Finding 3: a record no reader could hold (a 5,000-digit integer, a lone surrogate) was
stored, and every filtered or CloudEvents reader of its topic failed on it. Writes now refuse
it (I-JSON), and the readers survive one stored by an older version.

Finding 5: a client wrote server-owned meta (``$deliver_at``, ``$dead_letter_from``). Keys
beginning with ``$`` are now refused in a client's meta; the engine's own stamps still work,
a huge stored ``$deliver_at`` cannot overflow a wait, and redrive's allowlist check no
longer tells a live queue of another tenant from a free name.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import ujson

from topics._meta_keys import ServerMeta
from topics.engine import Engine
from topics.errors import ForbiddenError, InvalidRequestError
from topics.query.cloudevents import DEFAULT_TYPE, to_cloudevents
from topics.query.where import compile_where
from topics.queues.jobs import read_stamps

from ._support import START_MS

HUGE = b"1" * 5000
POISON: list[tuple[str, dict[str, Any]]] = [
    ("5000-digit integer in data", {"data": HUGE}),
    ("5000-digit integer as a Python int", {"data": {"n": 10**400}}),
    ("309-digit integer in meta", {"data": 1, "meta": b'{"n": -' + b"9" * 309 + b"}"}),
    ("lone surrogate as meta.type", {"data": 1, "meta": b'{"type": "\\ud800"}'}),
    ("lone low surrogate in data", {"data": b'["ok", "\\udc00"]'}),
]


@pytest.mark.parametrize(("what", "record"), POISON, ids=[p[0] for p in POISON])
async def test_a_record_no_reader_could_hold_is_refused(
    engine: Engine, what: str, record: dict[str, Any]
) -> None:
    await engine.write("t", [{"data": "before"}])
    with pytest.raises(InvalidRequestError) as info:
        await engine.write("t", [{"data": "fine"}, record])
    assert info.value.code == "invalid_request"
    assert "records[1]" in str(info.value), info.value
    assert (await engine.get_topic("t", touch=False)).head_seq == 1  # nothing appended


async def test_what_a_double_holds_and_paired_surrogates_are_stored(engine: Engine) -> None:
    data = b'{"big": ' + b"9" * 308 + b', "inf": 1e400, "emoji": "\\uD83D\\uDE00"}'
    await engine.write("t", [{"data": data}])
    got = ujson.loads((await engine.diff("t", from_seq=0)).records_json)[0]["data"]
    assert (got["big"], got["emoji"]) == (int("9" * 308), "\U0001f600")


# -- readers survive records stored before the write check ------------------------------


def test_where_treats_an_undecodable_part_as_having_no_members() -> None:
    pred = compile_where(["data.n", "Gt", 1])
    assert pred is not None
    assert pred(None, None, None, b'{"n": ' + HUGE + b"}") is False
    assert pred(None, None, None, b'{"n": 2}') is True
    absent = compile_where(["meta.type", "Exists", False])
    assert absent is not None
    assert absent(None, None, b'{"type": ' + HUGE + b"}", b"1") is True


def test_cloudevents_of_an_unencodable_type_falls_back_to_the_default() -> None:
    records = (
        b'[{"$seq":1,"$ts":1,"meta":{"type":"\\ud800"},"data":1},'
        b'{"$seq":2,"$ts":1,"meta":{"n":' + HUGE + b'},"data":2},'
        b'{"$seq":3,"$ts":1,"meta":{"type":"ok"},"data":3}]'
    )
    events = ujson.loads(to_cloudevents("t", records))
    assert [e["type"] for e in events] == [DEFAULT_TYPE, DEFAULT_TYPE, "ok"]
    assert [e["topicsseq"] for e in events] == [1, 2, 3]


def test_a_stored_deliver_at_beyond_int64_is_clamped() -> None:
    stamps = read_stamps(b'{"$deliver_at": ' + b"9" * 401 + b', "$dedupe_until": -5}')
    assert stamps == ((1 << 63) - 1, None, 0)
    at = stamps[0]
    assert at is not None
    assert (at - START_MS) / 1000 > 0  # the wait computation no longer overflows a float


# -- reserved meta -------------------------------------------------------------------------

RESERVED = [
    ("raw $deliver_at", b'{"$deliver_at": 1}'),
    ("escaped $", b'{"a": 1, "\\u0024dead_letter_from": "tenB-q"}'),
    ("mapping", {"$dedupe_key": "k"}),
    ("any $ key", b'{"$mine": true}'),
]


@pytest.mark.parametrize(("what", "meta"), RESERVED, ids=[r[0] for r in RESERVED])
async def test_a_client_may_not_write_server_owned_meta(
    engine: Engine, what: str, meta: object
) -> None:
    await engine.put_topic("q", {"type": "queue", "lease_ms": 1000})
    for topic in ("q", "log"):
        with pytest.raises(InvalidRequestError) as info:
            await engine.write(topic, [{"data": 1}, {"data": 2, "meta": meta}])
        assert info.value.detail["field"] == "records[1].meta"
        assert "$" in str(info.value)
    assert (await engine.get_topic("q", touch=False)).head_seq == 0


async def test_dollar_signs_that_are_not_top_level_keys_are_the_clients(engine: Engine) -> None:
    meta = b'{"price": "$5", "nested": {"$ref": 1}, "list": ["$x"]}'
    await engine.write("t", [{"data": 1, "meta": meta}])
    got = ujson.loads((await engine.diff("t", from_seq=0)).records_json)[0]["meta"]
    assert got["nested"] == {"$ref": 1}


async def test_the_documented_job_options_still_stamp(engine: Engine, clock: Any) -> None:
    await engine.put_topic("q", {"type": "queue", "lease_ms": 1000})
    await engine.write("q", [{"data": 1, "meta": {"trace": "a"}, "deliver_at": START_MS + 50}])
    assert (await engine.claim("q", node="w")).seqs == ()
    clock.advance(50)
    job = (await engine.claim("q", node="w")).claimed[0]
    assert job.meta == {"trace": "a", "$deliver_at": START_MS + 50}


async def test_dead_letters_still_carry_their_stamps(engine: Engine, clock: Any) -> None:
    config = {"type": "queue", "lease_ms": 1000, "max_deliveries": 1, "dead_letter": "dlq"}
    await engine.put_topic("q", config)
    await engine.write("q", [{"data": 1, "meta": {"trace": "z"}}])
    await engine.claim("q", node="w")
    clock.advance(1001)
    await engine.claim("q", node="w")
    moved = ujson.loads((await engine.diff("dlq", from_seq=0)).records_json)
    assert moved[0]["meta"]["$dead_letter_from"] == "q"


# -- redrive is not an existence oracle ----------------------------------------------------


@pytest.mark.parametrize("origin", ["tenB-q", "tenB-no-such-queue"])
async def test_redrive_refuses_every_origin_outside_the_allowlist_alike(
    engine: Engine, origin: str
) -> None:
    """A live queue of another tenant and a free name answer the same 403 (before the fix
    the free name was a 200 "skipped"). The stamp is server-written now; ``ServerMeta``
    stands in for a record an older version let a client forge."""
    await engine.put_topic("tenB-q", {"type": "queue", "lease_ms": 1000})
    forged = ServerMeta(b'{"$dead_letter_from": "%s"}' % origin.encode())
    await engine.write("tenA-dlq", [{"data": 1, "meta": forged}])
    with pytest.raises(ForbiddenError) as info:
        await engine.redrive("tenA-dlq", may_touch=lambda name: name.startswith("tenA-"))
    assert info.value.detail == {"to": origin}
    assert (await engine.get_topic("tenA-dlq", touch=False)).count == 1


# -- records an older version stored ---------------------------------------------------


@pytest.fixture
def old_writes(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Writes store what a version before issue #30 stored: the pure encoder with the
    I-JSON limits lifted (``monkeypatch.undo()`` restores today's writes)."""
    from topics._core import _pure_encode, _pure_json
    from topics._persistence import appender as _appender

    monkeypatch.setattr(_pure_json, "_MAX_INT_DIGITS", 10**12)
    monkeypatch.setattr(_pure_json, "_lone_surrogate", lambda buf, start, stop: None)
    monkeypatch.setattr(_appender, "encode_batch", _pure_encode.encode_batch)
    return monkeypatch


async def test_reads_carry_on_past_records_an_older_version_stored(
    engine: Engine, old_writes: pytest.MonkeyPatch
) -> None:
    poison = [
        {"data": b'{"n": ' + HUGE + b"}", "meta": b'{"type": ' + HUGE + b"}"},
        {"data": b'{"n": 1e400}', "meta": b'{"type": "\\ud800"}'},
        {"data": b'{"n": 2}', "meta": b'{"type": "ok"}'},
    ]
    await engine.write("t", poison)
    old_writes.undo()
    with pytest.raises(InvalidRequestError):  # today's writes refuse the same records
        await engine.write("t", poison[:1])
    where = ["data.n", "Lt", 9007199254740993]  # evaluated in Python (beyond 2**53)
    found = ujson.loads((await engine.diff("t", from_seq=0, where=where)).records_json)
    assert [r["$seq"] for r in found] == [3]
    events = await engine.diff("t", from_seq=0, format="cloudevents")
    # (the test parses the 5000-digit data as text; the server splices it verbatim)
    parsed = json.loads(events.records_json, parse_int=str)
    assert [e["type"] for e in parsed] == [
        DEFAULT_TYPE,
        DEFAULT_TYPE,
        "ok",
    ]


@pytest.mark.parametrize(
    "metas",
    [
        [{"a": 1}, b'{"$x": 1}'],  # the batch's fast paths fall through to the exact walk
        [b"{}", {"$x": 1}],
        [bytearray(b'{"a": "$"}'), memoryview(b'{"\\u0024x": 1}')],
        [b'{"a": 1}', None, b'{"b": 2, "$x": 1}'],
    ],
)
def test_the_check_finds_a_reserved_key_whatever_the_batch_mixes(metas: list[Any]) -> None:
    from topics._meta_keys import check_client_meta

    records = [{"data": 1} if m is None else {"data": 1, "meta": m} for m in metas]
    with pytest.raises(InvalidRequestError) as info:
        check_client_meta(records)
    assert info.value.detail["field"] == f"records[{len(metas) - 1}].meta"
    check_client_meta(records[:-1])  # the rest is the client's own


# -- a watch carries on past a record it cannot render -------------------------------------


async def test_a_watch_turns_a_record_it_cannot_render_into_an_unreadable_tombstone(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defence in depth (topics/watch/feed.py rule 9): whatever makes one record fail its
    rendering, the stream gets the records around it and a tombstone of its seq alone."""
    from topics.watch import topic as _watch_topic
    from topics.watch_types import CaughtUpEvent, RecordBatch, TombstoneEvent

    from .test_watch_hub import drain, kinds, open_session

    real = _watch_topic.to_cloudevents

    def fragile(topic: str, records_json: bytes, type_field: str = "type") -> bytes:
        if b'"poison"' in records_json:
            raise ValueError("a record no reader can render")
        return real(topic, records_json, type_field)

    monkeypatch.setattr(_watch_topic, "to_cloudevents", fragile)
    await engine.write("t", [{"data": 1}, {"data": 2}, {"data": "poison"}, {"data": 4}])
    stream = await open_session(engine, {"t": {"from_seq": 0}}, format="cloudevents")
    events = await drain(stream.feed)
    assert kinds(events) == ["RecordBatch", "TombstoneEvent", "RecordBatch", "CaughtUpEvent"]
    tomb = events[1]
    assert isinstance(tomb, TombstoneEvent)
    assert (tomb.tombstone.gap_from, tomb.tombstone.gap_to, tomb.cursor) == (3, 3, 3)
    assert tomb.tombstone.reason == "unreadable"
    delivered = [e for e in events if isinstance(e, RecordBatch)]
    got = [ev["topicsseq"] for b in delivered for ev in ujson.loads(b.records_json)]
    assert got == [1, 2, 4]
    assert events[-1] == CaughtUpEvent("t", 4, 4)
    await engine.write("t", [{"data": 5}])  # live delivery goes on
    after = await drain(stream.feed)
    assert kinds(after) == ["RecordBatch"]
