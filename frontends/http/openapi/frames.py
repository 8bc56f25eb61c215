"""The watch event frames of the SSE stream and the WebSocket, made from the event types.

Each watch event type of ``topics.watch_types`` (``WATCH_EVENT_TYPES``) declares its
frame's name (``FRAME``: the WebSocket op; the SSE event name is it with ``-`` for ``_``)
and its members (its ``wire`` fields), and its ``to_dict`` is what both streams send. So a
frame's schema here is ``result_schema`` of its type: the SSE payload under
``Sse<Name>Event`` and the WebSocket frame, ``op`` added, in ``WsServerFrame``. What stays
here is prose: each SSE event's description (a new event without one is described by its
type's docstring).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

from topics.watch_types import WATCH_EVENT_TYPES, WatchEvent
from topics.wire.frame_shapes import SSE_ERROR, WS_ERROR, FrameShape
from topics.wire.jsonschema import result_schema

from .errors import error_codes, stream_error_codes
from .schema import Schema, obj, ref

__all__ = [
    "sse_frame_schema",
    "sse_event_name",
    "sse_event_refs",
    "sse_schemas",
    "ws_event_frames",
    "ws_frame",
    "ws_result_frame",
]

#: Each SSE watch event's description, by the type's ``FRAME``.
_NOTES: dict[str, str] = {
    "record": "event: record; id: is the post-batch composite cursor.",
    "tombstone": "event: tombstone — explicit, never-silent loss.",
    "caught_up": "event: caught-up — the topic is drained to head.",
    "topic_deleted": "event: topic-deleted — terminal for that topic only.",
    "end_reached": "event: end-reached — the topic's to_ts/to_seq end was delivered up to "
    "next_from_seq; terminal for that topic only (it leaves the session).",
    "topic_added": "event: topic-added — a topic created under a watched prefix joined; "
    "its records follow from from_seq (0). Sent again on a resume until a later frame "
    "of it was sent.",
    "join_refused": "event: join-refused — a topic created under a watched prefix did not "
    "join: the session holds TOPICS_MAX_WATCH_TOPICS topics (joins count against it). "
    "Nothing of it is delivered; the frame has no id: (no cursor moved).",
    "backlog_exceeded": "event: backlog-exceeded — (from_seq, head_seq] is not replayed; "
    "the id: already points at head_seq. Re-snapshot, then take what follows.",
}


def sse_event_name(cls: type[WatchEvent]) -> str:
    """The ``event:`` name of ``cls``'s SSE frame."""
    return cls.FRAME.replace("_", "-")


def _schema_name(cls: type[WatchEvent]) -> str:
    return "Sse" + "".join(part.capitalize() for part in cls.FRAME.split("_")) + "Event"


def _note(cls: type[WatchEvent]) -> str:
    if cls.FRAME in _NOTES:
        return _NOTES[cls.FRAME]
    first = " ".join((cls.__doc__ or "").split("\n\n", 1)[0].split())
    return f"event: {sse_event_name(cls)} — {first}"


def sse_schemas() -> dict[str, Schema]:
    """``Sse<Name>Event``: the ``data:`` of each watch event's SSE frame."""
    unknown = sorted(set(_NOTES) - {cls.FRAME for cls in WATCH_EVENT_TYPES})
    if unknown:
        raise ValueError(f"_NOTES describes frames no watch event type has: {unknown}")
    return {_schema_name(cls): result_schema(cls, _note(cls)) for cls in WATCH_EVENT_TYPES}


def sse_event_refs() -> dict[str, Schema]:
    """The watch events' entries of an SSE stream's ``x-sse-events``."""
    return {sse_event_name(cls): ref(_schema_name(cls)) for cls in WATCH_EVENT_TYPES}


def ws_event_frames() -> list[Schema]:
    """The watch events' WebSocket frames: ``op`` (the type's ``FRAME``) and its members."""
    out: list[Schema] = []
    for cls in WATCH_EVENT_TYPES:
        schema = result_schema(cls)
        members = {"op": {"const": cls.FRAME}, **schema["properties"]}
        out.append(obj(members, ["op", *schema.get("required", ())]))
    return out


def ws_result_frame(
    op: str, cls: type, before: Mapping[str, Schema], after: Mapping[str, Schema] = {}
) -> Schema:
    """A WebSocket answer that carries a result type's ``to_dict`` (``committed``: the
    cursor, ``ack``: the write result): ``op``, the ``before`` members (``request_id``),
    the result's members, then ``after``'s (``performance``)."""
    schema = result_schema(cls)
    members = {"op": {"const": op}, **before, **schema["properties"], **after}
    return obj(members, ["op", *schema.get("required", ())])


# -- the frames that are no watch event (topics/wire/frame_shapes.py) ----------------------


def _members(shape: FrameShape) -> Schema:
    """``shape``'s members; an error frame's code lists every code a stream may carry
    (topics.errors' registry)."""
    properties: Schema = copy.deepcopy(shape.schema["properties"])
    code = "error_code" if shape is SSE_ERROR else "code" if shape is WS_ERROR else None
    if code is not None:
        properties[code]["enum"] = sorted({*error_codes(), *stream_error_codes()})
    return properties


def sse_frame_schema(shape: FrameShape, description: str) -> Schema:
    """The ``data:`` of an SSE frame built through ``shape``."""
    return obj(_members(shape), shape.schema.get("required", ()), description=description)


def ws_frame(shape: FrameShape) -> Schema:
    """A WebSocket frame built through ``shape``: ``op``, then its members."""
    members = {"op": {"const": shape.name}, **_members(shape)}
    return obj(members, ["op", *shape.schema.get("required", ())])
