"""The writer of the ``topics`` data source: DataFrame rows appended to one topic.

Role: ``df.write.format("topics")`` (batch) and ``df.writeStream.format("topics")``
(micro-batches). Each task appends its partition's rows in chunks of ``batch_records``,
each chunk one atomic write (contract §2) through the server (``url``) or the embedded
engine (``path``).

Rules:
1. Columns: ``data`` (required; JSON text, stored verbatim; SQL NULL writes JSON null),
   optional ``tag``, ``node`` and ``meta`` (JSON text of an object). ``data`` may also
   be a struct, map or array column and ``meta`` a struct or map: each value is then
   encoded to JSON once, in the task (``_json``: dates and timestamps as ISO 8601
   strings, decimals as exact JSON numbers), with no ``to_json`` round trip. The read side's
   ``topic``, ``seq``, ``ts``, ``ts_ms`` and ``gap`` are ignored (seqs are assigned by the topic), so
   a DataFrame read from one topic can be written to another as it is. Any other column
   is an error at planning time.
2. Every chunk has an idempotency key ``spark:<scope>:<partition>:<chunk>``, where the
   scope is the batch write's id (a uuid made on the driver, or option ``write_id``) or,
   streaming, ``<query id>:<batch id>``. It never contains the attempt number, so a
   retried task, or a micro-batch replayed after a restart, sends the same keys and the
   server answers the chunks it already has with ``deduped: true`` instead of appending
   them again (within the topic's ``idempotency_window_ms``, default 2 minutes). Chunks
   are cut by position, so this holds when a partition's rows come in the same order on
   every attempt (true for a deterministic plan; sort within partitions otherwise).
3. Engines and servers keep idempotency keys in memory only (SEMANTICS rule 19: a
   closed engine or a restarted server forgets them). So each written chunk is also
   recorded in the ledger topic (option ``ledger_topic``, default ``spark.writes``; one
   small record per chunk tagged with its key, kept for an hour), right after the
   chunk, and every task first skips the chunks the ledger already lists for its scope,
   partition and target topic (Spark does not tell a Python task whether it repeats a
   stage; a ``write_id`` may be reused for another topic). The
   ledger record follows its chunk (same WAL, later entry), so it never lists a chunk
   that is not there.
4. ``path`` mode: a data directory has one writer. A task opens ``topics.open(path)``,
   waiting up to ``lock_timeout_s`` for the directory lock (other tasks, or a server:
   stop it, or write through ``url``), writes, and closes.
5. ``url`` mode: a chunk whose answer was lost with the connection (a server restart)
   is in doubt: the server may have appended it and then forgotten its key. The task
   does not resend it blindly: it reads the topic after the head it saw before sending
   and counts the chunk as written when its records stand there together, each field as
   sent; only otherwise does it send it again.
6. Each task writes as the producer ``spark-partition-<partition id>`` (epoch 0; contract
   rule 19b), whose last batch the server or engine remembers durably, without a
   window: the chunk that a dead task appended but had not yet recorded in the ledger is
   its producer's last batch, and its retry is answered ``deduped`` even after a
   restart. The id is the partition's index, not the job's, so the producer ids of a
   topic stay as few as its writers' partitions (the server caps them at 10,000 per
   topic); two jobs writing one topic at once share them, and only then can the other
   job's chunk stand between.
7. Writes are appends, not transactions: a failed job may leave some chunks written.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import ArrayType, MapType, Row, StringType, StructType

from .._core.columns import WANT_ALL
from .._storage.fs import DataDirLockedError
from ..errors import TopicNotFoundError
from ._errors import message_first
from ._options import LEDGER, OptionError, WriteOptions
from ._sources import HttpSource

if TYPE_CHECKING:
    from ..frontends.inproc import SyncEngine

__all__ = ["LEDGER_TOPIC", "TopicsCommitMessage", "TopicsStreamWriter", "TopicsWriter"]

LEDGER_TOPIC = LEDGER
LEDGER_CONFIG = {"ttl_ms": 3_600_000, "durability": "disk"}
_WRITABLE = ("data", "tag", "node", "meta")
_IGNORED = frozenset({"topic", "seq", "ts", "ts_ms", "gap"})


@dataclass
class TopicsCommitMessage(WriterCommitMessage):
    """What one task wrote: rows, chunks, and how many chunks were already there."""

    partition: int
    records: int
    chunks: int
    skipped_chunks: int


def column_positions(schema: StructType) -> dict[str, int]:
    """Where each writable column sits in a row (rule 1); raises OptionError."""
    positions: dict[str, int] = {}
    for i, f in enumerate(schema.fields):
        if f.name in _IGNORED:
            continue
        if f.name not in _WRITABLE:
            raise OptionError(
                f"column {f.name!r} cannot be written to a topic: the writable columns are "
                "data (JSON text), tag, node, meta (JSON text of an object); "
                "topic, seq, ts, ts_ms and gap are ignored"
            )
        nested = (StructType, MapType) if f.name == "meta" else (StructType, MapType, ArrayType)
        if not isinstance(f.dataType, StringType) and not (
            f.name in ("data", "meta") and isinstance(f.dataType, nested)
        ):
            raise OptionError(
                f"column {f.name!r} must be a string (JSON text for data/meta; or, for "
                f"data, a struct, map or array, and for meta a struct or map), "
                f"got {f.dataType.simpleString()}"
            )
        positions[f.name] = i
    if "data" not in positions:
        raise OptionError("writing to a topic needs a 'data' column (JSON text)")
    return positions


def _records(rows: Sequence[Row], pos: dict[str, int]) -> list[dict[str, Any]]:
    data_i = pos["data"]
    tag_i, node_i, meta_i = pos.get("tag"), pos.get("node"), pos.get("meta")
    out: list[dict[str, Any]] = []
    for row in rows:
        data = row[data_i]
        rec: dict[str, Any] = {"data": _json(data)}
        if tag_i is not None and row[tag_i] is not None:
            rec["tag"] = row[tag_i]
        if node_i is not None and row[node_i] is not None:
            rec["node"] = row[node_i]
        if meta_i is not None and row[meta_i] is not None:
            rec["meta"] = _json(row[meta_i])
        out.append(rec)
    return out


def _json(value: Any) -> bytes:
    """A data/meta cell as JSON bytes: text as it is, anything nested encoded (rule 1)."""
    if value is None:
        return b"null"
    if isinstance(value, str):
        return value.encode()
    return "".join(_encode(value)).encode()


def _encode(value: Any) -> Iterator[str]:
    if isinstance(value, Row):
        value = value.asDict(recursive=False)
    if value is None or isinstance(value, bool | int | str):
        yield json.dumps(value, ensure_ascii=False)
    elif isinstance(value, float):
        yield json.dumps(value) if math.isfinite(value) else "null"
    elif isinstance(value, decimal.Decimal):
        yield str(value) if value.is_finite() else "null"
    elif isinstance(value, dt.datetime | dt.date):
        yield '"' + value.isoformat() + '"'
    elif isinstance(value, dict):
        yield "{"
        for i, (k, v) in enumerate(value.items()):
            yield ("," if i else "") + json.dumps(str(k), ensure_ascii=False) + ":"
            yield from _encode(v)
        yield "}"
    elif isinstance(value, list | tuple):
        yield "["
        for i, v in enumerate(value):
            if i:
                yield ","
            yield from _encode(v)
        yield "]"
    elif isinstance(value, bytes | bytearray):
        yield json.dumps(base64.b64encode(value).decode())
    else:
        raise TypeError(f"cannot write a {type(value).__name__} value as JSON")


def _chunks(rows: Iterator[Row], size: int) -> Iterator[list[Row]]:
    chunk: list[Row] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _ledger_entry(topic: str, key: str, first_seq: int, last_seq: int) -> dict[str, Any]:
    return {"data": {"topic": topic, "first_seq": first_seq, "last_seq": last_seq}, "tag": key}


def _logged_for(tag: object, record: dict[str, Any], topic: str) -> bool:
    """Whether a ledger record lists a chunk of ``topic`` (one ledger serves every target
    topic, and a ``write_id`` may be reused for another topic)."""
    data = record.get("data")
    return bool(tag) and isinstance(data, dict) and data.get("topic") == topic


def _ledger_keys(page: Callable[[int], tuple[list[str], int, bool]], prefix: str) -> set[str]:
    """Chunk keys under ``prefix`` in a ledger read page by page (rules 3, 5)."""
    done: set[str] = set()
    cursor = 0
    while True:
        try:
            tags, cursor, caught_up = page(cursor)
        except TopicNotFoundError:  # nothing was ever logged here
            return done
        done.update(t for t in tags if t.startswith(prefix))
        if caught_up:
            return done


def producer_id(partition: int) -> str:
    """The producer a task of ``partition`` writes as (rule 6)."""
    return f"spark-partition-{partition}"


class _HttpAppender:
    def __init__(self, opts: WriteOptions, producer: str | None = None) -> None:
        assert opts.url is not None
        from ._http import HttpClient  # only url writes need it (_sources rule 6)

        self.opts = opts
        self.producer = producer
        self.client = HttpClient(
            opts.url,
            api_key=opts.api_key,
            timeout_s=opts.timeout_s,
            retry_timeout_s=opts.timeout_s,
        )
        #: the topic's head before the next chunk: where a chunk in doubt would be (rule 5)
        self.head: int | None = None

    def done_keys(self, prefix: str) -> set[str]:
        ledger = self.opts.ledger_topic
        if not ledger:
            return set()

        def page(cursor: int) -> tuple[list[str], int, bool]:
            body = {"from_seq": cursor, "limit": 1000, "include_tags": True}
            ans = json.loads(self.client.diff(ledger, body))
            topic = self.opts.topic
            tags = [r["$tag"] for r in ans["records"] if _logged_for(r.get("$tag"), r, topic)]
            return tags, int(ans["next_from_seq"]), bool(ans["caught_up"])

        return _ledger_keys(page, prefix)

    def append(self, key: str, records: list[dict[str, Any]]) -> None:
        from ._http import json_body

        opts = self.opts
        parts = [
            b'{"data":'
            + rec["data"]
            + (b',"tag":' + json_body(rec["tag"]) if "tag" in rec else b"")
            + (b',"node":' + json_body(rec["node"]) if "node" in rec else b"")
            + (b',"meta":' + rec["meta"] if "meta" in rec else b"")
            + b"}"
            for rec in records
        ]
        fields: dict[str, Any] = {"idempotency_key": key, "return_seqs": False}
        if self.producer is not None:
            fields.update(producer_id=self.producer, epoch=0)
        if opts.node is not None:
            fields["node"] = opts.node
        if opts.create is not None:
            fields["create"] = opts.create
        if opts.config is not None:
            fields["config"] = opts.config
        body = b'{"records":[' + b",".join(parts) + b"]," + json_body(fields)[1:]
        if self.head is None:
            self.head = self._head()
        deadline = time.monotonic() + opts.timeout_s
        while True:
            try:
                answer = self.client.write(opts.topic, body, retry_lost=False)
                break
            except ConnectionError:  # rule 5: it may be there, under a forgotten key
                if time.monotonic() >= deadline:
                    raise
                found = self._find(self.head, records)
                if found is not None:
                    answer = found
                    break
        self.head = int(answer["head_seq"])
        if opts.ledger_topic:
            entry = _ledger_entry(opts.topic, key, answer["first_seq"], answer["last_seq"])
            # No idempotency key: a repeated ledger record is harmless, and the chunk's
            # key may also be another topic's (a write_id reused).
            ledger = {"create": True, "config": LEDGER_CONFIG}
            self.client.write(opts.ledger_topic, json_body({"records": [entry], **ledger}))

    def _head(self) -> int:
        try:
            return int(self.client.topic_state(self.opts.topic)["head_seq"])
        except TopicNotFoundError:
            return 0

    def _find(self, after: int, records: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The write answer of ``records`` if they stand together after seq ``after``,
        every field as sent (rule 5); None when they are not there."""
        node = self.opts.node
        sent = [
            (
                rec["data"].decode(),
                rec.get("tag"),
                rec.get("node", node),
                rec["meta"].decode() if "meta" in rec else None,
            )
            for rec in records
        ]
        source = HttpSource(self.opts.url or "", self.opts.api_key, self.opts.timeout_s)
        seqs: list[int] = []
        rows: list[tuple[Any, ...]] = []
        cursor, head = after, after
        try:
            while True:  # the requests retry until the server is back (_http rule 1)
                page = source.page(self.opts.topic, cursor, 1 << 62, WANT_ALL)
                head = page.head_seq
                if page.batch is not None:
                    cols = page.batch.to_pydict()
                    seqs += cols["seq"]
                    rows += zip(cols["data"], cols["tag"], cols["node"], cols["meta"], strict=True)
                cursor = page.next_from_seq
                if page.caught_up:
                    break
        except TopicNotFoundError:
            return None
        finally:
            source.close()
        n = len(sent)
        for i in range(len(rows) - n + 1):
            if rows[i] == sent[0] and rows[i : i + n] == sent:
                return {"first_seq": seqs[i], "last_seq": seqs[i + n - 1], "head_seq": head}
        return None

    def close(self) -> None:
        self.client.close()


