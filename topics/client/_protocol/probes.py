"""The probes (contract §8): health, readiness and metrics, answered as plain JSON."""

from __future__ import annotations

from typing import Any

from .call import Call

__all__ = ["metrics", "probe"]


def probe(path: str) -> Call[dict[str, Any]]:
    return Call("GET", path, lambda r: r.json())


def metrics() -> Call[dict[str, Any]]:
    return Call("GET", "/v0/metrics", lambda r: r.json(), headers={"Accept": "application/json"})
