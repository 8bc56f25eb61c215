"""Router endpoints of the Engine facade (contract §6) and their engine hooks.

The Engine inherits this mixin; the router subsystem itself lives in ``_routers.py``
(registry, graph, persistence) and ``_router_worker.py`` (forwarding).
Hooks the Engine calls: ``_init_routers`` (construction), ``_start_routers`` (once the
engine serves; starts forwarding workers in its nursery), ``_routers_on_topic_deleted``
(cascade, returns the removed router names) and ``_router_extension`` (persistence).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import trio

from ._routers import Routers

if TYPE_CHECKING:
    from ._log import TopicLog
    from ._persistence.store import StoreExtension
    from .engine import Engine
    from .router_types import DeleteRouterResult, PutRouterResult, RouterInfo, RouterPage

__all__ = ["RouterOps"]


class RouterOps:
    _router_set: Routers

    async def put_router(
        self, router: str, body: Mapping[str, Any] | None = None
    ) -> PutRouterResult:
        """Create a router or apply a changed definition (idempotent upsert, §6).

        Forwarding is asynchronous and derived: a background worker copies every record
        appended to ``source`` after the router's creation into ``dest``; a write to
        ``source`` never waits for it. A PUT that changes ``source`` restarts at the new
        source's head; any other change keeps the router's cursor. An absent ``source``
        is auto-created on the router's behalf (default topic config), and so is an absent
        ``dest`` unless ``create_dest`` is false; only once every check passed, so a
        refused router leaves no topic behind.

        Args:
            router: the router name (topic charset plus ``>``, e.g. ``"orders->audit"``).
            body: ``source`` and ``dest`` (required), ``preserve_node``, ``preserve_tag``,
                ``create_dest``, ``filter``, ``allow_cycle``, ``guarantee``.

        Returns: ``created`` True only when this call made the router.

        Raises: invalid_request (bad field, missing source/dest, source == dest, bad
        filter), topic_not_found (dest absent with ``create_dest`` false),
        router_cycle (``detail.cycle``), topic_exists_incompatible (``detail.reason``
        ``router_dest_fan_in``), throttled (``max_routers``, or ``max_topics`` and the
        namespace quotas for the topics it would create).

        Example::

            await engine.put_router("orders->audit", {"source": "orders", "dest": "audit"})
        """
        return await self._router_set.put(router, body)

    async def get_router(self, router: str) -> RouterInfo:
        """A router's definition and forwarding state (§6). Raises: router_not_found."""
        return await self._router_set.get(router)

    async def list_routers(
        self,
        *,
        prefix: str | None = None,
        source: str | None = None,
        dest: str | None = None,
        page_size: int = 100,
        cursor: str | None = None,
    ) -> RouterPage:
        """One page of routers in name order, optionally only those with this ``source``
        or ``dest`` (§6). ``next_cursor`` is set only when more follow.

        Raises: invalid_request (bad page_size, malformed cursor).
        """
        return await self._router_set.page(prefix, source, dest, page_size, cursor)

    async def delete_router(self, router: str) -> DeleteRouterResult:
        """Delete a router: its worker stops at once; copies already in dest stay (§6).
        Absent: ``deleted=False``."""
        return await self._router_set.delete(router)

    @property
    def router_count(self) -> int:
        """Routers configured (the ``topics_routers`` gauge, §8.3)."""
        return len(self._router_set)

    # -- engine hooks -------------------------------------------------------------------

    def _init_routers(self) -> None:
        """Set up router state (no routers exist yet)."""
        self._router_set = Routers(cast("Engine", self))

    def _start_routers(self, nursery: trio.Nursery) -> None:
        """Adopt recovered routers and start a forwarding worker per router."""
        self._router_set.start(nursery)

    def _routers_on_topic_deleted(self, log: TopicLog) -> list[str]:
        """Remove the routers that have ``log`` as source or dest; return their names."""
        return self._router_set.on_topic_deleted(log)

    def _router_extension(self) -> StoreExtension | None:
        return self._router_set
