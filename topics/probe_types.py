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


#: One damaged file (``topics/_storage/damage.py``, issue 32).
_DAMAGED_FILE = {
    "type": "object",
    "required": ["file", "kind", "problem", "topic", "first_seq", "last_seq", "widened"],
    "properties": {
        "file": {"type": "string", "description": "Relative to the data directory."},
        "kind": {"type": "string", "description": "segment, index, tags, wal, manifest"},
        "problem": {"type": "string", "description": "What failed: crc, truncated, header"},
        "topic": {"type": ["string", "null"]},
        "first_seq": {"type": ["integer", "null"]},
        "last_seq": {"type": ["integer", "null"]},
        "widened": {"type": "boolean", "description": "The range is an upper bound."},
        "offset": {"type": "integer", "description": "First bad byte; -1 unknown."},
    },
}


@dataclass(frozen=True, slots=True)
class HealthResult:
    """What ``GET /v0/health`` (and ``/healthz``) answers: the process can serve (200
    even with damaged files: everything else is served, docs/OPERATIONS.md)."""

    version: str = wire("The server's version.")
    uptime_ms: int = wire("Since the server started.", schema={"minimum": 0})
    damaged: tuple[dict[str, Any], ...] = wire(
        "Files that failed their checks (quarantined; their topics serve the rest, and "
        "readers get a corrupt tombstone over the seqs they held). Run `topics verify`.",
        schema={"type": "array", "items": _DAMAGED_FILE},
        default=(),
    )
    status: Literal["ok", "degraded"] = wire(
        "ok; degraded while a file is damaged (the server still serves: 200).", default="ok"
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "version": self.version,
            "uptime_ms": self.uptime_ms,
            "damaged": list(self.damaged),
        }


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
