"""Router routes: create/configure, get, list, delete (§6).

Rules:
1. PUT's body is the router definition; 201 when the call created the router, else 200.
2. The key's name prefixes (§0.2) apply to the router name (the dispatcher checks the
   path) and to the body's ``source`` and ``dest`` (``Principal.check_body``): a router may
   not read from or write (and auto-create) a topic outside the allowlist. 403 before the
   engine is called. GET, PUT and DELETE of an existing router whose source or dest is
   outside the allowlist are 403 too (another key made it; listing hides it as well).
3. Listing is filtered to the key's allowlist: a router is listed only when its name,
   source and dest are all names the key may touch, so a prefix-limited key never learns
   another tenant's topic names. With one allowed prefix the listing is narrowed in the
   engine; otherwise engine pages are scanned and filtered (a page may be short while
   ``next_cursor`` is present), as for topics.
"""

from __future__ import annotations

from topics.errors import ForbiddenError, RouterNotFoundError
from topics.router_types import RouterSummary

from .listing import filtered_page
from .query_params import CURSOR, PAGE_SIZE, PREFIX, ROUTER_DEST, ROUTER_SOURCE
from .requests import decode_json_object
from .routing import Route
from .state import Reply, RequestContext

__all__ = ["ROUTES"]

_MAX_PAGE_SIZE = 1000


async def put_router(ctx: RequestContext) -> Reply:
    """PUT /v0/routers/:router — create or configure (idempotent upsert, §6)."""
    body = decode_json_object(ctx.body) if ctx.body else {}
    ctx.principal.check_body("router", body)
    await _check_existing(ctx)  # replacing a router is deleting the old one
    result = await ctx.engine.put_router(ctx.name, body)
    return ctx.json(result.to_dict(), 201 if result.created else 200)


async def get_router(ctx: RequestContext) -> Reply:
    """GET /v0/routers/:router — definition and forwarding state (§6)."""
    info = await ctx.engine.get_router(ctx.name)
    _check_endpoints(ctx, info.config.source, info.config.dest)
    return ctx.json(info.to_dict())


async def delete_router(ctx: RequestContext) -> Reply:
    """DELETE /v0/routers/:router — stop forwarding; copies in dest stay (§6)."""
    await _check_existing(ctx)
    result = await ctx.engine.delete_router(ctx.name)
    return ctx.json(result.to_dict())


def _check_endpoints(ctx: RequestContext, source: str, dest: str) -> None:
    """Rule 2 for a router that exists: one the key could not have created (another key
    pointed it at a name outside this key's allowlist) is not this key's to read or delete.
    The answer does not repeat the foreign name (listing hides such routers too)."""
    principal = ctx.principal
    for field, name in (("source", source), ("dest", dest)):
        if not principal.may_touch(name):
            raise ForbiddenError(
                f"router {ctx.name!r} has a {field} outside this api key's name prefix allowlist",
                detail={"router": ctx.name, "field": field},
            )


async def _check_existing(ctx: RequestContext) -> None:
    """Rule 2 before a PUT or DELETE of a router that may exist (free without prefixes)."""
    if not ctx.principal.prefixes:
        return
    try:
        info = await ctx.engine.get_router(ctx.name)
    except RouterNotFoundError:
        return  # creating it, or deleting nothing (200, deleted: false)
    _check_endpoints(ctx, info.config.source, info.config.dest)


async def list_routers(ctx: RequestContext) -> Reply:
    """GET /v0/routers — one page of routers, filtered to the key's allowlist (rule 3)."""
    source = ctx.query_str(ROUTER_SOURCE) or None
    dest = ctx.query_str(ROUTER_DEST) or None
    engine = ctx.engine
    principal = ctx.principal

    async def fetch(
        prefix: str | None, page_size: int, cursor: str | None
    ) -> tuple[list[RouterSummary], str | None]:
        page = await engine.list_routers(
            prefix=prefix, source=source, dest=dest, page_size=page_size, cursor=cursor
        )
        return page.routers, page.next_cursor

    routers, next_cursor = await filtered_page(
        principal,
        ctx.query_str(PREFIX) or None,
        ctx.query_int(PAGE_SIZE, 100),
        ctx.query_str(CURSOR) or None,
        max_page_size=_MAX_PAGE_SIZE,
        fetch=fetch,
        visible=lambda r: all(principal.may_touch(n) for n in (r.router, r.source, r.dest)),
    )
    payload: dict[str, object] = {"routers": [r.to_dict() for r in routers]}
    if next_cursor is not None:
        payload["next_cursor"] = next_cursor
    return ctx.json(payload)


ROUTES = (
    Route(
        "GET",
        "/v0/routers",
        list_routers,
        query=(PREFIX, ROUTER_SOURCE, ROUTER_DEST, PAGE_SIZE, CURSOR),
        op="listRouters",
    ),
    Route("PUT", "/v0/routers/{router}", put_router, body=True, op="putRouter"),
    Route("GET", "/v0/routers/{router}", get_router, op="getRouter"),
    Route("DELETE", "/v0/routers/{router}", delete_router, op="deleteRouter"),
)
