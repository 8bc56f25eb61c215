"""The topic config object (contract §0.10): defaults, types, clamps and the
``durable`` <-> ``durability`` resolution.

Rule 1: ``durability`` is the stored truth; ``durable`` is derived on output as
``durability == "fsync"`` and only consulted on input when ``durability`` is absent.
Rule 2: a PUT applies the fields it names over the current config (or the defaults when
creating); ``type`` may never change once set.
Rule 3: unknown fields and wrong types are ``invalid_request`` (a typo must not silently
configure nothing); out-of-range numbers with a documented clamp are clamped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from ._names import check_topic_name
from .errors import InvalidRequestError

__all__ = ["Durability", "TopicConfig", "TopicType", "parse_config"]

TopicType = Literal["log", "queue"]
Durability = Literal["ephemeral", "memory", "disk", "fsync"]
Discard = Literal["old", "reject"]

U64_MAX = (1 << 64) - 1
LEASE_MS_RANGE = (100, 86_400_000)
CLAIM_JITTER_MS_RANGE = (0, 5000)
PRIORITY_RANGE = (-1000, 1000)


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """A topic's full configuration (every field of §0.10, durability resolved)."""

    type: TopicType = "log"
    ttl_ms: int = 0
    cap_records: int = 0
    cap_bytes: int = 0
    discard: Discard = "old"
    durability: Durability = "disk"
    priority: int | None = None
    auto_priority: bool = True
    auto_create: bool = True
    idempotency_window_ms: int = 120_000
    dedupe_node: bool = True
    lease_ms: int = 30_000
    claim_jitter_ms: int = 0
    max_deliveries: int = 0
    dead_letter: str | None = None
    leases_durable: bool = False

    @property
    def durable(self) -> bool:
        return self.durability == "fsync"

    def to_dict(self) -> dict[str, Any]:
        """The config object as the contract renders it (``durable`` included)."""
        return {
            "type": self.type,
            "ttl_ms": self.ttl_ms,
            "cap_records": self.cap_records,
            "cap_bytes": self.cap_bytes,
            "discard": self.discard,
            "durable": self.durable,
            "durability": self.durability,
            "priority": self.priority,
            "auto_priority": self.auto_priority,
            "auto_create": self.auto_create,
            "idempotency_window_ms": self.idempotency_window_ms,
            "dedupe_node": self.dedupe_node,
            "lease_ms": self.lease_ms,
            "claim_jitter_ms": self.claim_jitter_ms,
            "max_deliveries": self.max_deliveries,
            "dead_letter": self.dead_letter,
            "leases_durable": self.leases_durable,
        }


def _bad(field: str, problem: str) -> InvalidRequestError:
    return InvalidRequestError(f"config.{field}: {problem}", detail={"field": f"config.{field}"})


def _u64(field: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= U64_MAX:
        raise _bad(field, f"must be a non-negative integer, got {value!r}")
    return value


def _clamped(field: str, value: object, bounds: tuple[int, int]) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _bad(field, f"must be an integer, got {value!r}")
    return min(max(value, bounds[0]), bounds[1])


def _flag(field: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise _bad(field, f"must be true or false, got {value!r}")
    return value


def _choice(field: str, value: object, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise _bad(field, f"must be one of {', '.join(allowed)}; got {value!r}")
    assert isinstance(value, str)
    return value


def _priority(value: object) -> int | None:
    if value is None:
        return None
    return _clamped("priority", value, PRIORITY_RANGE)


def _dead_letter(value: object, topic: str | None) -> str | None:
    if value is None:
        return None
    name = check_topic_name(value, "config.dead_letter")
    if topic is not None and name == topic:
        raise _bad("dead_letter", "must differ from the topic itself")
    return name


_FIELD_PARSERS: dict[str, Any] = {
    "ttl_ms": _u64,
    "cap_records": _u64,
    "cap_bytes": _u64,
    "idempotency_window_ms": _u64,
    "max_deliveries": _u64,
    "auto_priority": _flag,
    "auto_create": _flag,
    "dedupe_node": _flag,
    "leases_durable": _flag,
}
_KNOWN = frozenset(f.name for f in dataclasses.fields(TopicConfig)) | {"durable"}


def parse_config(
    body: Mapping[str, Any] | None,
    base: TopicConfig | None = None,
    topic: str | None = None,
) -> TopicConfig:
    """Apply the fields named in ``body`` over ``base`` (the defaults when None).

    Args:
        body: a config object as received (None or {} = nothing to change).
        base: the current config of an existing topic, or None when creating.
        topic: the topic's own name, to reject ``dead_letter`` pointing at itself.

    Returns:
        The resulting full config. ``type`` is taken as given; the caller decides whether
        a change of type on an existing topic is a conflict.

    Raises:
        InvalidRequestError: an unknown field, a wrong type or a bad value.
    """
    current = base if base is not None else TopicConfig()
    if body is None:
        return current
    if not isinstance(body, Mapping):
        raise InvalidRequestError("config must be a JSON object", detail={"field": "config"})
    unknown = sorted(k for k in body if k not in _KNOWN)
    if unknown:
        raise _bad(unknown[0], "unknown config field")
    changes: dict[str, Any] = {}
    for name, value in body.items():
        if name in _FIELD_PARSERS:
            changes[name] = _FIELD_PARSERS[name](name, value)
        elif name == "type":
            changes[name] = _choice(name, value, get_args(TopicType))
        elif name == "discard":
            changes[name] = _choice(name, value, get_args(Discard))
        elif name == "priority":
            changes[name] = _priority(value)
        elif name == "lease_ms":
            changes[name] = _clamped(name, value, LEASE_MS_RANGE)
        elif name == "claim_jitter_ms":
            changes[name] = _clamped(name, value, CLAIM_JITTER_MS_RANGE)
        elif name == "dead_letter":
            changes[name] = _dead_letter(value, topic)
    durability = body.get("durability")
    if durability is not None:
        changes["durability"] = _choice("durability", durability, get_args(Durability))
    elif "durable" in body:
        changes["durability"] = "fsync" if _flag("durable", body["durable"]) else "disk"
    return dataclasses.replace(current, **changes) if changes else current
