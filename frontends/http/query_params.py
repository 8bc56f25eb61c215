"""The query parameters the routes read, each declared once.

A handler reads a parameter through its declaration (``ctx.query_bool(TOUCH, True)``,
``RequestContext`` takes nothing else), its ``Route`` lists the ones it reads
(``Route.query``), and the OpenAPI document's ``components.parameters`` and each
operation's parameter list are made from these (frontends/http/openapi/parameters.py,
builder.py). tests/unit/http/test_query_params.py checks that each route lists exactly
the declarations its handler reads, with the reader that matches their kind.

Rules:
1. ``kind`` says how the value is read and so its schema: ``bool`` is true/false/1/0
   (``query_bool``), ``int`` is ASCII digits (``query_int``), ``str`` is any text
   (``query_str``; ``schema`` may narrow what the engine accepts).
2. Defaults stay with the reader (a route may default one parameter differently:
   ``touch`` is true on GET /v0/topics/{topic}, false on the list).
3. ``?token=`` is read by the dispatcher for every route (auth); a route accepts it only
   with ``Route.query_token``, and the document lists it on exactly those.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "CURSOR",
    "IF_EMPTY",
    "LENIENT",
    "PAGE_SIZE",
    "PREFIX",
    "QUERY_PARAMS",
    "RETURN_SEQS",
    "ROUTER_DEST",
    "ROUTER_SOURCE",
    "TOKEN",
    "TOUCH",
    "WORK_LEASE_MS",
    "WORK_MAX",
    "WORK_NODE",
    "QueryParam",
]

_KIND_SCHEMAS: dict[str, dict[str, Any]] = {
    "bool": {"type": "string", "enum": ["true", "false", "1", "0"]},
    "int": {"type": "string", "pattern": "^[0-9]+$"},
    "str": {"type": "string"},
}


@dataclass(frozen=True, slots=True)
class QueryParam:
    """One query parameter.

    Attributes:
        key: its name in the document's ``components.parameters`` (unique; ``work_node``
            for the /work stream's ``node``).
        name: its name in the query string.
        kind: how it is read (rule 1).
        description: the document's description.
        required: a request without it is 400.
        schema: the document's schema when ``kind`` alone does not say it (a ``str``).
    """

    key: str
    name: str
    kind: Literal["bool", "int", "str"]
    description: str
    required: bool = False
    schema: Mapping[str, Any] | None = field(default=None, compare=False)

    def json_schema(self) -> dict[str, Any]:
        return dict(self.schema if self.schema is not None else _KIND_SCHEMAS[self.kind])


def _topic_name() -> dict[str, str]:
    return {"$ref": "#/components/schemas/TopicName"}


TOUCH = QueryParam("touch", "touch", "bool", "Bump the topic's auto-priority recency clock.")
PREFIX = QueryParam("prefix", "prefix", "str", "Only names starting with this.")
PAGE_SIZE = QueryParam(
    "page_size",
    "page_size",
    "int",
    "Page size; default 100, at most 1000 (larger values are clamped); 0 is 400.",
)
CURSOR = QueryParam(
    "cursor", "cursor", "str", "next_cursor of the previous page (opaque; a corrupt one is 400)."
)
IF_EMPTY = QueryParam(
    "if_empty",
    "if_empty",
    "bool",
    "Delete only when the topic holds no records (else 409 topic_not_empty).",
)
RETURN_SEQS = QueryParam(
    "return_seqs", "return_seqs", "bool", "false omits seqs from the answer (the body member wins)."
)
LENIENT = QueryParam(
    "lenient",
    "lenient",
    "bool",
    "Drop unknown topics instead of answering 404 (at least one must exist).",
)
TOKEN = QueryParam(
    "token",
    "token",
    "str",
    "DEV-ONLY bearer fallback for browser EventSource (accepted only on the SSE stream "
    "GETs; refused with 401 everywhere else). Leaks via logs, history and proxies.",
)
WORK_NODE = QueryParam(
    "work_node",
    "node",
    "str",
    "The worker identity the pushed jobs are leased to.",
    required=True,
    schema={"$ref": "#/components/schemas/NodeId"},
)
WORK_MAX = QueryParam(
    "work_max", "max", "int", "Target in-flight depth (default 1, clamped to TOPICS_MAX_CLAIM)."
)
WORK_LEASE_MS = QueryParam(
    "work_lease_ms", "lease_ms", "int", "Lease of pushed jobs (default: the topic's)."
)
ROUTER_SOURCE = QueryParam(
    "router_source", "source", "str", "Only routers from this source topic.", schema=_topic_name()
)
ROUTER_DEST = QueryParam(
    "router_dest", "dest", "str", "Only routers into this dest topic.", schema=_topic_name()
)

#: Every declaration, in the order of the document's ``components.parameters``.
QUERY_PARAMS: tuple[QueryParam, ...] = (
    TOUCH,
    PREFIX,
    PAGE_SIZE,
    CURSOR,
    IF_EMPTY,
    RETURN_SEQS,
    LENIENT,
    TOKEN,
    WORK_NODE,
    WORK_MAX,
    WORK_LEASE_MS,
    ROUTER_SOURCE,
    ROUTER_DEST,
)
