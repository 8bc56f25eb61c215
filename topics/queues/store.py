"""Every queue's lease projection and its persistence (``_queue`` rules 6 and 7).

``Queues`` holds each queue topic's :class:`~topics.queues.state.QueueState` by topic id and is
the store extension (manifest section "queues", WAL entry types 48..63): it snapshots the
projections of durable-lease queues and, at recovery, rebuilds them from the snapshot and
the lifecycle events logged after it (``encode_event``/``decode_event``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import ujson

from ..log.topic_log import TopicLog
from .state import ENTRY_TYPES, QueueState

if TYPE_CHECKING:
    from ..log.registry import TopicRegistry

__all__ = ["Queues", "decode_event", "encode_event", "leases_durable"]


class Queues:
    """Every queue topic's projection, keyed by topic id; also the store extension that
    snapshots them into the manifest section "queues" and replays their lease events."""

    key = "queues"
    entry_types = ENTRY_TYPES

    def __init__(self) -> None:
        self.states: dict[int, QueueState] = {}
        self._sections: dict[str, Any] = {}
        self._events: list[tuple[int, bytes]] = []

    def state(self, log: TopicLog) -> QueueState:
        q = self.states.get(log.topic_id)
        if q is None:
            q = self.states[log.topic_id] = QueueState(log)
        return q

    def snapshot(self) -> Any:
        topics = {
            str(tid): q.snapshot(leases_durable(q.log))
            for tid, q in self.states.items()
            if not q.log.deleted
        }
        return {"format": 1, "topics": topics}

    def restore(self, section: Any, logged: list[tuple[int, bytes]]) -> None:
        """Keep what recovery found until the registry is final (``bind``)."""
        topics = section.get("topics") if isinstance(section, dict) else None
        self._sections = dict(topics) if isinstance(topics, dict) else {}
        self._events = list(logged)

    def bind(self, registry: TopicRegistry) -> None:
        """Rebuild the projections of durable-lease queues from the snapshot and the
        events logged after it; other queues keep only their dead-letter count."""
        if not self._sections and not self._events:
            return
        queues = {
            log.topic_id: log for log in registry.topics.values() if log.config.type == "queue"
        }
        touched: dict[int, QueueState] = {}
        for key, section in self._sections.items():
            log = queues.get(int(key))
            if log is not None and isinstance(section, dict):
                q = touched[log.topic_id] = self.state(log)
                q.load(section, leases_durable(log))
        for kind, payload in self._events:
            tid, body = decode_event(payload)
            log = queues.get(tid)
            if log is not None and leases_durable(log):
                q = touched[tid] = self.state(log)
                q.apply_event(kind, body)
        for q in touched.values():
            if leases_durable(q.log):
                q.finish_restore()
        self._sections, self._events = {}, []


def leases_durable(log: TopicLog) -> bool:
    """Whether the queue's lease events are logged (and its projection snapshotted)."""
    return log.config.leases_durable and log.config.durability != "ephemeral"


def encode_event(topic_id: int, *body: object) -> bytes:
    return ujson.dumps([topic_id, *body], ensure_ascii=False).encode()


def decode_event(payload: bytes) -> tuple[int, list[Any]]:
    value = ujson.loads(payload)
    if not isinstance(value, list) or not value or not isinstance(value[0], int):
        raise ValueError("queue lease entry is not [topic_id, ...]")
    return value[0], value[1:]
