"""A deliberately naive, synchronous model of the topics/records contract (§0-§5).

The property test (tests/property/test_engine_model.py) drives the real engine and this
model with the same operations and compares every answer. The model is written for
obviousness, not speed: each topic is a plain list of live record objects, every query is
a linear scan, and every rule is spelled out next to the code that implements it, with the
rule number of docs/SEMANTICS.md (S<n>) or the contract section (§x.y).

Rule 1: nothing from the engine implementation is imported here: only the public result
types, the error classes, the config parser and the name check.
Rule 2: the model reads time only from the shared clock, once per operation, so that an
answer is exact for the clock at the time of the call (S6).
Rule 3: invalid input changes nothing: every check runs before the first mutation (S18).

Choices where the contract and SEMANTICS.md are silent are marked "ASSUMPTION" below.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import ujson

from topics._names import check_topic_name
from topics.config import TopicConfig, parse_config
from topics.errors import (
    BatchTooLargeError,
    HeadMismatchError,
    InvalidRequestError,
    ProducerFencedError,
    RecordTooLargeError,
    ThrottledError,
    TopicExistsIncompatibleError,
    TopicFullError,
    TopicNotEmptyError,
    TopicNotFoundError,
)
from topics.query.where import compile_where
from topics.settings import Limits
from topics.types import (
    DeleteRecordsResult,
    DeleteTopicResult,
    DiffResult,
    PutTopicResult,
    Tombstone,
    TopicPage,
    TopicState,
    TopicSummary,
    WriteResult,
)

__all__ = ["ContractModel"]

FRAME_OVERHEAD = 41  # S4: 40-byte header + 1-byte trailer
DEFAULT_LIMIT = 256  # S13 / §3.1
DIFF_BYTE_BUDGET = 1 << 20  # S14: 1 MiB of rendered records per diff
MAX_PAGE_SIZE = 1000  # S23 / §0.7
MAX_IDEMPOTENCY_KEY_CHARS = 256  # S19
MAX_PRODUCER_ID_CHARS = 256  # S19b
AUTO_PRIORITY_MAX = 500  # S22
AUTO_PRIORITY_HALF_LIFE_MS = 30_000
AUTO_PRIORITY_IDLE_MS = 300_000
U64_MAX = (1 << 64) - 1  # §3.1 from_seq, §5 before_seq


class Clock(Protocol):
    def now_ms(self) -> int: ...


# -- small validators -----------------------------------------------------------------


# The model's own list (not topics.record_fields): a field added there must be added here.
_RECORD_FIELDS = frozenset({"data", "tag", "node", "meta"})


def _bad(field_name: str, problem: str) -> InvalidRequestError:
    return InvalidRequestError(f"{field_name}: {problem}", detail={"field": field_name})


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _non_negative_int(field_name: str, value: object) -> int:
    """A u64 argument (§3.1, §5); bool is not a number here."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= U64_MAX:
        raise _bad(field_name, f"must be a non-negative integer, got {value!r}")
    return value


