"""Live-delivery methods behind the Engine facade (contract §7 watch, §7.x WebSocket, §11 caps).

The Engine owns one :class:`WatchOps`, built on its appender and its named cursors, and
delegates to it; the hub itself lives in ``watch/hub.py`` and is created on first use
(``watch_hub``), so the Engine needs no hook for it. Frontends call:

- ``create_watch`` (POST /v0/watch) and ``open_watch`` (GET /v0/watch/:wid),
- ``open_watch_feed`` + ``watch_subscribe`` (a WebSocket's subscriptions),
- ``acquire_stream_slot`` (the long-lived connection caps, for any stream),
- ``close_watch`` (remove a session now) and ``watch_statistics`` (gauges).

Rules:
1. Arguments are checked before anything changes (400 before 404 before 429), with the
   same clamps as a diff: ``limit`` 0 -> 256, at most ``TOPICS_MAX_LIMIT``;
   ``max_batch_bytes`` 0 -> 1 MiB, at most 8 MiB; ``heartbeat_ms`` into [1000, 60000].
2. ``tail`` resolves to the head at subscribe time; ``from_seq`` is taken as given (a
   cursor below the floors gets its tombstone on the stream, not an error here).
3. Name-prefix authorization is the frontend's (it knows the key); the engine binds a
   session to the ``owner`` it is given and opens it only for an equal owner.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import trio

from .. import _args
from .._core import RENDER_DATA, RENDER_META, RENDER_TAGS
from .._limits import DIFF_BYTE_BUDGET, DIFF_BYTE_CEILING
from .._names import check_topic_name
from ..errors import InvalidRequestError, TopicNotFoundError
from ..watch_types import TopicWatermarks, WatchCreated, WatchStatistics
from .bounds import apply_from_ts, split_topic_bounds, stream_options, topic_options
from .feed import WatchFeed
from .hub import StreamSlot, WatchHub, WatchStream
from .options import WatchGuardArgs as _WatchGuard
from .prefix import FeedJoiner, join_existing
from .topic import FeedOptions

if TYPE_CHECKING:
    from .._persistence.appender import Appender
    from .._storage.wal import Wal
    from ..auth import Principal
    from ..cursors.ops import CursorOps
    from ..log.registry import TopicRegistry
    from ..log.topic_log import TopicLog

__all__ = ["WatchOps"]

DEFAULT_LIMIT = 256
DEFAULT_BATCH_BYTES = 262_144
DEFAULT_HEARTBEAT_MS = 15_000
HEARTBEAT_MS_RANGE = (1_000, 60_000)
_START_FIELDS = frozenset({"from_seq", "tail"})


class WatchOps:
    """The live-delivery methods of :class:`topics.Engine`, which documents the public ones
    (see the module docstring)."""

    def __init__(self, appender: Appender, cursors: CursorOps) -> None:
        self._app = appender
        self.clock = appender.clock
        self.limits = appender.limits
        self._cursor_ops = cursors
        self._watch_hub: WatchHub | None = None
        self.apply_retention = appender.apply_retention

    @property
    def registry(self) -> TopicRegistry:
        return self._app.registry

    @property
    def watch_hub(self) -> WatchHub:
        """The engine's watch hub (created on first use); tests tune ``.settings`` here."""
        hub = self._watch_hub
        if hub is None:
            hub = self._watch_hub = WatchHub(
                now_ms=self.clock.now_ms,
                retention=self._app.apply_retention,
                wal=self._watch_wal,
                spawn=self._watch_spawn,
                wait_wal=self._wait_wal_progress,
                max_sessions=self.limits.max_watch_sessions,
                max_connections=self.limits.max_sse_connections,
                max_connections_per_key=self.limits.max_sse_connections_per_key,
                max_sessions_per_key=self.limits.max_watch_sessions_per_key,
                max_where_ms=self.limits.max_where_ms,
            )
            hub.on_delivered = self._cursor_ops.commit_delivered
        return hub

    async def create_watch(
        self,
        topics: Mapping[str, Any],
        *,
        node: str | list[str] | None = None,
        limit: int = 0,
        max_batch_bytes: int = DEFAULT_BATCH_BYTES,
        heartbeat_ms: int = DEFAULT_HEARTBEAT_MS,
        include_meta: bool = True,
        include_tags: bool = False,
        include_data: bool = True,
        consistency: str = "eventual",
        lenient: bool = False,
        owner: Principal | None = None,
        topic_prefix: Mapping[str, Any] | list[str] | None = None,
        max_backlog: int = 0,
        on_backlog: str = "jump",
        where: object = None,
        format: str = "records",
        ce_type_field: str | None = None,
    ) -> WatchCreated:
        """Create a watch session (POST /v0/watch, §7.1).

        Args:
            topics: topic -> ``{"from_seq": n}`` or ``{"tail": true}`` (or ``{}``/None).
            lenient: drop unknown topics instead of failing (at least one must exist).
            owner: the key that creates it; only the same key opens its stream (None:
                auth disabled, the wid alone opens it).
            topic_prefix: prefix -> ``{"tail", "max_backlog"}``: every topic under it,
                now and created later (``topics`` may then be empty; _watch_prefix).
            max_backlog: the default per-topic backlog limit (0: none; _watch_guard).
            on_backlog: ``"jump"`` (a ``backlog-exceeded`` frame) or ``"error"`` (409 here).
            where, format, ce_type_field: filter every topic's records and/or deliver them
                as CloudEvents, as on a diff; a topic's options may also hold ``from_ts``,
                ``to_ts`` and ``to_seq`` (topics/watch/bounds.py).

        Raises: invalid_request (malformed, no topics, over TOPICS_MAX_WATCH_TOPICS),
        forbidden (a prefix outside the owner's allowlist), topic_not_found,
        backlog_exceeded (409, with ``on_backlog: "error"``), throttled
        (TOPICS_MAX_WATCH_SESSIONS).

        Example::

            res = await engine.create_watch({"orders": {"from_seq": 0}})
            stream = engine.open_watch(res.wid)
        """
        opts = self._feed_options(
            node, limit, max_batch_bytes, include_meta, include_tags, include_data, consistency
        )
        opts = stream_options(opts, where, format, ce_type_field, self.limits.max_where_cost)
        hb = _args.u64("heartbeat_ms", heartbeat_ms)
        hb = min(max(hb, HEARTBEAT_MS_RANGE[0]), HEARTBEAT_MS_RANGE[1])
        lenient = _args.bool_arg("lenient", lenient)
        topics, timed = split_topic_bounds(topics)
        topics, named = self._cursor_ops.named_starts(topics)
        guard = _WatchGuard.parse(topics, topic_prefix, max_backlog, on_backlog, owner)
        starts = guard.starts(self._watch_starts, self.limits.max_watch_topics)
        self._app.check_ready()
        lenient_all = lenient and guard.entries is not None  # a prefix may cover none yet
        resolved = self._resolve_starts(starts, lenient, lenient_all) if starts else {}
        self._cursor_ops.start_at_cursors(resolved, named, owner)
        apply_from_ts(resolved, timed)
        hub = self.watch_hub
        resolved = guard.resolve(self, resolved, {}, self.limits.max_watch_topics)
        session = hub.create_session(
            {name: (log, cursor) for name, (log, cursor, _) in resolved.items()}, opts, hb, owner
        )
        guard.arm_session(self, session)
        for name, st in session.topics.items():
            st.commit_to = self._cursor_ops.commit_to(named, name)
            if name in timed:
                st.opts = topic_options(opts, timed[name])
        marks = {name: w for name, (_, _, w) in resolved.items()}
        return WatchCreated(session.wid, hub.settings.session_ttl_ms, marks, guard.prefixes_dict())

    def open_watch(
        self,
        wid: str,
        *,
        owner: Principal | None = None,
        rewind: Mapping[str, int] | int | None = None,
    ) -> WatchStream:
        """Open the stream of session ``wid`` (GET /v0/watch/:wid, §7.3-§7.4).

        ``rewind`` is the decoded Last-Event-ID (a cursor map or a checkpoint frame
        number): it may move the session's cursors back, never forward. The caller owns
        the returned stream and must ``close()`` it.

        Raises: invalid_request (malformed wid), not_found, unauthorized, throttled.
        """
        self._app.check_ready()
        stream = self.watch_hub.open_stream(wid, owner, rewind)
        if stream.session.prefixes is not None:
            # What was created meanwhile, then every later creation under the prefixes.
            join_existing(
                stream, self._app.registry, self.watch_hub.joiners, self.limits.max_watch_topics
            )
        return stream

    def close_watch(self, wid: str) -> bool:
        """Remove session ``wid`` now; an open stream ends with ``error`` 410."""
        return self.watch_hub.kill(wid)

    def open_watch_feed(self) -> WatchFeed:
        """An empty feed for a WebSocket connection (topics via ``watch_subscribe``)."""
        return WatchFeed(self.watch_hub)

    def watch_subscribe(
        self,
        feed: WatchFeed,
        topics: Mapping[str, Any],
        *,
        node: str | list[str] | None = None,
        limit: int = 0,
        max_batch_bytes: int = DEFAULT_BATCH_BYTES,
        include_meta: bool = True,
        include_tags: bool = False,
        include_data: bool = True,
        consistency: str = "eventual",
        topic_prefix: Mapping[str, Any] | list[str] | None = None,
        max_backlog: int = 0,
        on_backlog: str = "jump",
        principal: Principal | None = None,
        where: object = None,
        format: str = "records",
        ce_type_field: str | None = None,
    ) -> dict[str, TopicWatermarks]:
        """Add (or restart) topics on ``feed`` (a WebSocket ``subscribe``, §7.x).

        All or nothing: every topic is checked before any is added. Returns each topic's
        start and watermarks. ``topic_prefix``, ``max_backlog`` and ``on_backlog`` as for
        :meth:`create_watch`; ``principal`` narrows the prefixes to its allowlist.
        Raises: invalid_request, forbidden, topic_not_found, backlog_exceeded.
        """
        opts = self._feed_options(
            node, limit, max_batch_bytes, include_meta, include_tags, include_data, consistency
        )
        opts = stream_options(opts, where, format, ce_type_field, self.limits.max_where_cost)
        topics, timed = split_topic_bounds(topics)
        topics, named = self._cursor_ops.named_starts(topics)
        guard = _WatchGuard.parse(topics, topic_prefix, max_backlog, on_backlog, principal)
        starts = guard.starts(self._watch_starts, self.limits.max_watch_topics)
        new = [name for name in starts if name not in feed.topics]
        if len(feed.topics) + len(new) > self.limits.max_watch_topics:
            raise InvalidRequestError.for_field(
                "topics",
                f"a connection may subscribe to at most {self.limits.max_watch_topics} topics",
            )
        self._app.check_ready()
        resolved = self._resolve_starts(starts, lenient=False) if starts else {}
        self._cursor_ops.start_at_cursors(resolved, named, principal)
        apply_from_ts(resolved, timed)
        resolved = guard.resolve(self, resolved, feed.topics, self.limits.max_watch_topics)
        for name, (log, cursor, _) in resolved.items():
            topts = topic_options(opts, timed.get(name))
            ft = feed.add(name, log, cursor, topts, guard.first_read(name))
            ft.commit_to = self._cursor_ops.commit_to(named, name)
        guard.arm_feed(self, feed, opts)
        return {name: w for name, (_, _, w) in resolved.items()}

    def watch_prefixes(self, feed: WatchFeed) -> dict[str, Any]:
        """The ``topic_prefix`` entries ``feed`` joins new topics under (what each covers)."""
        joiner = self.watch_hub.joiners.get(feed)
        if not isinstance(joiner, FeedJoiner):
            return {}
        return {e.prefix: e.to_dict() for e, _ in joiner.entries}

    def watch_unsubscribe_prefix(self, feed: WatchFeed, prefixes: tuple[str, ...]) -> list[str]:
        """Stop joining under ``prefixes`` on ``feed``; returns the topics they cover there
        (the caller removes them: a WebSocket ``unsubscribe`` of ``topic_prefix``)."""
        joins = self.watch_hub.joiners
        joiner = joins.get(feed)
        if not isinstance(joiner, FeedJoiner):
            return []
        names = joiner.remove(prefixes)
        if joiner.entries:
            joins.set(feed, joiner, joiner.indexed())  # positions moved
        else:
            joins.drop(feed)
        return names

    def acquire_stream_slot(self, key_index: int) -> StreamSlot:
        """Count one long-lived connection (SSE or WebSocket) against the §11 caps.

        ``key_index`` is the key's position (-1 in dev mode: only the global cap applies).
        Release the slot when the connection ends. Raises: throttled.
        """
        return self.watch_hub.slots.acquire(key_index)

    def watch_statistics(self) -> WatchStatistics:
        """Sessions held and long-lived connections open (for /v0/metrics)."""
        return self.watch_hub.statistics()

    # -- helpers ---------------------------------------------------------------------

    def _feed_options(
        self,
        node: object,
        limit: object,
        max_batch_bytes: object,
        include_meta: object,
        include_tags: object,
        include_data: object,
        consistency: object,
    ) -> FeedOptions:
        n = _args.u64("limit", limit) or DEFAULT_LIMIT
        budget = _args.u64("max_batch_bytes", max_batch_bytes) or DIFF_BYTE_BUDGET
        flags = (
            (RENDER_TAGS if _args.bool_arg("include_tags", include_tags) else 0)
            | (RENDER_META if _args.bool_arg("include_meta", include_meta) else 0)
            | (RENDER_DATA if _args.bool_arg("include_data", include_data) else 0)
        )
        if consistency not in ("eventual", "strong"):
            raise InvalidRequestError.for_field(
                "consistency", f'must be "eventual" or "strong", got {consistency!r}'
            )
        return FeedOptions(
            limit=min(n, self.limits.max_limit),
            budget=min(budget, DIFF_BYTE_CEILING),
            flags=flags,
            skip=_args.node_set(node, self.limits.max_node_bytes),
            strong=consistency == "strong",
        )

    @staticmethod
    def _watch_starts(topics: object, cap: int) -> dict[str, tuple[int, bool]]:
        """Validate a topics map: name -> (from_seq, tail)."""
        if not isinstance(topics, Mapping) or not topics:
            raise InvalidRequestError.for_field(
                "topics", "must be a non-empty object of topic -> {from_seq, tail}"
            )
        if len(topics) > cap:
            raise InvalidRequestError(
                f"topics: {len(topics)} topics; at most {cap} per watch (TOPICS_MAX_WATCH_TOPICS)",
                detail={"field": "topics", "max": cap},
            )
        out: dict[str, tuple[int, bool]] = {}
        for name, spec in topics.items():
            check_topic_name(name, "topics")
            spec = {} if spec is None else spec
            if not isinstance(spec, Mapping):
                raise InvalidRequestError.for_field(
                    f"topics.{name}", "must be an object {from_seq, tail}"
                )
            for key in spec:
                if key not in _START_FIELDS:
                    raise InvalidRequestError.for_field(
                        f"topics.{name}.{key}", "is not a per-topic option (from_seq, tail)"
                    )
            from_seq = _args.u64(f"topics.{name}.from_seq", spec.get("from_seq", 0))
            tail = _args.bool_arg(f"topics.{name}.tail", spec.get("tail", False))
            out[name] = (from_seq, tail)
        return out

    def _resolve_starts(
        self, starts: Mapping[str, tuple[int, bool]], lenient: bool, none_ok: bool = False
    ) -> dict[str, tuple[TopicLog, int, TopicWatermarks]]:
        """Look the topics up and resolve ``tail`` (rule 2); ``none_ok``: lenient even
        when no named topic is left (a ``topic_prefix`` beside them)."""
        out: dict[str, tuple[TopicLog, int, TopicWatermarks]] = {}
        missing = []
        for name, (from_seq, tail) in starts.items():
            log = self._app.registry.get(name)
            if log is None:
                missing.append(name)
                continue
            self._app.apply_retention(log)
            cursor = log.head if tail else from_seq
            out[name] = (log, cursor, TopicWatermarks(cursor, log.head, log.earliest))
        if missing and (not lenient or not (out or none_ok)):
            err = TopicNotFoundError.for_topic(missing[0])
            if len(missing) > 1:
                assert err.detail is not None
                err.detail["topics"] = missing
            raise err
        return out

    def _watch_wal(self) -> Wal | None:
        return self._app.store.wal if self._app.store is not None else None

    def _watch_spawn(self, fn: Any) -> None:
        if self._app.nursery is None:
            raise RuntimeError("the engine is not open (use open_engine)")
        self._app.nursery.start_soon(fn)

    async def _wait_wal_progress(self) -> None:
        """Return after the WAL's next write or sync completes."""
        wal = self._watch_wal()
        if wal is None:
            await trio.sleep_forever()
        assert wal is not None
        await wal.wait_progress()
