"""The result schemas of the OpenAPI document match the result types (issue 16).

Every result dataclass of topics/types.py and topics/*_types.py whose ``to_dict`` makes
an API answer is paired with its schema in :data:`RESULTS`. For each pair, a fully
populated instance (every optional member set) gives the schema's property names, and a
minimal one (every optional member at its default or None) gives its ``required`` list
(``performance`` aside: the dispatcher adds it to every answer). Every result class must
be paired or listed in :data:`NOT_ANSWERS`, so a new one cannot be left undocumented.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import pytest

import topics.config
import topics.cursor_types
import topics.probe_types
import topics.queue_types
import topics.router_types
import topics.types
import topics.watch_types
from topics.config import TopicConfig
from topics.cursor_types import CursorInfo, DeleteCursorResult
from topics.errors import ThrottledError
from topics.frontends.http import ROUTE_MODULES
from topics.frontends.http.openapi import build_document
from topics.probe_types import HealthResult, ReadyResult
from topics.queue_types import (
    AckResult,
    ClaimResult,
    ExtendResult,
    Job,
    NackResult,
    RedriveResult,
)
from topics.router_types import (
    DeleteRouterResult,
    PutRouterResult,
    RouterConfig,
    RouterInfo,
    RouterPage,
    RouterSummary,
)
from topics.types import (
    DeleteRecordsResult,
    DeleteTopicResult,
    DiffResult,
    PutTopicResult,
    Record,
    Tombstone,
    TopicPage,
    TopicState,
    TopicSummary,
    WriteResult,
)
from topics.watch_types import (
    FRAMED_EVENT_TYPES,
    WATCH_EVENT_TYPES,
    BacklogExceededEvent,
    CaughtUpEvent,
    EndReachedEvent,
    JoinRefusedEvent,
    TombstoneEvent,
    TopicAddedEvent,
    TopicDeletedEvent,
    TopicWatermarks,
    WatchCreated,
    WatchEvent,
)
from topics.wire import sse, ws
from topics.wire.frame_shapes import (
    SSE_CONNECTION_CLOSING,
    SSE_CONNECTION_ESTABLISHED,
    SSE_ERROR,
    SSE_FRAMES,
    WS_ERROR,
    WS_FRAMES,
    WS_PONG,
    WS_SUBSCRIBED,
    WS_UNSUBSCRIBED,
    FrameShape,
)

#: (result type, its schema, members the route adds to ``to_dict``'s).
RESULTS: list[tuple[type, str, frozenset[str]]] = [
    (PutTopicResult, "TopicPutResult", frozenset()),
    (TopicState, "TopicState", frozenset()),
    (TopicSummary, "TopicSummary", frozenset()),
    (TopicPage, "TopicList", frozenset()),
    (DeleteTopicResult, "TopicDeleteResult", frozenset()),
    (TopicConfig, "TopicConfig", frozenset()),
    (WriteResult, "WriteResult", frozenset()),
    (DiffResult, "DiffResult", frozenset()),
    (Record, "Record", frozenset()),
    (Tombstone, "Tombstone", frozenset()),
    (DeleteRecordsResult, "DeleteRecordsResult", frozenset()),
    (PutRouterResult, "RouterPutResult", frozenset()),
    (RouterInfo, "RouterState", frozenset()),
    (RouterSummary, "RouterSummary", frozenset()),
    (RouterPage, "RouterList", frozenset()),
    (DeleteRouterResult, "RouterDeleteResult", frozenset()),
    (CursorInfo, "CursorInfo", frozenset()),
    (CursorInfo, "CursorItem", frozenset()),
    (DeleteCursorResult, "CursorDeleteResult", frozenset()),
    (Job, "Job", frozenset()),
    (ClaimResult, "ClaimResult", frozenset()),
    (AckResult, "AckResult", frozenset()),
    (NackResult, "NackResult", frozenset()),
    (ExtendResult, "ExtendResult", frozenset()),
    (RedriveResult, "RedriveResult", frozenset()),
    # POST /v0/watch adds the stream's URL to the engine's answer.
    (WatchCreated, "WatchSession", frozenset({"stream_url"})),
    (TopicWatermarks, "TopicWatermarks", frozenset()),
    (HealthResult, "Health", frozenset()),
    (ReadyResult, "Ready", frozenset()),
    # The watch events' frames (SSE data; the WebSocket frame adds op).
    (TombstoneEvent, "SseTombstoneEvent", frozenset()),
    (CaughtUpEvent, "SseCaughtUpEvent", frozenset()),
    (TopicDeletedEvent, "SseTopicDeletedEvent", frozenset()),
    (EndReachedEvent, "SseEndReachedEvent", frozenset()),
    (TopicAddedEvent, "SseTopicAddedEvent", frozenset()),
    (JoinRefusedEvent, "SseJoinRefusedEvent", frozenset()),
    (BacklogExceededEvent, "SseBacklogExceededEvent", frozenset()),
]

#: Members ``to_dict`` always makes that the wire may still leave out, and why.
OPTIONAL_ON_THE_WIRE: dict[str, frozenset[str]] = {
    # A diff or watch frame asked with include_data: false omits data; those records are
    # encoded by the read path (topics._core), not by Record.to_dict.
    "Record": frozenset({"data"}),
}

#: Result classes with a ``to_dict`` that is no API answer of its own, and why.
NOT_ANSWERS: dict[type, str] = {
    RouterConfig: "its members are spread into RouterPutResult and RouterState",
}

_MODULES = (
    topics.types,
    topics.config,
    topics.cursor_types,
    topics.probe_types,
    topics.queue_types,
    topics.router_types,
    topics.watch_types,
)


def _schemas() -> dict[str, Any]:
    routes = (route for module in ROUTE_MODULES for route in module.ROUTES)
    schemas: dict[str, Any] = build_document(routes)["components"]["schemas"]
    return schemas


def _value(hint: Any) -> Any:
    """A truthy value of ``hint`` (a dataclass: its fully populated instance)."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return _value(next(a for a in get_args(hint) if a is not type(None)))
    if origin is Literal:
        return get_args(hint)[0]
    if origin in (list, tuple, set, frozenset):
        return origin([_value(get_args(hint)[0])])
    if origin in (dict, typing.Mapping) or hint is dict:
        args = get_args(hint)
        return {"k": _value(args[1]) if args else 1}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _instance(hint, full=True)
    return {int: 1, float: 1.5, str: "x", bool: True, bytes: b"{}"}.get(hint, 1)


