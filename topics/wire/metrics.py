"""``/v0/metrics`` rendering (contract §8.3): Prometheus text v0.0.4 and a JSON snapshot.

Pure: values in (the engine's :class:`~topics.types.EngineStatistics`, the WAL's
statistics when the engine has a data directory, and gauges other frontends own), text or
a dict out.

Rules:
1. The metric names are exactly the ones §8.3 lists, plus our ``topics_storage_*``
   extension (a disk that fills; docs/OPERATIONS.md); every aggregate and WAL metric is
   always present (0 when its owner is absent, e.g. no WAL on a memory-only engine), so a
   scraper sees one stable set of series.
2. The per-topic block holds what the engine's snapshot holds (the engine bounds it) and
   ``topics_topic_metrics_truncated`` says whether topics were left out.
3. Label values are escaped per the exposition format (backslash, double quote, newline).
4. The JSON snapshot uses the same names as keys: a number for a plain metric, a
   ``{label value: number}`` object for a labelled one, and ``{"buckets", "sum", "count"}``
   (cumulative buckets keyed by ``le``) for the fsync histogram.
5. Named cursors (our extension): ``topics_cursor_lag`` and ``topics_cursor_seq`` per
   ``{topic, cursor}``; in JSON ``{topic: {cursor: number}}``. The caller bounds and
   filters the list as it does the per-topic block.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from topics.types import EngineStatistics

__all__ = [
    "CONTENT_TYPE",
    "EXTRA_GAUGES",
    "HistogramLike",
    "CursorGauge",
    "MetricFamily",
    "WalStatisticsLike",
    "metric_families",
    "metric_names",
    "render_json",
    "render_prometheus",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class HistogramLike(Protocol):
    """Per-bucket counts: ``counts[i]`` for values in (bounds_us[i-1], bounds_us[i]];
    ``counts[-1]`` for values above the last bound."""

    @property
    def bounds_us(self) -> tuple[float, ...]: ...
    @property
    def counts(self) -> tuple[int, ...]: ...
    @property
    def sum_us(self) -> float: ...
    @property
    def count(self) -> int: ...


class WalStatisticsLike(Protocol):
    """What the WAL reports (``topics._storage.wal.WalStatistics``)."""

    @property
    def frames_total(self) -> int: ...
    @property
    def batches_total(self) -> int: ...
    @property
    def fsyncs_total(self) -> int: ...
    @property
    def bytes_written_total(self) -> int: ...
    @property
    def rotations_total(self) -> int: ...
    @property
    def queue_depth(self) -> int: ...
    @property
    def queue_depth_peak(self) -> int: ...
    @property
    def submit_full_total(self) -> int: ...
    @property
    def read_only(self) -> bool: ...
    @property
    def fsync_latency_us(self) -> HistogramLike: ...


#: Gauges owned by frontends and subsystems outside the engine snapshot (routers, watch
#: sessions, SSE connections, queue leases); 0 until their owner reports them.
EXTRA_GAUGES: Mapping[str, str] = {
    "topics_routers": "Routers configured.",
    "topics_queue_leases_in_flight": "Queue jobs currently leased.",
    "topics_sse_connections": "Open SSE streams and WebSocket connections.",
    "topics_sse_direct_streams": "Open streams (SSE watch, queue /work) that write their "
    "frames to the fast lane's socket themselves (TOPICS_SSE_DIRECT).",
    "topics_watch_sessions": "Watch sessions held.",
    "topics_storage_degraded": "1 while writes are refused for storage: the disk is full, "
    "free space is below TOPICS_MIN_FREE_BYTES, or the WAL failed.",
    "topics_storage_free_bytes": "Free bytes on the data directory's file system (last reading).",
    "topics_storage_min_free_bytes": "The free-space reserve (TOPICS_MIN_FREE_BYTES).",
    "topics_storage_damaged_files": "Files found damaged (recovery, reads, the scrub); "
    "/v0/health names them and `topics verify DATA_DIR` lists them.",
    "topics_scrub_bytes_total": "Bytes the online scrub has read (TOPICS_SCRUB_BYTES_PER_S; "
    "0 while it is off).",
    "topics_scrub_passes_total": "Passes the online scrub has finished over the segment and "
    "closed WAL files.",
    "topics_cache_bytes": "Bytes of sealed segments held in the block cache (issue 31).",
    "topics_cache_capacity_bytes": "The block cache's budget (TOPICS_CACHE_BYTES).",
    "topics_cache_segments": "Segments and tag indexes held in the block cache.",
    "topics_cache_hits_total": "Reads of a sealed segment the block cache answered.",
    "topics_cache_misses_total": "Reads of a sealed segment that loaded it from its file.",
    "topics_cache_evictions_total": "Entries the block cache dropped to stay in budget.",
    "topics_cache_load_errors_total": "Segment loads that failed (unreadable or damaged file).",
}

_WAL_METRICS: tuple[tuple[str, Literal["counter", "gauge"], str], ...] = (
    ("frames_total", "counter", "WAL frames appended."),
    ("batches_total", "counter", "WAL group-commit batches written."),
    ("fsyncs_total", "counter", "WAL fdatasync calls."),
    ("bytes_written_total", "counter", "Bytes written to the WAL."),
    ("rotations_total", "counter", "WAL file rotations."),
    ("queue_depth", "gauge", "Frames waiting for the WAL writer."),
    ("queue_depth_peak", "gauge", "Highest WAL queue depth seen."),
    ("submit_full_total", "counter", "Submissions that found the WAL queue full."),
    ("read_only", "gauge", "1 when the WAL refused further writes after an I/O error."),
)

_TOPIC_METRICS: tuple[tuple[str, str, str], ...] = (
    ("topics_topic_head_seq", "head_seq", "Highest assigned seq per topic."),
    ("topics_topic_earliest_seq", "earliest_seq", "First live seq per topic."),
    ("topics_topic_records_live", "records_live", "Live records per topic."),
    ("topics_topic_bytes_live", "bytes_live", "Live record bytes per topic."),
    ("topics_topic_queue_ready", "queue_ready", "Claimable jobs per queue topic."),
    ("topics_topic_queue_in_flight", "queue_in_flight", "Leased jobs per queue topic."),
    (
        "topics_topic_queue_scheduled",
        "queue_scheduled",
        "Jobs per queue topic written for later and not due yet.",
    ),
)

_HISTOGRAM = "topics_wal_fsync_latency_us"
_HISTOGRAM_HELP = "WAL fdatasync latency in microseconds."
_BY_CLASS = "topics_topics_by_class"
_BY_CLASS_HELP = "Topics per durability class."
_TRUNCATED = "topics_topic_metrics_truncated"
_TRUNCATED_HELP = "1 when the per-topic block was capped."

#: One named cursor: (topic, cursor, committed seq, lag).
CursorGauge = tuple[str, str, int, int]

_CURSOR_METRICS: tuple[tuple[str, int, str], ...] = (
    ("topics_cursor_lag", 3, "Seqs after a named cursor (head_seq - committed seq)."),
    ("topics_cursor_seq", 2, "A named cursor's committed seq."),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(value: float | int | bool) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if value != value:  # NaN
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _le(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else repr(float(bound))


# The extra gauges ``_aggregates`` places itself (with a fallback from the engine's stats).
_EXPLICIT_EXTRAS = frozenset(
    {
        "topics_routers",
        "topics_queue_leases_in_flight",
        "topics_sse_connections",
        "topics_watch_sessions",
    }
)


def _aggregates(
    stats: EngineStatistics, extras: Mapping[str, float | int] | None
) -> list[tuple[str, str, float | int | bool]]:
    extra = extras or {}
    return [
        ("topics_topics", "Topics that exist.", stats.topics),
        (
            "topics_routers",
            EXTRA_GAUGES["topics_routers"],
            extra.get("topics_routers", stats.routers),
        ),
        ("topics_records_live", "Live records across all topics.", stats.records_live),
        ("topics_bytes_live", "Live record bytes across all topics.", stats.bytes_live),
        ("topics_queue_topics", "Topics of type queue.", stats.queue_topics),
        (
            "topics_queue_leases_in_flight",
            EXTRA_GAUGES["topics_queue_leases_in_flight"],
            extra.get("topics_queue_leases_in_flight", stats.queue_leases_in_flight),
        ),
        (
            "topics_sse_connections",
            EXTRA_GAUGES["topics_sse_connections"],
            extra.get("topics_sse_connections", 0),
        ),
        (
            "topics_watch_sessions",
            EXTRA_GAUGES["topics_watch_sessions"],
            extra.get("topics_watch_sessions", 0),
        ),
        *(
            (name, EXTRA_GAUGES[name], extra.get(name, 0))
            # Every other declared gauge, in declaration order: a new one renders without
            # an edit here (the storage, cache and scrub series come this way).
            for name in EXTRA_GAUGES
            if name not in _EXPLICIT_EXTRAS
        ),
        ("topics_ready", "1 once recovery finished and the server is ready.", stats.ready),
        ("topics_recovery_progress", "Recovery progress, 0.0-1.0.", stats.recovery_progress),
        ("topics_uptime_ms", "Milliseconds since the engine opened.", stats.uptime_ms),
    ]


def _aggregate_kind(name: str) -> Literal["counter", "gauge"]:
    """An aggregate's TYPE: a ``_total`` is a counter (the naming convention)."""
    return "counter" if name.endswith("_total") else "gauge"


