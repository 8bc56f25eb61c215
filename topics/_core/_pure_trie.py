"""``TagTrie``: tag -> ascending seqs in a compressed radix tree."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from itertools import chain

from ._pure_format import U64, int_in


class _Node:
    """A trie node: the edge label leading to it, children by first byte, its own seqs
    (ascending from ``head``, so dropping the smallest is O(1)) and its subtree size."""

    __slots__ = ("children", "head", "label", "seqs", "total")

    def __init__(self, label: bytes) -> None:
        self.label = label
        self.children: dict[int, _Node] = {}
        self.seqs: list[int] = []
        self.head = 0
        self.total = 0

    def size(self) -> int:
        return len(self.seqs) - self.head

    def take_below(self, below: int) -> list[int]:
        stop = bisect_left(self.seqs, below, self.head)
        taken = self.seqs[self.head : stop]
        self.head = stop
        self.compact()
        return taken

    def compact(self) -> None:
        # Amortised O(1): drop the consumed head once it is most of the list.
        if self.head == len(self.seqs):
            self.seqs, self.head = [], 0
        elif self.head > 16 and self.head * 2 > len(self.seqs):
            del self.seqs[: self.head]
            self.head = 0


def _check_tag(tag: bytes) -> bytes:
    if not isinstance(tag, bytes):
        raise TypeError("tag must be bytes")
    return tag


class TagTrie:
    """Tag -> ascending seqs in a compressed radix tree (see ``_ext.pyi``)."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self._root = _Node(b"")
        self._len = 0
        self._ntags = 0

    def __len__(self) -> int:
        return self._len

    @property
    def ntags(self) -> int:
        return self._ntags

    def _path(self, key: bytes, prefix: bool) -> list[_Node] | None:
        """Nodes from the root to the node of ``key`` or, for a prefix, to the topmost
        node whose tag starts with it; None when there is none."""
        node, path, pos = self._root, [self._root], 0
        while pos < len(key):
            child = node.children.get(key[pos])
            if child is None:
                return None
            if key.startswith(child.label, pos):
                pos += len(child.label)
            elif prefix and child.label.startswith(key[pos:]):
                pos = len(key)
            else:
                return None
            node = child
            path.append(node)
        return path

    def _descend_or_split(self, node: _Node, key: bytes, pos: int) -> _Node:
        """The child of ``node`` on the way to ``key[pos:]``, split or created as needed."""
        child = node.children.get(key[pos])
        if child is None:
            child = node.children[key[pos]] = _Node(key[pos:])
            return child
        common = 1
        while common < min(len(child.label), len(key) - pos):
            if child.label[common] != key[pos + common]:
                break
            common += 1
        if common < len(child.label):
            mid = node.children[key[pos]] = _Node(child.label[:common])
            child.label = child.label[common:]
            mid.children[child.label[0]] = child
            mid.total = child.total
            child = mid
        return child

    def add(self, tag: bytes, seq: int) -> None:
        _check_tag(tag)
        int_in(seq, 0, U64, "seq")
        node, path, pos = self._root, [self._root], 0
        while pos < len(tag):
            node = self._descend_or_split(node, tag, pos)
            pos += len(node.label)
            path.append(node)
        seqs = node.seqs
        if node.size() and seq <= seqs[-1]:
            j = bisect_left(seqs, seq, node.head)
            if seqs[j] == seq:
                return
            seqs.insert(j, seq)
        else:
            seqs.append(seq)
        for n in path:
            n.total += 1
        self._len += 1
        self._ntags += node.size() == 1

    def add_batch(self, tags: Sequence[bytes | None], first_seq: int) -> None:
        for i, tag in enumerate(tags):
            if tag is not None:
                self.add(tag, first_seq + i)

    def _removed(self, path: list[_Node], n: int) -> None:
        """Account for ``n`` entries taken from ``path[-1]`` and prune emptied nodes."""
        for node in path:
            node.total -= n
        self._len -= n
        self._ntags -= path[-1].size() == 0
        path[-1].compact()
        for d in range(len(path) - 1, 0, -1):
            if not self._tidy(path[d - 1], path[d]):
                break

    @staticmethod
    def _tidy(parent: _Node, node: _Node) -> bool:
        """Keep the tree compressed: drop an empty leaf (returns True so the caller tidies
        the parent next) or merge an entry-less node into its only child."""
        if node.size():
            return False
        if not node.children:
            del parent.children[node.label[0]]
            return True
        if len(node.children) == 1:
            (child,) = node.children.values()
            child.label = node.label + child.label
            parent.children[node.label[0]] = child
        return False

    def discard(self, tag: bytes, seq: int) -> bool:
        int_in(seq, 0, U64, "seq")
        path = self._path(_check_tag(tag), False)
        if path is None:
            return False
        node = path[-1]
        if node.size() and node.seqs[node.head] == seq:
            node.head += 1
        else:
            j = bisect_left(node.seqs, seq, node.head)
            if j == len(node.seqs) or node.seqs[j] != seq:
                return False
            del node.seqs[j]
        self._removed(path, 1)
        return True

    def pop_exact(self, tag: bytes, below: int) -> list[int]:
        path = self._path(_check_tag(tag), False)
        if path is None or not path[-1].size():
            return []
        taken = path[-1].take_below(below)
        if taken:
            self._removed(path, len(taken))
        return taken

    def pop_prefix(self, prefix: bytes, below: int) -> list[int]:
        path = self._path(_check_tag(prefix), True)
        if path is None:
            return []
        order: list[tuple[_Node, _Node | None]] = [(path[-1], None)]
        for node, _ in order:  # pre-order; the list grows while we walk it
            order.extend((child, node) for child in node.children.values())
        runs = []
        for node, parent in reversed(order):  # children before their parents
            if node.size():
                runs.append(node.take_below(below))
                self._ntags -= node.size() == 0
            node.total = node.size() + sum(c.total for c in node.children.values())
            if parent is not None:
                self._tidy(parent, node)
        taken = sorted(chain.from_iterable(runs))
        if taken:
            for node in path[:-1]:
                node.total -= len(taken)
            self._len -= len(taken)
            for d in range(len(path) - 1, 0, -1):
                if not self._tidy(path[d - 1], path[d]):
                    break
        return taken

    def count_exact(self, tag: bytes) -> int:
        path = self._path(_check_tag(tag), False)
        return path[-1].size() if path else 0

    def count_prefix(self, prefix: bytes) -> int:
        path = self._path(_check_tag(prefix), True)
        return path[-1].total if path else 0