def _optional(hint: Any) -> bool:
    return get_origin(hint) in (Union, types.UnionType) and type(None) in get_args(hint)


def _instance(cls: type, *, full: bool) -> Any:
    """``cls`` with every member set (``full``), or with only what it cannot do without."""
    hints = get_type_hints(cls, vars(inspect.getmodule(cls)))
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if not f.init or f.name.startswith("_"):
            continue
        has_default = (
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        )
        if full:
            kwargs[f.name] = _value(hints[f.name])
        elif not has_default:
            kwargs[f.name] = None if _optional(hints[f.name]) else _value(hints[f.name])
    return cls(**kwargs)


@pytest.mark.parametrize(
    ("cls", "name", "added"), RESULTS, ids=[f"{c.__name__}-{n}" for c, n, _ in RESULTS]
)
def test_schema_properties_are_the_keys_to_dict_makes(
    cls: type, name: str, added: frozenset[str]
) -> None:
    schema = _schemas()[name]
    full = set(_instance(cls, full=True).to_dict()) | added
    minimal = (set(_instance(cls, full=False).to_dict()) | added) - OPTIONAL_ON_THE_WIRE.get(
        name, frozenset()
    )
    properties = set(schema["properties"]) - {"performance"}
    required = set(schema.get("required", ())) - {"performance"}
    assert properties == full, (
        f"{name}: documented but never made {sorted(properties - full)}; "
        f"made but not documented {sorted(full - properties)}"
    )
    assert required == minimal, (
        f"{name}: required but optional in {cls.__name__} {sorted(required - minimal)}; "
        f"always made but not required {sorted(minimal - required)}"
    )


