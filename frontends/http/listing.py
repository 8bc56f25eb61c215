"""Listings a prefix-limited key may see (§0.2), shared by the topic and router lists.

Rules:
1. A key without prefixes lists what the engine lists, one engine page per request.
2. A key whose allowlist leaves nothing matching the asked ``prefix`` gets an empty page
   and no cursor; one that leaves exactly one prefix asks the engine for that prefix only.
3. Otherwise engine pages are scanned and filtered by ``visible`` (the names an item
   carries must all be allowed), up to :data:`MAX_FILTERED_PAGES` pages, so a page may
   hold fewer than ``page_size`` items while a ``next_cursor`` is present: the work one
   request causes stays bounded whatever the key's prefixes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from topics.auth import Principal

__all__ = ["MAX_FILTERED_PAGES", "Fetch", "filtered_page"]

T = TypeVar("T")

#: How many engine pages one filtered listing may scan before answering (rule 3).
MAX_FILTERED_PAGES = 16

#: ``(prefix, page_size, cursor) -> (items, next_cursor)``: one engine page.
Fetch = Callable[[str | None, int, str | None], Awaitable[tuple[Sequence[T], str | None]]]


async def filtered_page(
    principal: Principal,
    prefix: str | None,
    page_size: int,
    cursor: str | None,
    *,
    max_page_size: int,
    fetch: Fetch[T],
    visible: Callable[[T], bool],
) -> tuple[list[T], str | None]:
    """One page of what ``principal`` may see under ``prefix`` (rules 1-3)."""
    narrowed = principal.list_prefixes(prefix)
    if narrowed is None:
        items, next_cursor = await fetch(prefix, page_size, cursor)
        return list(items), next_cursor
    if not narrowed:
        return [], None
    scoped = narrowed[0] if len(narrowed) == 1 else prefix
    # A page_size below 1 goes to the engine as asked (its 400), not turned into 1 here.
    want = min(page_size, max_page_size) if page_size > 0 else 0
    found: list[T] = []
    next_cursor = cursor
    for _ in range(MAX_FILTERED_PAGES):
        items, next_cursor = await fetch(
            scoped, max(1, want - len(found)) if want else page_size, next_cursor
        )
        found += [item for item in items if visible(item)]
        if next_cursor is None or len(found) >= want:
            break
    return found, next_cursor