def _flag(field_name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise _bad(field_name, f"must be true or false, got {value!r}")
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json_check(raw: bytes) -> int:
    """S5: ``raw`` must be exactly one JSON value (UTF-8, no NaN/Infinity, no raw control
    characters in strings; surrounding whitespace allowed). Returns the number of top-level
    members of an object, else -1. Raises ValueError."""
    text = raw.decode("utf-8")  # strict: invalid UTF-8 raises UnicodeDecodeError
    value = json.loads(text, parse_constant=_reject_constant)  # strict=True by default
    return len(value) if isinstance(value, dict) else -1


def _encode_value(value: Any) -> bytes:
    """S5: bytes are already-encoded JSON, anything else is ``ujson.dumps`` with default
    arguments. Either way the result must be valid JSON (so NaN/Infinity are refused)."""
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
    else:
        raw = ujson.dumps(value).encode("utf-8")
    return raw


def _name_bytes(field_name: str, value: object, max_bytes: int) -> bytes:
    """S5: ``tag``/``node`` are non-empty strings within their byte limits."""
    if not isinstance(value, str):
        raise _bad(field_name, f"must be a string, got {type(value).__name__}")
    if value == "":
        raise _bad(field_name, "must not be empty")
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError:
        raise _bad(field_name, "is not valid UTF-8") from None
    if len(encoded) > max_bytes:  # S5: invalid_request, not record_too_large
        raise _bad(field_name, f"is {len(encoded)} bytes, more than {max_bytes}")
    return encoded


# -- stored state -------------------------------------------------------------------


@dataclass
class _Rec:
    """One live record, kept as the JSON texts that were stored (S5)."""

    seq: int
    ts: int
    node: str | None
    tag: str | None
    meta_json: bytes | None
    data_json: bytes

    @property
    def size(self) -> int:
        """S4: the frame length."""
        return (
            FRAME_OVERHEAD
            + len(self.node.encode() if self.node is not None else b"")
            + len(self.tag.encode() if self.tag is not None else b"")
            + len(self.meta_json or b"")
            + len(self.data_json)
        )

    def render(self, *, tags: bool, meta: bool, data: bool) -> bytes:
        """§0.4/§3.1: keys in order, absent ones omitted; data always present unless the
        reader asked for none."""
        parts = [f'"$seq":{self.seq}', f'"$ts":{self.ts}']
        if self.node is not None:
            parts.append('"$node":' + json.dumps(self.node))
        if tags and self.tag is not None:
            parts.append('"$tag":' + json.dumps(self.tag))
        out = ("{" + ",".join(parts)).encode()
        if data:
            out += b',"data":' + self.data_json
        if meta and self.meta_json is not None:
            out += b',"meta":' + self.meta_json
        return out + b"}"


@dataclass
class _Dedupe:
    written_at: int
    first_seq: int
    last_seq: int
    seqs: list[int]
    count: int


@dataclass
class _Producer:
    """S19b: a producer's highest epoch and its last appended batch (no window)."""

    epoch: int
    key: str | None = None
    first_seq: int = 0
    last_seq: int = 0


@dataclass
class _Topic:
    """One topic instance. tests/property/test_engine_restarts.py rewrites these fields to
    model a restart, so keep their names and meanings stable."""

    name: str
    config: TopicConfig
    live: list[_Rec] = field(default_factory=list)  # ascending seq, live records only
    head_seq: int = 0
    last_ts: int | None = None  # $ts of the record at head_seq (S3), live or not
    cap_floor: int = 1  # S9
    ttl_floor: int = 1
    # An ephemeral topic's records lost to a restart lie below this (reason "restart").
    restart_floor: int = 0
    dedupe: dict[str, _Dedupe] = field(default_factory=dict)
    producers: dict[str, _Producer] = field(default_factory=dict)  # S19b: survives restarts
    last_write_ts: int | None = None
    last_read_ts: int | None = None
    # Gap markers (SEMANTICS rule 13a, after a crash): (seq, lost_from, lost_to). A marker
    # holds no record; a reader reaching it gets a "crash" tombstone for the lost range
    # from its own start on.
    gaps: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.live)

    @property
    def bytes(self) -> int:
        return sum(r.size for r in self.live)

    @property
    def earliest_seq(self) -> int:
        """S9: the first live seq, or head_seq + 1."""
        return self.live[0].seq if self.live else self.head_seq + 1

    @property
    def evict_floor(self) -> int:
        return max(self.cap_floor, self.ttl_floor)

    def expire(self, now: int) -> None:
        """S6: drop every live record with now - $ts > ttl_ms (a prefix, by S3); the TTL
        floor moves one past the highest live seq dropped (S9)."""
        ttl = self.config.ttl_ms
        if ttl == 0:
            return
        while self.live and now - self.live[0].ts > ttl:
            lost = self.live.pop(0)
            self.ttl_floor = max(self.ttl_floor, lost.seq + 1)

    def retain(self, now: int) -> None:
        """Retention, applied at the start of every operation on the topic: TTL (S6), then,
        on a discard "old" topic, the caps (S7: so a PUT that lowers a cap applies at once),
        then the idempotency window (S19)."""
        self.expire(now)
        if self.config.discard == "old":
            self.evict_to_caps()
        self.forget_expired_keys(now)

    def evict_to_caps(self) -> None:
        """S7: evict the oldest live records until both (non-zero) caps hold."""
        cap_records, cap_bytes = self.config.cap_records, self.config.cap_bytes
        while self.live and (
            (cap_records and self.count > cap_records) or (cap_bytes and self.bytes > cap_bytes)
        ):
            lost = self.live.pop(0)
            self.cap_floor = max(self.cap_floor, lost.seq + 1)

    def effective_priority(self, now: int) -> int:
        """S22."""
        cfg = self.config
        if cfg.priority is not None:
            return cfg.priority
        if not cfg.auto_priority or self.last_read_ts is None:
            return 0
        # ASSUMPTION: after the clock steps back, a read "in the future" counts as now
        # (S22's formula would otherwise exceed its own maximum of 500).
        idle = max(0, now - self.last_read_ts)
        if idle >= AUTO_PRIORITY_IDLE_MS:
            return 0
        return round(AUTO_PRIORITY_MAX * 2 ** (-idle / AUTO_PRIORITY_HALF_LIFE_MS))

    def live_dedupe(self, key: str, now: int) -> _Dedupe | None:
        """S19: an entry expires when now - written_at > idempotency_window_ms, the topic's
        *current* window."""
        entry = self.dedupe.get(key)
        if entry is None or now - entry.written_at > self.config.idempotency_window_ms:
            return None
        return entry

    def forget_expired_keys(self, now: int) -> None:
        """S19 with S6's principle: an idempotency key that expired is gone for good, so a
        later PUT with a larger window (or a clock stepping back) cannot revive it.
        ASSUMPTION: S19 only says the current window applies to "existing entries"; which
        entries still exist must not depend on the history of unrelated calls."""
        window = self.config.idempotency_window_ms
        for key in [k for k, e in self.dedupe.items() if now - e.written_at > window]:
            del self.dedupe[key]


