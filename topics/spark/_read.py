"""The batch reader and the Structured Streaming reader of the ``topics`` data source.

Role: plan partitions on the driver (``_plan``), read them on executors (``_rows``).

Rules:
1. Batch: each topic is read from ``from_seq`` (exclusive) to ``min(to_seq, head_seq)``
   (``_options`` rule 3: per topic, ``earliest``/``latest``) where ``head_seq`` is read
   once, when the query is planned (a data directory is
   re-read then). A ``from_seq`` above the head is a cursor from an older topic of the
   same name: the read reports a ``recreated`` gap (contract §3.3, SEMANTICS rule 11).
2. Streaming offsets are JSON maps ``{"topic": seq, ...}``: "every record of that topic up
   to and including ``seq`` has been handed to Spark". A micro-batch reads exactly
   ``(start[t], end[t]]`` per topic, so a query restarted from its checkpoint re-plans
   the same ranges for an unfinished batch and resumes after the last committed one:
   nothing is lost and nothing is read twice.
3. ``latestOffset`` takes the heads now, bounded by the read limit (``ReadMaxRows`` from
   option ``max_records_per_trigger``: seqs, counted across topics in name order) and,
   under ``Trigger.AvailableNow``, by the heads recorded in
   ``prepareForTriggerAvailableNow``. Topics that appear under ``topic_prefix`` later join
   at ``from_seq`` (or at their head for ``from_seq=latest``); a topic that is gone keeps
   its offset until it exists again. A topic's ``to_seq`` caps its offsets: the stream
   reads nothing of it past that seq.
4. A query's initial offset is taken once, from the heads its reader read last
   (``prepareForTriggerAvailableNow`` reads them just before), and Spark, which asks
   for it twice while it starts the first micro-batch, gets the same answer both times.
   So an ``AvailableNow`` stream from ``latest`` that records reach while it starts
   never begins above its own cap (which would read as a recreated topic), and the
   start pays two head reads fewer (each scans a data directory's files: ~10 ms at
   10 M records).
5. Once an ``AvailableNow`` query's offsets reach the heads it recorded, ``latestOffset``
   answers them without reading the heads again. Spark asks once more after the last
   batch, and a data directory whose files changed meanwhile (an idle topics-server
   writes a new manifest every 30 s) costs that read a full recovery in the stream
   reader's process (9 s at 10 M records under load 8). A topic recreated after the
   query's snapshot is reported by the next query, which reads its head.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from ..errors import TopicNotFoundError
from ._errors import message_first
from ._options import ReadOptions
from ._plan import (
    TopicRange,
    end_seq,
    open_source,
    partition_target,
    plan_ranges,
    resolve_topics,
    start_seq,
)
from ._rows import RangeReader, check_data_fields
from ._sources import Source

try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pyspark < 4.2: no admission control for Python sources

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in mixin; older pyspark never calls prepareForTriggerAvailableNow."""

    ReadLimit = ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]

__all__ = ["TopicsBatchReader", "TopicsStreamReader"]


@message_first
def _read_partition(
    opts: ReadOptions, schema: StructType, partition: InputPartition
) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, TopicRange):  # Spark's placeholder for an empty plan
        return
    source = open_source(opts)
    try:
        arrow_schema = _arrow_schema(schema)
        ranges = RangeReader(source, arrow_schema, opts.on_gap, opts.failfast, opts.where)
        yield from ranges.read(partition.topic, partition.lo, partition.hi)
    finally:
        source.close()


