"""Validation of request arguments shared by every frontend (contract §2, §3, §5).

Each function returns the cleaned value or raises ``InvalidRequestError`` naming the
field, so an error reaches the client before anything is changed.
"""

from __future__ import annotations

from typing import Literal

from .errors import InvalidRequestError

__all__ = ["MatchSpec", "bool_arg", "match_arg", "node_set", "opt_str", "u64"]

U64_MAX = (1 << 64) - 1

MatchSpec = tuple[Literal["Eq", "Glob"], bytes]


def u64(field: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= U64_MAX:
        raise InvalidRequestError.for_field(field, f"must be a non-negative integer, got {value!r}")
    return value


def bool_arg(field: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidRequestError.for_field(field, f"must be true or false, got {value!r}")
    return value


def opt_str(field: str, value: object, max_bytes: int) -> str | None:
    """An optional non-empty string of at most ``max_bytes`` UTF-8 bytes."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidRequestError.for_field(field, f"must be a non-empty string, got {value!r}")
    try:
        size = len(value.encode())
    except UnicodeEncodeError:
        raise InvalidRequestError.for_field(field, "is not valid UTF-8") from None
    if size > max_bytes:
        raise InvalidRequestError.for_field(field, f"is {size} bytes; the limit is {max_bytes}")
    return value


def node_set(value: object, max_bytes: int) -> frozenset[bytes] | None:
    """A reader's node filter: a string or a list of strings (§4.5)."""
    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    out = set()
    for i, item in enumerate(items):
        field = f"node[{i}]" if isinstance(value, list) else "node"
        if item is None:
            raise InvalidRequestError.for_field(field, "must be a non-empty string, got None")
        node = opt_str(field, item, max_bytes)
        assert node is not None
        out.add(node.encode())
    return frozenset(out) if out else None


def match_arg(value: object) -> MatchSpec:
    """Parse a delete ``match``: "X" | ["tag","Eq","X"] | ["tag","Glob","P*"] (§5)."""
    if isinstance(value, str):
        return ("Eq", _tag_bytes(value))
    if not isinstance(value, list | tuple) or len(value) != 3:
        raise InvalidRequestError.for_field(
            "match", 'must be a tag string or ["tag", "Eq"|"Glob", value]'
        )
    key, op, operand = value
    if key != "tag":
        raise InvalidRequestError.for_field("match", f'only "tag" can be matched, got {key!r}')
    if not isinstance(operand, str):
        raise InvalidRequestError.for_field("match", f"the value must be a string, got {operand!r}")
    if op == "Eq":
        return ("Eq", _tag_bytes(operand))
    if op == "Glob":
        if not operand.endswith("*") or "*" in operand[:-1]:
            raise InvalidRequestError.for_field(
                "match", f"Glob takes a literal prefix followed by one trailing *, got {operand!r}"
            )
        return ("Glob", _tag_bytes(operand[:-1]))
    raise InvalidRequestError.for_field("match", f'the operator must be "Eq" or "Glob", got {op!r}')


def _tag_bytes(tag: str) -> bytes:
    try:
        return tag.encode()
    except UnicodeEncodeError:
        raise InvalidRequestError.for_field("match", "is not valid UTF-8") from None
