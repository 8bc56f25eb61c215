"""Hostile prefix watches (issue 30 finding 2): a creator that keeps adding topics under
prefixes many watchers follow.

What must hold, in every server mode: a watcher's subscription stays bounded however many
topics are created under its prefix (joins count against ``TOPICS_MAX_WATCH_TOPICS``; a
topic past it is reported with ``join-refused``, never dropped in silence), and a frame's
``id:`` stays short however many topics joined (past ``cursor.MAX_INLINE_TOPICS`` a stream
sends checkpoint ids; before, every frame named every joined topic, so each creation cost
every watcher a frame as large as its namespace and topic creation grew quadratic).
Counts and frame structure only: no timing.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

import pytest

from tests.support.server import SERVER_MODES
from topics.wire import cursor
from topics.wire.sse import Event

from .conftest import Target
from .test_streams import StreamReader, _open_stream

pytestmark = pytest.mark.slow

#: The servers here hold this many topics per subscription: past the inline id size,
#: small enough that a test crosses it with few creations.
CAP = cursor.MAX_INLINE_TOPICS + 16
DELIVERY_TIMEOUT_S = 30.0


@pytest.fixture(scope="module", params=list(SERVER_MODES))
def capped_server(request: pytest.FixtureRequest) -> Iterator[Target]:
    """A server of the mode with ``TOPICS_MAX_WATCH_TOPICS`` = :data:`CAP`."""
    target = Target(request.param, env={"TOPICS_MAX_WATCH_TOPICS": str(CAP)})
    yield target
    target.stop()


@pytest.fixture
def capped(capped_server: Target) -> Target:
    """The module's capped server for this mode, alive (conftest rule 1)."""
    capped_server.ensure()
    capped_server.snapshot = capped_server.stored()
    return capped_server


def _watch_prefix(target: Target, prefix: str) -> tuple[str, StreamReader]:
    with target.client() as http:
        r = http.post("/v0/watch", json={"topics": {}, "topic_prefix": [prefix]})
        assert r.status_code == 200, r.text
    wid = str(r.json()["wid"])
    assert target.server is not None
    reader = StreamReader(_open_stream(target, f"/v0/watch/{wid}")).start()
    assert reader.wait_for(lambda evs: bool(evs), DELIVERY_TIMEOUT_S)  # connection-established
    return wid, reader


def _create(target: Target, names: list[str]) -> None:
    with target.client() as http:
        for name in names:
            r = http.post(f"/v0/topics/{name}", json={"records": [{"data": 1}]})
            assert r.status_code == 201, r.text


def _named(events: list[Event], kind: str) -> list[str]:
    return [json.loads(e.data)["topic"] for e in events if e.event == kind]


def test_joins_past_the_topic_cap_are_refused_and_reported(capped: Target) -> None:
    prefix = "hpj-cap."
    _, reader = _watch_prefix(capped, prefix)
    names = [f"{prefix}{i:03d}" for i in range(CAP + 10)]
    _create(capped, names)
    try:
        assert reader.wait_for(
            lambda evs: (
                len(_named(evs, "topic-added")) + len(_named(evs, "join-refused")) >= len(names)
            ),
            DELIVERY_TIMEOUT_S,
        ), [e.event for e in reader.events][-5:]
        events = list(reader.events)
    finally:
        reader.stop()
    assert _named(events, "topic-added") == names[:CAP]
    assert _named(events, "join-refused") == names[CAP:]
    refused = next(json.loads(e.data) for e in events if e.event == "join-refused")
    assert refused == {
        "topic": names[CAP],
        "prefix": prefix,
        "head_seq": 1,
        "reason": "max_watch_topics",
        "max_watch_topics": CAP,
    }
    for before, event in itertools.pairwise(events):
        if event.event == "join-refused":  # no `id:` of its own: the last one stands
            assert event.id == before.id
    assert not any(
        json.loads(e.data)["topic"] in names[CAP:]
        for e in events
        if e.event in ("record", "caught-up")
    ), "a refused topic was delivered"
    capped.assert_unharmed(own_topics=tuple(names))


def test_ids_stay_short_however_many_topics_join(capped: Target) -> None:
    prefix = "hpj-ids."
    _, reader = _watch_prefix(capped, prefix)
    names = [f"{prefix}{i:03d}" for i in range(cursor.MAX_INLINE_TOPICS + 8)]
    _create(capped, names)
    try:
        assert reader.wait_for(
            lambda evs: names[-1] in _named(evs, "caught-up"), DELIVERY_TIMEOUT_S
        )
        events = list(reader.events)
    finally:
        reader.stop()
    ids = [e.id for e in events if e.id is not None and e.event != "connection-established"]
    last = ids[-20:]
    assert all(cursor.is_checkpoint(i) for i in last), last[-1][:80]
    assert max(len(i) for i in last) < 32
    capped.assert_unharmed(own_topics=tuple(names))


def test_a_resume_from_a_checkpoint_id_of_a_grown_stream_is_exact(capped: Target) -> None:
    prefix = "hpj-resume."
    wid, reader = _watch_prefix(capped, prefix)
    names = [f"{prefix}{i:03d}" for i in range(cursor.MAX_INLINE_TOPICS + 4)]
    _create(capped, names)
    try:
        assert reader.wait_for(
            lambda evs: names[-1] in _named(evs, "caught-up"), DELIVERY_TIMEOUT_S
        )
        last_id = reader.last_id()
    finally:
        reader.stop()
    assert cursor.is_checkpoint(last_id)
    _create(capped, [f"{prefix}late"])
    with capped.client() as http:
        r = http.post(f"/v0/topics/{names[0]}", json={"records": [{"data": 2}]})
        assert r.status_code == 200, r.text  # appended to an existing topic
    resumed = StreamReader(_open_stream(capped, f"/v0/watch/{wid}", last_event_id=last_id))
    resumed.start()
    try:
        assert resumed.wait_for(
            lambda evs: (
                f"{prefix}late" in _named(evs, "caught-up") and names[0] in _named(evs, "caught-up")
            ),
            DELIVERY_TIMEOUT_S,
        )
        records = [json.loads(e.data) for e in resumed.events if e.event == "record"]
    finally:
        resumed.stop()
    # Exactly what came after the checkpoint: the new record of names[0] and the late topic.
    got = sorted((r["topic"], rec["$seq"]) for r in records for rec in r["records"])
    assert got == sorted([(names[0], 2), (f"{prefix}late", 1)])
    capped.assert_unharmed(own_topics=(*names, f"{prefix}late"))
