"""What both clients share around httpx: settings, headers, request ids, error mapping.

Rules:
1. Every request carries an ``X-Request-ID`` the client made (one per logical call, the
   same on each retry, so the server's log ties the attempts together); every error the
   client raises carries the id of the answer (the server echoes ours) as
   ``exc.request_id`` (also :func:`request_id_of`).
2. An error answer becomes the ``topics.errors`` class registered for its
   ``error.code`` (``error_class_for_code``; an unknown code is the base
   :class:`~topics.errors.TopicsError`, whose ``code`` attribute then still says the wire
   code), with the server's message, detail and ``retry_after``. A body that is not our
   envelope (a proxy's HTML page) maps by HTTP status alone.
3. A failure to talk to the server at all is :class:`ClientConnectionError` (a
   ``TopicsError``, so one ``except TopicsError`` covers everything); its ``sent`` says
   whether the request may have reached the server.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

import httpx
import ujson

from topics._version import __version__
from topics.errors import (
    NotFoundError,
    NotReadyError,
    ThrottledError,
    TopicsError,
    error_class_for_code,
)

from ._protocol import Call, Reply
from ._retry import NO_RETRY, RETRY_STATUSES, RetryPolicy, server_delay_s

T = TypeVar("T")

__all__ = [
    "DEFAULT_URL",
    "ClientConnectionError",
    "Settings",
    "error_from_response",
    "request_id_of",
]

DEFAULT_URL = "http://127.0.0.1:4000"
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)
#: Answers that mean the server itself is not there yet (a restart, a proxy without its
#: backend): waited for like a refused connection (_retry rule 5).
_UNREACHABLE = frozenset({502, 503, 504})
_BY_STATUS: dict[int, type[TopicsError]] = {
    404: NotFoundError,
    429: ThrottledError,
    503: NotReadyError,
}


class ClientConnectionError(TopicsError):
    """The server could not be reached, or the connection broke before an answer came.

    Attributes:
        sent: False when the request certainly never reached the server (the connection
            could not be made); True when it may have (the answer was lost).
    """

    # Not a wire code: kept out of the registry of codes (errors.py rule 1) on purpose.
    sent: bool

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


ClientConnectionError.code = "connection_error"
ClientConnectionError.status = 0


def _set(exc: TopicsError, name: str, value: object) -> None:
    # Per-instance facts on the shared error classes (errors.py declares no such
    # attributes): stored in the instance dict so mypy and the classes stay untouched.
    exc.__dict__[name] = value


def request_id_of(exc: BaseException) -> str | None:
    """The X-Request-ID of the answer (or attempt) that raised ``exc``, if any."""
    value = getattr(exc, "request_id", None)
    return value if isinstance(value, str) else None


def new_request_id() -> str:
    return str(uuid.uuid4())


def error_from_response(status: int, headers: Mapping[str, str], body: bytes) -> TopicsError:
    """The exception for a non-2xx answer (rule 2)."""
    request_id = headers.get("x-request-id")
    error: dict[str, Any] | None = None
    try:
        parsed = ujson.loads(body) if body else None
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        error = parsed["error"]
    if error is not None and isinstance(error.get("code"), str):
        code: str = error["code"]
        cls = error_class_for_code(code)
        message = str(error.get("message") or f"HTTP {status} {code}")
        detail = error.get("detail")
        request_id = request_id or error.get("request_id")
    else:
        cls = _BY_STATUS.get(status, TopicsError)
        code = cls.code if cls is not TopicsError else "internal"
        text = body[:200].decode("utf-8", "replace").strip()
        message = f"HTTP {status}" + (f": {text}" if text else "")
        detail = None
    exc = cls(
        message,
        detail=detail if isinstance(detail, dict) else None,
        retry_after=server_delay_s(headers, error),
    )
    if cls.code != code:  # an unknown code: keep the wire's word for it
        _set(exc, "code", code)
    _set(exc, "http_status", status)
    _set(exc, "request_id", request_id)
    return exc


def connection_error(exc: httpx.TransportError, request_id: str, url: str) -> ClientConnectionError:
    sent = not isinstance(exc, _NOT_SENT)
    what = "lost the connection to" if sent else "could not connect to"
    err = ClientConnectionError(f"{what} {url}: {exc or type(exc).__name__}", sent=sent)
    _set(err, "request_id", request_id)
    return err


@dataclass(frozen=True, slots=True)
class Settings:
    """A client's connection settings (shared by :class:`Client` and :class:`AsyncClient`).

    Attributes:
        url: the server's base URL, e.g. ``http://127.0.0.1:4000``.
        api_key: sent as ``Authorization: Bearer <key>``.
        timeout_s: connect/read/write timeout of one request (a long poll adds its wait),
            and the deadline of a call whose server is not there (_retry rule 5).
        retry: the retry policy (``RetryPolicy(max_attempts=1)`` never retries).
        auto_idempotency_key: give each ``write()`` call a fresh idempotency key (uuid4)
            when the caller gave none, so its retries can never append twice.
    """

    url: str = DEFAULT_URL
    api_key: str | None = None
    timeout_s: float = 30.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    auto_idempotency_key: bool = True
    user_agent: ClassVar[str] = "topics-python"

    def headers(self) -> dict[str, str]:
        out = {"User-Agent": f"{self.user_agent}/{__version__}", "Accept": "application/json"}
        if self.api_key:
            out["Authorization"] = f"Bearer {self.api_key}"
        return out

    def timeout(self, extra_s: float = 0.0) -> httpx.Timeout:
        return httpx.Timeout(self.timeout_s, read=self.timeout_s + extra_s)

    def base_url(self) -> str:
        return self.url.rstrip("/")


def make_settings(
    url: str | None,
    api_key: str | None,
    timeout_s: float,
    retry: RetryPolicy | bool,
    auto_idempotency_key: bool,
) -> Settings:
    policy = retry if isinstance(retry, RetryPolicy) else RetryPolicy() if retry else NO_RETRY
    return Settings(url or DEFAULT_URL, api_key, timeout_s, policy, auto_idempotency_key)


class Exchange(Generic[T]):
    """One call's exchange with the server, for either client's ``_run`` loop: what to
    send, then after each attempt the parsed result, or how long to wait before the next
    (``_retry``'s policy; a call that is not idempotent is sent again only when it surely
    never left), or the error."""

    __slots__ = ("attempt", "call", "request", "request_id", "settings", "started")

    def __init__(self, call: Call[T], settings: Settings) -> None:
        self.call = call
        self.settings = settings
        self.request_id = request_id = new_request_id()
        headers = {"X-Request-ID": request_id, **(call.headers or {})}
        if call.body is not None:
            headers["Content-Type"] = "application/json"
        #: The keyword arguments of ``httpx.Client.request`` after method and path.
        self.request: dict[str, Any] = {
            "params": call.params,
            "content": call.body,
            "headers": headers,
        }
        if call.wait_s:  # else the httpx client's own timeout, settings.timeout() already
            self.request["timeout"] = settings.timeout(call.wait_s)
        self.started = time.monotonic()
        self.attempt = 0

    def result(self, resp: httpx.Response) -> T:
        """The parsed answer of a 2xx response (a malformed one is a ``TopicsError``)."""
        request_id = resp.headers.get("x-request-id")
        call = self.call
        try:
            return call.parse(Reply(resp.status_code, resp.content, request_id))
        except (ValueError, KeyError, TypeError) as exc:
            err = TopicsError(f"malformed answer to {call.method} {call.path}: {exc!r}")
            err.__dict__["request_id"] = request_id
            raise err from None

    def wait_s(self, failure: httpx.Response | httpx.TransportError) -> float:
        """Seconds to wait before the next attempt after ``failure``; raises its error
        when the call is not to be sent again."""
        self.attempt += 1
        call = self.call
        if isinstance(failure, httpx.TransportError):
            err: TopicsError = connection_error(failure, self.request_id, self.settings.url)
            retry = call.idempotent or not getattr(err, "sent", True)
            server_s = None
            unreachable = True
        else:
            err = error_from_response(failure.status_code, failure.headers, failure.content)
            retry = call.idempotent and failure.status_code in RETRY_STATUSES
            server_s = err.retry_after
            unreachable = failure.status_code in _UNREACHABLE
        if not retry:
            raise err
        # _retry rule 5: a server that is not there is waited for until the call's own
        # deadline (a restart outlasts the quick retries); only throttling counts attempts.
        until = self.started + self.settings.timeout_s + (call.wait_s or 0) if unreachable else None
        delay = self.settings.retry.delay_s(
            self.attempt, self.started, server_s, unreachable_until=until
        )
        if delay is None:
            raise err
        return delay
