"""Planning: which topics a read covers and how their seq ranges split into partitions.

Role: batch reads and micro-batches both reduce to "for each topic, seqs ``(lo, hi]``",
cut into :class:`TopicRange` partitions that Spark runs as separate tasks.

Rules:
1. A range is a cursor pair: ``lo`` exclusive, ``hi`` inclusive, so consecutive ranges
   ``(a, b]``, ``(b, c]`` cover every seq once and the union of a plan's partitions is
   exactly what one ``Reader`` loop from ``lo`` to ``hi`` returns.
2. Cuts come from the source (``Source.split_points``): segment ends for a data
   directory, fixed strides of ``partition_records`` seqs for a server.
3. ``hi < lo`` (only in streaming, when a topic's head fell below the stored offset) is
   kept as one partition: ``_rows`` reports the recreation and reads the new topic.
4. A topic's range comes from its options: ``from_seq`` (``latest`` = the head) or
   ``starting_ts`` resolved to the last seq committed before that time; ``to_seq`` or
   ``ending_ts`` resolved to the last seq committed at or before it, never past the
   head. ``$ts`` never decreases within a topic, so each is one binary search on the
   engine's side (``Source.seq_before_ts``).
5. How many seqs a partition gets: ``partition_records`` when the read names it; else
   the read's size divided over ``spark.default.parallelism`` (read by ``register`` from
   the session), so every core gets a task, within [``MIN_AUTO_PARTITION_RECORDS``,
   ``DEFAULT_PARTITION_RECORDS``]: a task costs ~0.1 s of its own, so a small read stays
   one task, and a large one is still cut into tasks of at most a million seqs. Without a
   known parallelism the split is ``DEFAULT_PARTITION_RECORDS``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from ._options import DEFAULT_PARTITION_RECORDS, ReadOptions
from ._sources import HttpSource, PathSource, Source

__all__ = [
    "MIN_AUTO_PARTITION_RECORDS",
    "TopicRange",
    "end_seq",
    "open_source",
    "partition_target",
    "plan_ranges",
    "resolve_topics",
    "start_seq",
]

#: The fewest seqs a derived split gives a task (rule 5): below this, a second task costs
#: more than the reading it takes off the first.
MIN_AUTO_PARTITION_RECORDS = 100_000


@dataclass(frozen=True)
class TopicRange(InputPartition):
    """One task's share of a read: seqs ``(lo, hi]`` of ``topic`` (rule 1)."""

    topic: str
    lo: int
    hi: int


def open_source(opts: ReadOptions) -> Source:
    if opts.path is not None:
        return PathSource(opts.path)
    assert opts.url is not None
    return HttpSource(opts.url, opts.api_key, opts.timeout_s)


def resolve_topics(source: Source, opts: ReadOptions) -> list[str]:
    """The topics a read covers: the named ones, or those under ``topic_prefix`` now."""
    if opts.topic_prefix is not None:
        return source.topic_names(opts.topic_prefix)
    return list(opts.topics)


def start_seq(source: Source, opts: ReadOptions, topic: str, head: int) -> int:
    """Where a read of ``topic`` starts (exclusive; rule 4)."""
    ts = opts.starting_ts_for(topic)
    if ts is not None:
        return source.seq_before_ts(topic, ts)
    start = opts.from_seq_for(topic)
    return head if start is None else start


def end_seq(source: Source, opts: ReadOptions, topic: str, head: int) -> int:
    """Where a read of ``topic`` ends (inclusive, at most ``head``; rule 4)."""
    ts = opts.ending_ts_for(topic)
    if ts is not None:
        return min(head, source.seq_before_ts(topic, ts + 1))
    return opts.end_for(topic, head)


def plan_ranges(source: Source, topic: str, lo: int, hi: int, target: int) -> list[TopicRange]:
    """Cut ``(lo, hi]`` into partitions (rules 2, 3); none when the range is empty."""
    if hi == lo:
        return []
    if hi < lo:
        return [TopicRange(topic, lo, hi)]
    bounds = [lo, *source.split_points(topic, lo, hi, target), hi]
    return [TopicRange(topic, a, b) for a, b in itertools.pairwise(bounds)]


def partition_target(opts: ReadOptions, seqs: int, parallelism: int) -> int:
    """Seqs per partition for a read of ``seqs`` seqs in all (rule 5)."""
    if opts.partition_records is not None:
        return opts.partition_records
    if parallelism < 2:
        return DEFAULT_PARTITION_RECORDS
    share = -(-seqs // parallelism)  # (ceiling: never one task more than the cores)
    return min(max(share, MIN_AUTO_PARTITION_RECORDS), DEFAULT_PARTITION_RECORDS)
