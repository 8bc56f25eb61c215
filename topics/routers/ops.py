"""Routers: the registry, the source->dest graph and their persistence (contract §6).

Role: hold every router's definition and forwarding state, validate a PUT against the
graph (fan-in, cycles, the router cap), start and stop one forwarding worker per router
(``routers/worker.py`` holds the ``Router`` and the forwarding itself) and keep all of it through restarts as
a store extension.

Rules:
1. Forwarding is derived: copies are never logged as WAL appends. What is durable is the
   definition (ROUTER_PUT / ROUTER_DELETE entries, synced) and the checkpoint section
   (definitions, cursors, counters, gap markers), which the store snapshots in the same
   synchronous step as the dest segments, so a recovered cursor always matches the
   recovered dest: the copies after it are re-derived from the source.
2. A derived dest is single-source: a router whose dest is already fed by a router from a
   different source is refused (409 topic_exists_incompatible, reason router_dest_fan_in).
3. DAG by default: a router that would close a directed cycle is refused (409
   router_cycle, ``detail.cycle`` = [source, dest, ..., source]) unless it sets
   ``allow_cycle``. A router whose edge lies on a cycle (same strongly connected
   component) stamps loop-prevention state into the copies it makes.
4. Checks come before any change, in this order: name and body (400), dest existence
   when ``create_dest`` is false (404), fan-in and cycle (409), ``max_routers`` (429),
   ``max_topics`` (and the namespace quotas) for the topics it would create. A source or
   dest that does not exist is auto-created on the router's behalf (§0.2, §6) only after
   every check passed, so a refused router leaves no phantom topic behind.
5. A new router starts at its source's current head; a PUT that changes the source
   restarts the cursor at the new source's head; any other change keeps the cursor.
6. Every change of the router set is synchronous (registry, graph, worker start/stop),
   then the WAL entries are awaited, so no other task ever sees a half-applied change.
7. Deleting a topic deletes every router that has it as source or dest (§1.4), logged
   before the topic delete itself (whose synced entry also syncs them).
"""

from __future__ import annotations

import bisect
import secrets
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import trio
import ujson

from .. import _args
from .._names import check_router_name
from .._storage import entries
from ..config import TopicConfig
from ..errors import (
    InvalidRequestError,
    RouterCycleError,
    RouterNotFoundError,
    ThrottledError,
    TopicExistsIncompatibleError,
    TopicNotFoundError,
)
from ..log.registry import decode_list_cursor, encode_list_cursor
from ..log.topic_log import TopicLog
from ..router_types import (
    DeleteRouterResult,
    PutRouterResult,
    RouterConfig,
    RouterInfo,
    RouterPage,
    RouterSummary,
)
from .config import ROUTER_FIELDS, parse_router_config
from .worker import Router, run_router

if TYPE_CHECKING:
    from .._persistence.appender import Appender
    from .._storage.wal import WalTicket

__all__ = [
    "ROUTER_DELETE",
    "ROUTER_PUT",
    "Routers",
    "parse_router_config",
]

#: WAL entry types (store extension range, entries.FIRST_EXTENSION_ENTRY and up).
ROUTER_PUT = entries.FIRST_EXTENSION_ENTRY  # JSON: name, config, inc, ids, cursor|null
ROUTER_DELETE = entries.FIRST_EXTENSION_ENTRY + 1  # JSON: {"name": ...}
SECTION_KEY = "routers"
MAX_PAGE_SIZE = 1000
# The router body fields under their old name here (tests/unit/test_auth_names.py).
_FIELDS = ROUTER_FIELDS


