"""The WebSocket data plane (§7.x): its message schemas and its upgrade operation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from topics.cursor_types import CursorInfo
from topics.types import WriteResult
from topics.wire.requests import WS_COMMANDS

from . import frames
from .errors import error_codes, response_headers, stream_error_codes
from .operation import Operation
from .schema import Schema, obj, ref


def schemas() -> dict[str, Schema]:
    """This module's entries of ``components.schemas``, in document order.

    Kept whole: a declarative table, read top to bottom like the document it makes.
    """

    def op(name: str, props: Mapping[str, Schema], required: Sequence[str] = ()) -> Schema:
        return obj({"op": {"const": name}, **props}, ["op", *required])

    rid = {"request_id": {"type": "string"}}
    topic_positions = {
        "type": "object",
        "additionalProperties": obj(
            {"from_seq": ref("Seq"), "head_seq": ref("Seq"), "earliest_seq": ref("Seq")}
        ),
    }
    return {
        "WsClientCommand": {
            "description": "A JSON text message from the client (§7.x).",
            "oneOf": [command.json_schema() for command in WS_COMMANDS],
        },
        "WsServerFrame": {
            "description": "A JSON text message from the server (§7.x). Clients must ignore "
            "unknown ops.",
            "oneOf": [
                op(
                    "subscribed",
                    {
                        **rid,
                        "topics": topic_positions,
                        "topic_prefix": ref("WatchPrefixesResolved"),
                    },
                    ["topics"],
                ),
                op(
                    "unsubscribed",
                    {**rid, "topics": {"type": "array", "items": ref("TopicName")}},
                    ["topics"],
                ),
                op("pong", rid),
                frames.ws_result_frame("committed", CursorInfo, rid),
                *frames.ws_event_frames(),
                frames.ws_result_frame(
                    "ack", WriteResult, rid, {"performance": ref("Performance")}
                ),
                op(
                    "error",
                    {
                        **rid,
                        "code": {"enum": sorted({*error_codes(), *stream_error_codes()})},
                        "message": {"type": "string"},
                        "detail": {"type": "object"},
                    },
                    ["code", "message"],
                ),
            ],
        },
    }


#: The operations of this area, joined to their routes by ``Route.op`` (operationId).
OPERATIONS: tuple[Operation, ...] = (
    Operation(
        op_id="openWebSocket",
        tag="websocket",
        summary="JSON-over-WebSocket subscribe/publish data plane",
        description="§7.x. Upgrade with a valid bearer key when auth is on (no scope is "
        "consumed at upgrade; each command is authorized by operation: subscribe needs "
        "read, publish write, publish with config also admin, and every name is checked "
        "against the prefix allowlist). Counts against the SSE connection caps. Messages "
        "are JSON text frames: x-websocket-messages gives their schemas; command errors "
        "arrive as {op: error} frames, not HTTP statuses. Refusals before the upgrade are "
        "HTTP answers with the error envelope; a GET without Upgrade is 400.",
        ok={
            "101": {
                "description": "Switching Protocols: the WebSocket is open.",
                "headers": response_headers(101),
            }
        },
        errors=(
            "invalid_request",
            "unauthorized",
            "throttled",
            "not_ready",
            "shutting_down",
            "internal",
        ),
        extra={
            "security": [{"bearerAuth": []}],
            "x-websocket-messages": {
                "client": ref("WsClientCommand"),
                "server": ref("WsServerFrame"),
            },
        },
    ),
)
