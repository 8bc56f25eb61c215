"""topics.wire.metrics: Prometheus text v0.0.4 and the JSON snapshot of §8.3."""

from __future__ import annotations

import re

from topics._storage.wal import LatencyHistogram, WalStatistics
from topics.types import EngineStatistics, TopicGauge
from topics.wire.metrics import (
    CONTENT_TYPE,
    metric_families,
    metric_names,
    render_json,
    render_prometheus,
)

# Every name §8.3 lists (the histogram is listed by its family name).
CONTRACT_NAMES = {
    "topics_topics",
    "topics_topics_by_class",
    "topics_routers",
    "topics_records_live",
    "topics_bytes_live",
    "topics_queue_topics",
    "topics_queue_leases_in_flight",
    "topics_sse_connections",
    "topics_watch_sessions",
    "topics_ready",
    "topics_recovery_progress",
    "topics_uptime_ms",
    "topics_topic_head_seq",
    "topics_topic_earliest_seq",
    "topics_topic_records_live",
    "topics_topic_bytes_live",
    "topics_topic_queue_ready",
    "topics_topic_queue_in_flight",
    "topics_topic_metrics_truncated",
    "topics_wal_frames_total",
    "topics_wal_batches_total",
    "topics_wal_fsyncs_total",
    "topics_wal_bytes_written_total",
    "topics_wal_rotations_total",
    "topics_wal_queue_depth",
    "topics_wal_queue_depth_peak",
    "topics_wal_submit_full_total",
    "topics_wal_read_only",
    "topics_wal_fsync_latency_us",
}
# Our extensions beside the contract's names (storage degraded by a full disk, cursors).
EXTENSION_NAMES = {
    "topics_sse_direct_streams",
    "topics_storage_degraded",
    "topics_storage_free_bytes",
    "topics_storage_min_free_bytes",
    "topics_storage_damaged_files",
    "topics_cursor_lag",
    "topics_cursor_seq",
    "topics_topic_queue_scheduled",
    # Issues 31 and 32: the block cache and damaged files.
    "topics_cache_bytes",
    "topics_cache_capacity_bytes",
    "topics_cache_segments",
    "topics_cache_hits_total",
    "topics_cache_misses_total",
    "topics_cache_evictions_total",
    "topics_cache_load_errors_total",
    # Issue 32: the online scrub's progress.
    "topics_scrub_bytes_total",
    "topics_scrub_passes_total",
}

SAMPLE = re.compile(r'^([a-z_]+)(\{[a-z]+="(?:[^"\\]|\\.)*"\})? (-?[0-9.e+]+|NaN|[+-]Inf)$')


def _stats(**over: object) -> EngineStatistics:
    values: dict[str, object] = {
        "ready": True,
        "recovery_progress": 1.0,
        "uptime_ms": 1234,
        "topics": 2,
        "topics_by_class": {"ephemeral": 0, "memory": 0, "disk": 1, "fsync": 1},
        "queue_topics": 0,
        "records_live": 15,
        "bytes_live": 900,
        "topic_gauges": [TopicGauge("jobs", 10, 1, 10, 600), TopicGauge('we"ird\\', 5, 1, 5, 300)],
        "topic_gauges_truncated": False,
    }
    values.update(over)
    return EngineStatistics(**values)  # type: ignore[arg-type]


def _wal() -> WalStatistics:
    hist = LatencyHistogram(
        bounds_us=(100.0, 500.0, 2500.5), counts=(3, 2, 1, 4), sum_us=9000.0, count=10
    )
    return WalStatistics(
        frames_total=40,
        batches_total=12,
        fsyncs_total=10,
        bytes_written_total=4096,
        rotations_total=1,
        queue_depth=0,
        queue_depth_peak=7,
        submit_full_total=0,
        read_only=False,
        fsync_latency_us=hist,
    )


