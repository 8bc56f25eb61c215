"""A prefix watch checked against the contract model (issue 18 item 3), as rules mixed into
the engine-vs-model state machine of ``test_engine_model.py``.

One session watches ``topic_prefix: ["c"]`` (``c:x`` and ``c.y`` of the machine's names).
Each drain opens a stream on it, takes every event, commits each as sent, and closes the
stream, so between drains the session is idle: topics created, written, deleted and
recreated meanwhile are exactly the prefix-join cases that touch cursors. After a drain,
for every topic under the prefix the model holds, the records delivered must be the
model's records after the cursor the previous drain left (0 for a topic the watch had not
seen, or a new instance of a name), with the model's tombstone gaps, ending at the model's
head; a topic the watch had not seen announces itself with ``topic-added`` at 0, and a
watched topic that is gone says ``topic-deleted``. A session collected by the idle GC (the
machine moves the clock by minutes) is re-created the way the Python client does it: the
topics it holds named at their cursors, the prefix without ``tail``.
"""

from __future__ import annotations

from typing import Any

import ujson
from hypothesis.stateful import initialize, rule

from topics.errors import NotFoundError
from topics.watch_types import (
    RecordBatch,
    TombstoneEvent,
    TopicAddedEvent,
    TopicDeletedEvent,
    WatchEvent,
)

PREFIX = "c"


class PrefixWatchRules:
    """Rules for ``EngineMatchesModel`` (which provides ``db`` and ``model``)."""

    db: Any
    model: Any

    @initialize()
    def start_a_prefix_watch(self) -> None:
        # name -> (the model's topic instance, the cursor the last drain committed)
        self.watched: dict[str, tuple[object, int]] = {}
        self.wid = self._create({})

    def _create(self, named: dict[str, int]) -> str:
        async def create() -> str:
            topics = {name: {"from_seq": cursor} for name, cursor in named.items()}
            created = await self.db.engine.create_watch(topics, topic_prefix=[PREFIX])
            return created.wid

        wid: str = self.db._call(create)
        for name in self.model.topics:
            if name.startswith(PREFIX) and name not in self.watched:
                self.watched[name] = (self.model.topics[name], 0)
        return wid

    def _drain(self) -> list[WatchEvent] | None:
        async def drain() -> list[WatchEvent] | None:
            try:
                stream = self.db.engine.open_watch(self.wid)
            except NotFoundError:
                return None
            out: list[WatchEvent] = []
            try:
                while events := stream.feed.poll():
                    for ev in events:
                        deleted = isinstance(ev, TopicDeletedEvent)
                        stream.commit(ev.topic, ev.cursor, None, deleted)
                    out.extend(events)
            finally:
                stream.close()
            return out

        result: list[WatchEvent] | None = self.db._call(drain)
        return result

    def _expected(self, name: str, cursor: int) -> tuple[list[int], list[tuple[int, int]]]:
        """The model's records and tombstone gaps after ``cursor``, every page."""
        seqs: list[int] = []
        gaps: list[tuple[int, int]] = []
        while True:
            page = self.model.diff(name, from_seq=cursor)
            if page.tombstone is not None:
                gaps.append((page.tombstone.gap_from, page.tombstone.gap_to))
            seqs += [r.seq for r in page.records]
            cursor = page.next_from_seq
            if page.caught_up:
                return seqs, gaps

    @rule()
    def drain_the_prefix_watch(self) -> None:
        recreated = False
        events = self._drain()
        if events is None:  # collected while idle: re-create it as the client does
            named = {
                n: c for n, (inst, c) in self.watched.items() if self.model.topics.get(n) is inst
            }
            self.watched = {n: self.watched[n] for n in named}
            self.wid = self._create(named)
            recreated = True
            events = self._drain()
            assert events is not None
        by_topic: dict[str, list[WatchEvent]] = {}
        for ev in events:
            by_topic.setdefault(ev.topic, []).append(ev)
        for name, (inst, _) in list(self.watched.items()):
            if self.model.topics.get(name) is not inst:
                got = by_topic.get(name, [])
                if not recreated and name not in self.model.topics:
                    assert any(isinstance(e, TopicDeletedEvent) for e in got), (name, got)
                del self.watched[name]
        for name, topic in self.model.topics.items():
            if not name.startswith(PREFIX):
                continue
            got = by_topic.get(name, [])
            if name in self.watched:
                start = self.watched[name][1]
            else:
                start = 0
                assert got, f"{name} joined the prefix watch but sent nothing"
                assert isinstance(got[0], TopicAddedEvent), (name, got)
                assert got[0].cursor == 0
            seqs, gaps = self._expected(name, start)
            delivered = [
                r["$seq"]
                for e in got
                if isinstance(e, RecordBatch)
                for r in ujson.loads(e.records_json)
            ]
            tombs = [
                (e.tombstone.gap_from, e.tombstone.gap_to)
                for e in got
                if isinstance(e, TombstoneEvent)
            ]
            assert (delivered, tombs) == (seqs, gaps), (name, start, got)
            end = got[-1].cursor if got else start
            assert end == topic.head_seq, (name, end, topic.head_seq)
            self.watched[name] = (topic, end)
