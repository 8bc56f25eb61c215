"""JSON Schema fragments as plain dicts: the few constructors the request declarations
(:mod:`topics.wire.requests`) and the OpenAPI document (frontends/http/openapi) share, and
:func:`result_schema`, a result dataclass's schema from its fields (topics/result_fields.py).

``ref(name)`` points into the OpenAPI document's ``components.schemas``.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from topics.result_fields import wire_members

__all__ = [
    "U64_MAX",
    "Schema",
    "boolean",
    "integer",
    "nullable",
    "obj",
    "ref",
    "result_schema",
    "string",
    "u64",
]

Schema = dict[str, Any]

U64_MAX = (1 << 64) - 1


def ref(name: str) -> Schema:
    """A reference to ``components.schemas[name]`` of the OpenAPI document."""
    return {"$ref": f"#/components/schemas/{name}"}


def obj(
    properties: Mapping[str, Schema],
    required: Sequence[str] = (),
    *,
    closed: bool = False,
    description: str | None = None,
) -> Schema:
    """An object schema; ``closed`` forbids members not listed (request bodies)."""
    out: Schema = {"type": "object"}
    if description:
        out["description"] = description
    out["properties"] = dict(properties)
    if required:
        out["required"] = list(required)
    if closed:
        out["additionalProperties"] = False
    return out


def u64(description: str, **extra: Any) -> Schema:
    """A u64 integer (0..2^64-1) with ``description`` and any ``extra`` keywords."""
    return {"type": "integer", "minimum": 0, "maximum": U64_MAX, "description": description} | extra


def integer(description: str, **extra: Any) -> Schema:
    """An integer with ``description`` and any ``extra`` keywords."""
    return {"type": "integer", "description": description} | extra


def boolean(description: str, **extra: Any) -> Schema:
    """A boolean with ``description`` and any ``extra`` keywords."""
    return {"type": "boolean", "description": description} | extra


def string(description: str, **extra: Any) -> Schema:
    """A string with ``description`` and any ``extra`` keywords."""
    return {"type": "string", "description": description} | extra


def nullable(schema: Schema) -> Schema:
    """``schema`` or JSON null (3.1 style: a type list, or anyOf for a $ref)."""
    if "$ref" in schema:
        return {"anyOf": [schema, {"type": "null"}]}
    out = dict(schema)
    kind = out.get("type")
    if isinstance(kind, str):
        out["type"] = [kind, "null"]
    if "enum" in out:
        out["enum"] = [*out["enum"], None]
    return out


_SCALARS: dict[object, Schema] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    bool: {"type": "boolean"},
    float: {"type": "number"},
}


def _of_type(hint: object) -> tuple[Schema, bool]:
    """The schema a field's type says, and whether the type allows None."""
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (_of_type(rest[0])[0] if len(rest) == 1 else {}), True
    if origin is Literal:
        return {"type": "string", "enum": list(args)}, False
    if origin is list:
        return {"type": "array", "items": _of_type(args[0])[0] if args else {}}, False
    if origin is dict or hint is dict:
        return {"type": "object"}, False
    return dict(_SCALARS.get(hint, {})), False


def result_schema(cls: type, description: str | None = None) -> Schema:
    """The JSON object schema of result dataclass ``cls``, from its fields: each
    :func:`~topics.result_fields.wire` field a member (its type, or the schema beside it,
    and its description), in field order, a flattened field's members in its place, then
    the type's computed members; ``X | None`` is nullable unless ``omitted``, and a member
    is required unless ``omitted``.

    Raises:
        TypeError: a field says neither ``wire`` nor ``off_wire``.
    """
    properties: dict[str, Schema] = {}
    required: list[str] = []
    for name, meta, hint in wire_members(cls):
        derived, optional = _of_type(hint) if hint is not None else ({}, False)
        if isinstance(meta.schema, str):
            derived = ref(meta.schema)
        elif meta.schema is not None:
            derived = derived | dict(meta.schema)
        if optional and not meta.omitted:
            derived = nullable(derived)
        properties[name] = derived | {"description": meta.description}
        if not meta.omitted:
            required.append(name)
    return obj(properties, required, description=description)
