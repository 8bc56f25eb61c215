"""The router calls (contract §6): create or replace, info, listing, delete."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from topics.router_types import (
    DeleteRouterResult,
    PutRouterResult,
    RouterConfig,
    RouterInfo,
    RouterPage,
    RouterSummary,
)

from .call import Call, Reply, dumps, fields_of, router_path

__all__ = [
    "delete_router",
    "get_router",
    "list_routers",
    "put_router",
    "router_config",
    "router_info",
]


def router_config(obj: Mapping[str, Any]) -> RouterConfig:
    fields = fields_of(RouterConfig, obj)
    flt = fields.get("filter")
    if isinstance(flt, list):
        fields["filter"] = tuple(flt)
    return RouterConfig(**fields)


def put_router(router: str, body: Mapping[str, Any] | None) -> Call[PutRouterResult]:
    def parse(reply: Reply) -> PutRouterResult:
        obj = reply.json()
        return PutRouterResult(obj["router"], bool(obj["created"]), router_config(obj))

    raw = dumps(dict(body), "router") if body is not None else None
    return Call("PUT", router_path(router), parse, body=raw)


def router_info(obj: Mapping[str, Any]) -> RouterInfo:
    return RouterInfo(
        router=obj["router"],
        config=router_config(obj),
        cursor=obj.get("cursor", 0),
        forwarded_total=obj.get("forwarded_total", 0),
        dropped_total=obj.get("dropped_total", 0),
        lag=obj.get("lag", 0),
    )


def get_router(router: str) -> Call[RouterInfo]:
    return Call("GET", router_path(router), lambda r: router_info(r.json()))


def list_routers(
    prefix: str | None, source: str | None, dest: str | None, page_size: int, cursor: str | None
) -> Call[RouterPage]:
    params = {"page_size": str(page_size)}
    for name, value in (("prefix", prefix), ("source", source), ("dest", dest), ("cursor", cursor)):
        if value:
            params[name] = value

    def parse(reply: Reply) -> RouterPage:
        obj = reply.json()
        routers = [
            RouterSummary(
                router=r["router"],
                source=r["source"],
                dest=r["dest"],
                guarantee=r.get("guarantee", "at_least_once"),
                forwarded_total=r.get("forwarded_total", 0),
            )
            for r in obj["routers"]
        ]
        return RouterPage(routers, obj.get("next_cursor"))

    return Call("GET", "/v0/routers", parse, params=params)


def delete_router(router: str) -> Call[DeleteRouterResult]:
    def parse(reply: Reply) -> DeleteRouterResult:
        obj = reply.json()
        return DeleteRouterResult(obj["router"], bool(obj["deleted"]))

    return Call("DELETE", router_path(router), parse)
