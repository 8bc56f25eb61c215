"""A producer's state on a topic and its persisted forms (issue 19, ``_producers`` rule 3).

Role: the data the write conditions of ``ops/producers.py`` keep on each ``TopicLog`` (a
producer's highest epoch and its last appended batch), and how that data is written to
the WAL (``APPEND_PRODUCER`` and ``PRODUCER`` entries) and to the checkpoint manifest.
It sits in the logs layer, beside ``_log``, so the persistence layer that logs and
recovers topics can use it without reaching up into the engine's subsystems; the checks
themselves stay in ``ops/producers.py``.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ujson

__all__ = [
    "ProducerClaim",
    "ProducerState",
    "decode_append_producer",
    "decode_producer",
    "encode_append_producer",
    "encode_producer",
    "load_producers",
    "snapshot_producers",
]

# topic_id, salt, epoch, producer_id bytes, key bytes (0: none; a key is never empty)
_APPEND_PRODUCER_HEAD = struct.Struct("<QIQHH")


@dataclass(frozen=True, slots=True)
class ProducerClaim:
    """A write's ``producer_id`` and ``epoch``, validated."""

    producer_id: str
    epoch: int


@dataclass(slots=True)
class ProducerState:
    """What a topic knows of one producer (rules 1-2)."""

    epoch: int
    key: str | None = None  # the idempotency key of its last appended batch
    first_seq: int = 0
    last_seq: int = 0


def encode_append_producer(
    topic_id: int, salt: int, claim: ProducerClaim, key: str | None, frames: bytes
) -> bytes:
    pid = claim.producer_id.encode()
    kb = key.encode() if key is not None else b""
    head = _APPEND_PRODUCER_HEAD.pack(topic_id, salt, claim.epoch, len(pid), len(kb))
    return b"".join((head, pid, kb, frames))


def decode_append_producer(
    payload: bytes,
) -> tuple[int, int, ProducerClaim, str | None, memoryview]:
    """``(topic_id, salt, claim, key, frames)`` of an ``APPEND_PRODUCER`` entry."""
    topic_id, salt, epoch, npid, nkey = _APPEND_PRODUCER_HEAD.unpack_from(payload)
    view = memoryview(payload)
    at = _APPEND_PRODUCER_HEAD.size
    pid = bytes(view[at : at + npid]).decode()
    at += npid
    key = bytes(view[at : at + nkey]).decode() if nkey else None
    return topic_id, salt, ProducerClaim(pid, epoch), key, view[at + nkey :]


def encode_producer(topic_id: int, producer_id: str, state: ProducerState) -> bytes:
    body = [topic_id, producer_id, state.epoch, state.key, state.first_seq, state.last_seq]
    return ujson.dumps(body, ensure_ascii=False).encode()


def decode_producer(payload: bytes) -> tuple[int, str, ProducerState]:
    tid, pid, epoch, key, first, last = ujson.loads(payload)
    return int(tid), str(pid), ProducerState(int(epoch), key, int(first), int(last))


def snapshot_producers(producers: Mapping[str, ProducerState]) -> dict[str, list[Any]]:
    """The manifest form: ``{producer_id: [epoch, key, first_seq, last_seq]}``.

    It takes a ``TopicLog``'s ``producers``, not the log, so this module stays below
    ``topic_log.py``, which imports it.
    """
    return {pid: [s.epoch, s.key, s.first_seq, s.last_seq] for pid, s in producers.items()}


def load_producers(section: object) -> dict[str, ProducerState]:
    if not isinstance(section, dict):
        return {}
    return {
        str(pid): ProducerState(int(v[0]), v[1], int(v[2]), int(v[3])) for pid, v in section.items()
    }
