"""Parsing the data source's string options into checked, typed settings.

Role: Spark hands a data source its options as a case-insensitive map of strings. Every
option is checked here, once, on the driver, so a typo or a bad value fails the query at
planning time with a message naming the option, never inside a task.

Rules:
1. Exactly one of ``path`` (a data directory, read with ``topics.Reader`` / written with
   ``topics.open``) and ``url`` (a topics-server) is required.
2. Reads name their topics with exactly one of ``topic`` (one name or a comma list) and
   ``topic_prefix``; writes with ``topic`` (one name).
3. Seqs follow the contract's cursor convention: ``from_seq`` is exclusive (records with
   ``seq > from_seq``; 0 = from the earliest retained), ``to_seq`` inclusive. As in
   Kafka's source, each takes a keyword or a JSON map of topic -> seq or keyword:
   ``from_seq`` ``earliest`` (= 0) or ``latest`` (the head when the query starts),
   ``to_seq`` ``latest`` (the head seen when planning, the default); ``to_seq`` has no
   ``earliest`` (an empty read), as Kafka's ``endingOffsets`` has none.
4. Unknown options are an error: a misspelt ``on_gap`` must not silently mean "fail".
5. ``data_schema`` is a Spark DDL string of typed data fields; Spark parses it (with the
   rest of the read's schema), and ``_rows`` checks the types at planning. ``mode``
   says what a record that does not fit them becomes: ``PERMISSIVE`` (a
   ``_corrupt_record`` row) or ``FAILFAST`` (an error), as for ``spark.read.json``.
6. ``starting_ts`` / ``ending_ts`` (issue 18, as Kafka's ``startingOffsetsByTimestamp``)
   bound a read by commit time instead of seq: ms since the epoch or an ISO 8601 time
   with a zone, or a JSON map of topic -> either. Each is resolved to a seq per topic
   (``_plan.start_seq`` / ``end_seq``) and cannot be given with its seq twin.
7. ``where`` is the diff's predicate (the JSON tuple language of ``topics.query.where``),
   checked here and evaluated by the engine or the server, so filtered-out records never
   reach Spark.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from .._names import check_topic_name
from ..errors import TopicsError
from ..query.where import compile_where

__all__ = ["ReadOptions", "WriteOptions", "parse_read_options", "parse_write_options"]

OnGap = Literal["fail", "emit"]
T = TypeVar("T")

_COMMON = frozenset({"path", "url", "api_key", "topic", "timeout_s"})
_READ = _COMMON | {
    "topic_prefix",
    "from_seq",
    "to_seq",
    "partition_records",
    "on_gap",
    "max_records_per_trigger",
    "data_schema",
    "mode",
    "starting_ts",
    "ending_ts",
    "where",
}
_WRITE = _COMMON | {
    "batch_records",
    "write_id",
    "create",
    "config",
    "node",
    "lock_timeout_s",
    "ledger_topic",
}
#: Where writes record their chunks (``_write`` rule 3).
LEDGER = "spark.writes"
# Spark's own options that reach the data source too (writeStream's checkpointLocation).
_SPARK_OWN = frozenset({"__path__", "checkpointlocation"})

# A Spark task has a cost of its own: on 2 cores, 1M records took twice as long in 8
# tasks of 125k as in 2 of 500k, and 10M records 25-40 % longer in 20 tasks than in 10.
# A million records is ~90 MB of frames, near Spark's own 128 MB file splits.
#: The most seqs one task reads when ``partition_records`` is not given (``_plan`` rule 5).
DEFAULT_PARTITION_RECORDS = 1_000_000
DEFAULT_BATCH_RECORDS = 1000
MAX_BATCH_RECORDS = 10_000


class OptionError(ValueError):
    """A data source option that is missing, unknown or malformed."""


@dataclass(frozen=True)
class ReadOptions:
    path: str | None
    url: str | None
    api_key: str | None
    topics: tuple[str, ...]
    topic_prefix: str | None
    #: per-topic start cursors; ``default_from_seq`` for any other topic; None = "latest"
    from_seqs: dict[str, int | None] = field(default_factory=dict)
    default_from_seq: int | None = 0
    #: per-topic inclusive ends; ``default_to_seq`` for any other topic; None = the head
    to_seqs: dict[str, int | None] = field(default_factory=dict)
    default_to_seq: int | None = None
    #: seqs per task; None: derived from the read's size and Spark's parallelism (_plan rule 5)
    partition_records: int | None = None
    on_gap: OnGap = "fail"
    max_records_per_trigger: int = 0
    timeout_s: float = 60.0
    data_schema: str | None = None
    failfast: bool = False
    #: per-topic commit-time bounds in ms (rule 6); the defaults for any other topic
    starting_ts: dict[str, int] = field(default_factory=dict)
    default_starting_ts: int | None = None
    ending_ts: dict[str, int] = field(default_factory=dict)
    default_ending_ts: int | None = None
    #: the diff predicate (rule 7), as parsed JSON
    where: object = None

    def starting_ts_for(self, topic: str) -> int | None:
        return self.starting_ts.get(topic, self.default_starting_ts)

    def ending_ts_for(self, topic: str) -> int | None:
        return self.ending_ts.get(topic, self.default_ending_ts)

    def from_seq_for(self, topic: str) -> int | None:
        return self.from_seqs.get(topic, self.default_from_seq)

    def to_seq_for(self, topic: str) -> int | None:
        return self.to_seqs.get(topic, self.default_to_seq)

    def end_for(self, topic: str, head: int) -> int:
        """The last seq to read of ``topic`` whose head is ``head``."""
        end = self.to_seq_for(topic)
        return head if end is None else min(end, head)


@dataclass(frozen=True)
class WriteOptions:
    path: str | None
    url: str | None
    api_key: str | None
    topic: str
    batch_records: int = DEFAULT_BATCH_RECORDS
    write_id: str | None = None
    create: bool | None = None
    config: dict[str, object] | None = None
    node: str | None = None
    lock_timeout_s: float = 120.0
    timeout_s: float = 60.0
    #: the ledger topic; "" = none (a retry then relies on the server's keys alone)
    ledger_topic: str = LEDGER


def _check_keys(options: Mapping[str, str], allowed: frozenset[str]) -> dict[str, str]:
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    unknown = sorted(set(opts) - allowed - _SPARK_OWN)
    if unknown:
        raise OptionError(
            f"unknown option(s) {', '.join(unknown)} for the topics data source "
            f"(known: {', '.join(sorted(allowed))})"
        )
    return opts


def _location(opts: dict[str, str]) -> tuple[str | None, str | None, str | None]:
    path, url = opts.get("path") or opts.get("__path__"), opts.get("url")
    if (path is None) == (url is None):
        raise OptionError(
            "give exactly one of option 'path' (a topics data directory) "
            "and option 'url' (a topics-server, http://host:port)"
        )
    if path is not None:
        path = os.path.abspath(path)
    elif url is not None and not url.startswith("http://"):
        raise OptionError(f"url: expected http://host:port, got {url!r}")
    return path, url, opts.get("api_key") or None


def _int(opts: dict[str, str], name: str, default: int, minimum: int = 0) -> int:
    raw = opts.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"{name}: expected an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(f"{name}: must be at least {minimum}, got {value}")
    return value


def _float(opts: dict[str, str], name: str, default: float) -> float:
    raw = opts.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise OptionError(f"{name}: expected a number of seconds, got {raw!r}") from None
    if not value > 0:
        raise OptionError(f"{name}: must be positive, got {raw!r}")
    return value


def _topic(name: str) -> str:
    try:
        return check_topic_name(name)
    except TopicsError as exc:
        raise OptionError(exc.message) from None


def _seq_option(
    name: str, raw: str | None, default: int | None, keywords: dict[str, int | None]
) -> tuple[dict[str, int | None], int | None]:
    """A seq option (rule 3): an integer, a keyword, or a JSON object of topic -> either.
    Returns the per-topic values and the value for every other topic."""

    def one(value: object, where: str) -> int | None:
        if isinstance(value, str) and value.strip().lower() in keywords:
            return keywords[value.strip().lower()]
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        if isinstance(value, str) and value.strip().isdigit():
            return int(value)
        words = " or ".join(repr(k) for k in keywords)
        raise OptionError(f"{where}: expected a seq >= 0 or {words}, got {value!r}")

    return _per_topic(name, raw, one, default)


def _per_topic(
    name: str, raw: str | None, one: Callable[[object, str], T], default: T | None
) -> tuple[dict[str, T], T | None]:
    """An option that is one value (parsed by ``one``) or a JSON object of topic -> value:
    the per-topic values, and the value for every other topic (``default`` if none)."""
    if raw is None or raw.strip() == "":
        return {}, default
    raw = raw.strip()
    if raw.startswith("{"):
        try:
            obj = json.loads(raw)
        except ValueError:
            raise OptionError(f"{name}: not a JSON object: {raw!r}") from None
        return {_topic(k): one(v, f"{name}[{k!r}]") for k, v in obj.items()}, default
    return {}, one(raw, name)


def _ts_option(name: str, raw: str | None) -> tuple[dict[str, int], int | None]:
    """A time option (rule 6): ms, ISO 8601 with a zone, or a JSON map of topic -> either."""

    def one(value: object, where: str) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        if isinstance(value, str):
            text = value.strip()
            if text.isdigit():
                return int(text)
            try:
                when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                when = None
            if when is not None and when.tzinfo is not None:
                return int(when.timestamp() * 1000)
        raise OptionError(
            f"{where}: expected ms since the epoch or an ISO 8601 time with a zone "
            f"(2026-11-25T17:00:00Z), got {value!r}"
        )

    return _per_topic(name, raw, one, None)


def _where(raw: str | None) -> object:
    """The ``where`` option (rule 7): JSON, checked by the engine's own compiler."""
    if raw is None or raw.strip() == "":
        return None
    try:
        where = json.loads(raw)
    except ValueError:
        raise OptionError(f"where: not JSON: {raw!r}") from None
    try:
        compile_where(where)
    except TopicsError as exc:
        raise OptionError(f"where: {exc.message}") from None
    return where


