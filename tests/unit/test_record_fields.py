"""topics.record_fields: the one declaration of a record's members, and the check every write
runs (its fast path must agree with the exact walk on every kind of input)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from topics.record_fields import RECORD_FIELDS, first_unknown_field


class Frozen(Mapping[str, Any]):
    """A mapping that is not a dict."""

    def __init__(self, **items: Any) -> None:
        self._items = items

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        ([{"data": 1}, {"data": 2, "tag": "t", "node": "n", "meta": {}}], None),
        ([{"data": 1}, {"data": 2, "tga": "x"}], (1, "tga")),
        ([{"data": 1, "zz": 1, "aa": 2}], (0, "aa")),  # the first in sorted order
        ([Frozen(data=1), Frozen(data=1, Tag="x")], (1, "Tag")),
        (["data", {"data": 1}], None),  # a non-mapping is the encoder's to refuse
        ([b"xy", 5, None, [1, [2]], {"data": 1}], None),
        ([5, {"data": 1, "x": 1}], (1, "x")),
        (["tga", {"data": 1, "x": 1}], (1, "x")),
        ([{"data": 1, 7: 1}], (0, "7")),
        ([], None),
    ],
)
def test_first_unknown_field(records: list[Any], expected: tuple[int, str] | None) -> None:
    assert first_unknown_field(records) == expected


def test_the_base_members_are_declared() -> None:
    assert {"data", "tag", "node", "meta"} <= RECORD_FIELDS
