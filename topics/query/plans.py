"""The compiled ``where`` plans the process keeps, so a filter repeated by a poller, a
resumed watch or a hostile client is checked and compiled once (issue 30).

Compiling the largest legal ``where`` (63 ``In`` of 256 values) costs a few ms of Python,
more than reading 1,000 records with it; a reader repeats its filter on every page. Plans
are keyed by the expression's JSON text (which tells ``1`` from ``1.0`` from ``true``,
whatever the compiler would), least recently used first out, and bounded by their weight
(the values and terms they hold) rather than their number, so the cache holds a few of the
largest plans or thousands of small ones, and never more than :data:`MAX_WEIGHT` values.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

import ujson

__all__ = ["MAX_WEIGHT", "PlanCache", "plan_key"]

#: Values and terms all kept plans hold together: 4 of the largest (64 x 256), a few MB.
MAX_WEIGHT = 1 << 16

P = TypeVar("P")


def plan_key(value: object) -> str | None:
    """The expression's JSON text, or None when it has none (then it is not cached)."""
    try:
        return ujson.dumps(value, ensure_ascii=False, escape_forward_slashes=False)
    except (OverflowError, TypeError, ValueError, UnicodeError):
        return None


class PlanCache(Generic[P]):
    """Plans by key, least recently used first out, within a total weight. Locked: the
    engine compiles on its event loop, but an offline Reader or a Spark driver may
    compile from threads of their own."""

    def __init__(self, max_weight: int = MAX_WEIGHT) -> None:
        self.max_weight = max_weight
        self.weight = 0
        self._plans: OrderedDict[tuple[object, ...], tuple[P, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[object, ...]) -> P | None:
        with self._lock:
            hit = self._plans.get(key)
            if hit is None:
                return None
            self._plans.move_to_end(key)
            return hit[0]

    def put(self, key: tuple[object, ...], plan: P, weight: int) -> None:
        with self._lock:
            if weight > self.max_weight or key in self._plans:
                return
            self._plans[key] = (plan, weight)
            self.weight += weight
            while self.weight > self.max_weight:
                _, (_, w) = self._plans.popitem(last=False)
                self.weight -= w

    def __len__(self) -> int:
        return len(self._plans)
