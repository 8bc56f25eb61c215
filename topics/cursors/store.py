"""Named consumer cursors: per topic, a name -> committed seq map that survives restarts.

Kafka consumer groups, Redis ``XREADGROUP`` and NATS durable consumers keep a reader's
position on the server; this is the same for topics. The Engine methods are in
``cursors/ops.py``; this module holds the state and its persistence.

Rules:
1. A cursor is keyed by the topic's id, not its name: a topic deleted and created again
   under the same name starts with no cursors (ids are never reused).
2. Every commit and delete is one WAL entry of the store-extension range (40..47); the
   manifest section "cursors" snapshots them all at checkpoint time. Replay applies the
   entries in log order after the snapshot, so the last commit wins, as it did live.
3. A topic delete logs nothing here: recovery drops the cursors of every topic id that is
   not in the recovered registry (``prune``), and a live delete drops them at once.
4. An absent section (a data directory written before cursors existed) is no cursors.
5. A cursor remembers the API key that created it (``owner``: the key's
   ``Principal.owner_id``, derived from the key, so reordering ``TOPICS_API_KEYS`` changes
   nothing; -1 without auth or for an engine caller), persisted with it (an
   optional last field of CURSOR_PUT and of the snapshot; absent: -1), so the per-key
   bound (``TOPICS_MAX_CURSORS_PER_KEY``) holds across restarts. ``per_owner`` counts them
   as they come and go; commits by another key leave the owner as it was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import ujson

from ..errors import InvalidRequestError

__all__ = [
    "CURSOR_DELETE",
    "CURSOR_NAME_RE",
    "CURSOR_PUT",
    "ENTRY_TYPES",
    "Committed",
    "Cursors",
    "check_cursor_name",
    "encode_delete",
    "encode_put",
]

# WAL entry types (store extension range 40..47 is the cursors'); JSON arrays:
CURSOR_PUT = 40  # [topic_id, name, seq, updated_ms(, owner: rule 5)]
CURSOR_DELETE = 41  # [topic_id, name]
ENTRY_TYPES = frozenset({CURSOR_PUT, CURSOR_DELETE})

#: A cursor name (the topic-name charset); the OpenAPI document's CursorName pattern.
CURSOR_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,254}")


def check_cursor_name(name: object, field: str = "cursor") -> str:
    """``name`` if it is a valid cursor name (the topic-name charset), else invalid_request."""
    if not isinstance(name, str) or CURSOR_NAME_RE.fullmatch(name) is None:
        raise InvalidRequestError(
            f"{field}: {name!r} is not a valid cursor name "
            "(1-255 chars of A-Z a-z 0-9 . _ : -, starting alphanumeric)",
            detail={"field": field},
        )
    return name


@dataclass(slots=True)
class Committed:
    seq: int
    updated_ms: int
    owner: int = -1  # rule 5


def encode_put(topic_id: int, name: str, seq: int, updated_ms: int, owner: int = -1) -> bytes:
    body = [topic_id, name, seq, updated_ms] + ([owner] if owner >= 0 else [])
    return ujson.dumps(body).encode()


def encode_delete(topic_id: int, name: str) -> bytes:
    return ujson.dumps([topic_id, name]).encode()


class Cursors:
    """Every topic's cursors, by topic id; also the store extension "cursors"."""

    key = "cursors"
    entry_types = ENTRY_TYPES

    def __init__(self) -> None:
        self.by_topic: dict[int, dict[str, Committed]] = {}
        self.per_owner: dict[int, int] = {}  # rule 5: cursors created by each key

    def _count(self, owner: int, delta: int) -> None:
        if owner >= 0:
            left = self.per_owner.get(owner, 0) + delta
            if left:
                self.per_owner[owner] = left
            else:
                self.per_owner.pop(owner, None)

    def get(self, topic_id: int, name: str) -> Committed | None:
        held = self.by_topic.get(topic_id)
        return held.get(name) if held is not None else None

    def of(self, topic_id: int) -> dict[str, Committed]:
        return self.by_topic.get(topic_id) or {}

    def commit(self, topic_id: int, name: str, seq: int, updated_ms: int, owner: int = -1) -> None:
        held = self.by_topic.setdefault(topic_id, {})
        cur = held.get(name)
        if cur is None:
            held[name] = Committed(seq, updated_ms, owner)
            self._count(owner, 1)
        else:
            cur.seq, cur.updated_ms = seq, updated_ms

    def delete(self, topic_id: int, name: str) -> bool:
        held = self.by_topic.get(topic_id)
        if held is None or name not in held:
            return False
        self._count(held.pop(name).owner, -1)
        if not held:
            del self.by_topic[topic_id]
        return True

    def drop_topic(self, topic_id: int) -> None:
        for cur in (self.by_topic.pop(topic_id, None) or {}).values():
            self._count(cur.owner, -1)

    def prune(self, live_ids: set[int]) -> None:
        """Rule 3: forget the cursors of topics that no longer exist."""
        for tid in [t for t in self.by_topic if t not in live_ids]:
            self.drop_topic(tid)

    # -- store extension (rules 2, 4) ------------------------------------------------------

    def snapshot(self) -> Any:
        topics = {
            str(tid): {
                name: [c.seq, c.updated_ms] + ([c.owner] if c.owner >= 0 else [])
                for name, c in held.items()
            }
            for tid, held in self.by_topic.items()
        }
        return {"format": 1, "topics": topics}

    def restore(self, section: Any, logged: list[tuple[int, bytes]]) -> None:
        self.by_topic, self.per_owner = {}, {}
        topics = section.get("topics") if isinstance(section, dict) else None
        for tid, held in (topics or {}).items():
            for name, (seq, updated_ms, *owner) in held.items():
                self.commit(int(tid), name, int(seq), int(updated_ms), *map(int, owner))
        for kind, payload in logged:
            body = ujson.loads(payload)
            if kind == CURSOR_PUT:
                owner = int(body[4]) if len(body) > 4 else -1
                self.commit(int(body[0]), body[1], int(body[2]), int(body[3]), owner)
            elif kind == CURSOR_DELETE:
                self.delete(int(body[0]), body[1])