# -- the model ----------------------------------------------------------------------


def _encode_cursor(after: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"after": after}).encode()).decode()


def _decode_cursor(cursor: object) -> str:
    if not isinstance(cursor, str):
        raise _bad("cursor", "must be a string")
    try:
        obj = json.loads(base64.urlsafe_b64decode(cursor.encode("ascii")).decode("utf-8"))
    except (ValueError, UnicodeError, binascii.Error):
        raise _bad("cursor", "malformed cursor") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("after"), str):
        raise _bad("cursor", "malformed cursor")
    return obj["after"]


def _parse_match(match: object) -> tuple[str, str] | None:
    """S25: a string (Eq), ["tag","Eq",X] or ["tag","Glob","P*"]; returns (op, operand)."""
    if match is None:
        return None
    if isinstance(match, str):
        return ("Eq", match)
    if not isinstance(match, list | tuple) or len(match) != 3:
        raise _bad("match", 'must be a tag string or ["tag", "Eq"|"Glob", value]')
    key, op, operand = match
    if key != "tag":
        raise _bad("match", f'only "tag" can be matched, got {key!r}')
    if op not in ("Eq", "Glob"):
        raise _bad("match", f"op must be Eq or Glob, got {op!r}")
    if not isinstance(operand, str):
        raise _bad("match", "the value must be a string")
    if op == "Glob" and (not operand.endswith("*") or "*" in operand[:-1]):
        raise _bad("match", "a Glob must be a literal prefix followed by one trailing *")
    return (op, operand)


def _tag_matches(tag: str | None, parsed: tuple[str, str]) -> bool:
    if tag is None:  # S26: records without a tag never match
        return False
    op, operand = parsed
    if op == "Eq":
        return tag == operand
    return tag.encode().startswith(operand[:-1].encode())