def _samples(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m is not None, f"not an exposition sample: {line!r}"
        out[m.group(1) + (m.group(2) or "")] = m.group(3)
    return out


def test_every_contract_metric_is_rendered() -> None:
    assert set(metric_names()) == CONTRACT_NAMES | EXTENSION_NAMES
    text = render_prometheus(_stats(), _wal()).decode()
    for name in CONTRACT_NAMES:
        kind = "histogram" if name == "topics_wal_fsync_latency_us" else None
        assert f"# HELP {name} " in text
        assert re.search(rf"^# TYPE {name} (gauge|counter|histogram)$", text, re.M)
        if kind:
            assert f"# TYPE {name} histogram" in text
    assert CONTENT_TYPE.startswith("text/plain; version=0.0.4")


def test_sample_values() -> None:
    samples = _samples(render_prometheus(_stats(), _wal(), {"topics_routers": 3}).decode())
    assert samples["topics_topics"] == "2"
    assert samples['topics_topics_by_class{class="disk"}'] == "1"
    assert samples["topics_routers"] == "3"
    assert samples["topics_sse_connections"] == "0"
    assert samples["topics_ready"] == "1"
    assert samples["topics_recovery_progress"] == "1.0"
    assert samples['topics_topic_head_seq{topic="jobs"}'] == "10"
    assert samples['topics_topic_bytes_live{topic="we\\"ird\\\\"}'] == "300"
    assert samples["topics_topic_metrics_truncated"] == "0"
    assert samples["topics_wal_frames_total"] == "40"
    assert samples["topics_wal_read_only"] == "0"


def test_histogram_buckets_are_cumulative_and_end_at_inf() -> None:
    samples = _samples(render_prometheus(_stats(), _wal()).decode())
    assert samples['topics_wal_fsync_latency_us_bucket{le="100"}'] == "3"
    assert samples['topics_wal_fsync_latency_us_bucket{le="500"}'] == "5"
    assert samples['topics_wal_fsync_latency_us_bucket{le="2500.5"}'] == "6"
    assert samples['topics_wal_fsync_latency_us_bucket{le="+Inf"}'] == "10"
    assert samples["topics_wal_fsync_latency_us_sum"] == "9000.0"
    assert samples["topics_wal_fsync_latency_us_count"] == "10"


def test_memory_only_engine_reports_zero_wal_metrics() -> None:
    samples = _samples(render_prometheus(_stats(), None).decode())
    assert samples["topics_wal_frames_total"] == "0"
    assert samples['topics_wal_fsync_latency_us_bucket{le="+Inf"}'] == "0"
    assert samples["topics_wal_fsync_latency_us_count"] == "0"


def test_truncated_per_topic_block() -> None:
    stats = _stats(topic_gauges=[TopicGauge("a", 1, 1, 1, 10)], topic_gauges_truncated=True)
    samples = _samples(render_prometheus(stats).decode())
    assert samples["topics_topic_metrics_truncated"] == "1"
    assert [k for k in samples if k.startswith("topics_topic_head_seq")] == [
        'topics_topic_head_seq{topic="a"}'
    ]


def test_not_ready_gauges() -> None:
    samples = _samples(render_prometheus(_stats(ready=False, recovery_progress=0.25)).decode())
    assert samples["topics_ready"] == "0"
    assert samples["topics_recovery_progress"] == "0.25"


def test_json_snapshot_uses_the_same_names() -> None:
    snap = render_json(_stats(), _wal(), {"topics_watch_sessions": 2})
    assert set(snap) | {"topics_wal_fsync_latency_us"} == CONTRACT_NAMES | EXTENSION_NAMES
    assert snap["topics_topics"] == 2
    assert snap["topics_ready"] == 1
    assert snap["topics_watch_sessions"] == 2
    assert snap["topics_topic_head_seq"] == {"jobs": 10, 'we"ird\\': 5}
    assert snap["topics_topics_by_class"]["fsync"] == 1
    assert snap["topics_wal_read_only"] == 0
    assert snap["topics_wal_fsync_latency_us"] == {
        "buckets": {"100": 3, "500": 5, "2500.5": 6, "+Inf": 10},
        "sum": 9000.0,
        "count": 10,
    }


def test_named_cursor_lag_and_seq() -> None:
    cursors = [("jobs", "billing", 7, 3), ('we"ird\\', "g", 5, 0)]
    text = render_prometheus(_stats(), None, None, cursors).decode()
    assert 'topics_cursor_lag{topic="jobs",cursor="billing"} 3' in text
    assert 'topics_cursor_seq{topic="jobs",cursor="billing"} 7' in text
    assert 'topics_cursor_lag{topic="we\\"ird\\\\",cursor="g"} 0' in text
    assert "# TYPE topics_cursor_lag gauge" in render_prometheus(_stats()).decode()
    out = render_json(_stats(), None, None, cursors)
    assert out["topics_cursor_lag"] == {"jobs": {"billing": 3}, 'we"ird\\': {"g": 0}}
    assert out["topics_cursor_seq"]["jobs"] == {"billing": 7}
    assert render_json(_stats())["topics_cursor_lag"] == {}


def test_the_declared_families_are_what_both_renderings_carry() -> None:
    """metric_families() (which the OpenAPI snapshot schema is made from) says each
    family's TYPE, HELP and labels as the text has them and its JSON shape as the
    snapshot has it."""
    cursors = [("jobs", "billing", 7, 3)]
    text = render_prometheus(_stats(), _wal(), None, cursors).decode()
    snap = render_json(_stats(), _wal(), None, cursors)
    families = metric_families()
    assert [f.name for f in families] == list(snap)
    for family in families:
        assert f"# TYPE {family.name} {family.kind}\n" in text
        assert f"# HELP {family.name} {family.help}\n" in text
        sampled = re.findall(rf"^{family.name}(?:_bucket)?\{{(.*?)\}}", text, re.M)
        for labels in sampled:
            assert re.findall(r'(\w+)="', labels) == list(family.labels), family.name
        value = snap[family.name]
        if family.kind == "histogram":
            value = value["buckets"]
        for _ in family.labels:
            assert isinstance(value, dict), family.name
            value = next(iter(value.values()), 0)  # an empty family (no queue topic) is {}
        number = float if family.value == "number" else int
        assert type(value) is number, family.name
