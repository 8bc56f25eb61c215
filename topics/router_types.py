"""Result types of the router endpoints (contract §6): frozen dataclasses with ``to_dict()``.

``to_dict()`` gives the contract's JSON object without the ``performance`` block, which
frontends add. ``filter`` is echoed in its normalized tuple form (a bare string filter
``"x"`` reads back as ``["tag", "Eq", "x"]``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .result_fields import wire

__all__ = [
    "DeleteRouterResult",
    "Guarantee",
    "PutRouterResult",
    "RouterConfig",
    "RouterInfo",
    "RouterPage",
    "RouterSummary",
]

Guarantee = Literal["at_least_once", "exactly_once"]


@dataclass(frozen=True, slots=True)
class RouterConfig:
    """A router's definition: every field of the PUT body, defaults filled in."""

    source: str = wire("The topic it reads.", schema="TopicName")
    dest: str = wire("The topic it writes.", schema="TopicName")
    preserve_node: bool = wire("Keep $node on forwarded records.", default=True)
    preserve_tag: bool = wire("Keep $tag on forwarded records.", default=True)
    create_dest: bool = wire("Auto-create dest if absent (false: 404).", default=True)
    filter: tuple[str, str, str] | None = wire(
        "Forward-time tag filter (the §5 tuple language); null = all.",
        schema="Match",
        default=None,
    )
    allow_cycle: bool = wire("Permit a directed cycle (runtime hop cap instead).", default=False)
    guarantee: Guarantee = wire(
        "Delivery mode: at_least_once (default) or exactly_once (a stable idempotency key "
        "in meta._topics_router suppresses duplicate dest appends).",
        default="at_least_once",
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "dest": self.dest,
            "preserve_node": self.preserve_node,
            "preserve_tag": self.preserve_tag,
            "create_dest": self.create_dest,
            "filter": list(self.filter) if self.filter is not None else None,
            "allow_cycle": self.allow_cycle,
            "guarantee": self.guarantee,
        }


@dataclass(frozen=True, slots=True)
class PutRouterResult:
    """What ``PUT /v0/routers/:router`` answers (201 when ``created``, else 200)."""

    router: str = wire("The router.", schema="RouterName")
    created: bool = wire("This call created the router.")
    config: RouterConfig = wire("The router as configured.", flatten=True)

    def to_dict(self) -> dict[str, Any]:
        return {"router": self.router, "created": self.created, **self.config.to_dict()}


@dataclass(frozen=True, slots=True)
class RouterInfo:
    """One router's definition and forwarding state (``GET /v0/routers/:router``).

    Attributes:
        cursor: the last source seq the router has dealt with (forwarded, filtered out,
            dropped, or reported lost as ``source_trim``).
        forwarded_total: copies appended to dest by this router.
        dropped_total: source records deliberately not forwarded: loop prevention (a copy
            back into the topic it started from, or past the hop cap), a copy on a loop
            whose stamped meta would exceed the record limits, or a record that can never
            fit a ``discard: "reject"`` dest's caps (docs/ROUTERS.md).
        lag: source records (seqs) still ahead of the cursor.
    """

    router: str = wire("The router.", schema="RouterName")
    config: RouterConfig = wire("The router as configured.", flatten=True)
    cursor: int = wire(
        "The last source seq the router has dealt with (forwarded, filtered out, dropped, "
        "or reported lost).",
        schema="Seq",
    )
    forwarded_total: int = wire("Records forwarded.", schema={"minimum": 0})
    dropped_total: int = wire(
        "Source records deliberately not forwarded: loop prevention, a copy whose stamped "
        "meta would exceed the record limits, or a record that can never fit a discard: "
        "reject dest's caps (docs/ROUTERS.md).",
        schema={"minimum": 0},
    )
    lag: int = wire("Source seqs still ahead of the cursor.", schema={"minimum": 0})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"router": self.router, **self.config.to_dict()}
        out.update(
            forwarded_total=self.forwarded_total,
            dropped_total=self.dropped_total,
            cursor=self.cursor,
            lag=self.lag,
        )
        return out


@dataclass(frozen=True, slots=True)
class RouterSummary:
    """One entry of ``GET /v0/routers``."""

    router: str = wire("The router.", schema="RouterName")
    source: str = wire("The topic it reads.", schema="TopicName")
    dest: str = wire("The topic it writes.", schema="TopicName")
    guarantee: Guarantee = wire(
        "Delivery mode: at_least_once (default) or exactly_once (a stable idempotency key "
        "in meta._topics_router suppresses duplicate dest appends)."
    )
    forwarded_total: int = wire("Records forwarded.", schema={"minimum": 0})

    def to_dict(self) -> dict[str, Any]:
        return {
            "router": self.router,
            "source": self.source,
            "dest": self.dest,
            "guarantee": self.guarantee,
            "forwarded_total": self.forwarded_total,
        }


@dataclass(frozen=True, slots=True)
class RouterPage:
    """One page of routers in name order; ``next_cursor`` only when more follow."""

    routers: list[RouterSummary] = wire(
        "This page's routers.",
        schema={"items": {"$ref": "#/components/schemas/RouterSummary"}},
    )
    next_cursor: str | None = wire(
        "Opaque; present only when more pages exist.", schema={"minLength": 1}, omitted=True
    )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"routers": [r.to_dict() for r in self.routers]}
        if self.next_cursor is not None:
            out["next_cursor"] = self.next_cursor
        return out


@dataclass(frozen=True, slots=True)
class DeleteRouterResult:
    """What ``DELETE /v0/routers/:router`` answers (``deleted`` false when absent)."""

    router: str = wire("The router.", schema="RouterName")
    deleted: bool = wire("False when it did not exist.")

    def to_dict(self) -> dict[str, Any]:
        return {"router": self.router, "deleted": self.deleted}
