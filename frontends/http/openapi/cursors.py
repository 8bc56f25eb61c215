"""Named cursors (a consumer group's position): schemas and operations."""

from __future__ import annotations

from topics.cursor_types import CursorInfo, DeleteCursorResult
from topics.cursors.store import CURSOR_NAME_RE
from topics.wire.jsonschema import result_schema
from topics.wire.requests import CURSOR_COMMIT

from .errors import BODY, GATE, NAMED, STORE
from .operation import BODY_NOTE, Operation, json_body, ok_response
from .schema import Schema, obj, ref, with_perf


def schemas() -> dict[str, Schema]:
    """This module's entries of ``components.schemas``, in document order."""
    info = result_schema(CursorInfo)
    return {
        "CursorName": {
            "type": "string",
            "pattern": f"^{CURSOR_NAME_RE.pattern}$",
            "description": "A named cursor: 1-255 chars of A-Z a-z 0-9 . _ : -, starting "
            "alphanumeric.",
        },
        "CursorInfo": with_perf(info),
        "CursorItem": info,
        "CursorList": with_perf(
            obj(
                {
                    "topic": ref("TopicName"),
                    "cursors": {"type": "array", "items": ref("CursorItem")},
                },
                ["topic", "cursors"],
            )
        ),
        CURSOR_COMMIT.name: CURSOR_COMMIT.json_schema(),
        "CursorDeleteResult": with_perf(result_schema(DeleteCursorResult)),
    }


#: The operations of this area, joined to their routes by ``Route.op`` (operationId).
OPERATIONS: tuple[Operation, ...] = (
    Operation(
        op_id="listCursors",
        tag="cursors",
        summary="List a topic's named cursors with their lag",
        description="Every cursor of the topic in name order. lag is head_seq - seq.",
        ok=ok_response("CursorList", "The cursors."),
        errors=(*GATE, *NAMED, "topic_not_found"),
    ),
    Operation(
        op_id="getCursor",
        tag="cursors",
        summary="One named cursor",
        description="404 cursor_not_found when the topic holds no such cursor (a read "
        "from it would start at 0).",
        params=["cursor_name"],
        ok=ok_response("CursorInfo", "The cursor and its lag."),
        errors=(*GATE, *NAMED, "topic_not_found", "cursor_not_found"),
    ),
    Operation(
        op_id="commitCursor",
        tag="cursors",
        summary="Commit a seq to a named cursor (optionally compare-and-set)",
        description="Creates the cursor or moves it (back too), never past head_seq (400). "
        "With expect_seq it commits only if the committed seq is that (a cursor never "
        "committed counts as 0), else 409 cursor_conflict and nothing changes. Synced "
        "before the answer, like topic config; dropped with its topic. Needs the read "
        "scope (a consumer commits its own progress)." + BODY_NOTE,
        params=["cursor_name", "Content-Encoding"],
        body=json_body(CURSOR_COMMIT.name, required=True, description="The seq to commit."),
        ok=ok_response("CursorInfo", "The cursor as committed."),
        errors=(*GATE, *STORE, *BODY, "topic_not_found", "cursor_conflict"),
    ),
    Operation(
        op_id="deleteCursor",
        tag="cursors",
        summary="Forget a named cursor",
        description="Idempotent: an absent cursor answers 200 with deleted: false.",
        params=["cursor_name"],
        ok=ok_response("CursorDeleteResult", "Whether a cursor was deleted."),
        errors=(*GATE, *STORE, *NAMED, "topic_not_found"),
    ),
)