class ContractModel:
    """The contract, naively. Same method names and arguments as the engine, synchronous."""

    def __init__(self, clock: Clock, limits: Limits | None = None) -> None:
        self.clock = clock
        self.limits = limits if limits is not None else Limits()
        self.topics: dict[str, _Topic] = {}

    # -- helpers ----------------------------------------------------------------------

    def _existing(self, name: str, now: int) -> _Topic:
        topic = self.topics.get(name)
        if topic is None:
            raise TopicNotFoundError.for_topic(name)
        topic.retain(now)
        return topic

    def _total_bytes(self, now: int) -> int:
        """Live bytes over every topic, exact for ``now`` (S6).

        S18 lets the engine count records already expired in *other* topics until their
        next operation or its 1 s background sweep; the property test settles those topics
        first, so this exact total is what the engine sees too. Only what holds bytes is
        settled here: another topic's idempotency keys are forgotten at that topic's own
        next operation, as the engine does (forgetting them here made a key that a clock
        step-back brought back inside its window differ between the two)."""
        for topic in self.topics.values():
            topic.expire(now)
            if topic.config.discard == "old":
                topic.evict_to_caps()
        return sum(t.bytes for t in self.topics.values())

    def _check_topic_room(self) -> None:
        """§11: creating one more topic must stay within TOPICS_MAX_TOPICS (0 = unlimited)."""
        cap = self.limits.max_topics
        if cap and len(self.topics) >= cap:
            raise ThrottledError.for_limit("max_topics", cap)

    # -- topics (§1) ------------------------------------------------------------------

    def put_topic(self, name: str, config: dict[str, Any] | None = None) -> PutTopicResult:
        check_topic_name(name)
        now = self.clock.now_ms()
        current = self.topics.get(name)
        if current is not None:
            current.retain(now)  # S6: what expired under the old config stays expired
        new = parse_config(config, current.config if current else None, topic=name)  # S21
        if current is not None:
            if new.type != current.config.type:
                raise TopicExistsIncompatibleError(
                    "type cannot change", detail={"topic": name, "field": "type"}
                )
            current.config = new
            current.retain(now)  # a tightened cap/ttl applies to what is stored now
            return PutTopicResult(topic=name, created=False, config=new)
        self._check_topic_room()
        self.topics[name] = _Topic(name=name, config=new)
        return PutTopicResult(topic=name, created=True, config=new)

    def get_topic(self, name: str, *, touch: bool = True) -> TopicState:
        check_topic_name(name)
        _flag("touch", touch)
        now = self.clock.now_ms()
        topic = self._existing(name, now)
        if touch:  # S17. ASSUMPTION: the answer reflects this call's own touch.
            topic.last_read_ts = now
        return self._state(topic, now)

    def _state(self, topic: _Topic, now: int) -> TopicState:
        queue = None
        if topic.config.type == "queue":
            # ASSUMPTION: with no claims ever made, every live job is ready.
            queue = {
                "ready": topic.count,
                "in_flight": 0,
                "dead_lettered": 0,
                "scheduled": 0,
                "backoff": 0,
            }
        return TopicState(
            topic=topic.name,
            type=topic.config.type,
            head_seq=topic.head_seq,
            earliest_seq=topic.earliest_seq,
            next_seq=topic.head_seq + 1,
            count=topic.count,
            bytes=topic.bytes,
            config=topic.config,
            effective_priority=topic.effective_priority(now),
            last_write_ts=topic.last_write_ts,
            last_read_ts=topic.last_read_ts,
            queue=queue,
        )

    def list_topics(
        self,
        *,
        prefix: str | None = None,
        page_size: int = 100,
        cursor: str | None = None,
        touch: bool = False,
    ) -> TopicPage:
        if prefix is not None and not isinstance(prefix, str):
            raise _bad("prefix", "must be a string")
        if not _is_int(page_size) or page_size < 1:
            raise _bad("page_size", f"must be a positive integer, got {page_size!r}")
        _flag("touch", touch)
        after = _decode_cursor(cursor) if cursor is not None else None
        page_size = min(page_size, MAX_PAGE_SIZE)
        now = self.clock.now_ms()
        # S23: byte order of the names (== str order for the ASCII topic charset).
        names = sorted(
            (n for n in self.topics if n.startswith(prefix or "")), key=lambda n: n.encode()
        )
        if after is not None:
            names = [n for n in names if n.encode() > after.encode()]
        page, more = names[:page_size], len(names) > page_size
        summaries = []
        for name in page:
            topic = self.topics[name]
            topic.retain(now)
            if touch:
                topic.last_read_ts = now
            cfg = topic.config
            summaries.append(
                TopicSummary(
                    topic=name,
                    type=cfg.type,
                    head_seq=topic.head_seq,
                    earliest_seq=topic.earliest_seq,
                    count=topic.count,
                    bytes=topic.bytes,
                    durable=cfg.durable,
                    durability=cfg.durability,
                    effective_priority=topic.effective_priority(now),
                )
            )
        return TopicPage(topics=summaries, next_cursor=_encode_cursor(page[-1]) if more else None)

    def delete_topic(self, name: str, *, if_empty: bool = False) -> DeleteTopicResult:
        check_topic_name(name)
        _flag("if_empty", if_empty)
        now = self.clock.now_ms()
        topic = self.topics.get(name)
        if topic is None:
            return DeleteTopicResult(topic=name, deleted=False, routers_removed=[])
        topic.retain(now)
        if if_empty and topic.count > 0:  # S24
            raise TopicNotEmptyError(
                f'topic "{name}" holds {topic.count} records', detail={"topic": name}
            )
        del self.topics[name]  # S24: records, floors and dedupe state all go
        return DeleteTopicResult(topic=name, deleted=True, routers_removed=[])

    # -- writes (§2) ------------------------------------------------------------------

    def write(
        self,
        name: str,
        records: list[dict[str, Any]],
        *,
        node: str | None = None,
        idempotency_key: str | None = None,
        create: bool | None = None,
        config: dict[str, Any] | None = None,
        return_seqs: bool = True,
        expected_head_seq: int | None = None,
        producer_id: str | None = None,
        epoch: int | None = None,
    ) -> WriteResult:
        # S18, in order. 1: the name.
        check_topic_name(name)
        # 2: argument types. The batch node is an argument, checked even when every record
        # names its own (S5). ASSUMPTION: the records array itself is checked with the
        # records (step 6), so a dedupe hit never looks at it.
        if node is not None:
            _name_bytes("node", node, self.limits.max_node_bytes)
        if idempotency_key is not None and (
            not isinstance(idempotency_key, str)
            or not 1 <= len(idempotency_key) <= MAX_IDEMPOTENCY_KEY_CHARS
        ):
            raise _bad("idempotency_key", "must be a string of 1-256 characters")  # S19
        if create is not None:
            _flag("create", create)
        if config is not None and not isinstance(config, Mapping):
            raise _bad("config", "must be a JSON object")
        _flag("return_seqs", return_seqs)
        if producer_id is not None or epoch is not None:  # S19b: both or neither
            if producer_id is None or epoch is None:
                raise _bad("producer_id" if producer_id is None else "epoch", "goes with the other")
            if (
                not isinstance(producer_id, str)
                or not 1 <= len(producer_id) <= MAX_PRODUCER_ID_CHARS
            ):
                raise _bad("producer_id", "must be a string of 1-256 characters")
            _non_negative_int("epoch", epoch)
        if expected_head_seq is not None:
            _non_negative_int("expected_head_seq", expected_head_seq)  # S19c
        now = self.clock.now_ms()
        # 3: the inline config, validated even when the topic exists (then ignored).
        inline_config = parse_config(config, None, topic=name) if config is not None else None
        # 4: existence.
        topic = self.topics.get(name)
        if topic is not None:
            topic.retain(now)
        else:
            allowed = create
            if allowed is None:
                allowed = inline_config.auto_create if inline_config is not None else True
            if not allowed:
                raise TopicNotFoundError.for_topic(name)
        # 4b: the producer fence (S19b).
        producer = None
        if producer_id is not None and topic is not None:
            producer = topic.producers.get(producer_id)
            if producer is not None and epoch < producer.epoch:  # type: ignore[operator]
                raise ProducerFencedError("fenced", detail={"current_epoch": producer.epoch})
        # 5: the producer's last batch (no window), then the idempotency window; a hit does
        # not look at the records, and a newer epoch it carries still fences older ones.
        if topic is not None and idempotency_key is not None:
            entry = topic.live_dedupe(idempotency_key, now)
            if producer is not None and producer.key == idempotency_key:
                last = producer.last_seq
                first = producer.first_seq
                entry = _Dedupe(now, first, last, list(range(first, last + 1)), last - first + 1)
            if entry is not None:
                if producer_id is not None:
                    assert epoch is not None
                    if producer is None:
                        topic.producers[producer_id] = _Producer(epoch)
                    else:
                        producer.epoch = max(producer.epoch, epoch)
                return WriteResult(
                    topic=name,
                    first_seq=entry.first_seq,
                    last_seq=entry.last_seq,
                    seqs=list(entry.seqs) if return_seqs else None,
                    head_seq=topic.head_seq,
                    count=entry.count,
                    created=False,
                    deduped=True,
                )
        # 5b: compare-and-append (S19c): an absent topic's head is 0.
        head = topic.head_seq if topic is not None else 0
        if expected_head_seq is not None and expected_head_seq != head:
            raise HeadMismatchError("head moved", detail={"head_seq": head})
        # 6: the records.
        encoded = self._encode_batch(records, node)
        batch_bytes = sum(r.size for r in encoded)
        # 7: discard "reject" caps (S8), against the topic that would receive the batch.
        cfg = topic.config if topic is not None else (inline_config or TopicConfig())
        if cfg.discard == "reject":
            self._check_reject_caps(cfg, topic, len(encoded), batch_bytes)
        # 8: TOPICS_MAX_TOTAL_BYTES: the live total after the write, net of what the
        # topic's own caps would evict at once (S18).
        max_total = self.limits.max_total_bytes
        if max_total:
            before = topic.bytes if topic is not None else 0
            after = _Topic(name, cfg, live=[*(topic.live if topic else []), *encoded])
            if cfg.discard == "old":
                after.evict_to_caps()
            if self._total_bytes(now) - before + after.bytes > max_total:
                raise ThrottledError.for_limit("max_total_bytes", max_total)
        # 9: TOPICS_MAX_TOPICS for a write that creates the topic.
        created = topic is None
        if topic is None:
            self._check_topic_room()
            topic = _Topic(name=name, config=cfg)
            self.topics[name] = topic
        # Only now: append (S2, S3), evict (S7), remember the key (S19).
        ts = now if topic.last_ts is None else max(now, topic.last_ts)
        first = topic.head_seq + 1
        for offset, rec in enumerate(encoded):
            rec.seq, rec.ts = first + offset, ts
            topic.live.append(rec)
        topic.head_seq = first + len(encoded) - 1
        topic.last_ts = ts
        # ASSUMPTION: a recency clock like last_read_ts, so the clock's now, not the batch's
        # $ts (they differ only after the clock stepped back, S3).
        topic.last_write_ts = now
        if cfg.discard == "old":
            topic.evict_to_caps()
        seqs = list(range(first, topic.head_seq + 1))
        if idempotency_key is not None:
            topic.dedupe[idempotency_key] = _Dedupe(now, first, topic.head_seq, seqs, len(seqs))
        if producer_id is not None:
            assert epoch is not None
            topic.producers[producer_id] = _Producer(epoch, idempotency_key, first, topic.head_seq)
        return WriteResult(
            topic=name,
            first_seq=first,
            last_seq=topic.head_seq,
            seqs=seqs if return_seqs else None,
            head_seq=topic.head_seq,
            count=len(seqs),  # S20
            created=created,
            deduped=False,
        )

    @staticmethod
    def _check_reject_caps(
        cfg: TopicConfig, topic: _Topic | None, n: int, batch_bytes: int
    ) -> None:
        """S8: a batch that alone exceeds a cap can never fit (record_too_large); one that
        would take the topic over a cap is topic_full."""
        count = topic.count if topic is not None else 0
        held = topic.bytes if topic is not None else 0
        if (cfg.cap_records and n > cfg.cap_records) or (
            cfg.cap_bytes and batch_bytes > cfg.cap_bytes
        ):
            raise RecordTooLargeError(
                "the batch alone exceeds the topic's cap", detail={"records": n}
            )
        if (cfg.cap_records and count + n > cfg.cap_records) or (
            cfg.cap_bytes and held + batch_bytes > cfg.cap_bytes
        ):
            raise TopicFullError("the topic is full (discard: reject)")

    def _encode_batch(self, records: Any, default_node: str | None) -> list[_Rec]:
        """S5/S18: validate every record (all or nothing) into unsequenced _Rec objects."""
        if not isinstance(records, list | tuple):
            raise _bad("records", "must be an array")
        if not records:
            raise _bad("records", "must hold at least one record")
        if len(records) > self.limits.max_batch_records:
            raise BatchTooLargeError(
                f"{len(records)} records, more than {self.limits.max_batch_records}",
                detail={"max": self.limits.max_batch_records},
            )
        return [self._encode_record(i, rec, default_node) for i, rec in enumerate(records)]

    def _encode_record(self, i: int, rec: Any, default_node: str | None) -> _Rec:
        lim = self.limits
        where = f"records[{i}]"
        if not isinstance(rec, Mapping):
            raise _bad(where, "must be an object")
        unknown = sorted(str(k) for k in rec if k not in _RECORD_FIELDS)
        if unknown:  # a typo is refused, not stored without the field (issue 21)
            raise _bad(f"{where}.{unknown[0]}", "is not a record field")
        if "data" not in rec:
            raise _bad(f"{where}.data", "is required")
        try:
            data_json = _encode_value(rec["data"])
            _json_check(data_json)
        except (TypeError, ValueError, OverflowError):
            raise _bad(f"{where}.data", "is not valid JSON") from None
        meta = rec.get("meta")
        meta_json = None
        if meta is not None:
            if not isinstance(meta, dict | bytes):
                raise _bad(f"{where}.meta", "must be a JSON object")
            try:
                meta_json = _encode_value(meta)
                members = _json_check(meta_json)
            except (TypeError, ValueError, OverflowError):
                raise _bad(f"{where}.meta", "is not valid JSON") from None
            if members < 0:
                raise _bad(f"{where}.meta", "must be a JSON object")
            if members > lim.max_meta_keys:
                raise _bad(f"{where}.meta", f"more than {lim.max_meta_keys} keys")
            if len(meta_json) > lim.max_meta_bytes:  # S5: invalid_request
                raise _bad(f"{where}.meta", f"more than {lim.max_meta_bytes} bytes")
        tag = rec.get("tag")
        if tag is not None:
            _name_bytes(f"{where}.tag", tag, lim.max_tag_bytes)
        node = rec.get("node")
        if node is None:
            node = default_node
        if node is not None:
            _name_bytes(f"{where}.node", node, lim.max_node_bytes)
        if len(data_json) + len(meta_json or b"") > lim.max_record_bytes:
            raise RecordTooLargeError(
                f"{where}: data+meta exceed {lim.max_record_bytes} bytes",
                detail={"index": i, "max": lim.max_record_bytes},
            )
        return _Rec(seq=0, ts=0, node=node, tag=tag, meta_json=meta_json, data_json=data_json)

    # -- reads (§3, §4.4, §4.5) -------------------------------------------------------

    def diff(
        self,
        name: str,
        *,
        from_seq: int = 0,
        limit: int = 0,
        node: str | list[str] | None = None,
        include_tags: bool = True,
        include_meta: bool = True,
        include_data: bool = True,
        wait_ms: int = 0,
        from_ts: int | None = None,
        to_ts: int | None = None,
        to_seq: int | None = None,
        where: Any = None,
    ) -> DiffResult:
        check_topic_name(name)
        _non_negative_int("from_seq", from_seq)
        _non_negative_int("limit", limit)
        _non_negative_int("wait_ms", wait_ms)  # S16: the model never waits
        # S29-S31 (issue 18): bounds and a predicate, checked before the topic is looked up.
        for field_name, value in (("from_ts", from_ts), ("to_ts", to_ts), ("to_seq", to_seq)):
            if value is not None:
                _non_negative_int(field_name, value)
        if from_ts is not None and from_seq:
            raise InvalidRequestError("from_ts: give from_seq or from_ts, not both")
        if where is not None:
            compile_where(where)  # only its checks: the model evaluates on its own (_matches)
        # §4.5: one node id or a list of them. ASSUMPTION: each must be a valid node id
        # (S5: a non-empty string within max_node_bytes); an empty list filters nothing.
        max_node = self.limits.max_node_bytes
        if node is None:
            skip: frozenset[str] = frozenset()
        elif isinstance(node, list):
            skip = frozenset(n for n in node if _name_bytes("node", n, max_node))
        else:
            skip = frozenset([node]) if _name_bytes("node", node, max_node) else frozenset()
        include_tags = _flag("include_tags", include_tags)
        include_meta = _flag("include_meta", include_meta)
        include_data = _flag("include_data", include_data)
        now = self.clock.now_ms()
        topic = self._existing(name, now)  # §3.1: a diff never creates
        topic.last_read_ts = now  # S17
        limit = min(limit or DEFAULT_LIMIT, self.limits.max_limit)  # S13
        head, earliest = topic.head_seq, topic.earliest_seq
        echo: int | None = None
        if from_ts is not None:  # S29: after the last live record older than from_ts
            older = [r.seq for r in topic.live if r.ts < from_ts]
            from_seq = echo = older[-1] if older else 0
        user_end = to_seq
        if to_ts is not None:  # S30: before the first live record past to_ts
            later = [r.seq for r in topic.live if r.ts > to_ts]
            by_ts = later[0] - 1 if later else (head if to_ts < now else None)
            if by_ts is not None:
                user_end = by_ts if user_end is None else min(user_end, by_ts)
        tombstone, start = self._tombstone(topic, from_seq)
        end: int | None = None
        markers = [g for g in topic.gaps if g[0] >= topic.evict_floor]
        gap = next((g for g in markers if g[0] >= start), None)
        if (
            gap is not None
            and tombstone is None
            and (user_end is None or gap[0] <= user_end)
            and not any(start <= rec.seq < gap[0] for rec in topic.live)
        ):
            # Nothing live between the cursor and the marker: report the loss now.
            gap_from = max(gap[1], start)
            tombstone = Tombstone(
                gap_from=gap_from,
                gap_to=gap[2],
                reason="crash",
                missed_estimate=gap[2] - gap_from + 1,
                earliest_seq=earliest,
                head_seq=head,
            )
            start = gap[0] + 1
            gap = next((g for g in markers if g[0] >= start), None)
        if gap is not None:
            end = gap[1] - 1  # before the first seq the crash may have lost
        if user_end is not None:
            end = user_end if end is None else min(end, user_end)
        if not topic.config.dedupe_node:
            skip = frozenset()
        rendered: list[bytes] = []
        budget_used = examined = 0
        # S15: reached the head (or the seq before the next marker) unless a bound stops it
        next_from_seq = head if end is None else min(end, head)
        for rec in topic.live:
            if rec.seq < start:
                continue
            if end is not None and rec.seq > end:
                break
            examined += 1
            if rec.node not in skip and (where is None or _matches(where, rec)):
                out = rec.render(tags=include_tags, meta=include_meta, data=include_data)
                rendered.append(out)
                budget_used += len(out)
            if examined >= limit or budget_used >= DIFF_BYTE_BUDGET:
                next_from_seq = rec.seq
                break
        if end is not None and start > end:  # nothing to scan before the end
            next_from_seq = start - 1
        if from_ts is None and to_ts is None and to_seq is None:
            return DiffResult(
                topic=name,
                records_json=b"[" + b",".join(rendered) + b"]",
                record_count=len(rendered),
                next_from_seq=next_from_seq,
                head_seq=head,
                earliest_seq=earliest,
                caught_up=next_from_seq == head,
                tombstone=tombstone,
                lag=head - next_from_seq,
                records_scanned=examined,
            )
        stop = head if user_end is None else min(head, user_end)  # S30
        return DiffResult(
            topic=name,
            records_json=b"[" + b",".join(rendered) + b"]",
            record_count=len(rendered),
            next_from_seq=next_from_seq,
            head_seq=head,
            earliest_seq=earliest,
            caught_up=next_from_seq >= stop,
            tombstone=tombstone,
            lag=max(0, stop - next_from_seq),
            records_scanned=examined,
            from_seq=echo,
            end_reached=(user_end is not None and next_from_seq >= user_end)
            if to_ts is not None or to_seq is not None
            else None,
        )

    @staticmethod
    def _tombstone(topic: _Topic, from_seq: int) -> tuple[Tombstone | None, int]:
        """S10-S12: the tombstone (if any) for a read from ``from_seq`` and the first seq
        the scan may return."""
        head, earliest = topic.head_seq, topic.earliest_seq
        if from_seq > head:  # S11: a cursor from the future
            gap_from, gap_to = 1, earliest - 1
            return (
                Tombstone(
                    gap_from=gap_from,
                    gap_to=gap_to,
                    reason="recreated",
                    missed_estimate=max(0, gap_to - gap_from + 1),
                    earliest_seq=earliest,
                    head_seq=head,
                ),
                earliest,
            )
        wanted = from_seq + 1
        if wanted < topic.evict_floor:  # S10
            below_cap, below_ttl = wanted < topic.cap_floor, wanted < topic.ttl_floor
            reason = "mixed" if below_cap and below_ttl else ("cap" if below_cap else "ttl")
            if topic.restart_floor >= topic.evict_floor:  # the last loss was a restart
                reason = "restart"
            return (
                Tombstone(
                    gap_from=wanted,
                    gap_to=earliest - 1,
                    reason=reason,
                    missed_estimate=earliest - 1 - wanted + 1,
                    earliest_seq=earliest,
                    head_seq=head,
                ),
                earliest,
            )
        return None, wanted  # S12: a deleted gap reads silently

    # -- deletes (§5) -----------------------------------------------------------------

    def delete_records(
        self, name: str, *, before_seq: int | None = None, match: Any = None
    ) -> DeleteRecordsResult:
        check_topic_name(name)
        if before_seq is not None:
            _non_negative_int("before_seq", before_seq)
        parsed = _parse_match(match)
        if before_seq is None and parsed is None:  # S25
            raise _bad("before_seq", "give before_seq, match or both")
        now = self.clock.now_ms()
        topic = self._existing(name, now)
        bound = topic.head_seq + 1  # S26: only records present at call time
        if before_seq is not None:
            bound = min(before_seq, bound)
        keep, deleted = [], 0
        for rec in topic.live:
            if rec.seq < bound and (parsed is None or _tag_matches(rec.tag, parsed)):
                deleted += 1  # S27: silent, no floor moves
            else:
                keep.append(rec)
        topic.live = keep
        return DeleteRecordsResult(
            topic=name,
            deleted=deleted,
            earliest_seq=topic.earliest_seq,
            head_seq=topic.head_seq,
            count=topic.count,
            bytes=topic.bytes,
        )


