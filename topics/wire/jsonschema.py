"""JSON Schema fragments as plain dicts: the few constructors the request declarations
(:mod:`topics.wire.requests`) and the OpenAPI document (frontends/http/openapi) share.

``ref(name)`` points into the OpenAPI document's ``components.schemas``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "U64_MAX",
    "Schema",
    "boolean",
    "integer",
    "nullable",
    "obj",
    "ref",
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
