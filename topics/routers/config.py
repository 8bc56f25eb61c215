"""A router's definition as a PUT gives it (contract §6): the body checked into a
:class:`~topics.router_types.RouterConfig`, and its tag filter compiled for the worker.

The filter is the language of a delete's ``match`` (an exact tag or a glob prefix), echoed
as ``("tag", op, operand)``; a recovered definition goes through the same parse, so a
router restored from the WAL or a checkpoint is checked exactly like a new one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from .. import _args
from .._names import check_topic_name
from ..errors import InvalidRequestError
from ..router_types import Guarantee, RouterConfig

__all__ = ["ROUTER_FIELDS", "compile_filter", "parse_router_config"]

#: The fields of a router body (what auth.py classifies as names or not).
ROUTER_FIELDS = frozenset(
    {
        "source",
        "dest",
        "preserve_node",
        "preserve_tag",
        "create_dest",
        "filter",
        "allow_cycle",
        "guarantee",
    }
)
_GUARANTEES: tuple[Guarantee, ...] = ("at_least_once", "exactly_once")


def parse_router_config(body: object) -> RouterConfig:
    """Validate a PUT body (contract §6) into a :class:`RouterConfig`. Raises invalid_request."""
    if body is None:
        body = {}
    if not isinstance(body, Mapping):
        raise InvalidRequestError("a router body must be a JSON object", detail={"field": "body"})
    unknown = sorted(str(k) for k in body if k not in ROUTER_FIELDS)
    if unknown:
        raise InvalidRequestError.for_field(unknown[0], "is not a router field")
    names = {}
    for field in ("source", "dest"):
        value = body.get(field)
        if value is None:
            raise InvalidRequestError.for_field(field, "is required (a topic name)")
        names[field] = check_topic_name(value, field)
    if names["source"] == names["dest"]:
        raise InvalidRequestError.for_field("dest", "must differ from source")
    flags = {
        field: _args.bool_arg(field, body.get(field, default))
        for field, default in (
            ("preserve_node", True),
            ("preserve_tag", True),
            ("create_dest", True),
            ("allow_cycle", False),
        )
    }
    guarantee = body.get("guarantee", "at_least_once")
    if guarantee not in _GUARANTEES:
        raise InvalidRequestError.for_field(
            "guarantee", f'must be "at_least_once" or "exactly_once", got {guarantee!r}'
        )
    return RouterConfig(
        source=names["source"],
        dest=names["dest"],
        filter=_normalize_filter(body.get("filter")),
        guarantee=cast(Guarantee, guarantee),
        **flags,
    )


def _normalize_filter(value: object) -> tuple[str, str, str] | None:
    """The filter in its echoed tuple form (same language as a delete's ``match``)."""
    if value is None:
        return None
    try:
        op, _ = _args.match_arg(value)
    except InvalidRequestError as exc:
        problem = exc.message.removeprefix("match: ")
        raise InvalidRequestError.for_field("filter", problem) from None
    operand = value if isinstance(value, str) else cast("list[str]", value)[2]
    return ("tag", op, operand)


def compile_filter(spec: tuple[str, str, str] | None) -> tuple[bool, bytes] | None:
    """(is_prefix, bytes) for the worker's per-record tag test."""
    if spec is None:
        return None
    op, operand = _args.match_arg(list(spec))
    return (op == "Glob", operand)