class Routers:
    """The router set of one engine; also its :class:`~topics._persistence.store.StoreExtension`."""

    key = SECTION_KEY
    entry_types = frozenset({ROUTER_PUT, ROUTER_DELETE})

    def __init__(self, appender: Appender) -> None:
        self.appender = appender
        appender.router_names = lambda: self.names
        self.routers: dict[str, Router] = {}
        self.names: list[str] = []
        self._by_source: dict[str, set[str]] = {}
        self._by_dest: dict[str, set[str]] = {}
        self._scc: dict[str, int] = {}
        self._nursery: trio.Nursery | None = None
        self._restored: tuple[Any, list[tuple[int, bytes]]] | None = None

    def __len__(self) -> int:
        return len(self.routers)

    # -- the endpoints: Engine.put_router, get_router, list_routers, delete_router --------

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
        name = check_router_name(router)
        config = parse_router_config(body)
        app = self.appender
        app.check_serving()
        old = self.routers.get(name)
        if old is not None and old.config == config:
            await trio.lowlevel.checkpoint()  # every engine call is a trio checkpoint
            return PutRouterResult(name, False, config)
        source, dest = self._check_put(name, config, old)
        created = [t for t, log in ((config.source, source), (config.dest, dest)) if log is None]
        # Auto-create (rule 4): only now that nothing can refuse the router any more.
        if source is None:
            source = app.registry.create(config.source, TopicConfig())
        if dest is None:
            dest = app.registry.create(config.dest, TopicConfig())
        # Rule 6: everything below up to the awaits is one synchronous step.
        restart = old is None or old.config.source != config.source
        fresh = Router(name, config, _new_inc())
        fresh.cursor = source.head  # rule 5
        if old is not None:
            self._unlink(old)
            if not restart:
                fresh.inc, fresh.cursor = old.inc, old.cursor
            fresh.forwarded_total = old.forwarded_total
            fresh.dropped_total = old.dropped_total
        fresh.source_id, fresh.dest_id = source.topic_id, dest.topic_id
        self._link(fresh)
        made = [log for log in (source, dest) if log.name in created]
        tickets = self._log_put(fresh, made, restart)
        self._spawn(fresh)
        for ticket in tickets:
            await app.wait(ticket)
        if not tickets:
            await trio.lowlevel.checkpoint()
        return PutRouterResult(name, old is None, config)

    async def get_router(self, router: str) -> RouterInfo:
        """A router's definition and forwarding state (§6). Raises: router_not_found."""
        name = check_router_name(router)
        self.appender.check_ready()
        held = self.routers.get(name)
        if held is None:
            raise RouterNotFoundError.for_router(name)
        source = self.appender.registry.get(held.config.source)
        lag = max(0, source.head - held.cursor) if source is not None else 0
        await trio.lowlevel.checkpoint()
        return RouterInfo(
            name, held.config, held.cursor, held.forwarded_total, held.dropped_total, lag
        )

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
        for field, value in (("prefix", prefix), ("source", source), ("dest", dest)):
            if value is not None and not isinstance(value, str):
                raise InvalidRequestError.for_field(field, "must be a string")
        size = _args.u64("page_size", page_size)
        if size == 0:
            raise InvalidRequestError.for_field("page_size", "must be at least 1")
        size = min(size, MAX_PAGE_SIZE)
        after = decode_list_cursor(cursor) if cursor is not None else None
        self.appender.check_ready()
        out: list[RouterSummary] = []
        last: str | None = None
        for router in self._iter_from(prefix or "", after):
            if (source is not None and router.config.source != source) or (
                dest is not None and router.config.dest != dest
            ):
                continue
            if len(out) == size:
                last = out[-1].router  # another match follows: there is a next page
                break
            cfg = router.config
            out.append(
                RouterSummary(
                    router.name, cfg.source, cfg.dest, cfg.guarantee, router.forwarded_total
                )
            )
        await trio.lowlevel.checkpoint()
        return RouterPage(out, encode_list_cursor(last) if last is not None else None)

    async def delete_router(self, router: str) -> DeleteRouterResult:
        """Delete a router: its worker stops at once; copies already in dest stay (§6).
        Absent: ``deleted=False``."""
        name = check_router_name(router)
        self.appender.check_serving()
        held = self.routers.get(name)
        if held is not None:
            self._unlink(held)
        ticket = self._log_delete(name) if held is not None else None
        if ticket is not None:
            await self.appender.wait(ticket)
        else:
            await trio.lowlevel.checkpoint()
        return DeleteRouterResult(name, held is not None)

    def on_topic_deleted(self, log: TopicLog) -> list[str]:
        """Rule 7: remove (and log the removal of) every router touching ``log``."""
        names = sorted(self._by_source.get(log.name, set()) | self._by_dest.get(log.name, set()))
        for name in names:
            self._unlink(self.routers[name])
            self._log_delete(name)  # synced by the TOPIC_DELETE entry right behind it
        return names

    # -- validation (rules 2-4) -----------------------------------------------------------

    def _check_put(
        self, name: str, config: RouterConfig, old: Router | None
    ) -> tuple[TopicLog | None, TopicLog | None]:
        """Rule 4's checks after the body's; returns the source and dest that exist."""
        app = self.appender
        source = app.registry.get(config.source)
        dest = app.registry.get(config.dest)
        if dest is None and not config.create_dest:
            raise _topic_missing(config.dest, "dest")
        self._check_fan_in(name, config)
        if not config.allow_cycle:
            self._check_cycle(name, config)
        cap = app.limits.max_routers
        if old is None and cap and len(self.routers) >= cap:
            raise ThrottledError.for_limit("max_routers", cap)
        if old is None:
            app.check_router_quota(name)
        missing = [t for t, log in ((config.source, source), (config.dest, dest)) if log is None]
        for i, topic in enumerate(missing):
            app.check_topic_cap(topic, missing[:i])
        return source, dest

    def _check_fan_in(self, name: str, config: RouterConfig) -> None:
        for other in sorted(self._by_dest.get(config.dest, ())):
            feeder = self.routers[other]
            if other != name and feeder.config.source != config.source:
                raise TopicExistsIncompatibleError(
                    f'topic "{config.dest}" is already the dest of router "{other}" from '
                    f'"{feeder.config.source}"; a derived dest has a single source',
                    detail={
                        "reason": "router_dest_fan_in",
                        "topic": config.dest,
                        "router": other,
                        "source": feeder.config.source,
                    },
                )

    def _check_cycle(self, name: str, config: RouterConfig) -> None:
        """Refuse the edge source->dest if dest already reaches source (ignoring ``name``'s
        own current edge, which a PUT replaces)."""
        parent: dict[str, str] = {config.dest: config.dest}
        frontier = [config.dest]
        while frontier:
            topic = frontier.pop()
            if topic == config.source:
                path = [topic]
                while path[-1] != config.dest:
                    path.append(parent[path[-1]])
                cycle = [config.source, *reversed(path)]
                raise RouterCycleError(
                    f"router {name!r} would close the cycle {' -> '.join(cycle)}; "
                    "set allow_cycle to permit it (loops are then broken at run time)",
                    detail={"router": name, "cycle": cycle},
                )
            for other in self._by_source.get(topic, ()):
                if other == name:
                    continue
                nxt = self.routers[other].config.dest
                if nxt not in parent:
                    parent[nxt] = topic
                    frontier.append(nxt)

    # -- the graph --------------------------------------------------------------------

    def _link(self, router: Router) -> None:
        name = router.name
        if name not in self.routers:
            bisect.insort(self.names, name)
        self.routers[name] = router
        self._by_source.setdefault(router.config.source, set()).add(name)
        self._by_dest.setdefault(router.config.dest, set()).add(name)
        self._recompute_cycles()

    def _unlink(self, router: Router) -> None:
        """Stop the router's worker at once and take it out of the set and the graph."""
        router.removed = True
        if router.scope is not None:
            router.scope.cancel()
        name = router.name
        if self.routers.get(name) is router:
            del self.routers[name]
            del self.names[bisect.bisect_left(self.names, name)]
        for index, topic in (
            (self._by_source, router.config.source),
            (self._by_dest, router.config.dest),
        ):
            names = index.get(topic)
            if names is not None:
                names.discard(name)
                if not names:
                    del index[topic]
        self._recompute_cycles()

    def _recompute_cycles(self) -> None:
        """Strongly connected components of the topic graph (iterative Tarjan); a router
        is on a cycle iff its source and dest share a component (rule 3)."""
        graph: dict[str, list[str]] = {}
        for router in self.routers.values():
            graph.setdefault(router.config.source, []).append(router.config.dest)
            graph.setdefault(router.config.dest, [])
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        comp: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        counter = 0
        for root in graph:
            if root in index:
                continue
            work: list[tuple[str, Iterator[str]]] = [(root, iter(graph[root]))]
            index[root] = low[root] = counter
            counter += 1
            stack.append(root)
            on_stack.add(root)
            while work:
                node, edges = work[-1]
                child = next(edges, None)
                if child is not None:
                    if child not in index:
                        index[child] = low[child] = counter
                        counter += 1
                        stack.append(child)
                        on_stack.add(child)
                        work.append((child, iter(graph[child])))
                    elif child in on_stack:
                        low[node] = min(low[node], index[child])
                    continue
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        comp[member] = index[node]
                        if member == node:
                            break
        self._scc = comp
        for router in self.routers.values():
            router.on_cycle = comp[router.config.source] == comp[router.config.dest]

    def same_component(self, a: str, b: str) -> bool:
        """True when topics ``a`` and ``b`` lie on a common cycle of the router graph."""
        ca = self._scc.get(a)
        return ca is not None and ca == self._scc.get(b)

    def _iter_from(self, prefix: str, after: str | None) -> Iterator[Router]:
        lo = bisect.bisect_right(self.names, after) if after is not None else 0
        lo = max(lo, bisect.bisect_left(self.names, prefix))
        for name in self.names[lo:]:
            if not name.startswith(prefix):
                return
            yield self.routers[name]

    # -- workers ----------------------------------------------------------------------

    def start(self, nursery: trio.Nursery) -> None:
        """Once the engine serves: adopt what recovery found, start every worker."""
        self._nursery = nursery
        if self._restored is not None:
            section, logged = self._restored
            self._restored = None
            self._apply_restored(section, logged)
        for router in list(self.routers.values()):
            self._spawn(router)

    def _spawn(self, router: Router) -> None:
        if self._nursery is None:  # not serving yet: start() spawns it
            return
        scope = trio.CancelScope()
        router.scope = scope
        self._nursery.start_soon(self._worker, router, scope, name=f"router {router.name}")

    async def _worker(self, router: Router, scope: trio.CancelScope) -> None:
        with scope:
            await run_router(self, router)

    # -- persistence (rule 1) ------------------------------------------------------------

    def _log_put(self, router: Router, created: list[TopicLog], restart: bool) -> list[WalTicket]:
        store = self.appender.store
        if store is None:
            return []
        # The auto-created topics come first: replay must know them before the router.
        tickets = [store.log_topic(log, log.watermark) for log in created]
        record = router.to_record()
        if not restart:
            record["cursor"] = None  # replay keeps the cursor it has
        payload = ujson.dumps(record, ensure_ascii=False).encode()
        tickets.append(store.log_extension(ROUTER_PUT, payload, sync=True))
        return tickets

    def _log_delete(self, name: str) -> WalTicket | None:
        store = self.appender.store
        if store is None:
            return None
        payload = ujson.dumps({"name": name}, ensure_ascii=False).encode()
        return store.log_extension(ROUTER_DELETE, payload, sync=True)

    def snapshot(self) -> dict[str, Any]:
        """The checkpoint section (taken synchronously with the dest segments: rule 1)."""
        # Gap markers are saved with their topic (store manifest), not here.
        return {"format": 1, "routers": [self.routers[name].to_record() for name in self.names]}

    def restore(self, section: Any, logged: list[tuple[int, bytes]]) -> None:
        """Keep what recovery found; applied by :meth:`start` once the registry is final."""
        self._restored = (section, logged)

    def _apply_restored(self, section: Any, logged: list[tuple[int, bytes]]) -> None:
        registry = self.appender.registry
        records: dict[str, dict[str, Any]] = {}
        if isinstance(section, dict):
            for rec in section.get("routers", ()):
                records[rec["name"]] = rec
        for kind, payload in logged:
            body = ujson.loads(payload)
            name = body["name"]
            if kind == ROUTER_DELETE:
                records.pop(name, None)
                continue
            old = records.get(name)
            if old is not None:
                body["forwarded_total"] = old.get("forwarded_total", 0)
                body["dropped_total"] = old.get("dropped_total", 0)
                if body["cursor"] is None:
                    body["cursor"] = old["cursor"]
            records[name] = body
        for name in sorted(records):
            rec = records[name]
            config = parse_router_config(rec["config"])
            source, dest = registry.get(config.source), registry.get(config.dest)
            if source is None or dest is None:
                continue  # its topic was deleted (the cascade's entry may predate a checkpoint)
            if source.topic_id != rec["source_id"] or dest.topic_id != rec["dest_id"]:
                continue  # a later instance of the name: the router went with the old one
            router = Router(name, config, int(rec["inc"]))
            router.cursor = min(int(rec["cursor"] or 0), source.head)
            router.forwarded_total = int(rec.get("forwarded_total", 0))
            router.dropped_total = int(rec.get("dropped_total", 0))
            router.source_id, router.dest_id = source.topic_id, dest.topic_id
            self._link(router)


def _topic_missing(topic: str, field: str) -> TopicNotFoundError:
    return TopicNotFoundError(
        f'{field} topic "{topic}" does not exist; create it or set create_dest',
        detail={"topic": topic, "field": field},
    )


def _new_inc() -> int:
    return secrets.randbits(31) or 1