def _topic_values(stats: EngineStatistics, attr: str) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for gauge in stats.topic_gauges:
        value = getattr(gauge, attr, None)
        if value is not None:
            out.append((gauge.topic, int(value)))
    return out


def _histogram(wal: WalStatisticsLike | None) -> tuple[list[tuple[str, int]], float, int]:
    """Cumulative ``(le, count)`` buckets ending with +Inf, the sum and the count."""
    if wal is None:
        return [("+Inf", 0)], 0.0, 0
    hist = wal.fsync_latency_us
    buckets: list[tuple[str, int]] = []
    running = 0
    for bound, count in zip(hist.bounds_us, hist.counts, strict=False):
        running += count
        buckets.append((_le(bound), running))
    buckets.append(("+Inf", hist.count))
    return buckets, float(hist.sum_us), hist.count


def render_prometheus(
    stats: EngineStatistics,
    wal: WalStatisticsLike | None = None,
    extras: Mapping[str, float | int] | None = None,
    cursors: Sequence[CursorGauge] = (),
) -> bytes:
    """The Prometheus text exposition (v0.0.4) of every §8.3 metric.

    Args:
        stats: the engine's snapshot (``Engine.statistics()``).
        wal: the WAL's statistics, or None for a memory-only engine (WAL metrics are 0).
        extras: values for :data:`EXTRA_GAUGES` reported by their owners.
        cursors: the named cursors to report (rule 5).
    """
    lines: list[str] = []

    def family(name: str, kind: str, help_text: str) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")

    family(_BY_CLASS, "gauge", _BY_CLASS_HELP)
    for cls, count in sorted(stats.topics_by_class.items()):
        lines.append(f'{_BY_CLASS}{{class="{_escape(cls)}"}} {count}')
    for name, help_text, value in _aggregates(stats, extras):
        family(name, _aggregate_kind(name), help_text)
        lines.append(f"{name} {_num(value)}")
    for name, attr, help_text in _TOPIC_METRICS:
        family(name, "gauge", help_text)
        for topic, value in _topic_values(stats, attr):
            lines.append(f'{name}{{topic="{_escape(topic)}"}} {value}')
    family(_TRUNCATED, "gauge", _TRUNCATED_HELP)
    lines.append(f"{_TRUNCATED} {_num(stats.topic_gauges_truncated)}")
    for name, index, help_text in _CURSOR_METRICS:
        family(name, "gauge", help_text)
        for gauge in cursors:
            labels = f'topic="{_escape(gauge[0])}",cursor="{_escape(gauge[1])}"'
            lines.append(f"{name}{{{labels}}} {gauge[index]}")
    for attr, kind, help_text in _WAL_METRICS:
        name = f"topics_wal_{attr}"
        family(name, kind, help_text)
        lines.append(f"{name} {_num(getattr(wal, attr) if wal is not None else 0)}")
    family(_HISTOGRAM, "histogram", _HISTOGRAM_HELP)
    buckets, total, count = _histogram(wal)
    for le, cumulative in buckets:
        lines.append(f'{_HISTOGRAM}_bucket{{le="{le}"}} {cumulative}')
    lines.append(f"{_HISTOGRAM}_sum {_num(total)}")
    lines.append(f"{_HISTOGRAM}_count {count}")
    lines.append("")
    return "\n".join(lines).encode()


