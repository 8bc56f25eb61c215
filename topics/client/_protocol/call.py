"""A call as a value (:class:`Call`), its answer (:class:`Reply`), and what every area's
calls share: the JSON encoding (rule 2 of the package), the checked paths (rule 3) and the
lenient field picking (rule 1)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import ujson

from topics._names import check_router_name, check_topic_name
from topics.errors import InvalidRequestError

__all__ = [
    "Call",
    "Reply",
    "dumps",
    "fields_of",
    "json_value",
    "perf_ms",
    "router_path",
    "topic_path",
]

T = TypeVar("T")
_BYTES = (bytes, bytearray, memoryview)


@dataclass(frozen=True, slots=True)
class Reply:
    """A successful HTTP answer: status, raw body and the server's X-Request-ID."""

    status: int
    body: bytes
    request_id: str | None = None

    def json(self) -> dict[str, Any]:
        value = ujson.loads(self.body) if self.body else {}
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request and how to read its answer.

    Attributes:
        idempotent: safe to send again when the answer was lost (rule 5).
        wait_s: extra seconds the server may legitimately hold the request (long polls).
    """

    method: str
    path: str
    parse: Callable[[Reply], T]
    params: Mapping[str, str] | None = None
    body: bytes | None = None
    idempotent: bool = True
    headers: Mapping[str, str] | None = None
    wait_s: float = 0.0


def dumps(value: object, field: str = "body") -> bytes:
    """Compact UTF-8 JSON of ``value``; unencodable values are ``invalid_request``."""
    try:
        return ujson.dumps(
            value, ensure_ascii=False, escape_forward_slashes=False, allow_nan=False
        ).encode()
    except (TypeError, OverflowError, ValueError) as exc:
        raise InvalidRequestError(
            f"{field}: cannot be encoded as JSON ({exc})", detail={"field": field}
        ) from None


def json_value(value: object, field: str) -> bytes:
    """Rule 2: bytes are JSON text already; anything else is encoded once."""
    if isinstance(value, _BYTES):
        return bytes(value)
    return dumps(value, field)


def topic_path(topic: str, suffix: str = "") -> str:
    return "/v0/topics/" + quote(check_topic_name(topic), safe="") + suffix


def router_path(router: str) -> str:
    return "/v0/routers/" + quote(check_router_name(router), safe="")


def fields_of(cls: type[Any], obj: Mapping[str, Any]) -> dict[str, Any]:
    """The members of ``obj`` that are fields of dataclass ``cls`` (rule 1)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in obj.items() if k in names}


def perf_ms(obj: Mapping[str, Any], name: str) -> float:
    """A timing from the answer's ``performance`` member, 0.0 when absent."""
    perf = obj.get("performance")
    value = perf.get(name, 0.0) if isinstance(perf, dict) else 0.0
    return float(value) if isinstance(value, int | float) else 0.0
