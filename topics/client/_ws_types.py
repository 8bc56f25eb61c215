"""Typed answers of the WebSocket client's ``subscribe`` and ``unsubscribe``.

They used to be the server's frames as dicts; they are now typed like the HTTP client's
results (``Subscribed.topics`` maps each topic to the :class:`~topics.watch_types.
TopicWatermarks` a ``WatchCreated`` carries) and stay read-only mappings of the frame, so
``sub["topics"][t]["head_seq"]`` and ``sub["op"]`` still work.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from topics.watch_types import TopicWatermarks

__all__ = ["Subscribed", "Unsubscribed"]


class _Frame(Mapping[str, Any]):
    """The frame's own keys, read-only (backward compatibility)."""

    frame: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.frame[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.frame)

    def __len__(self) -> int:
        return len(self.frame)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.frame)


@dataclass(frozen=True, eq=False)
class Subscribed(_Frame):
    """A ``subscribed`` answer: where each topic starts and its watermarks.

    ``prefixes`` holds the ``topic_prefix`` entries as the server narrowed them (None when
    the subscription named none).
    """

    request_id: str | None
    topics: dict[str, TopicWatermarks]
    prefixes: dict[str, Any] | None = None
    frame: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_frame(cls, frame: Mapping[str, Any]) -> Subscribed:
        topics = {
            str(name): TopicWatermarks(
                int(w.get("from_seq", 0)), int(w.get("head_seq", 0)), int(w.get("earliest_seq", 1))
            )
            for name, w in (frame.get("topics") or {}).items()
            if isinstance(w, Mapping)
        }
        prefixes = frame.get("topic_prefix")
        return cls(
            request_id=frame.get("request_id"),
            topics=topics,
            prefixes=dict(prefixes) if isinstance(prefixes, Mapping) else None,
            frame=dict(frame),
        )


@dataclass(frozen=True, eq=False)
class Unsubscribed(_Frame):
    """An ``unsubscribed`` answer: the topics no longer delivered."""

    request_id: str | None
    topics: list[str]
    frame: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_frame(cls, frame: Mapping[str, Any]) -> Unsubscribed:
        return cls(
            request_id=frame.get("request_id"),
            topics=[str(t) for t in frame.get("topics") or ()],
            frame=dict(frame),
        )