def render_json(
    stats: EngineStatistics,
    wal: WalStatisticsLike | None = None,
    extras: Mapping[str, float | int] | None = None,
    cursors: Sequence[CursorGauge] = (),
) -> dict[str, Any]:
    """The JSON snapshot: the same metrics keyed by their Prometheus names (rule 4)."""
    out: dict[str, Any] = {_BY_CLASS: dict(sorted(stats.topics_by_class.items()))}
    for name, _, value in _aggregates(stats, extras):
        out[name] = int(value) if isinstance(value, bool) else value
    for name, attr, _ in _TOPIC_METRICS:
        out[name] = dict(_topic_values(stats, attr))
    out[_TRUNCATED] = int(stats.topic_gauges_truncated)
    for name, index, _ in _CURSOR_METRICS:
        by_topic: dict[str, dict[str, int]] = {}
        for gauge in cursors:
            by_topic.setdefault(gauge[0], {})[gauge[1]] = int(gauge[index])
        out[name] = by_topic
    for attr, _, _ in _WAL_METRICS:
        value = getattr(wal, attr) if wal is not None else 0
        out[f"topics_wal_{attr}"] = int(value) if isinstance(value, bool) else value
    buckets, total, count = _histogram(wal)
    out[_HISTOGRAM] = {"buckets": dict(buckets), "sum": total, "count": count}
    return out


