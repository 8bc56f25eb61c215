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
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from ._options import ReadOptions
from ._sources import HttpSource, PathSource, Source

__all__ = ["TopicRange", "end_seq", "open_source", "plan_ranges", "resolve_topics", "start_seq"]


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