# -- S31: the where predicate, evaluated on decoded records (independent of topics.query.where) --

_ABSENT = object()


def _member(rec: _Rec, name: str) -> Any:
    if name == "tag":
        return rec.tag if rec.tag is not None else _ABSENT
    if name == "node":
        return rec.node if rec.node is not None else _ABSENT
    part, _, key = name.partition(".")
    raw = rec.data_json if part == "data" else rec.meta_json
    obj = json.loads(raw) if raw is not None else None
    return obj.get(key, _ABSENT) if isinstance(obj, dict) else _ABSENT


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _matches(expr: Any, rec: _Rec) -> bool:
    if isinstance(expr, str):
        expr = ["tag", "Eq", expr]
    head = expr[0]
    if head == "and":
        return all(_matches(e, rec) for e in expr[1])
    if head == "or":
        return any(_matches(e, rec) for e in expr[1])
    if head == "not":
        return not _matches(expr[1], rec)
    name, op = expr[0], expr[1]
    operand = expr[2] if len(expr) == 3 else True
    v = _member(rec, name)
    if op == "Exists":
        return (v is not _ABSENT) == operand
    if op == "Eq":
        return v is not _ABSENT and _json_equal(v, operand)
    if op == "Ne":
        return not (v is not _ABSENT and _json_equal(v, operand))
    if op == "In":
        return v is not _ABSENT and any(_json_equal(v, o) for o in operand)
    if op == "Glob":
        return isinstance(v, str) and v.startswith(operand[:-1])
    if not _is_num(v):
        return False
    return {"Gt": v > operand, "Ge": v >= operand, "Lt": v < operand, "Le": v <= operand}[op]
