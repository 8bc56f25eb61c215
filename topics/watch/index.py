"""A prefix index: which registered prefixes a name starts with, without a scan of them
(issue 30, finding 2: prefix watches made topic creation cost every open prefix watch).

Role: the watch hub keeps its prefix joins here (``topics.watch.joins``), so creating a
topic costs the joins whose prefix it starts with, not one test per open prefix watch.

Rules:
1. ``add(prefix, key, value)`` files ``value`` under ``prefix`` for ``key``;
   ``matches(name)`` returns ``{key: [value, ...]}`` for every prefix of ``name`` that
   holds something, shortest prefix first, values of one prefix in the order they were
   added. ``remove(key)`` takes every value of ``key`` out.
2. The index is a map of prefix -> holders beside the distinct prefix lengths, in order.
   A lookup slices the name once per distinct length not longer than it and looks the
   slice up: at most ``len(name)`` dict probes however many prefixes are held, the bound
   a character trie walk has. In Python one probe per *distinct length* is cheaper than
   one dict per *character* (a trie walk pays a dict lookup per character of every name,
   even when no held prefix is that long), and watchers' prefixes share few lengths.
3. ``probes`` counts the dict probes of every lookup (tests assert the bound of rule 2).
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["PrefixIndex"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class PrefixIndex(Generic[K, V]):
    """prefix -> key -> values, looked up by name (see the module docstring)."""

    __slots__ = ("_by_key", "_by_prefix", "_lengths", "_uses", "probes")

    def __init__(self) -> None:
        self._by_prefix: dict[str, dict[K, list[V]]] = {}
        # Where each key has values, so ``remove`` touches only those prefixes.
        self._by_key: dict[K, set[str]] = {}
        self._lengths: list[int] = []  # distinct prefix lengths, ascending
        self._uses: dict[int, int] = {}  # length -> prefixes held of that length
        self.probes = 0

    def __len__(self) -> int:
        """Prefixes held."""
        return len(self._by_prefix)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def add(self, prefix: str, key: K, value: V) -> None:
        if not prefix:
            raise ValueError("a prefix is at least one character")
        holders = self._by_prefix.get(prefix)
        if holders is None:
            holders = self._by_prefix[prefix] = {}
            n = len(prefix)
            if n not in self._uses:
                bisect.insort(self._lengths, n)
            self._uses[n] = self._uses.get(n, 0) + 1
        holders.setdefault(key, []).append(value)
        self._by_key.setdefault(key, set()).add(prefix)

    def remove(self, key: K) -> None:
        """Take every value of ``key`` out (nothing if it holds none)."""
        for prefix in self._by_key.pop(key, ()):
            holders = self._by_prefix[prefix]
            del holders[key]
            if holders:
                continue
            del self._by_prefix[prefix]
            n = len(prefix)
            left = self._uses[n] - 1
            if left:
                self._uses[n] = left
            else:
                del self._uses[n]
                del self._lengths[bisect.bisect_left(self._lengths, n)]

    def matches(self, name: str) -> dict[K, list[V]]:
        """Every key with a value under a prefix of ``name``, and those values (rule 1)."""
        out: dict[K, list[V]] = {}
        by_prefix = self._by_prefix
        size = len(name)
        probes = 0
        for n in self._lengths:
            if n > size:
                break
            probes += 1
            holders = by_prefix.get(name[:n])
            if holders is not None:
                for key, values in holders.items():
                    held = out.get(key)
                    if held is None:
                        out[key] = list(values)
                    else:
                        held.extend(values)
        self.probes += probes
        return out
