"""The stream frames that are no watch event: each frame's members, declared once.

The builders of ``topics.wire.sse`` (``error``, ``connection-established``,
``connection-closing``) and ``topics.wire.ws`` (``subscribed``, ``unsubscribed``,
``pong``, ``error``) make their JSON with :meth:`FrameShape.build`, and the OpenAPI
document publishes each :attr:`FrameShape.schema` (the watch events' frames are declared
by their types in ``topics.watch_types``). A member a builder sends that is not declared
here is a bug: ``build`` raises.

Rules:
1. Members are sent in the declared order; a member whose value is None is left out (so a
   declared member the schema does not require may be absent).
2. The WebSocket frames' ``op`` is :attr:`FrameShape.name`, ahead of the declared members.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .jsonschema import Schema, integer, obj, ref, string

__all__ = [
    "SSE_CONNECTION_CLOSING",
    "SSE_CONNECTION_ESTABLISHED",
    "SSE_ERROR",
    "SSE_FRAMES",
    "WS_ERROR",
    "WS_FRAMES",
    "WS_PONG",
    "WS_SUBSCRIBED",
    "WS_UNSUBSCRIBED",
    "FrameShape",
]


@dataclass(frozen=True, slots=True)
class FrameShape:
    """One frame: its name (the SSE event, the WebSocket op) and its members' schema."""

    name: str
    schema: Schema
    order: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "order", tuple(self.schema["properties"]))

    def build(self, members: Mapping[str, Any]) -> dict[str, Any]:
        """The frame's members in declared order, None values left out (rule 1).

        Raises:
            TypeError: a member this frame does not declare.
        """
        unknown = members.keys() - set(self.order)
        if unknown:
            raise TypeError(f"the {self.name} frame declares no member {sorted(unknown)}")
        return {name: members[name] for name in self.order if members.get(name) is not None}


_RID = {"request_id": {"type": "string"}}

SSE_ERROR = FrameShape(
    "error",
    obj(
        {
            "code": integer(
                "HTTP-aligned: 429 advisory pacing, 408 slow consumer and 410 session "
                "collected (terminal), 409 the topic ceased to be a queue (/work)."
            ),
            "error": string("Human-readable message."),
            "error_code": string(
                "The wire code (§0.5 codes plus the stream-only session_gone and slow_consumer)."
            ),
            "retry_after_ms": {"type": "integer", "minimum": 0},
            "topics": {"type": "array", "items": ref("TopicName")},
            "detail": {"type": "object"},
            **_RID,
        },
        ["code", "error"],
    ),
)
SSE_CONNECTION_ESTABLISHED = FrameShape(
    "connection-established",
    obj(
        {
            **_RID,
            "wid": {"type": "string"},
            "topics": {
                "type": "object",
                "additionalProperties": ref("TopicWatermarks"),
                "description": "Where this stream resumes, per topic, and the watermarks.",
            },
        },
        ["request_id", "topics"],
    ),
)
SSE_CONNECTION_CLOSING = FrameShape(
    "connection-closing",
    obj(
        {
            "reason": string(
                "Why the server ends the stream.", examples=["server_shutdown", "superseded"]
            ),
            **_RID,
            "retry_after_ms": {"type": "integer", "minimum": 0},
        },
        ["reason"],
    ),
)

WS_SUBSCRIBED = FrameShape(
    "subscribed",
    obj(
        {
            **_RID,
            "topics": {
                "type": "object",
                "additionalProperties": obj(
                    {"from_seq": ref("Seq"), "head_seq": ref("Seq"), "earliest_seq": ref("Seq")}
                ),
            },
            "topic_prefix": ref("WatchPrefixesResolved"),
        },
        ["topics"],
    ),
)
WS_UNSUBSCRIBED = FrameShape(
    "unsubscribed",
    obj({**_RID, "topics": {"type": "array", "items": ref("TopicName")}}, ["topics"]),
)
WS_PONG = FrameShape("pong", obj(_RID))
WS_ERROR = FrameShape(
    "error",
    obj(
        {
            **_RID,
            "code": {"type": "string"},
            "message": {"type": "string"},
            "detail": {"type": "object"},
        },
        ["code", "message"],
    ),
)

SSE_FRAMES = (SSE_ERROR, SSE_CONNECTION_ESTABLISHED, SSE_CONNECTION_CLOSING)
WS_FRAMES = (WS_SUBSCRIBED, WS_UNSUBSCRIBED, WS_PONG, WS_ERROR)