class _PathAppender:
    def __init__(self, opts: WriteOptions, producer: str | None = None) -> None:
        assert opts.path is not None
        self.opts = opts
        self.producer = producer
        self.engine = _open_engine(opts.path, opts.lock_timeout_s)

    def done_keys(self, prefix: str) -> set[str]:
        """Chunk keys under ``prefix`` already in the ledger (rule 3)."""
        ledger = self.opts.ledger_topic
        if not ledger:
            return set()

        def page(cursor: int) -> tuple[list[str], int, bool]:
            res = self.engine.diff(ledger, from_seq=cursor, limit=1000, include_tags=True)
            topic = self.opts.topic
            tags = [
                r.tag for r in res.records if r.tag and _logged_for(r.tag, {"data": r.data}, topic)
            ]
            return tags, res.next_from_seq, res.caught_up

        return _ledger_keys(page, prefix)

    def append(self, key: str, records: list[dict[str, Any]]) -> None:
        opts = self.opts
        res = self.engine.write(
            opts.topic,
            records,
            idempotency_key=key,
            node=opts.node,
            create=opts.create,
            config=opts.config,
            return_seqs=False,
            producer_id=self.producer,
            epoch=None if self.producer is None else 0,
        )
        # Rule 3: logged after the chunk, in the same WAL, so the ledger never lists a
        # chunk that is not there.
        if opts.ledger_topic:
            entry = _ledger_entry(opts.topic, key, res.first_seq, res.last_seq)
            self.engine.write(opts.ledger_topic, [entry], config=LEDGER_CONFIG, return_seqs=False)

    def close(self) -> None:
        self.engine.close()


