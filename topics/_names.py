"""Name rules for topics and routers (contract §1.1, §6, §12 "No path traversal").

Names are validated at the engine boundary, before any use; storage keys files by
numeric ids, so a name never reaches a path.
"""

from __future__ import annotations

import re

from .errors import InvalidRequestError

__all__ = ["ROUTER_NAME_RE", "TOPIC_NAME_RE", "check_router_name", "check_topic_name"]

# Public: the OpenAPI document's name patterns are these (frontends/http/openapi/schema.py).
TOPIC_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,254}")
ROUTER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:>-]{0,254}")


def check_topic_name(name: object, field: str = "topic") -> str:
    """Return ``name`` if it is a valid topic name, else raise invalid_request."""
    if not isinstance(name, str) or TOPIC_NAME_RE.fullmatch(name) is None:
        raise InvalidRequestError(
            f"{field}: {name!r} is not a valid topic name "
            "(1-255 chars of A-Z a-z 0-9 . _ : -, starting alphanumeric)",
            detail={"field": field},
        )
    return name


def check_router_name(name: object, field: str = "router") -> str:
    """Return ``name`` if it is a valid router name (topic charset plus '>')."""
    if not isinstance(name, str) or ROUTER_NAME_RE.fullmatch(name) is None:
        raise InvalidRequestError(
            f"{field}: {name!r} is not a valid router name "
            "(1-255 chars of A-Z a-z 0-9 . _ : - >, starting alphanumeric)",
            detail={"field": field},
        )
    return name
