"""How a result type's fields appear on the wire, declared beside the fields themselves.

A result dataclass (``WriteResult``, ``DiffResult``, ...) gives each field either
:func:`wire` (a member of its JSON object: the description, and the schema when its type
does not say it) or :func:`off_wire` (why it is not a member: a performance timing, a
cache). frontends/http/openapi builds the result's schema from ``dataclasses.fields``
(``topics.wire.jsonschema.result_schema``), so a field cannot be added without saying how
it shows, and the document cannot describe a member the type does not have.

Rules:
1. A member's name is the field's unless ``name`` says otherwise (``records_json`` is
   ``records``).
2. A field typed ``X | None`` is ``null`` on the wire when None, unless ``omitted``: then
   the member is left out (and is not required).
3. This module holds metadata only; the types' ``to_dict`` still builds the JSON, and
   tests/integration/test_result_schemas.py checks that the two agree with what the
   server sends.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field
from typing import Any

__all__ = ["OffWire", "WireField", "off_wire", "wire"]


@dataclass(frozen=True, slots=True)
class WireField:
    """A field that is a member of the result's JSON object (see the module rules)."""

    description: str
    #: The member's schema: a ``components.schemas`` name, or a JSON Schema mapping.
    schema: str | Mapping[str, Any] | None = None
    name: str | None = None
    omitted: bool = False


@dataclass(frozen=True, slots=True)
class OffWire:
    """A field that is not a member, and why."""

    why: str


def wire(
    description: str,
    *,
    schema: str | Mapping[str, Any] | None = None,
    name: str | None = None,
    omitted: bool = False,
    default: Any = MISSING,
    default_factory: Callable[[], Any] | Any = MISSING,
) -> Any:
    """A dataclass field that is a member of the JSON object (``schema``: a
    ``components.schemas`` name or a JSON Schema, when the field's type does not say it)."""
    meta = {"wire": WireField(description, schema, name, omitted)}
    return field(default=default, default_factory=default_factory, metadata=meta)


def off_wire(
    why: str,
    *,
    default: Any = MISSING,
    default_factory: Callable[[], Any] | Any = MISSING,
    **kw: Any,
) -> Any:
    """A dataclass field that is not a member of the JSON object, and why."""
    return field(
        default=default, default_factory=default_factory, metadata={"wire": OffWire(why)}, **kw
    )
