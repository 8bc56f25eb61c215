"""The engine against the contract model: random operation sequences, every answer compared.

A hypothesis state machine drives the real engine (through the synchronous facade,
``topics.open(None, ...)``, memory-only) and :class:`tests.support.model.ContractModel` with
the same calls, sharing one ManualClock, and asserts that both give the same answer: equal
results, or errors with the same wire code. Names come from a small set so operations
collide; limits are small so that batch, record, meta, tag, node, topic-count and total-byte
limits are all reachable.

When this fails, hypothesis prints the shortest step sequence it found. Decide from the
contract and docs/SEMANTICS.md which side is wrong; engine bugs get a plain regression test
in tests/property/test_engine_regressions.py.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import ujson
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

import topics
from tests.property._watch_prefix_model import PrefixWatchRules
from tests.support.model import ContractModel
from topics._clock import ManualClock
from topics.errors import TopicsError
from topics.settings import Limits
from topics.types import DiffResult, TopicPage

LIMITS = Limits(
    max_batch_records=6,
    max_record_bytes=400,
    max_meta_bytes=60,
    max_meta_keys=3,
    max_tag_bytes=8,
    max_node_bytes=6,
    max_limit=12,
    max_topics=3,
    max_total_bytes=8000,
)
NAMES = ["a", "b", "c:x", "c.y"]
BAD_NAMES: list[Any] = ["", "-a", "a/b", "a b", "x" * 256, 5, None]
TAGS = ["t1", "t2", "t10", "u1", "é", "t*"]
NODES = ["n1", "n2", "nö"]
KEYS = ["k1", "k2", "k3"]
PRODUCERS = ["p1", "p2"]

# -- value strategies ---------------------------------------------------------------

text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), max_codepoint=0x2FF), max_size=6
)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | text
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6,
)
raw_json = st.sampled_from(
    [b'{"a":1}', b" [1, 2] ", b'"x/y"', b"null", b"12.5", b"true", b'{"k":{"n":[]}}']
) | json_values.map(lambda v: ujson.dumps(v).encode())
bad_raw_json = st.sampled_from(
    [b"{bad", b"NaN", b"", b"[1,]", b'"\x01"', b"\xff", b"1 2", b"Infinity", b"'s'"]
)
bad_data = st.sampled_from([float("nan"), float("inf"), -float("inf"), {1, 2}, object()])
metas = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), json_scalars, max_size=3) | (
    st.sampled_from([b'{"r": 1}', b"{}", b' {"a/b":"\\u00e9"} '])  # raw JSON objects
)
bad_metas = st.sampled_from(
    [[1], "m", 5, {"a": 1, "b": 2, "c": 3, "d": 4}, {"a": "x" * 80}, b"[1]", b"{bad"]
)
tags = st.sampled_from(TAGS)
bad_tags = st.sampled_from(["", "x" * 9, 5, ["t1"]])
nodes = st.sampled_from(NODES)
bad_nodes = st.sampled_from(["", "x" * 7, 7, ["n1"]])


@st.composite
def records(draw: st.DrawFn, fault: bool = False) -> dict[str, Any]:
    """One record; with ``fault``, exactly one of its fields is bad."""
    rec: dict[str, Any] = {}
    rec["data"] = draw(
        st.sampled_from(["json", "json", "json", "raw", "raw", "big"]).flatmap(
            lambda kind: {"json": json_values, "raw": raw_json, "big": st.just("x" * 300)}[kind]
        )
    )
    if draw(st.booleans()):
        rec["tag"] = draw(st.none() | tags)  # None = absent
    if draw(st.integers(0, 3)) == 0:
        rec["node"] = draw(nodes)
    if draw(st.integers(0, 3)) == 0:
        rec["meta"] = draw(metas)
    if fault:
        kind = draw(
            st.sampled_from(["data", "raw", "meta", "tag", "node", "missing", "type", "unknown"])
        )
        if kind == "data":
            rec["data"] = draw(bad_data)
        elif kind == "raw":
            rec["data"] = draw(bad_raw_json)
        elif kind == "meta":
            rec["meta"] = draw(bad_metas)
        elif kind == "tag":
            rec["tag"] = draw(bad_tags)
        elif kind == "node":
            rec["node"] = draw(bad_nodes)
        elif kind == "missing":
            del rec["data"]
        elif kind == "unknown":
            rec[draw(st.sampled_from(["tga", "Data", "$seq", ""]))] = 1
        else:
            return draw(st.sampled_from([5, "rec", [1], None]))  # type: ignore[return-value]
    return rec


@st.composite
def batches(draw: st.DrawFn) -> list[Any]:
    """A batch: usually 1-4 good records, sometimes one bad record, empty or too long."""
    shape = draw(st.sampled_from(["ok"] * 12 + ["fault", "fault", "empty", "too_many", "huge"]))
    if shape == "empty":
        return []
    if shape == "too_many":
        return [{"data": i} for i in range(LIMITS.max_batch_records + 1)]
    batch = draw(st.lists(records(), min_size=1, max_size=4))
    if shape == "fault":
        batch.insert(draw(st.integers(0, len(batch))), draw(records(fault=True)))
    elif shape == "huge":  # data+meta over max_record_bytes
        batch.append({"data": "y" * LIMITS.max_record_bytes})
    return batch


CONFIG_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "ttl_ms": st.sampled_from([0, 0, 1000, 50_000, 150_000]),
    "cap_records": st.sampled_from([0, 0, 1, 2, 3, 5]),
    "cap_bytes": st.sampled_from([0, 0, 100, 300, 1000]),
    "discard": st.sampled_from(["old", "reject"]),
    "dedupe_node": st.booleans(),
    "idempotency_window_ms": st.sampled_from([0, 1000, 60_000, 120_000]),
    "durability": st.sampled_from(["ephemeral", "memory", "disk", "fsync"]),
    "durable": st.booleans(),
    "priority": st.sampled_from([None, -5, 0, 10, 2000, -2000]),
    "auto_priority": st.booleans(),
    "auto_create": st.sampled_from([True, True, False]),
    "type": st.sampled_from(["log"] * 5 + ["queue"]),
}
BAD_CONFIGS: list[Any] = [
    {"ttl": 5},
    {"ttl_ms": -1},
    {"ttl_ms": "5"},
    {"cap_records": True},
    {"discard": "none"},
    {"priority": 1.5},
    {"durability": "tape"},
    {"durable": "yes"},
    {"type": "stream"},
    {"auto_create": 1},
    "config",
    [("ttl_ms", 1)],
]


@st.composite
def configs(draw: st.DrawFn, allow_bad: bool = True) -> Any:
    if allow_bad and draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(BAD_CONFIGS))
    names = draw(st.lists(st.sampled_from(sorted(CONFIG_FIELDS)), max_size=4, unique=True))
    return {name: draw(CONFIG_FIELDS[name]) for name in names}


topic_names = st.sampled_from(NAMES)
BAD_FLAGS: list[Any] = [1, "yes", None]
GOOD_MATCHES: list[Any] = [
    None,
    None,
    "t1",
    "t2",
    "é",
    "t*",  # Eq: the * is a literal here
    ["tag", "Eq", "t10"],
    ["tag", "Glob", "t*"],
    ["tag", "Glob", "*"],
    ["tag", "Glob", "u*"],
    ("tag", "Eq", "u1"),
    "x" * 20,  # longer than any tag can be: matches nothing
]
BAD_ARGS: dict[str, dict[str, list[Any]]] = {
    "put_topic": {"name": BAD_NAMES, "config": BAD_CONFIGS},
    "get_topic": {"name": BAD_NAMES, "touch": BAD_FLAGS},
    "delete_topic": {"name": BAD_NAMES, "if_empty": BAD_FLAGS},
    "list_topics": {
        "prefix": [5, ["c"]],
        "page_size": [0, -1, "2", True, 1.5, None],
        "touch": BAD_FLAGS,
        # ASSUMPTION: none of these is a cursor the engine can have produced.
        "cursor": ["not a cursor!", "", "e30=", "eyJ4Ijox", "eyJhZnRlciI6MX0=", 7, ["x"]],
    },
    "write": {
        "name": BAD_NAMES,
        "records": ["records", {"data": 1}, 5, None, []],
        "node": ["", "x" * 7, 7, ["n1"]],
        "idempotency_key": ["", "k" * 257, 5],
        "create": ["yes", 1],
        "config": BAD_CONFIGS,
        "return_seqs": [1, None],
        "expected_head_seq": [-1, "0", True, 1.5, 2**64],
        "producer_id": ["", 5, "p" * 257],
        "epoch": [-1, "1", True, 2**64],
    },
    "diff": {
        "name": BAD_NAMES,
        "from_seq": [-1, "1", 1.5, True, None, 2**64],
        "limit": [-1, "3", None, True],
        "node": [5, [5], "", [""], "x" * 7, [None], {"n1": 1}],
        "include_tags": BAD_FLAGS,
        "include_meta": BAD_FLAGS,
        "include_data": BAD_FLAGS,
        "wait_ms": [-1, "5", 1.5, True],
    },
    "delete_records": {
        "name": BAD_NAMES,
        "before_seq": [-1, "3", 2.5, True],
        "match": [
            ["tag", "Glob", "t"],
            ["tag", "Glob", "*t*"],
            ["tag", "Glob", "t**"],
            ["tag", "Regex", "t"],
            ["node", "Eq", "n1"],
            ["tag", "Eq"],
            ["tag", "Eq", "t1", "x"],
            5,
            ["tag", "Eq", 5],
            {"tag": "t1"},
        ],
    },
}

# -- comparison ---------------------------------------------------------------------


# Known engine gaps, each pinned by a failing test in test_engine_regressions.py and
# stepped around here so the machine can look past them. Drop a mask once its tests pass.
# test_expired_idempotency_key_stays_expired_when_the_window_grows / _clock_steps_back:
# the engine prunes expired keys only during keyed writes, so an expired key can come back.
MASK_KEY_REVIVAL = False


#: where expressions for bounded_diff (issue 18): fields the generated records have.
WHERES = st.sampled_from(
    [
        None,
        ["tag", "Eq", TAGS[0]],
        ["tag", "Glob", TAGS[0][:1] + "*"],
        ["node", "Exists"],
        ["meta.a", "Exists"],
        ["meta.a", "Eq", 1],
        ["data.a", "Eq", 1],
        ["data.a", "Ge", 0],
        ["data.k", "Exists", False],
        ["or", [["meta.b", "Eq", "x"], ["data.a", "In", [1, "1", True]]]],
        ["and", [["tag", "Exists"], ["not", ["meta.c", "Lt", 0]]]],
    ]
)


def comparable(result: Any) -> Any:
    """What must match: the contract JSON, plus the diff's scan count and record count.
    List cursors are opaque, so only their presence is compared."""
    if isinstance(result, DiffResult):
        return (result.to_dict(), result.records_scanned, result.record_count)
    if isinstance(result, TopicPage):
        return ([t.to_dict() for t in result.topics], result.next_cursor is not None)
    return result.to_dict()


class EngineMatchesModel(PrefixWatchRules, RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock()
        self.model = ContractModel(self.clock, LIMITS)
        self.db: Any = topics.open(None, clock=self.clock, limits=LIMITS)
        # (engine cursor, model cursor, prefix, page_size) of list pages that said "more"
        self.cursors: list[tuple[str, str, str | None, int]] = []
        # every idempotency key ever written per topic instance -> written_at (for masks)
        self.keys_written: dict[str, dict[str, int]] = {}

    def would_revive_a_key(self, name: str, now: int, window: int) -> bool:
        """True when a key written to ``name`` has expired by now under the topic's
        current window but would not have under ``window`` at ``now``."""
        topic = self.model.topics.get(name)
        if topic is None:
            return False
        old_window = topic.config.idempotency_window_ms
        return any(
            self.clock.now_ms() - at > old_window and now - at <= window
            for at in self.keys_written.get(name, {}).values()
        )

    def teardown(self) -> None:
        self.db.close()

    def settle_other_topics(self, name: object) -> None:
        """S18 lets TOPICS_MAX_TOTAL_BYTES count records already expired in *other* topics
        until their next operation or the engine's 1 s background sweep, which runs on real
        time. Touching those topics first (touch=False changes nothing else) makes the
        total exact, so the answer no longer depends on the sweep's timing."""
        now = self.clock.now_ms()
        for other, topic in list(self.model.topics.items()):
            ttl = topic.config.ttl_ms
            if other != name and ttl and topic.live and now - topic.live[0].ts > ttl:
                self.both("get_topic", other, touch=False)

    def both(self, method: str, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """Call ``method`` on engine and model; assert the same answer or the same error."""
        if method == "write" and LIMITS.max_total_bytes:
            self.settle_other_topics(args[0])
        outcomes = []
        for target in (self.db, self.model):
            call: Callable[..., Any] = getattr(target, method)
            try:
                outcomes.append((None, call(*copy.deepcopy(args), **copy.deepcopy(kwargs))))
            except TopicsError as exc:
                outcomes.append((exc, None))
        (engine_exc, engine_out), (model_exc, model_out) = outcomes
        where = f"{method}(*{args!r:.300}, **{kwargs!r:.300})"
        if currently_in_test_context():  # coverage notes for --hypothesis-show-statistics
            event(f"{method} -> {model_exc.code if model_exc else 'ok'}")
            if isinstance(model_out, DiffResult):
                tomb = model_out.tombstone
                event(f"diff tombstone {tomb.reason if tomb else None}")
        if engine_exc is not None or model_exc is not None:
            assert engine_exc is not None, f"{where}: engine answered, model raised {model_exc!r}"
            assert model_exc is not None, f"{where}: engine raised {engine_exc!r}, model answered"
            assert engine_exc.code == model_exc.code, (
                f"{where}: engine {engine_exc!r} vs model {model_exc!r}"
            )
            return None, None
        assert comparable(engine_out) == comparable(model_out), (
            f"{where}:\n engine {engine_out!r}\n model  {model_out!r}"
        )
        if method == "write" and kwargs.get("idempotency_key") and not model_out.deduped:
            keys = self.keys_written.setdefault(args[0], {})
            keys[kwargs["idempotency_key"]] = self.clock.now_ms()
        if method == "delete_topic" and model_out.deleted:
            self.keys_written.pop(args[0], None)
        return engine_out, model_out

    def relative_seq(self, data: st.DataObject, name: str) -> int:
        """A seq near the interesting points of the topic's log (floors, head)."""
        topic = self.model.topics.get(name)
        if topic is None:
            return data.draw(st.integers(0, 5))
        points = [0, topic.head_seq, topic.head_seq + 1, topic.head_seq + 3, topic.earliest_seq]
        for p in (topic.evict_floor, topic.earliest_seq):
            points += [p - 2, p - 1]
        choice = data.draw(st.sampled_from(points) | st.integers(0, topic.head_seq + 2))
        return max(0, choice)

    def call(self, data: st.DataObject, method: str, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """``both``, but now and then with exactly one argument replaced by a bad value, so
        each error answer has one cause (the order of checks is tested separately)."""
        bad = BAD_ARGS[method]
        if data.draw(st.integers(0, 7), label="spoil?") == 0:
            field_name = data.draw(st.sampled_from(sorted(bad)), label="bad field")
            value = data.draw(st.sampled_from(bad[field_name]), label="bad value")
            if field_name == "name":
                args = (value, *args[1:])
            elif field_name == "records":
                args = (args[0], value)
            else:
                kwargs[field_name] = value
        return self.both(method, *args, **kwargs)

    # -- rules ------------------------------------------------------------------------

    @initialize(name=topic_names, config=configs(allow_bad=False))
    def start_with_a_topic(self, name: str, config: dict[str, Any]) -> None:
        self.both("put_topic", name, config=config)

    @initialize(
        config=st.fixed_dictionaries(
            {
                "ttl_ms": st.sampled_from([1000, 50_000]),
                "cap_records": st.sampled_from([0, 2, 3]),
                "cap_bytes": st.sampled_from([0, 200]),
                "discard": st.sampled_from(["old", "old", "reject"]),
            }
        )
    )
    def start_with_a_retention_topic(self, config: dict[str, Any]) -> None:
        self.both("put_topic", "b", config=config)

    @rule(data=st.data(), name=topic_names, config=st.one_of(st.none(), configs(allow_bad=False)))
    def put_topic(self, data: st.DataObject, name: str, config: Any) -> None:
        window = (config or {}).get("idempotency_window_ms")
        now = self.clock.now_ms()
        if MASK_KEY_REVIVAL and window is not None and self.would_revive_a_key(name, now, window):
            return
        self.call(data, "put_topic", name, config=config)

    @rule(data=st.data(), name=topic_names, touch=st.booleans())
    def get_topic(self, data: st.DataObject, name: str, touch: bool) -> None:
        self.call(data, "get_topic", name, touch=touch)

    @rule()
    def compare_every_state(self) -> None:
        for name in NAMES:
            self.both("get_topic", name, touch=False)

    @rule(
        data=st.data(),
        prefix=st.sampled_from([None, None, "", "c", "c:", "a", "z"]),
        page_size=st.sampled_from([1, 2, 3, 100, 2000]),
        touch=st.booleans(),
    )
    def list_topics(self, data: st.DataObject, prefix: Any, page_size: Any, touch: Any) -> None:
        engine_page, model_page = self.call(
            data, "list_topics", prefix=prefix, page_size=page_size, touch=touch
        )
        if engine_page is not None and engine_page.next_cursor is not None:
            self.cursors.append(
                (engine_page.next_cursor, model_page.next_cursor, prefix, page_size)
            )

    @rule(data=st.data())
    def follow_list_cursor(self, data: st.DataObject) -> None:
        if not self.cursors:
            return
        engine_cursor, model_cursor, prefix, page_size = data.draw(st.sampled_from(self.cursors))
        pages = []
        for target, cursor in ((self.db, engine_cursor), (self.model, model_cursor)):
            pages.append(target.list_topics(prefix=prefix, page_size=page_size, cursor=cursor))
        assert comparable(pages[0]) == comparable(pages[1])
        if pages[0].next_cursor is not None:
            self.cursors.append((pages[0].next_cursor, pages[1].next_cursor, prefix, page_size))

    @rule(
        data=st.data(),
        name=topic_names,
        batch=batches(),
        node=st.sampled_from([None, None, None, *NODES]),
        key=st.sampled_from([None, None, None, *KEYS]),
        create=st.sampled_from([None, None, None, None, True, False]),
        config=st.one_of(st.none(), st.none(), st.none(), configs(allow_bad=False)),
        return_seqs=st.sampled_from([True, True, False]),
    )
    def write(
        self,
        data: st.DataObject,
        name: str,
        batch: Any,
        node: Any,
        key: Any,
        create: Any,
        config: Any,
        return_seqs: Any,
    ) -> None:
        self.call(
            data,
            "write",
            name,
            batch,
            node=node,
            idempotency_key=key,
            create=create,
            config=config,
            return_seqs=return_seqs,
        )

    @rule(name=topic_names, batch=st.lists(records(), min_size=1, max_size=3))
    def write_plain(self, name: str, batch: list[Any]) -> None:
        self.both("write", name, batch)

    @rule(
        name=st.sampled_from(["b", "b", "a"]),
        batch=st.lists(
            st.fixed_dictionaries(
                {"data": st.integers(0, 9)},
                optional={"tag": tags, "node": nodes},
            ),
            min_size=1,
            max_size=5,
        ),
    )
    def fill(self, name: str, batch: list[dict[str, Any]]) -> None:
        """Small records, mostly into the retention topic "b", so caps and TTLs bite."""
        self.both("write", name, batch)

    @rule(data=st.data())
    def read_from_below_the_floor(self, data: st.DataObject) -> None:
        lossy = sorted(n for n, t in self.model.topics.items() if t.evict_floor > 1)
        if not lossy:
            return
        name = data.draw(st.sampled_from(lossy))
        floor = self.model.topics[name].evict_floor
        from_seq = data.draw(st.integers(0, floor - 1))
        self.both("diff", name, from_seq=from_seq, limit=data.draw(st.sampled_from([0, 1, 3])))

    @rule(
        data=st.data(),
        name=topic_names,
        batch=st.lists(records(), min_size=1, max_size=2),
        key=st.sampled_from([None, *KEYS]),
    )
    def compare_and_append(
        self, data: st.DataObject, name: str, batch: list[Any], key: str | None
    ) -> None:
        """S19c: an expected head at, just around or far from the actual one."""
        topic = self.model.topics.get(name)
        head = topic.head_seq if topic is not None else 0
        expected = data.draw(st.sampled_from([head, head, max(0, head - 1), head + 1, 0]))
        self.call(data, "write", name, batch, expected_head_seq=expected, idempotency_key=key)

    @rule(
        data=st.data(),
        name=topic_names,
        batch=st.lists(records(), min_size=1, max_size=2),
        producer=st.sampled_from(PRODUCERS),
        epoch=st.integers(0, 3),
        key=st.sampled_from([None, None, *KEYS]),
        expect_head=st.booleans(),
    )
    def producer_write(
        self,
        data: st.DataObject,
        name: str,
        batch: list[Any],
        producer: str,
        epoch: int,
        key: str | None,
        expect_head: bool,
    ) -> None:
        """S19b: fenced epochs, the last batch deduplicated without a window, and both
        conditions together."""
        topic = self.model.topics.get(name)
        extra: dict[str, Any] = {}
        if expect_head:
            extra["expected_head_seq"] = topic.head_seq if topic is not None else 0
        self.call(
            data,
            "write",
            name,
            batch,
            producer_id=producer,
            epoch=epoch,
            idempotency_key=key,
            **extra,
        )

    @rule(
        name=topic_names,
        producer=st.sampled_from(PRODUCERS),
        epoch=st.integers(0, 3),
        key=st.sampled_from(KEYS),
        wait=st.booleans(),
    )
    def producer_resends_its_last_batch(
        self, name: str, producer: str, epoch: int, key: str, wait: bool
    ) -> None:
        """S19b: a producer's last batch is deduplicated even after the idempotency window
        (``wait``), from its own epoch or the next one (a restarted instance)."""
        first = [{"data": "first"}]
        self.both("write", name, first, producer_id=producer, epoch=epoch, idempotency_key=key)
        topic = self.model.topics.get(name)
        if wait and topic is not None:
            self.clock.advance(topic.config.idempotency_window_ms + 1)
        again = [{"data": "again"}]
        self.both(
            "write", name, again, producer_id=producer, epoch=epoch + int(wait), idempotency_key=key
        )

    @rule(name=topic_names, key=st.sampled_from(KEYS), n=st.integers(1, 3))
    def retry_write(self, name: str, key: str, n: int) -> None:
        """Same key, different records: deduped while the key is in its window."""
        self.both("write", name, [{"data": i, "tag": "t1"} for i in range(n)], idempotency_key=key)

    @rule(
        data=st.data(),
        name=topic_names,
        limit=st.sampled_from([0, 0, 1, 2, 3, 5, 20]),
        node=st.sampled_from([None, None, "n1", ["n1", "n2"], [], "zz"]),
        include_tags=st.booleans(),
        include_meta=st.booleans(),
        include_data=st.sampled_from([True, True, False]),
        wait_ms=st.sampled_from([0, 0, 0, 1]),
    )
    def diff(
        self,
        data: st.DataObject,
        name: str,
        limit: int,
        node: Any,
        include_tags: bool,
        include_meta: bool,
        include_data: bool,
        wait_ms: int,
    ) -> None:
        # wait_ms=1: a caught-up empty read really waits 1 ms (wall time); nothing writes
        # meanwhile, so the answer is the plain read's (S16).
        self.call(
            data,
            "diff",
            name,
            from_seq=self.relative_seq(data, name),
            limit=limit,
            node=node,
            include_tags=include_tags,
            include_meta=include_meta,
            include_data=include_data,
            wait_ms=wait_ms,
        )

    @rule(name=topic_names, data=st.data())
    def read_everything_in_pages(self, name: str, data: st.DataObject) -> None:
        """A consumer loop: follow next_from_seq until caught up."""
        limit = data.draw(st.sampled_from([1, 2, 5]))
        node = data.draw(st.sampled_from([None, "n1"]))
        from_seq = self.relative_seq(data, name)
        for _ in range(50):
            engine_out, _model_out = self.both(
                "diff", name, from_seq=from_seq, limit=limit, node=node
            )
            if engine_out is None or engine_out.caught_up:
                return
            from_seq = engine_out.next_from_seq

    @rule(name=topic_names, data=st.data())
    def wait_with_records_available(self, name: str, data: st.DataObject) -> None:
        """wait_ms only matters when nothing is there: with records behind the cursor, a
        long-poll answers at once, exactly like a plain read."""
        topic = self.model.topics.get(name)
        if topic is None or not topic.live:
            return
        from_seq = max(0, topic.live[-1].seq - 1)
        self.both("diff", name, from_seq=from_seq, wait_ms=data.draw(st.sampled_from([1, 50_000])))

    @rule(
        data=st.data(),
        name=topic_names,
        use_before=st.booleans(),
        match=st.sampled_from(GOOD_MATCHES),
    )
    def delete_records(self, data: st.DataObject, name: str, use_before: bool, match: Any) -> None:
        before = self.relative_seq(data, name) if use_before or match is None else None
        self.call(data, "delete_records", name, before_seq=before, match=match)

    @rule(name=topic_names, data=st.data())
    def bounded_diff(self, name: str, data: st.DataObject) -> None:
        """Issue 18 (S29-S31): from_ts, to_ts, to_seq and where against the model. The
        echoed from_seq may name a deleted record after the model's (the engine finds the
        last *held* record older than from_ts; a reader passes deleted seqs for free), so
        it is checked as a range; a topic with gap markers is left to the unit tests."""
        topic = self.model.topics.get(name)
        now = self.clock.now_ms()
        stamps = sorted({r.ts for r in topic.live}) if topic is not None else []
        near = [now - 1, now, now + 1, 0, *stamps, *(t + 1 for t in stamps)]
        kw: dict[str, Any] = {"limit": data.draw(st.sampled_from([0, 1, 2, 5]))}
        if data.draw(st.booleans(), label="from_ts?"):
            kw["from_ts"] = data.draw(st.sampled_from(near), label="from_ts")
        else:
            kw["from_seq"] = self.relative_seq(data, name)
        if data.draw(st.booleans(), label="to_ts?"):
            kw["to_ts"] = data.draw(st.sampled_from(near), label="to_ts")
        if data.draw(st.booleans(), label="to_seq?"):
            kw["to_seq"] = self.relative_seq(data, name)
        kw["where"] = data.draw(WHERES, label="where")
        if topic is not None and topic.gaps:
            return
        outs = []
        for target in (self.db, self.model):
            try:
                outs.append((None, target.diff(name, **copy.deepcopy(kw))))
            except TopicsError as exc:
                outs.append((exc.code, None))
        (e_err, e_out), (m_err, m_out) = outs
        where = f"diff({name!r}, **{kw!r})"
        assert e_err == m_err, f"{where}: engine {e_err} vs model {m_err}"
        if e_out is None:
            return
        e_dict, m_dict = e_out.to_dict(), m_out.to_dict()
        e_echo, m_echo = e_dict.pop("from_seq", None), m_dict.pop("from_seq", None)
        if (
            e_out.records_scanned == m_out.records_scanned == 0
            and e_dict["next_from_seq"] == e_echo
            and m_dict["next_from_seq"] == m_echo
        ):
            # Nothing read (the end comes before the start): the cursor stays at the echoed
            # start, which may differ by deleted seqs as said above; checked as that range.
            del e_dict["next_from_seq"], m_dict["next_from_seq"]
        assert (e_dict, e_out.records_scanned) == (m_dict, m_out.records_scanned), (
            f"{where}:\n engine {e_out!r}\n model  {m_out!r}"
        )
        if m_echo is not None:
            assert topic is not None
            after = [r.seq for r in topic.live if r.seq > m_echo]
            top = after[0] - 1 if after and m_echo else (topic.head_seq if m_echo else 0)
            assert m_echo <= e_echo <= top, f"{where}: from_seq {e_echo} vs model {m_echo}"

    @rule(name=topic_names)
    def delete_records_without_a_predicate(self, name: str) -> None:
        self.both("delete_records", name)

    @rule(data=st.data(), name=topic_names, if_empty=st.booleans())
    def delete_topic(self, data: st.DataObject, name: str, if_empty: bool) -> None:
        self.call(data, "delete_topic", name, if_empty=if_empty)

    @rule(ms=st.sampled_from([0, 1, 500, 999, 1000, 1001, 30_000, 60_000, 120_001, 200_000]))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(ms=st.integers(0, 200_000))
    def advance_clock_randomly(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(ms=st.sampled_from([1, 10, 1000, 5000]))
    def step_clock_back(self, ms: int) -> None:
        """Wall clocks do step back (NTP); $ts must still never decrease (S3).

        A step back must not un-expire a record or an idempotency key: the engine may
        already have dropped it (its background sweep runs on wall time, and a keyed write
        prunes expired keys), so the answer would depend on timing. Such steps are skipped.
        """
        now, back = self.clock.now_ms(), self.clock.now_ms() - ms
        for topic in self.model.topics.values():
            ttl, window = topic.config.ttl_ms, topic.config.idempotency_window_ms
            for rec in topic.live:
                if ttl and (now - rec.ts > ttl) != (back - rec.ts > ttl):
                    return
            for entry in topic.dedupe.values():
                if (now - entry.written_at > window) != (back - entry.written_at > window):
                    return
            if MASK_KEY_REVIVAL and self.would_revive_a_key(topic.name, back, window):
                return
        self.clock.set(back)


_HEALTH = [HealthCheck.too_slow, HealthCheck.filter_too_much]

TestEngineMatchesModel = EngineMatchesModel.TestCase
TestEngineMatchesModel.settings = settings(
    max_examples=200, stateful_step_count=40, deadline=None, suppress_health_check=_HEALTH
)


class HeavyEngineMatchesModel(EngineMatchesModel):
    """The same machine, longer runs: ``pytest -m slow``."""


TestEngineMatchesModelHeavy = pytest.mark.slow(HeavyEngineMatchesModel.TestCase)
TestEngineMatchesModelHeavy.settings = settings(
    max_examples=600, stateful_step_count=100, deadline=None, suppress_health_check=_HEALTH
)


def test_engine_matches_model_on_the_diff_byte_budget() -> None:
    """The 1 MiB diff budget needs records too big for the machine's limits: one scenario
    with the default limits (two ~700 KB records fill the budget; the third waits)."""
    machine = EngineMatchesModel.__new__(EngineMatchesModel)
    clock = ManualClock()
    machine.clock, machine.model = clock, ContractModel(clock)
    machine.db = topics.open(None, clock=clock)
    try:
        big = "x" * 700_000
        machine.both("write", "t", [{"data": big, "node": "n"}, {"data": big}, {"data": big}])
        machine.both("write", "t", [{"data": 1}])
        for from_seq in (0, 1, 2, 3):
            for node in (None, "n"):
                machine.both("diff", "t", from_seq=from_seq, node=node)
                machine.both("diff", "t", from_seq=from_seq, node=node, include_data=False)
    finally:
        machine.db.close()
