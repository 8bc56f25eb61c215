"""Per-key namespace quotas (contract §11, issue 14): how many topics and routers the names
of one prefix-limited API key may hold, so that one tenant cannot use up
``TOPICS_MAX_TOPICS``/``TOPICS_MAX_ROUTERS`` for every other.

Role: the engine asks :meth:`NamespaceQuotas.check_topic` before it registers a new topic
and :meth:`NamespaceQuotas.check_router` before a new router; both are synchronous and
read only the sorted name lists the registry and the routers already keep.

Rules:
1. A quota belongs to a namespace (a key's prefix allowlist), not to a request: creating
   name N by any path (PUT, a write's auto-create, a router's dest, a dead letter moved at
   claim time, a WebSocket publish) is refused with ``429 throttled`` (``detail.limit``
   ``max_topics_per_key`` / ``max_routers_per_key``) when a namespace containing N already
   holds the quota. So the engine's own deferred creations (dead letters, router dests)
   are bounded too, with no request to attribute them to.
2. Nothing is persisted: the count is of the names that exist now (one bisect pair per
   prefix), so deleting frees quota at once and a restart needs no bookkeeping.
3. Keys without prefixes are not namespaces here: their namespace is every name, which the
   instance caps already bound (and such a key can delete any tenant's topics anyway).
4. Only new names count: reconfiguring an existing topic or router never checks a quota.
5. 0 = unlimited. With both quotas 0 (the default) or no prefix-limited key the engine holds
   no ``NamespaceQuotas`` at all and single-tenant use is unchanged.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from ..errors import ThrottledError
from ..settings import Limits

__all__ = ["NamespaceQuotas", "count_under", "quotas_for"]

# Sorts after every character a name may hold ([A-Za-z0-9._:-]): name < prefix + _TOP for
# every name that starts with prefix.
_TOP = "\U0010ffff"


def _normalize(prefixes: Iterable[str]) -> tuple[str, ...]:
    """The prefixes with every one covered by a shorter one dropped (no name counted twice)."""
    out: list[str] = []
    for prefix in sorted(set(prefixes)):
        if not out or not prefix.startswith(out[-1]):
            out.append(prefix)
    return tuple(out)


def count_under(names: Sequence[str], prefixes: tuple[str, ...]) -> int:
    """How many of the sorted ``names`` start with one of the (normalized) ``prefixes``."""
    return sum(bisect.bisect_left(names, p + _TOP) - bisect.bisect_left(names, p) for p in prefixes)


class NamespaceQuotas:
    """The namespaces of the prefix-limited keys and their topic/router quotas.

    Example::

        quotas = NamespaceQuotas([("tenA-",), ("tenB-", "shared.")], max_topics=100)
        quotas.check_topic("tenA-jobs", registry.names)  # 429 at 100 tenA- topics
    """

    __slots__ = ("max_routers", "max_topics", "namespaces")

    def __init__(
        self, namespaces: Iterable[Sequence[str]], *, max_topics: int = 0, max_routers: int = 0
    ) -> None:
        self.namespaces = sorted({_normalize(ns) for ns in namespaces if ns})
        self.max_topics = max_topics
        self.max_routers = max_routers

    @property
    def active(self) -> bool:
        """False when no quota can ever refuse (rule 5)."""
        return bool(self.namespaces) and bool(self.max_topics or self.max_routers)

    def check_topic(self, name: str, names: Sequence[str]) -> None:
        """Raise 429 when creating topic ``name`` would overfill a namespace (rule 1)."""
        if self.max_topics:
            self._check(name, names, self.max_topics, "max_topics_per_key")

    def check_router(self, name: str, names: Sequence[str]) -> None:
        """Raise 429 when creating router ``name`` would overfill a namespace (rule 1)."""
        if self.max_routers:
            self._check(name, names, self.max_routers, "max_routers_per_key")

    def _check(self, name: str, names: Sequence[str], cap: int, limit: str) -> None:
        for prefixes in self.namespaces:
            if name.startswith(prefixes) and count_under(names, prefixes) >= cap:
                raise ThrottledError.for_limit(limit, cap)


def quotas_for(namespaces: Iterable[Sequence[str]], limits: Limits) -> NamespaceQuotas | None:
    """The quotas ``limits`` puts on these namespaces, or None when none applies (rule 5)."""
    quotas = NamespaceQuotas(
        namespaces,
        max_topics=limits.max_topics_per_key,
        max_routers=limits.max_routers_per_key,
    )
    return quotas if quotas.active else None
