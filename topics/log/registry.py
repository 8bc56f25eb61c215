"""The set of live topics: lookup by name, name-ordered listing, numeric ids (§1.3).

Rule 1: a topic instance gets a fresh numeric id on every create; storage keys files by
it, never by name, and a delete+recreate is a new instance with a new id.
Rule 2: ``names`` is always the sorted list of the keys of ``topics`` (listing pages
are a bisect away, no per-request sort).
"""

from __future__ import annotations

import base64
import binascii
import bisect
from collections.abc import Callable

import ujson

from ..config import TopicConfig
from ..errors import InvalidRequestError
from .topic_log import TopicLog

__all__ = ["TopicRegistry", "decode_list_cursor", "encode_list_cursor"]


class TopicRegistry:
    def __init__(self) -> None:
        self.topics: dict[str, TopicLog] = {}
        self.names: list[str] = []
        self.next_id = 1
        #: Called with every topic added while the engine serves (prefix watches join it:
        #: ``topics.watch.prefix``); None until a prefix watch exists.
        self.on_add: Callable[[TopicLog], None] | None = None

    def __len__(self) -> int:
        return len(self.topics)

    def get(self, name: str) -> TopicLog | None:
        return self.topics.get(name)

    def prepare(self, name: str, config: TopicConfig) -> TopicLog:
        """A new, not yet registered topic instance (registered by ``add`` once its first
        write or PUT has been validated, so a failed request leaves no trace)."""
        return TopicLog(name, self.next_id, config)

    def add(self, log: TopicLog) -> None:
        self.topics[log.name] = log
        bisect.insort(self.names, log.name)
        self.next_id = max(self.next_id, log.topic_id + 1)
        if self.on_add is not None:
            self.on_add(log)

    def create(self, name: str, config: TopicConfig) -> TopicLog:
        log = self.prepare(name, config)
        self.add(log)
        return log

    def remove(self, name: str) -> TopicLog | None:
        log = self.topics.pop(name, None)
        if log is not None:
            del self.names[bisect.bisect_left(self.names, name)]
        return log

    def page(self, prefix: str, after: str | None, size: int) -> tuple[list[TopicLog], str | None]:
        """Up to ``size`` topics whose name starts with ``prefix``, after name ``after``.

        Returns (topics, last name if more follow else None).
        """
        lo = bisect.bisect_right(self.names, after) if after is not None else 0
        lo = max(lo, bisect.bisect_left(self.names, prefix))
        out: list[TopicLog] = []
        i = lo
        while i < len(self.names) and len(out) < size:
            name = self.names[i]
            if not name.startswith(prefix):
                return out, None
            out.append(self.topics[name])
            i += 1
        more = i < len(self.names) and self.names[i].startswith(prefix)
        return out, (out[-1].name if more and out else None)


def encode_list_cursor(after: str) -> str:
    """Opaque list cursor: base64 of {"after": name} (contract §0.7)."""
    return base64.urlsafe_b64encode(ujson.dumps({"after": after}).encode()).decode()


def decode_list_cursor(cursor: object) -> str:
    bad = InvalidRequestError(
        "cursor: malformed or corrupt list cursor", detail={"field": "cursor"}
    )
    if not isinstance(cursor, str) or not cursor:
        raise bad
    try:
        obj = ujson.loads(base64.urlsafe_b64decode(cursor.encode() + b"=" * (-len(cursor) % 4)))
    except (ValueError, binascii.Error):
        raise bad from None
    if not isinstance(obj, dict) or not isinstance(obj.get("after"), str):
        raise bad
    after: str = obj["after"]
    return after
