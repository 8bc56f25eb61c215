"""Probes (§8) and this document: their schemas and operations."""

from __future__ import annotations

from topics.probe_types import HealthResult, ReadyResult
from topics.wire.jsonschema import result_schema
from topics.wire.metrics import MetricFamily, metric_families

from .errors import AUTH, GATE, response_headers
from .operation import Operation, ok_response
from .schema import Schema, obj, ref, with_perf


def _family_schema(family: MetricFamily) -> Schema:
    """A family's JSON value: the histogram's three members, else one object per label
    around the sample's number (``topics.wire.metrics`` rule 4)."""
    if family.kind == "histogram":
        value = obj(
            {
                "buckets": {"type": "object", "additionalProperties": {"type": "integer"}},
                "sum": {"type": "number"},
                "count": {"type": "integer"},
            },
            ["buckets", "sum", "count"],
        )
    else:
        value = {"type": family.value}
        for _ in family.labels:
            value = {"type": "object", "additionalProperties": value}
    keyed = ", then ".join(family.labels) if family.kind != "histogram" else ""
    return {**value, "description": f"{family.help} Keyed by {keyed}." if keyed else family.help}


def _metrics_snapshot() -> Schema:
    """The JSON snapshot: one member per family of ``topics.wire.metrics``, all present."""
    families = metric_families()
    return {
        "type": "object",
        "description": "The JSON snapshot (Accept: application/json): the Prometheus "
        "metrics keyed by family name; labelled families nest one object per label; the "
        "histogram is {buckets, sum, count} (cumulative buckets keyed by le).",
        "properties": {
            **{family.name: _family_schema(family) for family in families},
            "performance": ref("Performance"),
        },
        "required": [*(family.name for family in families), "performance"],
    }


def schemas() -> dict[str, Schema]:
    """This module's entries of ``components.schemas``, in document order.

    Kept whole: a declarative table, read top to bottom like the document it makes.
    """
    return {
        "Health": with_perf(result_schema(HealthResult)),
        "Ready": with_perf(result_schema(ReadyResult)),
        "MetricsSnapshot": _metrics_snapshot(),
        "OpenApiDocument": {
            "type": "object",
            "description": "This document (no performance object).",
            "required": ["openapi", "info", "paths"],
        },
    }


#: The operations of this area, joined to their routes by ``Route.op`` (operationId).
_LIVENESS = (
    "§8.1. 200 whenever the process can serve; never touches the topic "
    "set. Needs a key only with TOPICS_PROBE_AUTH."
)
_READINESS = (
    "§8.2. 503 not_ready (detail.replay_progress) during WAL replay, (detail.storage) while "
    "storage refuses writes, (detail.accepting) while accept() runs out of descriptors; "
    "503 shutting_down while draining. Needs a key only with TOPICS_PROBE_AUTH."
)


OPERATIONS: tuple[Operation, ...] = (
    Operation(
        op_id="health",
        tag="probes",
        summary="Liveness",
        description=_LIVENESS,
        ok=ok_response("Health", "Alive."),
        errors=("unauthorized", "internal"),
    ),
    Operation(
        op_id="healthAlias",
        tag="probes",
        summary="Liveness (alias of /v0/health)",
        description=_LIVENESS,
        ok=ok_response("Health", "Alive."),
        errors=("unauthorized", "internal"),
    ),
    Operation(
        op_id="ready",
        tag="probes",
        summary="Readiness",
        description=_READINESS,
        ok=ok_response("Ready", "Ready to serve."),
        errors=("unauthorized", "not_ready", "shutting_down", "internal"),
    ),
    Operation(
        op_id="readyAlias",
        tag="probes",
        summary="Readiness (alias of /v0/ready)",
        description=_READINESS,
        ok=ok_response("Ready", "Ready to serve."),
        errors=("unauthorized", "not_ready", "shutting_down", "internal"),
    ),
    Operation(
        op_id="metrics",
        tag="probes",
        summary="Prometheus text (default) or a JSON snapshot",
        description="§8.3. 200 even while recovering. Needs the read scope when keys are "
        "configured. Accept: application/json selects the JSON snapshot.",
        ok={
            "200": {
                "description": "The metrics.",
                "headers": response_headers(200),
                "content": {
                    "text/plain": {
                        "schema": {
                            "type": "string",
                            "description": "Prometheus text exposition 0.0.4.",
                        }
                    },
                    "application/json": {"schema": ref("MetricsSnapshot")},
                },
            }
        },
        errors=(*AUTH, "internal"),
    ),
    Operation(
        op_id="backup",
        tag="probes",
        summary="Online backup of the data directory (a tar stream)",
        description="Admin, with no name prefix allowlist (a backup holds every tenant's "
        "topics). The server keeps serving reads and writes meanwhile. The snapshot holds "
        "every write acknowledged before the request and, for every topic, a prefix of its "
        "writes; a WAL flush is its barrier. The body is a POSIX tar whose first member "
        "BACKUP (JSON) lists the rest; Content-Length is exact. Restore it offline with "
        "`topics restore FILE DATA_DIR` (docs/OPERATIONS.md). One backup at a time: "
        "another answers 429 throttled (detail.limit = concurrent_backups); a memory-only "
        "server answers 400 invalid_request (detail.reason = memory_only).",
        ok={
            "200": {
                "description": "The archive (Content-Disposition names a file).",
                "headers": response_headers(200),
                "content": {
                    "application/x-tar": {
                        "schema": {"type": "string", "format": "binary"},
                    }
                },
            }
        },
        errors=(*GATE, "invalid_request"),
    ),
    Operation(
        op_id="openapi",
        tag="meta",
        summary="This OpenAPI document",
        description="Unauthenticated by default (a key is needed only with "
        "TOPICS_PROBE_AUTH); served during recovery and never shed. The body is exactly "
        "the document (no performance object).",
        ok=ok_response("OpenApiDocument", "The document."),
        errors=("unauthorized", "internal"),
    ),
)