def _open_engine(path: str, timeout_s: float) -> SyncEngine:
    # Here, not at the top: the engine and trio are for path writes only, and every
    # streaming query's planner process imports this module (_sources rule 6).
    from ..frontends.inproc import SyncEngine

    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        try:
            return SyncEngine(path)
        except DataDirLockedError as exc:
            if time.monotonic() >= deadline:
                raise DataDirLockedError(
                    f"{exc.filename or path}: the topics data directory {path} stayed locked "
                    f"for {timeout_s:g} s (lock_timeout_s). A data directory has one writer: "
                    "stop the topics-server on it, or write through the server with option "
                    "'url' instead of 'path'."
                ) from exc
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


def _write_partition(
    opts: WriteOptions, positions: dict[str, int], scope: str, rows: Iterator[Row]
) -> TopicsCommitMessage:
    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx is not None else 0
    prefix = f"spark:{scope}:{partition}:"
    producer = producer_id(partition)
    appender = (
        _HttpAppender(opts, producer) if opts.url is not None else _PathAppender(opts, producer)
    )
    records = chunks = skipped = 0
    try:
        done = appender.done_keys(prefix)
        for chunk in _chunks(rows, opts.batch_records):
            key = f"{prefix}{chunks}"
            chunks += 1
            records += len(chunk)
            if key in done:
                skipped += 1
                continue
            appender.append(key, _records(chunk, positions))
    finally:
        appender.close()
    return TopicsCommitMessage(partition, records, chunks, skipped)


class TopicsWriter(DataSourceWriter):
    """``df.write.format("topics").mode("append")`` (rules 1-7)."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        self.opts = opts
        self.positions = column_positions(schema)
        # Made once, on the driver, and shipped inside the pickled writer to every task
        # attempt: the idempotency scope of this job (rule 2).
        self.write_id = opts.write_id or uuid.uuid4().hex

    @message_first
    def write(self, iterator: Iterator[Row]) -> TopicsCommitMessage:
        return _write_partition(self.opts, self.positions, self.write_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to do: every chunk was appended (and acknowledged) by its task."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to undo: appends are not transactional (rule 7)."""


class TopicsStreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("topics")``: keys scoped by query id and batch id (rule 2)."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        self.opts = opts
        self.positions = column_positions(schema)
        self.fallback_id = opts.write_id or uuid.uuid4().hex

    @message_first
    def write(self, iterator: Iterator[Row]) -> TopicsCommitMessage:
        ctx = TaskContext.get()
        query = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None
        batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
        scope = f"{self.opts.write_id or query or self.fallback_id}:{batch or 0}"
        return _write_partition(self.opts, self.positions, scope, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: each task's chunks are already appended."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo (rule 7); a replay of the batch is deduplicated (rules 2, 3, 6)."""