def test_every_result_type_is_paired_with_its_schema() -> None:
    paired = {cls for cls, _, _ in RESULTS} | set(NOT_ANSWERS)
    results = {
        cls
        for module in _MODULES
        for cls in vars(module).values()
        if dataclasses.is_dataclass(cls)
        and isinstance(cls, type)
        and cls.__module__ == module.__name__
        and callable(getattr(cls, "to_dict", None))
    }
    assert results - paired == set(), "pair each result type with its schema in RESULTS"


def _sse_data(frame: bytes) -> dict[str, Any]:
    (event,) = [e for e in sse.SSEDecoder().feed(frame) if isinstance(e, sse.Event)]
    data: dict[str, Any] = json.loads(event.data)
    return data


@pytest.mark.parametrize("cls", WATCH_EVENT_TYPES, ids=lambda c: c.__name__)
def test_watch_frames_carry_exactly_their_documented_members(cls: type[WatchEvent]) -> None:
    """What topics.wire.sse and topics.wire.ws send for a watch event is what the
    document's frame schemas (made from the event type) list, in both streams."""
    schemas = _schemas()
    event = _instance(cls, full=True)
    if cls not in FRAMED_EVENT_TYPES:  # the record batch: its frames are built from bytes
        event = dataclasses.replace(event, records_json=b"[]")
    sse_members = set(_sse_data(sse.frame_for_event("c", event)))
    ws_frame = json.loads(ws.frame_for_event(event))
    name = "Sse" + "".join(p.capitalize() for p in cls.FRAME.split("_")) + "Event"
    assert set(schemas[name]["properties"]) == sse_members
    assert set(schemas[name]["required"]) == sse_members
    (documented,) = [
        f for f in schemas["WsServerFrame"]["oneOf"] if f["properties"]["op"]["const"] == cls.FRAME
    ]
    assert ws_frame["op"] == cls.FRAME
    assert set(documented["properties"]) == set(ws_frame) == sse_members | {"op"}


def _every_member_frames() -> list[tuple[FrameShape, dict[str, Any]]]:
    """Each frame of topics/wire/frame_shapes.py as its builder makes it, every optional
    member given."""
    exc = ThrottledError("slow down", detail={"retry_after_ms": 5})
    marks = {"a": {"from_seq": 1, "head_seq": 2, "earliest_seq": 0}}
    return [
        (
            SSE_ERROR,
            _sse_data(sse.error_frame(exc, request_id="r", topics=["a"], retry_after_ms=9)),
        ),
        (SSE_CONNECTION_ESTABLISHED, _sse_data(sse.connection_established_frame("r", "w", marks))),
        (SSE_CONNECTION_CLOSING, _sse_data(sse.connection_closing_frame("superseded", "r", 9))),
        (WS_SUBSCRIBED, json.loads(ws.subscribed_frame("r", marks, {"p": {"covers": []}}))),
        (WS_UNSUBSCRIBED, json.loads(ws.unsubscribed_frame("r", ["a"]))),
        (WS_PONG, json.loads(ws.pong_frame("r"))),
        (WS_ERROR, json.loads(ws.error_frame("r", exc))),
    ]


@pytest.mark.parametrize("index", range(len(SSE_FRAMES) + len(WS_FRAMES)))
def test_declared_frames_are_sent_and_documented_as_declared(index: int) -> None:
    """The frames built through topics/wire/frame_shapes.py carry their declared members
    in order, and the document's schema of each lists exactly those."""
    shape, sent = _every_member_frames()[index]
    schemas = _schemas()
    if shape in SSE_FRAMES:
        assert list(sent) == list(shape.order)
        name = "Sse" + "".join(p.capitalize() for p in shape.name.split("-")) + "Event"
        assert list(schemas[name]["properties"]) == list(shape.order)
    else:
        assert list(sent) == ["op", *shape.order]
        (documented,) = [
            f
            for f in schemas["WsServerFrame"]["oneOf"]
            if f["properties"]["op"]["const"] == shape.name
        ]
        assert list(documented["properties"]) == ["op", *shape.order]


def test_a_frame_member_that_is_not_declared_is_refused() -> None:
    with pytest.raises(TypeError, match="declares no member"):
        WS_PONG.build({"request_id": "r", "latency_ms": 1})
