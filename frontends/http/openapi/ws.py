"""The WebSocket data plane (§7.x): its message schemas and its upgrade operation."""

from __future__ import annotations

from topics.cursor_types import CursorInfo
from topics.types import WriteResult
from topics.wire.frame_shapes import WS_ERROR, WS_PONG, WS_SUBSCRIBED, WS_UNSUBSCRIBED
from topics.wire.requests import WS_COMMANDS

from . import frames
from .errors import response_headers
from .operation import Operation
from .schema import Schema, ref


def schemas() -> dict[str, Schema]:
    """This module's entries of ``components.schemas``, in document order: the commands
    (``topics.wire.requests``), the server's frames (``topics.wire.frame_shapes``, the
    watch events of ``topics.watch_types``, the cursor and write results)."""

    rid = {"request_id": {"type": "string"}}
    return {
        "WsClientCommand": {
            "description": "A JSON text message from the client (§7.x).",
            "oneOf": [command.json_schema() for command in WS_COMMANDS],
        },
        "WsServerFrame": {
            "description": "A JSON text message from the server (§7.x). Clients must ignore "
            "unknown ops.",
            "oneOf": [
                *(frames.ws_frame(shape) for shape in (WS_SUBSCRIBED, WS_UNSUBSCRIBED, WS_PONG)),
                frames.ws_result_frame("committed", CursorInfo, rid),
                *frames.ws_event_frames(),
                frames.ws_result_frame(
                    "ack", WriteResult, rid, {"performance": ref("Performance")}
                ),
                frames.ws_frame(WS_ERROR),
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
