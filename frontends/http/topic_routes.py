"""Topic routes: create/configure, state, list, delete (§1).

Rules:
1. PUT's body is the topic config object (§0.10); an empty body means all defaults.
   201 when the call created the topic, else 200.
2. Listing is filtered to the key's name prefixes (§0.2, ``listing.py``): a
   prefix-limited key never sees a name outside its allowlist.
3. A body's ``dead_letter`` is a name too: outside the key's allowlist it is 403 before
   the engine runs (``Principal.check_body``), so no key routes dead jobs to another tenant.
"""

from __future__ import annotations

from topics.engine import MAX_PAGE_SIZE
from topics.types import TopicSummary

from .listing import filtered_page
from .query_params import CURSOR, IF_EMPTY, PAGE_SIZE, PREFIX, TOUCH
from .requests import decode_json_object
from .routing import Route
from .state import HttpState, Reply, RequestContext

__all__ = ["ROUTES"]


async def put_topic(ctx: RequestContext) -> Reply:
    """PUT /v0/topics/:topic — create or configure (idempotent upsert, §1.1)."""
    config = decode_json_object(ctx.body) if ctx.body else None
    ctx.principal.check_body("topic_config", config)  # dead_letter (§0.2)
    result = await ctx.engine.put_topic(ctx.name, config)
    return ctx.json(result.to_dict(), 201 if result.created else 200)


async def get_topic(ctx: RequestContext) -> Reply:
    """GET /v0/topics/:topic — topic state (§1.2)."""
    state = await ctx.engine.get_topic(ctx.name, touch=ctx.query_bool(TOUCH, True))
    return ctx.json(state.to_dict())


async def delete_topic(ctx: RequestContext) -> Reply:
    """DELETE /v0/topics/:topic — delete the topic and everything in it (§1.4)."""
    result = await ctx.engine.delete_topic(ctx.name, if_empty=ctx.query_bool(IF_EMPTY, False))
    return ctx.json(result.to_dict())


async def list_topics(ctx: RequestContext) -> Reply:
    """GET /v0/topics — one page of topics, filtered to the key's allowlist (§1.3)."""
    engine = ctx.engine
    principal = ctx.principal
    touch = ctx.query_bool(TOUCH, False)

    async def fetch(
        prefix: str | None, page_size: int, cursor: str | None
    ) -> tuple[list[TopicSummary], str | None]:
        page = await engine.list_topics(
            prefix=prefix, page_size=page_size, cursor=cursor, touch=touch
        )
        return page.topics, page.next_cursor

    topics, next_cursor = await filtered_page(
        principal,
        ctx.query_str(PREFIX) or None,
        ctx.query_int(PAGE_SIZE, 100),
        ctx.query_str(CURSOR) or None,
        max_page_size=MAX_PAGE_SIZE,
        fetch=fetch,
        visible=lambda t: principal.may_touch(t.topic),
    )
    payload: dict[str, object] = {"topics": [t.to_dict() for t in topics]}
    if next_cursor is not None:
        payload["next_cursor"] = next_cursor
    return ctx.json(payload)


def register(quart_app: object, state: HttpState) -> None:
    """Bound each prefix-limited key's names by the per-key topic and router quotas (§11,
    topics/log/quotas.py): the engine checks them on every creation path, its own included."""
    state.engine.set_quota_namespaces(p.prefixes for p in state.keys.principals)


ROUTES = (
    Route(
        "GET", "/v0/topics", list_topics, query=(PREFIX, PAGE_SIZE, CURSOR, TOUCH), op="listTopics"
    ),
    Route("PUT", "/v0/topics/{topic}", put_topic, body=True, op="putTopic"),
    Route("GET", "/v0/topics/{topic}", get_topic, query=(TOUCH,), op="getTopic"),
    Route("DELETE", "/v0/topics/{topic}", delete_topic, query=(IF_EMPTY,), op="deleteTopic"),
)