def _arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark checks each batch against (its own conversion, as in
    ``pyspark.sql.worker.plan_data_source_read``)."""
    try:
        return to_arrow_schema(schema, timezone="UTC")
    except TypeError:  # an older pyspark without the timezone parameter
        return to_arrow_schema(schema)


class TopicsBatchReader(DataSourceReader):
    """``spark.read.format("topics")``: one partition per seq range (rule 1)."""

    def __init__(self, opts: ReadOptions, schema: StructType, parallelism: int = 0) -> None:
        check_data_fields(_arrow_schema(schema))  # at planning, not in a task
        self.opts = opts
        self.schema = schema
        self.parallelism = parallelism  # spark.default.parallelism, 0 if unknown

    @message_first
    def partitions(self) -> list[InputPartition]:
        opts = self.opts
        source = open_source(opts)
        try:
            source.refresh()
            ranges: list[tuple[str, int, int]] = []
            for topic in resolve_topics(source, opts):
                head = source.head_seq(topic)
                lo = start_seq(source, opts, topic, head)
                hi = end_seq(source, opts, topic, head)
                if hi < head and hi <= lo:
                    continue  # ends before it starts (an above-head start is rule 1's gap)
                ranges.append((topic, lo, hi))
            return _cut(source, opts, ranges, self.parallelism)
        finally:
            source.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.opts, self.schema, partition)


class TopicsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("topics")`` with exact per-topic seq offsets (rules 2, 3)."""

    def __init__(self, opts: ReadOptions, schema: StructType, parallelism: int = 0) -> None:
        check_data_fields(_arrow_schema(schema))
        self.opts = opts
        self.schema = schema
        self.parallelism = parallelism
        self._source: Source | None = None  # driver side only (see __getstate__)
        self._target: dict[str, int] | None = None
        self._latest: dict[str, int] | None = None
        self._initial: dict[str, int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"opts": self.opts, "schema": self.schema, "parallelism": self.parallelism}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["opts"], state["schema"], state["parallelism"])  # type: ignore[misc]

    @property
    def source(self) -> Source:
        if self._source is None:
            self._source = open_source(self.opts)
        return self._source

    def _heads(self) -> dict[str, int]:
        source = self.source
        source.refresh()
        heads: dict[str, int] = {}
        for topic in resolve_topics(source, self.opts):
            try:
                heads[topic] = source.head_seq(topic)
            except TopicNotFoundError:  # named but absent (or just deleted): wait for it
                continue
        self._latest = heads
        return heads

    def _joined_at(self, topic: str, head: int) -> int:
        return start_seq(self.source, self.opts, topic, head)

    @message_first
    def initialOffset(self) -> dict[str, int]:
        if self._initial is None:  # rule 4
            heads = self._latest if self._latest is not None else self._heads()
            self._initial = {t: self._joined_at(t, h) for t, h in heads.items()}
        return dict(self._initial)

    @message_first
    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._heads()

    def getDefaultReadLimit(self) -> Any:
        n = self.opts.max_records_per_trigger
        if ReadMaxRows is not None and n > 0:
            return ReadMaxRows(n)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def reportLatestOffset(self) -> dict[str, int] | None:
        return dict(self._latest) if self._latest is not None else None

    @message_first
    def latestOffset(
        self, start: dict[str, int] | None = None, limit: Any = None
    ) -> dict[str, int]:
        start = dict(start or {})
        if self._target is not None and all(start.get(t) == h for t, h in self._target.items()):
            return start  # rule 5
        heads = self._heads()
        budget = (
            limit.max_rows if ReadMaxRows is not None and isinstance(limit, ReadMaxRows) else None
        )
        end = dict(start)
        for topic in sorted(heads):
            head = heads[topic]
            if self._target is not None:
                if topic not in self._target:
                    continue  # appeared after the AvailableNow snapshot
                head = min(head, self._target[topic])
            lo = start.get(topic)
            if lo is None:  # a topic joining the stream (partitions() agrees on its start)
                lo = self._joined_at(topic, head)
                end[topic] = min(lo, head)
                if lo >= head:
                    continue
            if head < lo:  # recreated: the head fell below the offset (_plan rule 3)
                end[topic] = head
                continue
            head = max(lo, end_seq(self.source, self.opts, topic, head))  # to_seq/ending_ts
            if budget is not None:
                head = min(head, lo + budget)
                budget -= head - lo
            end[topic] = head
        return end

    @message_first
    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        ranges: list[tuple[str, int, int]] = []
        for topic in sorted(end):
            lo = start.get(topic)
            if lo is None:
                lo = self._joined_at(topic, end[topic])
            ranges.append((topic, lo, end[topic]))
        return _cut(self.source, self.opts, ranges, self.parallelism)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.opts, self.schema, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the offsets live in Spark's checkpoint, not on the server."""

    def stop(self) -> None:
        if self._source is not None:
            self._source.close()
            self._source = None


def _cut(
    source: Source, opts: ReadOptions, ranges: list[tuple[str, int, int]], parallelism: int
) -> list[InputPartition]:
    """The partitions of a read's per-topic ranges, sized for the whole read (``_plan``
    rule 5: the cores share what every topic holds, not each topic apart)."""
    seqs = sum(max(hi - lo, 0) for _, lo, hi in ranges)
    target = partition_target(opts, seqs, parallelism)
    plan: list[InputPartition] = []
    for topic, lo, hi in ranges:
        plan += plan_ranges(source, topic, lo, hi, target)
    return plan
