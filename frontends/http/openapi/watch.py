"""Watch sessions and their SSE stream (§7): schemas and operations."""

from __future__ import annotations

from topics.watch_types import TopicWatermarks, WatchCreated
from topics.wire.frame_shapes import SSE_CONNECTION_CLOSING, SSE_CONNECTION_ESTABLISHED, SSE_ERROR
from topics.wire.jsonschema import result_schema
from topics.wire.requests import WATCH, WATCH_TOPIC

from . import frames
from .errors import BODY, GATE
from .operation import BODY_NOTE, Operation, json_body, ok_response, sse_ok
from .schema import (
    Schema,
    boolean,
    obj,
    ref,
    u64,
    with_perf,
)


def schemas() -> dict[str, Schema]:
    """This module's entries of ``components.schemas``, in document order.

    Kept whole: a declarative table, read top to bottom like the document it makes.
    """
    return {
        "TopicWatermarks": result_schema(TopicWatermarks, "A watched topic's position."),
        WATCH_TOPIC.name: WATCH_TOPIC.json_schema(),
        "WatchPrefixOptions": obj(
            {
                "tail": boolean(
                    "Existing topics under the prefix start at their head (topics created "
                    "later always start at 0).",
                    default=False,
                ),
                "max_backlog": u64(
                    "Backlog limit of the topics under it (replaces the request's; 0: none)."
                ),
            },
            closed=True,
        ),
        "WatchPrefixes": {
            "description": "topic_prefix: every topic whose name starts with a prefix, now and "
            "created later (those join with an event: topic-added at from_seq 0, up to "
            "TOPICS_MAX_WATCH_TOPICS topics in all; past it join-refused). A prefix "
            "is narrowed to the key's allowlist; one that shares no name with it is 403. "
            "An object prefix -> options, or an array of prefixes.",
            "oneOf": [
                {
                    "type": "object",
                    "minProperties": 1,
                    "additionalProperties": {
                        "oneOf": [ref("WatchPrefixOptions"), {"type": "null"}]
                    },
                },
                {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
            ],
        },
        "WatchPrefixesResolved": {
            "type": "object",
            "description": "Each topic_prefix as it applies: the allowed prefixes it covers "
            "after narrowing to the key's allowlist.",
            "additionalProperties": obj(
                {
                    "covers": {"type": "array", "items": {"type": "string"}},
                    "tail": {"type": "boolean"},
                    "max_backlog": ref("Seq"),
                },
                ["covers", "tail", "max_backlog"],
            ),
        },
        WATCH.name: WATCH.json_schema(),
        "WatchSession": with_perf(result_schema(WatchCreated)),
        # SSE event payloads (the data: line of each event name).
        **frames.sse_schemas(),
        "SseErrorEvent": frames.sse_frame_schema(
            SSE_ERROR, "event: error — a per-stream problem (no id: line)."
        ),
        "SseConnectionEstablishedEvent": frames.sse_frame_schema(
            SSE_CONNECTION_ESTABLISHED,
            "event: connection-established — the first event after retry: "
            "(CONTRACT-NOTES 6); no id: line.",
        ),
        "SseConnectionClosingEvent": frames.sse_frame_schema(
            SSE_CONNECTION_CLOSING,
            "event: connection-closing — the server ends the stream on purpose "
            "(CONTRACT-NOTES 7); reconnect with Last-Event-ID.",
        ),
    }


#: The operations of this area, joined to their routes by ``Route.op`` (operationId).
OPERATIONS: tuple[Operation, ...] = (
    Operation(
        op_id="createWatch",
        tag="watch",
        summary="Create a multiplexed SSE watch session",
        description="§7.1. Returns a wid and the stream URL; 400/404 come here, before any "
        "stream is open. The key's prefix allowlist applies to every topic named (403); "
        "a topic_prefix is narrowed to it (403 when nothing is left). With on_backlog: "
        "error, a topic further behind than its max_backlog is 409 backlog_exceeded. "
        "Over TOPICS_MAX_WATCH_SESSIONS is 429 throttled. Idle sessions are collected "
        "after session_ttl_ms." + BODY_NOTE,
        params=["Content-Encoding"],
        body=json_body(WATCH.name, required=True, description="The subscription."),
        ok=ok_response("WatchSession", "The session and the resolved per-topic positions."),
        errors=(*GATE, *BODY, "topic_not_found", "backlog_exceeded"),
    ),
    Operation(
        op_id="openWatchStream",
        tag="watch",
        summary="Open the SSE stream of a watch session",
        description="§7.2-§7.6. Capability-gated: no scope is checked here; with auth on, "
        "the key that created the session must be presented (header or the dev-only "
        "?token=) and any other key is 401. Resumes from the session cursors, rewound by "
        "Last-Event-ID (a malformed one is ignored). Unknown/collected wid: 404 "
        "not_found; malformed: 400. Counts against TOPICS_MAX_SSE_CONNECTIONS(_PER_KEY) "
        "(429). The event payloads are in x-sse-events.",
        params=["Last-Event-ID"],
        ok=sse_ok("The stream is open."),
        errors=(
            "unauthorized",
            "throttled",
            "not_ready",
            "internal",
            "invalid_request",
            "not_found",
            "not_acceptable",
        ),
        extra={
            "x-sse-events": {
                "connection-established": ref("SseConnectionEstablishedEvent"),
                "connection-closing": ref("SseConnectionClosingEvent"),
                **frames.sse_event_refs(),
                "error": ref("SseErrorEvent"),
            }
        },
    ),
)