@dataclass(frozen=True, slots=True)
class MetricFamily:
    """One family as both renderings carry it (the OpenAPI document's metrics snapshot
    schema is made from these).

    Attributes:
        name: the Prometheus name, also the JSON snapshot's key.
        kind: the Prometheus TYPE.
        help: the HELP text.
        labels: the labels of its samples, outermost first: the JSON value nests one
            object per label (``()``: a bare number); the histogram's is ``("le",)``.
        value: the JSON type of a sample's value.
    """

    name: str
    kind: Literal["gauge", "counter", "histogram"]
    help: str
    labels: tuple[str, ...]
    value: Literal["integer", "number"]


def metric_families() -> Sequence[MetricFamily]:
    """Every metric family rendered, in order, read from the tables the renderers use."""
    out = [MetricFamily(_BY_CLASS, "gauge", _BY_CLASS_HELP, ("class",), "integer")]
    for name, help_text, value in _aggregates(_EMPTY, None):
        # A float sample (recovery progress) is a JSON number; counts and flags are integers.
        json_type: Literal["integer", "number"] = (
            "number" if isinstance(value, float) else "integer"
        )
        out.append(MetricFamily(name, _aggregate_kind(name), help_text, (), json_type))
    out += [MetricFamily(n, "gauge", h, ("topic",), "integer") for n, _, h in _TOPIC_METRICS]
    out.append(MetricFamily(_TRUNCATED, "gauge", _TRUNCATED_HELP, (), "integer"))
    out += [
        MetricFamily(n, "gauge", h, ("topic", "cursor"), "integer") for n, _, h in _CURSOR_METRICS
    ]
    out += [
        MetricFamily(f"topics_wal_{attr}", kind, h, (), "integer") for attr, kind, h in _WAL_METRICS
    ]
    out.append(MetricFamily(_HISTOGRAM, "histogram", _HISTOGRAM_HELP, ("le",), "integer"))
    return out


def metric_names() -> Sequence[str]:
    """Every metric family name rendered, in order (for tests and docs)."""
    return [family.name for family in metric_families()]


_EMPTY = EngineStatistics(
    ready=True,
    recovery_progress=1.0,
    uptime_ms=0,
    topics=0,
    topics_by_class={},
    queue_topics=0,
    records_live=0,
    bytes_live=0,
    topic_gauges=[],
    topic_gauges_truncated=False,
)