def parse_read_options(options: Mapping[str, str]) -> ReadOptions:
    """Check a read's options (rules 1-7)."""
    opts = _check_keys(options, _READ)
    path, url, api_key = _location(opts)
    topic, prefix = opts.get("topic"), opts.get("topic_prefix")
    if (topic is None) == (prefix is None):
        raise OptionError(
            "give exactly one of option 'topic' (a name or a comma list) and option 'topic_prefix'"
        )
    names = tuple(_topic(t.strip()) for t in topic.split(",") if t.strip()) if topic else ()
    if topic is not None and not names:
        raise OptionError("topic: no topic name given")
    on_gap = opts.get("on_gap", "fail").lower()
    if on_gap not in ("fail", "emit"):
        raise OptionError(f"on_gap: expected 'fail' or 'emit', got {on_gap!r}")
    from_seqs, default_from = _seq_option(
        "from_seq", opts.get("from_seq"), 0, {"earliest": 0, "latest": None}
    )
    to_seqs, default_to = _seq_option("to_seq", opts.get("to_seq"), None, {"latest": None})
    starting, default_starting = _ts_option("starting_ts", opts.get("starting_ts"))
    ending, default_ending = _ts_option("ending_ts", opts.get("ending_ts"))
    for seq_name, ts_name in (("from_seq", "starting_ts"), ("to_seq", "ending_ts")):
        if opts.get(seq_name, "").strip() and opts.get(ts_name, "").strip():
            raise OptionError(f"give {seq_name} or {ts_name}, not both")
    mode = opts.get("mode", "PERMISSIVE").upper()
    if mode not in ("PERMISSIVE", "FAILFAST"):
        raise OptionError(f"mode: expected PERMISSIVE or FAILFAST, got {opts['mode']!r}")
    data_schema = opts.get("data_schema", "").strip() or None
    if data_schema is not None and data_schema.lower().startswith("struct<"):
        data_schema = data_schema[len("struct<") : -1]  # a struct type: its fields
    return ReadOptions(
        path=path,
        url=url,
        api_key=api_key,
        topics=tuple(dict.fromkeys(names)),
        topic_prefix=prefix,
        from_seqs=from_seqs,
        default_from_seq=default_from,
        to_seqs=to_seqs,
        default_to_seq=default_to,
        partition_records=_int(opts, "partition_records", 0, 1) or None,
        on_gap="emit" if on_gap == "emit" else "fail",
        max_records_per_trigger=_int(opts, "max_records_per_trigger", 0),
        timeout_s=_float(opts, "timeout_s", 60.0),
        data_schema=data_schema,
        failfast=mode == "FAILFAST",
        starting_ts=starting,
        default_starting_ts=default_starting,
        ending_ts=ending,
        default_ending_ts=default_ending,
        where=_where(opts.get("where")),
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Check a write's options (rules 1, 2, 4)."""
    opts = _check_keys(options, _WRITE)
    path, url, api_key = _location(opts)
    topic = opts.get("topic")
    if topic is None or "," in topic:
        raise OptionError("topic: a write needs exactly one topic name (option 'topic')")
    create_raw = opts.get("create")
    create: bool | None = None
    if create_raw is not None:
        if create_raw.lower() not in ("true", "false"):
            raise OptionError(f"create: expected true or false, got {create_raw!r}")
        create = create_raw.lower() == "true"
    config: dict[str, object] | None = None
    if opts.get("config"):
        try:
            config = json.loads(opts["config"])
        except ValueError:
            raise OptionError("config: expected a JSON object (the topic config)") from None
        if not isinstance(config, dict):
            raise OptionError("config: expected a JSON object (the topic config)")
    write_id = opts.get("write_id") or None
    if write_id is not None and (len(write_id) > 100 or ":" in write_id):
        raise OptionError("write_id: at most 100 characters, without ':'")
    return WriteOptions(
        path=path,
        url=url,
        api_key=api_key,
        topic=_topic(topic.strip()),
        batch_records=min(_int(opts, "batch_records", DEFAULT_BATCH_RECORDS, 1), MAX_BATCH_RECORDS),
        write_id=write_id,
        create=create,
        config=config,
        node=opts.get("node") or None,
        lock_timeout_s=_float(opts, "lock_timeout_s", 120.0),
        timeout_s=_float(opts, "timeout_s", 60.0),
        ledger_topic=_topic(ledger) if (ledger := opts.get("ledger_topic", LEDGER).strip()) else "",
    )
