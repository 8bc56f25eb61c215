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
3. A field declared ``wire(..., flatten=True)`` holds a dataclass (``RouterConfig``)
   whose own wire members are members of this object, in place of one nested member.
4. A member no field holds (``count``, the length of another) is declared beside the
   type's fields, in its ``WIRE_COMPUTED`` tuple of :func:`computed`; it follows them.
5. This module holds metadata only; the types' ``to_dict`` still builds the JSON, and
   tests/integration/test_result_schemas.py checks that the two agree with what the
   server sends. :func:`wire_members` reads the declarations (rules 1, 3 and 4) in
   member order, for the schema builder and the tests.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field
from typing import Any

__all__ = ["Computed", "OffWire", "WireField", "computed", "off_wire", "wire", "wire_members"]


@dataclass(frozen=True, slots=True)
class WireField:
    """A field that is a member of the result's JSON object (see the module rules)."""

    description: str
    #: The member's schema: a ``components.schemas`` name, or a JSON Schema mapping.
    schema: str | Mapping[str, Any] | None = None
    name: str | None = None
    omitted: bool = False
    #: The field's dataclass's members are this object's (rule 3).
    flatten: bool = False


@dataclass(frozen=True, slots=True)
class Computed:
    """A member no field holds (rule 4): its name, description and schema."""

    name: str
    description: str
    schema: str | Mapping[str, Any]
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
    flatten: bool = False,
    default: Any = MISSING,
    default_factory: Callable[[], Any] | Any = MISSING,
) -> Any:
    """A dataclass field that is a member of the JSON object (``schema``: a
    ``components.schemas`` name or a JSON Schema, when the field's type does not say it;
    ``flatten``: its dataclass's members are this object's instead, rule 3)."""
    meta = {"wire": WireField(description, schema, name, omitted, flatten)}
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


def computed(
    name: str, description: str, *, schema: str | Mapping[str, Any], omitted: bool = False
) -> Computed:
    """A member no field holds, for a type's ``WIRE_COMPUTED`` (rule 4)."""
    return Computed(name, description, schema, omitted)


def wire_members(cls: type) -> list[tuple[str, WireField | Computed, object]]:
    """Each member of ``cls``'s JSON object in order: its name, its declaration and the
    field's type (None for a computed one); flattened fields spread (rule 3).

    Raises:
        TypeError: a field says neither ``wire`` nor ``off_wire``.
    """
    hints = typing.get_type_hints(cls)
    out: list[tuple[str, WireField | Computed, object]] = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("wire")
        if isinstance(meta, OffWire):
            continue
        if not isinstance(meta, WireField):
            raise TypeError(f"{cls.__name__}.{f.name}: give it wire(...) or off_wire(...)")
        if meta.flatten:
            out.extend(wire_members(hints[f.name]))
        else:
            out.append((meta.name or f.name, meta, hints[f.name]))
    extra: tuple[Computed, ...] = getattr(cls, "WIRE_COMPUTED", ())
    out.extend((c.name, c, None) for c in extra)
    return out
