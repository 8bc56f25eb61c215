"""Server-wide HTTP state and the per-request context every handler receives.

``HttpSettings`` is what ``create_app`` is configured with (the server builds it from the
environment); ``HttpState`` is the one mutable object shared by all requests (per-key
in-flight counts, the CPU-pressure monitor, the shutdown flag); ``RequestContext`` is
built by the dispatcher for each request and handed to the route handler; a ``Route`` says
which handler and how the dispatcher treats it. ``Route`` is declared here, not in
``routing.py`` (the table that matches routes, which re-exports it), because the state keeps
the app's routes and the context the matched one: both ends of that reference in one module,
so there is no import circle between the two (issue 29).

Rules:
1. Everything here is touched only from the trio thread, in synchronous code: counters
   need no lock (trio never interleaves code between two awaits).
2. Handlers never send bytes themselves: they return a :class:`Reply` (status, body,
   content type, extra headers) and the dispatcher finishes it (request id, gzip,
   content length) in one place (``respond.finish``).
3. ``RequestContext.t0`` is taken when the request reaches the dispatcher, so
   ``server_total_ms`` covers auth, body reading, parsing, the engine call and encoding.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import trio

from topics.auth import DEV_PRINCIPAL, KeyStore, Principal, Scope, required_scopes
from topics.engine import Engine
from topics.errors import InvalidRequestError, ShuttingDownError, ThrottledError
from topics.settings import Limits
from topics.wire.envelope import json_bytes, performance

from .accepting import AcceptWatch
from .pressure import PressureMonitor
from .query_params import QueryParam

__all__ = ["TAIL_KEY", "Handler", "HttpSettings", "HttpState", "Reply", "RequestContext", "Route"]

log = logging.getLogger("topics.http")

JSON = b"application/json"
#: How a tail parameter segment is keyed in the route table (routing.py rule 1).
TAIL_KEY = "{}"


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """How the HTTP frontend behaves (the server fills it from ``TOPICS_*`` variables).

    Attributes:
        limits: the engine's limits; ``max_body_bytes`` and ``max_inflight_per_key`` are
            enforced here.
        keys: the hashed API key store; no keys means auth is disabled (dev mode).
        probe_auth: require a valid key on /v0/health and /v0/ready too.
        throttle_lag_ms: answer 429 when the smoothed trio scheduling lag exceeds this
            (0 disables the CPU-pressure throttle).
        lag_interval_ms: how often the lag monitor samples.
        gzip_min_bytes: compress responses at least this large when the client accepts gzip.
        gzip_level: zlib level for response compression (CPU, not bandwidth, is scarce).
        metrics_max_topics: bound of the per-topic block of /v0/metrics.
        body_timeout_s: a request body must be whole this long after its head, or the
            answer is 408 and the connection closes (``TOPICS_HTTP_BODY_TIMEOUT_MS``).
        sse_direct: streams (SSE watch, ``/work``) on a connection the fast lane owns
            write their frames to its socket themselves (``TOPICS_SSE_DIRECT``; off only
            to measure, or to rule the direct path out).
    """

    limits: Limits = field(default_factory=Limits)
    keys: KeyStore = field(default_factory=KeyStore)
    probe_auth: bool = False
    throttle_lag_ms: float = 200.0
    lag_interval_ms: float = 20.0
    gzip_min_bytes: int = 1024
    gzip_level: int = 1
    metrics_max_topics: int = 1000
    body_timeout_s: float = 30.0
    sse_direct: bool = True


MetricsSource = Callable[[], Mapping[str, float | int]]


class HttpState:
    """What every request shares: engine, settings, in-flight counts, pressure, shutdown."""

    def __init__(self, engine: Engine, settings: HttpSettings) -> None:
        self.engine = engine
        self.settings = settings
        self.keys = settings.keys
        self.auth_enabled = settings.keys.enabled
        self.max_body_bytes = settings.limits.max_body_bytes
        self.max_inflight_per_key = settings.limits.max_inflight_per_key
        self.inflight: dict[int, int] = {}
        self.pressure = PressureMonitor(settings.throttle_lag_ms, settings.lag_interval_ms)
        self.shutting_down = False
        self.started = time.monotonic()
        #: Callables other frontends register to report gauges to /v0/metrics
        #: (``topics_sse_connections``, ``topics_routers``, ...).
        self.metrics_sources: list[MetricsSource] = []
        #: Streams open now that write their frames to the lane's socket themselves
        #: (``direct_stream``; ``topics_sse_direct_streams`` in /v0/metrics).
        self.direct_streams = 0
        #: The app's route table, in order (set by ``create_app``): what
        #: ``GET /v0/openapi.json`` documents.
        self.routes: tuple[Route, ...] = ()
        self._longpolls: set[trio.CancelScope] = set()
        #: Failed accepts (descriptors exhausted): /v0/ready is 503 while they go on.
        self.accepting = AcceptWatch()

    # -- per-key in-flight cap (§11) -----------------------------------------------------

    def acquire_slot(self, principal: Principal) -> bool:
        """Take an in-flight slot for ``principal``; False if it already holds the cap.

        Only keys are counted (dev mode has no key to attribute use to, §11).
        """
        cap = self.max_inflight_per_key
        if not cap or principal.key_index < 0:
            return True
        held = self.inflight.get(principal.key_index, 0)
        if held >= cap:
            return False
        self.inflight[principal.key_index] = held + 1
        return True

    def release_slot(self, principal: Principal) -> None:
        """Give back a slot taken by :meth:`acquire_slot` (called from a ``finally``)."""
        if not self.max_inflight_per_key or principal.key_index < 0:
            return
        held = self.inflight.get(principal.key_index, 0) - 1
        if held > 0:
            self.inflight[principal.key_index] = held
        else:
            self.inflight.pop(principal.key_index, None)

    # -- shutdown --------------------------------------------------------------------------

    def begin_shutdown(self) -> None:
        """Flip /v0/ready to 503 shutting_down and end every pending long-poll now."""
        self.shutting_down = True
        for scope in list(self._longpolls):
            scope.cancel()

    @contextmanager
    def long_poll(self) -> Iterator[trio.CancelScope]:
        """A cancel scope around a long-poll wait that shutdown cancels (the caller then
        answers with what it has instead of holding the drain)."""
        scope = trio.CancelScope()
        if self.shutting_down:
            scope.cancel()
        self._longpolls.add(scope)
        try:
            with scope:
                yield scope
        finally:
            self._longpolls.discard(scope)

    def check_pressure(self) -> None:
        """Raise 429 throttled (with ``retry_after_ms``) while the trio loop is overloaded."""
        if self.pressure.throttled():
            retry_ms = self.pressure.retry_after_ms()
            raise ThrottledError(
                "the server is overloaded (CPU pressure); retry after the indicated delay",
                detail={"retry_after_ms": retry_ms},
                retry_after=retry_ms / 1000,
            )

    def check_not_shutting_down(self) -> None:
        if self.shutting_down:
            raise ShuttingDownError("the server is shutting down", retry_after=1.0)

    def uptime_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)


@dataclass(slots=True)
class Reply:
    """A finished answer before transport concerns (request id, gzip, length)."""

    status: int
    body: bytes
    content_type: bytes = JSON
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


class RequestContext:
    """One request as the handlers see it (built by the dispatcher, rule 3)."""

    __slots__ = (
        "_query",
        "body",
        "headers",
        "method",
        "name",
        "path",
        "principal",
        "query_string",
        "receive",
        "request_id",
        "route",
        "state",
        "t0",
    )

    def __init__(
        self,
        state: HttpState,
        method: str,
        path: str,
        headers: dict[bytes, bytes],
        query_string: bytes,
        request_id: str,
        t0: float,
    ) -> None:
        self.state = state
        self.method = method
        self.path = path
        self.headers = headers
        self.query_string = query_string
        self.request_id = request_id
        self.t0 = t0
        self.route: Route | None = None
        self.name: str = ""
        self.principal: Principal = DEV_PRINCIPAL
        self.body = b""
        #: The ASGI ``receive``, which after the body returns ``http.disconnect`` when the
        #: client goes away, for handlers that wait and must notice a vanished client.
        self.receive: Callable[[], Awaitable[Mapping[str, Any]]] | None = None
        self._query: dict[str, str] | None = None

    @property
    def engine(self) -> Engine:
        return self.state.engine

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.t0) * 1000

    # -- responses -----------------------------------------------------------------------

    def json(self, payload: dict[str, Any], status: int = 200, **perf: Any) -> Reply:
        """A JSON reply: ``payload`` plus the performance object (computed now)."""
        payload["performance"] = performance(self.elapsed_ms(), **perf)
        return Reply(status, json_bytes(payload))

    # -- query parameters ------------------------------------------------------------------

    @property
    def query(self) -> dict[str, str]:
        """The query string as a dict (the last of repeated names wins)."""
        if self._query is None:
            text = self.query_string.decode("latin-1")
            self._query = dict(
                urllib.parse.parse_qsl(text, keep_blank_values=True, errors="replace")
            )
        return self._query

    # The readers take a parameter's declaration (frontends/http/query_params.py), so the
    # document lists what the handlers read.

    def query_bool(self, param: QueryParam, default: bool) -> bool:
        if not self.query_string:
            return default
        name = param.name
        raw = self.query.get(name)
        if raw is None:
            return default
        value = raw.strip().lower()
        if value in ("true", "1"):
            return True
        if value in ("false", "0"):
            return False
        raise InvalidRequestError.for_field(name, f"must be true or false, got {raw!r}")

    def query_int(self, param: QueryParam, default: int) -> int:
        name = param.name
        raw = self.query.get(name) if self.query_string else None
        if raw is None or raw == "":
            return default
        if not (raw.isascii() and raw.isdigit()):
            raise InvalidRequestError.for_field(
                name, f"must be a non-negative integer, got {raw!r}"
            )
        return int(raw)

    def query_str(self, param: QueryParam) -> str | None:
        return self.query.get(param.name) if self.query_string else None


Handler = Callable[[RequestContext], Awaitable[Reply]]


@dataclass(frozen=True, slots=True)
class Route:
    """One method + path pattern and how the dispatcher treats it.

    Attributes:
        method: "GET", "PUT", "POST", "DELETE".
        pattern: e.g. "/v0/topics/{topic}/diff" (routing.py rule 1).
        handler: ``async (ctx) -> Reply``.
        fast: the fast lane may serve it (a hot POST, or a stream GET).
        body: the dispatcher reads the (bounded, decoded) body into ``ctx.body`` first.
        probe: liveness/readiness/metrics: no readiness or pressure check, and auth only
            when ``TOPICS_PROBE_AUTH`` is set (metrics sets ``always_auth``).
        always_auth: with ``probe``, still authenticate whenever keys are configured.
        pressure: "gate" sheds in the dispatcher under CPU pressure; "handler" leaves it to
            the handler (a write may opt out with ``disable_backpressure``); "never".
        query_token: accept the dev-only ``?token=`` credential (SSE streams only).
        query: the query parameters the handler reads (frontends/http/query_params.py).
        scopes: the scopes needed (default: ``topics.auth.ROUTE_SCOPES``).
        op: the operationId of the route's entry in the OpenAPI document: an
            ``Operation`` of an area module of ``frontends/http/openapi`` (routing.py rule 4).
        api: False for a route outside the /v0 API (the web console), which has no ``op``.
    """

    method: str
    pattern: str
    handler: Handler
    fast: bool = False
    body: bool = False
    probe: bool = False
    always_auth: bool = False
    pressure: Literal["gate", "handler", "never"] = "gate"
    query_token: bool = False
    query: tuple[QueryParam, ...] = ()
    scopes: frozenset[Scope] | None = None
    op: str = ""
    api: bool = True
    param: str = field(init=False, default="")
    prefix: str = field(init=False, default="")
    suffix: str = field(init=False, default="")

    def __post_init__(self) -> None:
        if self.scopes is None:
            object.__setattr__(self, "scopes", required_scopes(self.method, self.pattern))
        head, brace, rest = self.pattern.partition("{")
        if brace:
            param, close, suffix = rest.partition("}")
            base, _, last = suffix.rpartition("/")
            if base and last.startswith("{") and last.endswith("}"):
                suffix = base + "/" + TAIL_KEY  # a tail parameter (routing.py rule 1)
            else:
                base = suffix
            if not close or not head.endswith("/") or "{" in base or "}" in base:
                raise ValueError(f"route pattern {self.pattern!r}: one {{param}} segment at most")
            if suffix and not suffix.startswith("/"):
                raise ValueError(
                    f"route pattern {self.pattern!r}: the parameter is a whole segment"
                )
            object.__setattr__(self, "param", param)
            object.__setattr__(self, "prefix", head)
            object.__setattr__(self, "suffix", suffix)

    @property
    def needed_scopes(self) -> frozenset[Scope]:
        return self.scopes or frozenset()
