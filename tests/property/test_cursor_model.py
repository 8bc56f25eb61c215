"""Named cursors against a model: random commits (with and without ``expect_seq``),
committing reads, deletes of cursors and topics, and clean restarts, on a real data
directory through the sync facade. The model is a dict per topic of cursor -> seq (a topic
delete drops them); after every step each topic's ``list_cursors`` must equal it, and every
refusal must be the one the model predicts (400 past the head, 409 on a stale
``expect_seq``, 404 for a missing topic) with nothing changed."""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import topics
from topics.errors import CursorConflictError, InvalidRequestError, TopicNotFoundError

TOPICS = ["a", "b"]
GROUPS = ["g1", "g2", "g3"]


class CursorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="topics-cursor-model-")
        self.db = topics.open(self.dir)
        self.model: dict[str, dict[str, int]] = {}  # topic -> cursor -> seq

    def teardown(self) -> None:
        self.db.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _head(self, topic: str) -> int | None:
        try:
            return self.db.get_topic(topic, touch=False).head_seq
        except TopicNotFoundError:
            return None

    @rule(topic=st.sampled_from(TOPICS), n=st.integers(1, 5))
    def write(self, topic: str, n: int) -> None:
        self.db.write(topic, [{"data": i} for i in range(n)])
        self.model.setdefault(topic, {})

    @rule(
        topic=st.sampled_from(TOPICS),
        group=st.sampled_from(GROUPS),
        back=st.integers(-2, 4),
        expect=st.one_of(st.none(), st.integers(0, 12)),
    )
    def commit(self, topic: str, group: str, back: int, expect: int | None) -> None:
        head = self._head(topic)
        seq = max(0, (head or 0) - back)  # back < 0: past the head
        before = dict(self.model.get(topic, {}))
        try:
            self.db.put_cursor(topic, group, seq, expect_seq=expect)
        except TopicNotFoundError:
            assert head is None
            return
        except InvalidRequestError:
            assert head is not None
            assert seq > head
            assert dict(self.model.get(topic, {})) == before
            return
        except CursorConflictError:
            assert expect is not None
            assert expect != before.get(group, 0)
            return
        assert head is not None
        assert seq <= head
        assert expect is None or expect == before.get(group, 0)
        self.model[topic][group] = seq

    @rule(topic=st.sampled_from(TOPICS), group=st.sampled_from(GROUPS), limit=st.integers(1, 4))
    def read_and_commit(self, topic: str, group: str, limit: int) -> None:
        head = self._head(topic)
        if head is None:
            return
        start = self.model[topic].get(group, 0)
        res = self.db.diff(topic, cursor=group, commit=True, limit=limit)
        assert [r.seq for r in res.records] == list(range(start + 1, min(start + limit, head) + 1))
        if res.next_from_seq != start:
            self.model[topic][group] = res.next_from_seq

    @rule(topic=st.sampled_from(TOPICS), group=st.sampled_from(GROUPS))
    def delete_cursor(self, topic: str, group: str) -> None:
        if self._head(topic) is None:
            return
        res = self.db.delete_cursor(topic, group)
        assert res.deleted == (group in self.model[topic])
        self.model[topic].pop(group, None)

    @rule(topic=st.sampled_from(TOPICS))
    def delete_topic(self, topic: str) -> None:
        self.db.delete_topic(topic)
        self.model.pop(topic, None)

    @precondition(lambda self: bool(self.model))
    @rule()
    def restart(self) -> None:
        self.db.close()
        self.db = topics.open(self.dir)

    @invariant()
    def cursors_match_the_model(self) -> None:
        for topic in TOPICS:
            if topic not in self.model:
                assert self._head(topic) is None
                continue
            got = {c.cursor: c.seq for c in self.db.list_cursors(topic)}
            assert got == self.model[topic]


CursorMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=25, deadline=None)
test_cursor_model = CursorMachine.TestCase
