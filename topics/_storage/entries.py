"""WAL entry payloads: what the engine logs and how recovery reads it back.

Every state change of a persistent topic is one WAL entry, appended in the order the
engine applied it, so replaying the entries in LSN order over the last checkpoint
reproduces the state exactly:

Rule 1: an APPEND carries the record frames exactly as the in-memory segment holds them
  (plus the segment salt their CRCs use), so replay appends the same bytes — no re-encoding.
Rule 2: anything that depends on the clock is logged as its outcome, never recomputed:
  an EXPIRE entry names the seq bound TTL reached, a tag delete logs the seqs it removed.
Rule 3: cap eviction is not logged: it is a pure function of the appends and the config
  entries before it, and replay re-runs it at the same points.
Rule 4: a WATERMARK entry is synced before any seq above the previous watermark is handed
  out, so after a crash no seq is ever reused (docs/STORAGE_FORMATS.md).
Rule 5: a HEAD entry says "here the topic's head is exactly this, and no seq above it has
  been handed out": replay sets the watermark to it (the only entry that may lower it). It
  needs no sync: the WAL survives as a prefix, so if it survived, so did every append
  before it. A quiet topic logs one, so a crash keeps its head exactly (recovery.py rule 4).
Rule 6: a producer's state (its highest epoch and last batch, topics/log/producer_state.py) is
  logged in the same entry as the append it describes (APPEND_PRODUCER), so a crash keeps
  both or neither; a change without an append is a PRODUCER entry.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import ujson

__all__ = [
    "APPEND",
    "APPEND_PRODUCER",
    "DELETE_BEFORE",
    "DELETE_SEQS",
    "EXPIRE",
    "FIRST_EXTENSION_ENTRY",
    "GAP",
    "GAP_CORRUPT",
    "HEAD",
    "PRODUCER",
    "TOPIC_DELETE",
    "TOPIC_PUT",
    "WATERMARK",
    "AppendEntry",
    "decode_append",
    "decode_topic_put",
    "decode_u64s",
    "encode_append",
    "encode_topic_put",
    "encode_u64s",
    "gap_is_corrupt",
]

TOPIC_PUT = 1  # JSON: {"id", "name", "config", "watermark"}
TOPIC_DELETE = 2  # u64 topic_id
APPEND = 3  # u64 topic_id, u32 salt, frames
DELETE_BEFORE = 4  # u64 topic_id, u64 bound
DELETE_SEQS = 5  # u64 topic_id, u64 seq * n
EXPIRE = 6  # u64 topic_id, u64 bound, u64 ttl_floor
WATERMARK = 7  # u64 topic_id, u64 watermark
GAP = 8  # u64 topic_id, u64 marker seq, u64 lost_from, u64 lost_to (a crash's head jump)
#: A GAP entry's optional fifth u64: the seqs were lost to WAL damage (reason ``corrupt``),
#: not to a crash. A binary that predates it reads the entry as a crash's gap.
GAP_CORRUPT = 1
HEAD = 9  # u64 topic_id, u64 head (rule 5; WAL format version 2)
#: An APPEND that carries its producer's new state (rule 6; WAL format version 3):
#: u64 topic_id, u32 salt, u64 epoch, u16 len(producer_id), u16 len(key), the two, frames.
APPEND_PRODUCER = 10
#: A producer's state changed without an append (rule 6; version 3): JSON
#: [topic_id, producer_id, epoch, key|null, first_seq, last_seq].
PRODUCER = 11
#: Entry types from here up belong to store extensions (routers, queues): recovery hands
#: them, in log order, to the extension that declared them (store.StoreExtension).
FIRST_EXTENSION_ENTRY = 32

_APPEND_HEAD = struct.Struct("<QI")


@dataclass(frozen=True, slots=True)
class AppendEntry:
    topic_id: int
    salt: int
    frames: memoryview


def encode_append(topic_id: int, salt: int, frames: bytes) -> bytes:
    return _APPEND_HEAD.pack(topic_id, salt) + frames


def decode_append(payload: bytes) -> AppendEntry:
    topic_id, salt = _APPEND_HEAD.unpack_from(payload)
    return AppendEntry(topic_id, salt, memoryview(payload)[_APPEND_HEAD.size :])


def encode_u64s(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}Q", *values)


def decode_u64s(payload: bytes) -> tuple[int, ...]:
    if len(payload) % 8:
        raise ValueError(f"u64 entry payload of {len(payload)} bytes")
    return struct.unpack(f"<{len(payload) // 8}Q", payload)


def gap_is_corrupt(values: tuple[int, ...]) -> bool:
    """Whether a decoded GAP entry carries :data:`GAP_CORRUPT`."""
    return len(values) > 4 and values[4] == GAP_CORRUPT


def encode_topic_put(topic_id: int, name: str, config: dict[str, Any], watermark: int) -> bytes:
    body = {"id": topic_id, "name": name, "config": config, "watermark": watermark}
    return ujson.dumps(body, ensure_ascii=False).encode()


def decode_topic_put(payload: bytes) -> dict[str, Any]:
    body = ujson.loads(payload)
    if not isinstance(body, dict):
        raise ValueError("TOPIC_PUT payload is not an object")
    return body
