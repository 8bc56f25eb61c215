"""The prefix index of prefix joins (topics.watch.index, issue 30 finding 2): what a name
matches, in which order, removal, and the bound on the work of one lookup."""

from __future__ import annotations

import pytest

from topics.watch.index import PrefixIndex


def test_a_name_matches_every_held_prefix_it_starts_with_shortest_first() -> None:
    index: PrefixIndex[str, int] = PrefixIndex()
    index.add("orders.", "a", 1)
    index.add("orders.eu.", "a", 2)
    index.add("orders.eu.", "b", 3)
    index.add("other", "c", 4)
    index.add("orders.eu.paris.x", "d", 5)  # longer than the name: not a prefix of it
    assert index.matches("orders.eu.paris") == {"a": [1, 2], "b": [3]}
    assert index.matches("orders.us") == {"a": [1]}
    assert index.matches("order") == {}
    assert index.matches("o") == {}
    assert len(index) == 4


def test_removing_a_key_takes_all_its_values_and_keeps_the_rest() -> None:
    index: PrefixIndex[str, int] = PrefixIndex()
    index.add("a.", "x", 1)
    index.add("a.b", "x", 2)
    index.add("a.", "y", 3)
    index.remove("x")
    assert "x" not in index
    assert index.matches("a.b.c") == {"y": [3]}
    index.remove("y")
    index.remove("never-held")
    assert len(index) == 0
    assert index.matches("a.b.c") == {}
    index.probes = 0
    index.matches("a.b.c")
    assert index.probes == 0  # no prefix length is held any more


def test_a_lookup_probes_once_per_distinct_length_however_many_prefixes() -> None:
    index: PrefixIndex[int, int] = PrefixIndex()
    for i in range(1000):  # a thousand watchers, all on prefixes of one length
        index.add(f"w{i:04d}.", i, i)
    index.matches("w0042.orders")
    assert index.probes == 1
    assert index.matches("w0042.orders") == {42: [42]}
    for n in range(1, 40):  # every length up to 39: still bounded by the name's length
        index.add("x" * n, -n, n)
    index.probes = 0
    index.matches("x" * 10)
    assert index.probes == 10


def test_an_empty_prefix_is_refused() -> None:
    index: PrefixIndex[str, int] = PrefixIndex()
    with pytest.raises(ValueError):
        index.add("", "a", 1)
