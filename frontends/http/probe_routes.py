"""Operational routes: liveness, readiness, metrics (§8).

Rules:
1. /v0/health (and /healthz) answers 200 whenever the process can serve; it never
   touches the engine's topic set, so it stays cheap however many topics exist. Files
   found damaged (issue 32) are listed, with status ``degraded``: still 200, and /v0/ready
   too, since every other topic and record is served.
2. /v0/ready (and /readyz) answers 200 once recovery is complete, 503 not_ready (with
   ``replay_progress``) while it runs and 503 shutting_down once the drain has begun.
   Readiness means "can take writes": while storage refuses them (a full disk, free space
   below the reserve, a failed WAL) it is 503 not_ready with ``detail.storage``, and it
   turns 200 again by itself when space returns (docs/HTTP.md, "Probes"). So is a server
   that cannot accept connections (descriptors exhausted, ``accepting.py``): 503 not_ready
   with ``detail.accepting`` (the errno name) while accepts fail, 200 once one succeeds.
3. /v0/metrics answers 200 even while recovering; Prometheus text by default, the JSON
   snapshot for ``Accept: application/json``. It needs the read scope when keys are
   configured; health and ready need a key only with ``TOPICS_PROBE_AUTH``. The per-topic
   series are filtered to a prefix-limited key's allowlist; aggregates are server-wide.
"""

from __future__ import annotations

from topics import __version__
from topics.errors import NotReadyError
from topics.probe_types import HealthResult, ReadyResult
from topics.wire import metrics

from .routing import Route
from .state import Reply, RequestContext

__all__ = ["ROUTES"]

_PROMETHEUS = metrics.CONTENT_TYPE.encode()


async def health(ctx: RequestContext) -> Reply:
    """GET /v0/health — liveness."""
    damaged = tuple(ctx.state.engine.damaged_files())
    result = HealthResult(
        __version__, ctx.state.uptime_ms(), damaged, "degraded" if damaged else "ok"
    )
    return ctx.json(result.to_dict())


async def ready(ctx: RequestContext) -> Reply:
    """GET /v0/ready — readiness (recovery and drain aware)."""
    state = ctx.state
    state.check_not_shutting_down()
    engine = state.engine
    if not engine.ready:
        progress = engine.recovery_progress
        raise NotReadyError(
            f"recovery in progress ({progress:.0%}); retry shortly",
            detail={"replay_progress": round(progress, 3)},
            retry_after=1.0,
        )
    storage = engine.storage_state()
    if storage != "ok":
        raise NotReadyError(
            "writes are refused: "
            + (
                "the WAL failed; restart the server"
                if storage == "wal_failed"
                else "the data directory's disk is (nearly) full; free space to resume"
            ),
            detail={"storage": storage},
            retry_after=5.0,
        )
    accepting = state.accepting
    if accepting.failing():
        raise NotReadyError(
            f"new connections are refused ({accepting.error}: out of file descriptors); "
            "raise the open-file limit or shed connections",
            detail={"accepting": accepting.error},
            retry_after=1.0,
        )
    return ctx.json(ReadyResult(engine.topic_count).to_dict())


async def metrics_route(ctx: RequestContext) -> Reply:
    """GET /v0/metrics — Prometheus text or a JSON snapshot."""
    state = ctx.state
    engine = state.engine
    # A prefix-limited key sees only its own topics' series (§0.2: no cross-tenant names);
    # the server-wide aggregates stay (docs/OPERATIONS.md, "Limits and hostile clients").
    principal = ctx.principal
    include = principal.may_touch if principal.prefixes else None
    stats = engine.statistics(max_topic_gauges=state.settings.metrics_max_topics, include=include)
    shown = engine.cursor_lags(include, state.settings.metrics_max_topics)
    cursors = [(c.topic, c.cursor, c.seq, c.lag) for c in shown]
    wal = engine.wal_statistics()
    extras: dict[str, float | int] = {}
    for source in state.metrics_sources:
        extras.update(source())
    extras.update(engine.storage_gauges())
    if b"application/json" in ctx.headers.get(b"accept", b""):
        return ctx.json(metrics.render_json(stats, wal, extras, cursors))
    body = metrics.render_prometheus(stats, wal, extras, cursors)
    return Reply(200, body, content_type=_PROMETHEUS)


ROUTES = (
    Route("GET", "/v0/health", health, probe=True, op="health"),
    Route("GET", "/healthz", health, probe=True, op="healthAlias"),
    Route("GET", "/v0/ready", ready, probe=True, op="ready"),
    Route("GET", "/readyz", ready, probe=True, op="readyAlias"),
    Route("GET", "/v0/metrics", metrics_route, probe=True, always_auth=True, op="metrics"),
)
