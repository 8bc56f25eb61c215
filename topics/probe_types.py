"""Result types of the probes (contract §8): frozen dataclasses with ``to_dict()``.

``to_dict()`` gives the contract's JSON object without the ``performance`` block, which
frontends add. The routes (frontends/http/probe_routes.py) build them; the OpenAPI
document's ``Health`` and ``Ready`` schemas are built from their fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .result_fields import wire

__all__ = ["HealthResult", "ReadyResult"]


@dataclass(frozen=True, slots=True)
class HealthResult:
    """What ``GET /v0/health`` (and ``/healthz``) answers: the process can serve."""

    version: str = wire("The server's version.")
    uptime_ms: int = wire("Since the server started.", schema={"minimum": 0})
    status: Literal["ok"] = wire("Always ok.", default="ok")

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "version": self.version, "uptime_ms": self.uptime_ms}


@dataclass(frozen=True, slots=True)
class ReadyResult:
    """What ``GET /v0/ready`` (and ``/readyz``) answers once it can take writes."""

    topics: int = wire("Live topics.", schema={"minimum": 0})
    status: Literal["ready"] = wire("Always ready (otherwise 503).", default="ready")
    wal_replay_complete: bool = wire(
        "Always true (otherwise 503 not_ready).", schema={"const": True}, default=True
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "wal_replay_complete": self.wal_replay_complete,
            "topics": self.topics,
        }
