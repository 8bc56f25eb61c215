"""Shared helpers for the engine behaviour tests (contract §0-§5, docs/SEMANTICS.md).

Sizes follow SEMANTICS.md rule 4: a record's stored size is its frame length,
``41 + len(node) + len(tag) + len(meta_json) + len(data_json)`` in UTF-8 bytes, where a
Python value's JSON text is ``ujson.dumps(value)`` with default arguments and ``bytes``
data is stored verbatim.
"""

from __future__ import annotations

from typing import Any

import pytest
import ujson

from topics.settings import Limits

START_MS = 1_700_000_000_000
FRAME_OVERHEAD = 41

DEFAULT_CONFIG: dict[str, Any] = {
    "type": "log",
    "ttl_ms": 0,
    "cap_records": 0,
    "cap_bytes": 0,
    "discard": "old",
    "durable": False,
    "durability": "disk",
    "priority": None,
    "auto_priority": True,
    "auto_create": True,
    "idempotency_window_ms": 120000,
    "dedupe_node": True,
    "lease_ms": 30000,
    "claim_jitter_ms": 0,
    "max_deliveries": 0,
    "dead_letter": None,
    "leases_durable": False,
}


def data_json(value: Any) -> bytes:
    """The stored JSON text of ``data`` (bytes are already-encoded JSON)."""
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    return ujson.dumps(value).encode()


def frame_size(
    data: Any,
    *,
    node: str | None = None,
    tag: str | None = None,
    meta: dict[str, Any] | None = None,
) -> int:
    """The frame length of one record (SEMANTICS.md rule 4)."""
    size = FRAME_OVERHEAD + len(data_json(data))
    if node is not None:
        size += len(node.encode())
    if tag is not None:
        size += len(tag.encode())
    if meta is not None:
        size += len(ujson.dumps(meta).encode())
    return size


def record_size(record: dict[str, Any], batch_node: str | None = None) -> int:
    """Frame length of a write-request record, taking the batch-level node into account."""
    node = record.get("node")
    if node is None:
        node = batch_node
    return frame_size(record["data"], node=node, tag=record.get("tag"), meta=record.get("meta"))


def recs(*values: Any) -> list[dict[str, Any]]:
    """Records carrying the given data values and nothing else."""
    return [{"data": v} for v in values]


def rendered(result: Any) -> list[dict[str, Any]]:
    """The diff's records exactly as the contract renders them (decoded records_json)."""
    out = ujson.loads(result.records_json)
    assert isinstance(out, list)
    return out


def seqs_of(result: Any) -> list[int]:
    """The $seq of every record a diff returned, in order."""
    return [obj["$seq"] for obj in rendered(result)]


def with_limits(**overrides: int) -> pytest.MarkDecorator:
    """Run a test against an engine opened with these Limits (overrides the fixture)."""
    return pytest.mark.parametrize("limits", [Limits(**overrides)], ids=["limits"])


async def snapshot(engine: Any, topic: str) -> tuple[Any, ...]:
    """Everything a rejected operation must leave untouched (read without touching)."""
    st = await engine.get_topic(topic, touch=False)
    return (st.head_seq, st.earliest_seq, st.next_seq, st.count, st.bytes, st.config)
