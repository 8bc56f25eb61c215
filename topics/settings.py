"""Engine-wide limits (contract §2 batching limits, §3 read clamps, §11 resource caps).

Every limit has the contract's default and its ``TOPICS_MAX_*`` environment variable.
A resource cap of 0 means unlimited (§11); the batching limits are hard limits and must
be positive.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass

from ._storage.segment_cache import DEFAULT_CACHE_BYTES
from .query.where import DEFAULT_MAX_COST

__all__ = ["Limits", "with_cache_bytes"]

# Resource caps (§11) may be 0 = unlimited; everything else must be >= 1.
_ZERO_MEANS_UNLIMITED = frozenset(
    {
        "max_topics",
        "max_routers",
        "max_watch_sessions",
        "max_sse_connections",
        "max_sse_connections_per_key",
        "max_inflight_per_key",
        "max_total_bytes",
        "min_free_bytes",
        "max_topics_per_key",
        "max_routers_per_key",
        "max_watch_sessions_per_key",
        "max_cursors_per_topic",
        "max_cursors_per_key",
        "max_producers_per_topic",
        "max_where_ms",
        "where_cpu_share",
        "cache_bytes",
        "scrub_bytes_per_s",
    }
)
# The frame stores tag/node lengths in 16 bits.
_U16_FIELDS = frozenset({"max_tag_bytes", "max_node_bytes"})


@dataclass(frozen=True, slots=True)
class Limits:
    """Hard limits and resource caps, with the contract's defaults."""

    max_batch_records: int = 10_000
    max_record_bytes: int = 1 << 20
    max_body_bytes: int = 64 << 20
    max_meta_bytes: int = 16 << 10
    max_meta_keys: int = 64
    max_tag_bytes: int = 256
    max_node_bytes: int = 128
    max_limit: int = 1000
    max_claim: int = 1000
    max_watch_topics: int = 256
    max_topics: int = 100_000
    max_routers: int = 10_000
    max_watch_sessions: int = 10_000
    max_sse_connections: int = 10_000
    max_sse_connections_per_key: int = 1000
    max_inflight_per_key: int = 1000
    max_total_bytes: int = 0
    # Per-key quotas (0 = unlimited; topics/log/quotas.py): topics and routers under a
    # prefix-limited key's prefixes, and watch sessions held by one key.
    max_topics_per_key: int = 0
    max_routers_per_key: int = 0
    max_watch_sessions_per_key: int = 0
    # State one topic or one key may grow (0 = unlimited): named cursors per topic and
    # created by one API key over every topic (cursors/ops.py), producer ids per topic
    # (ops/producers.py rule 5). A producer id costs ~600 B, a cursor up to ~1.3 KiB.
    max_cursors_per_topic: int = 1000
    max_cursors_per_key: int = 10_000
    max_producers_per_topic: int = 10_000
    # Not a contract limit: segment file handles the store keeps open (_storage/handles.py),
    # so descriptors stay bounded however many topics there are.
    max_open_files: int = 256
    # Not a contract limit (issue 31): bytes of sealed segments kept in memory after a
    # read loaded them from their files (_storage/segment_cache.py); 0 keeps only the
    # segment in use. docs/OPERATIONS.md says how to size it.
    cache_bytes: int = DEFAULT_CACHE_BYTES
    # Not a contract limit: changes are refused (507 insufficient_storage) while the data
    # directory's file system has less free space than this (_storage/space.py); 0 = off.
    min_free_bytes: int = 64 << 20
    # Not a contract limit (issue 30): what one ``where`` plan may cost per record (a test
    # per term, a decode per part read; topics/query/where.py rule 7), and how long a filtered
    # read or one live delivery may spend before it answers with what it has and a
    # cursor (0 = no time bound; topics/log/reads.py rule 4).
    max_where_cost: int = DEFAULT_MAX_COST
    max_where_ms: int = 10
    # The percent of the event loop one key's filtered diffs may take when it sends them
    # back to back (0 = no pacing; topics/ops/where_pacing.py).
    where_cpu_share: int = 5
    # Not a contract limit (issue 32): bytes per second the online scrub re-reads segment
    # and closed WAL files at to find rot before a read does (topics/ops/scrub.py); 0 = off.
    scrub_bytes_per_s: int = 0

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{field.name} must be an integer, got {value!r}")
            low = 0 if field.name in _ZERO_MEANS_UNLIMITED else 1
            if value < low:
                raise ValueError(f"{field.name} must be >= {low}, got {value}")
            if field.name in _U16_FIELDS and value > 0xFFFF:
                raise ValueError(f"{field.name} must be <= 65535, got {value}")
        if self.where_cpu_share > 100:
            raise ValueError(f"where_cpu_share is a percent, got {self.where_cpu_share}")

    @staticmethod
    def env_var(name: str) -> str:
        """The environment variable that sets limit ``name`` (e.g. TOPICS_MAX_TOPICS)."""
        return "TOPICS_" + name.upper()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Limits:
        """Read every ``TOPICS_MAX_*`` variable that is set; raise ValueError on a bad one."""
        env = os.environ if env is None else env
        values: dict[str, int] = {}
        for field in dataclasses.fields(cls):
            raw = env.get(cls.env_var(field.name))
            if raw is None or raw.strip() == "":
                continue
            try:
                values[field.name] = int(raw.strip())
            except ValueError:
                raise ValueError(f"{cls.env_var(field.name)}={raw!r} is not an integer") from None
        return cls(**values)

    @property
    def encode_limits(self) -> tuple[int, int, int, int, int]:
        """The tuple ``topics._core.encode_batch`` takes."""
        return (
            self.max_record_bytes,
            self.max_meta_bytes,
            self.max_meta_keys,
            self.max_tag_bytes,
            self.max_node_bytes,
        )


def with_cache_bytes(
    limits: Limits | None, cache_bytes: int | None, env: Mapping[str, str] | None = None
) -> Limits | None:
    """The limits an embedded engine opens with, given ``cache_bytes=`` (issue 31).

    ``cache_bytes`` wins; without it, an engine opened without ``limits`` takes
    ``TOPICS_CACHE_BYTES`` from the environment (the server reads every variable), and
    one opened with ``limits`` keeps theirs.
    """
    if cache_bytes is None:
        if limits is not None:
            return limits
        env = os.environ if env is None else env
        raw = env.get(Limits.env_var("cache_bytes"), "").strip()
        if not raw:
            return None
        try:
            cache_bytes = int(raw)
        except ValueError:
            raise ValueError(f"TOPICS_CACHE_BYTES={raw!r} is not an integer") from None
    return dataclasses.replace(limits if limits is not None else Limits(), cache_bytes=cache_bytes)
