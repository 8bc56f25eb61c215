"""Named cursor routes: a topic's server-side consumer positions (topics/cursors/ops.py).

Rules:
1. The cursor name is the path's last segment; the topic segment is checked against the
   key's prefix allowlist by the dispatcher, and a cursor lives inside its topic, so the
   allowlist covers it too.
2. Scopes (topics/auth.py ROUTE_SCOPES): list, get and commit need ``read`` (a consumer
   commits its own progress, as Kafka's offset commit needs only READ); delete needs
   ``delete``.
3. PUT's body is ``{"seq": n}`` with an optional ``"expect_seq": m`` (compare-and-set:
   409 ``cursor_conflict`` on a mismatch, nothing changed).
"""

from __future__ import annotations

from topics.wire.requests import CURSOR_COMMIT

from .requests import decode_json_object
from .routing import Route
from .state import Reply, RequestContext

__all__ = ["PUT_FIELDS", "ROUTES"]

#: The members a commit body accepts (declared in topics/wire/requests.py).
PUT_FIELDS = CURSOR_COMMIT.names


def _cursor_name(ctx: RequestContext) -> str:
    return ctx.path.rpartition("/")[2]


async def list_cursors(ctx: RequestContext) -> Reply:
    """GET /v0/topics/:topic/cursors — every cursor of the topic with its lag."""
    cursors = await ctx.engine.list_cursors(ctx.name)
    return ctx.json({"topic": ctx.name, "cursors": [c.to_dict() for c in cursors]})


async def get_cursor(ctx: RequestContext) -> Reply:
    """GET /v0/topics/:topic/cursors/:cursor — one cursor (404 cursor_not_found)."""
    info = await ctx.engine.get_cursor(ctx.name, _cursor_name(ctx))
    return ctx.json(info.to_dict())


async def put_cursor(ctx: RequestContext) -> Reply:
    """PUT /v0/topics/:topic/cursors/:cursor — commit a seq (rule 3)."""
    args = decode_json_object(ctx.body, PUT_FIELDS)
    info = await ctx.engine.put_cursor(
        ctx.name,
        _cursor_name(ctx),
        args.get("seq"),  # type: ignore[arg-type]  # the engine type-checks (None: 400)
        expect_seq=args.get("expect_seq"),
        owner=ctx.principal,
    )
    return ctx.json(info.to_dict())


async def delete_cursor(ctx: RequestContext) -> Reply:
    """DELETE /v0/topics/:topic/cursors/:cursor — forget a cursor."""
    result = await ctx.engine.delete_cursor(ctx.name, _cursor_name(ctx))
    return ctx.json(result.to_dict())


ROUTES = (
    Route("GET", "/v0/topics/{topic}/cursors", list_cursors, op="listCursors"),
    Route("GET", "/v0/topics/{topic}/cursors/{cursor}", get_cursor, op="getCursor"),
    Route("PUT", "/v0/topics/{topic}/cursors/{cursor}", put_cursor, body=True, op="commitCursor"),
    Route("DELETE", "/v0/topics/{topic}/cursors/{cursor}", delete_cursor, op="deleteCursor"),
)
