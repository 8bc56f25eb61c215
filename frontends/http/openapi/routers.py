"""Routers (§6): their schemas and operations."""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING

from topics.router_types import (
    DeleteRouterResult,
    PutRouterResult,
    RouterConfig,
    RouterInfo,
    RouterPage,
    RouterSummary,
)
from topics.wire.jsonschema import result_schema

from .errors import BODY, GATE, NAMED, STORE
from .operation import BODY_NOTE, Operation, json_body, ok_response
from .schema import Schema, obj, with_perf


def schemas() -> dict[str, Schema]:
    """This module's entries of ``components.schemas``, in document order.

    Kept whole: a declarative table, read top to bottom like the document it makes.
    """
    config = result_schema(RouterConfig)["properties"]
    defaults = {f.name: f.default for f in dataclasses.fields(RouterConfig)}
    return {
        "RouterPutRequest": obj(
            {
                name: member | ({} if defaults[name] is MISSING else {"default": defaults[name]})
                for name, member in config.items()
            },
            ["source", "dest"],
            closed=True,
            description="Create or configure a router (§6.1); source != dest. The key's prefix "
            "allowlist applies to source and dest too.",
        ),
        "RouterPutResult": with_perf(result_schema(PutRouterResult)),
        "RouterState": with_perf(result_schema(RouterInfo)),
        "RouterSummary": result_schema(RouterSummary),
        "RouterList": with_perf(result_schema(RouterPage)),
        "RouterDeleteResult": with_perf(result_schema(DeleteRouterResult)),
    }


#: The operations of this area, joined to their routes by ``Route.op`` (operationId).
OPERATIONS: tuple[Operation, ...] = (
    Operation(
        op_id="putRouter",
        tag="routers",
        summary="Create or configure a router (idempotent upsert)",
        description="§6.1. Forwarding is asynchronous and derived. 201 when created. An "
        "absent source (and an absent dest unless create_dest is false) is auto-created "
        "with the default config, after every check passed: a refused router leaves no "
        "topic behind. A cycle is 409 router_cycle (detail.cycle) unless allow_cycle; a "
        "second source into a derived dest is 409 topic_exists_incompatible (detail.reason "
        "= router_dest_fan_in); over TOPICS_MAX_ROUTERS is 429 throttled. The key's prefix "
        "allowlist applies to source and dest, the topics it may create (403)." + BODY_NOTE,
        params=["Content-Encoding"],
        body=json_body("RouterPutRequest", required=True, description="The router."),
        ok=ok_response("RouterPutResult", "The router as configured.", (200, 201)),
        errors=(
            *GATE,
            *STORE,
            *BODY,
            "topic_not_found",
            "router_cycle",
            "topic_exists_incompatible",
        ),
    ),
    Operation(
        op_id="getRouter",
        tag="routers",
        summary="Get a router",
        description="§6.2.",
        ok=ok_response("RouterState", "The router and its forwarded_total."),
        errors=(*GATE, *NAMED, "router_not_found"),
    ),
    Operation(
        op_id="listRouters",
        tag="routers",
        summary="List routers (opaque-cursor paginated)",
        description="§6.3. Filtered to the key's prefix allowlist.",
        ok=ok_response("RouterList", "One page; next_cursor is absent on the last page."),
        errors=(*GATE, "invalid_request"),
    ),
    Operation(
        op_id="deleteRouter",
        tag="routers",
        summary="Delete a router",
        description="§6.4. Idempotent (deleted: false when absent); forwarded copies stay.",
        ok=ok_response("RouterDeleteResult", "Whether it existed."),
        errors=(*GATE, *STORE, *NAMED),
    ),
)
