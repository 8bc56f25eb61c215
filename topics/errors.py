"""The one error hierarchy every frontend maps (contract §0.5 error table).

Each class carries the stable wire ``code``, the HTTP ``status`` and, per instance, a
human ``message`` and an optional structured ``detail``. Frontends never build error
bodies themselves: they call :func:`topics.wire.envelope.error_body` (HTTP/SSE) or the
WebSocket equivalent with the exception.

Rule 1: a code is registered by exactly one class (checked at class creation).
Rule 2: tombstones are data, never errors; nothing here is raised for loss.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

__all__ = [
    "BatchTooLargeError",
    "ConflictError",
    "CursorConflictError",
    "CursorNotFoundError",
    "ForbiddenError",
    "HeadMismatchError",
    "InsufficientStorageError",
    "InternalError",
    "InvalidRequestError",
    "MethodNotAllowedError",
    "NotAQueueError",
    "NotAcceptableError",
    "NotFoundError",
    "NotReadyError",
    "PayloadTooLargeError",
    "ProducerFencedError",
    "RecordTooLargeError",
    "RequestTimeoutError",
    "RouterCycleError",
    "RouterNotFoundError",
    "ShuttingDownError",
    "StorageUnavailableError",
    "ThrottledError",
    "TopicExistsIncompatibleError",
    "TopicFullError",
    "TopicNotEmptyError",
    "TopicNotFoundError",
    "TopicsError",
    "UnauthorizedError",
    "UnsupportedMediaTypeError",
    "FAMILY_CODES",
    "error_class_for_code",
    "registered_codes",
]

_REGISTRY: dict[str, type[TopicsError]] = {}


class TopicsError(Exception):
    """Base of every error topics raises on purpose.

    Args:
        message: what went wrong and, where useful, what to do next.
        detail: structured context echoed as ``error.detail``.
        retry_after: seconds a client should wait (429/503), sent as ``Retry-After``.
    """

    code: ClassVar[str] = "internal"
    status: ClassVar[int] = 500
    #: True for a code that only travels inside a stream (an SSE ``event: error`` or a
    #: WebSocket error frame) and is never an HTTP answer's status.
    stream_only: ClassVar[bool] = False
    #: The X-Request-ID of the HTTP exchange that produced this error (set by the client).
    request_id: str | None = None

    def __init__(
        self,
        message: str,
        *,
        detail: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.detail: dict[str, Any] | None = dict(detail) if detail is not None else None
        self.retry_after = retry_after

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        code = cls.__dict__.get("code")
        if code is None:  # an intermediate family base shares its parent's code
            return
        if code in _REGISTRY:
            raise TypeError(f"error code {code!r} already registered by {_REGISTRY[code].__name__}")
        _REGISTRY[code] = cls

    def to_dict(self) -> dict[str, Any]:
        """The ``error`` object of the contract's envelope."""
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.detail is not None:
            body["detail"] = self.detail
        return body

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, detail={self.detail!r})"


_REGISTRY["internal"] = TopicsError


def error_class_for_code(code: str) -> type[TopicsError]:
    """The class registered for a wire code; unknown codes map to :class:`TopicsError`."""
    return _REGISTRY.get(code, TopicsError)


def registered_codes() -> dict[str, type[TopicsError]]:
    """Every registered code and its class, in registration order (the OpenAPI document's
    list of codes is made from it). A code registers when its module is imported."""
    return dict(_REGISTRY)


class InternalError(TopicsError):
    """A bug: the server could not complete a valid request."""


# 400 ------------------------------------------------------------------------------


class InvalidRequestError(TopicsError):
    code = "invalid_request"
    status = 400

    @classmethod
    def for_field(cls, field: str, problem: str) -> InvalidRequestError:
        return cls(f"{field}: {problem}", detail={"field": field})


class BatchTooLargeError(TopicsError):
    code = "batch_too_large"
    status = 400


class RecordTooLargeError(TopicsError):
    code = "record_too_large"
    status = 400


# 401/403 --------------------------------------------------------------------------


class UnauthorizedError(TopicsError):
    code = "unauthorized"
    status = 401


class ForbiddenError(TopicsError):
    code = "forbidden"
    status = 403


# 404 ------------------------------------------------------------------------------


class NotFoundError(TopicsError):
    code = "not_found"
    status = 404


class TopicNotFoundError(NotFoundError):
    code = "topic_not_found"
    status = 404

    @classmethod
    def for_topic(cls, topic: str) -> TopicNotFoundError:
        return cls(f'topic "{topic}" does not exist', detail={"topic": topic})


class RouterNotFoundError(NotFoundError):
    code = "router_not_found"
    status = 404

    @classmethod
    def for_router(cls, router: str) -> RouterNotFoundError:
        return cls(f'router "{router}" does not exist', detail={"router": router})


class CursorNotFoundError(NotFoundError):
    code = "cursor_not_found"
    status = 404

    @classmethod
    def for_cursor(cls, topic: str, cursor: str) -> CursorNotFoundError:
        return cls(
            f'topic "{topic}" has no cursor "{cursor}"',
            detail={"topic": topic, "cursor": cursor},
        )


# 405/406/413/415 ------------------------------------------------------------------


class MethodNotAllowedError(TopicsError):
    code = "method_not_allowed"
    status = 405


class NotAcceptableError(TopicsError):
    code = "not_acceptable"
    status = 406


class RequestTimeoutError(TopicsError):
    """The request's body did not arrive within the server's deadline (an extension of
    the contract's table: the connection is closed after this answer)."""

    code = "request_timeout"
    status = 408


class PayloadTooLargeError(TopicsError):
    code = "payload_too_large"
    status = 413


class UnsupportedMediaTypeError(TopicsError):
    code = "unsupported_media_type"
    status = 415


# 409 ------------------------------------------------------------------------------


class ConflictError(TopicsError):
    code = "conflict"
    status = 409


#: Codes of family bases: a client catches the family, no frontend answers with its code.
FAMILY_CODES = frozenset({ConflictError.code})


class RouterCycleError(ConflictError):
    code = "router_cycle"
    status = 409


class TopicExistsIncompatibleError(ConflictError):
    code = "topic_exists_incompatible"
    status = 409


class TopicNotEmptyError(ConflictError):
    code = "topic_not_empty"
    status = 409


class NotAQueueError(ConflictError):
    code = "not_a_queue"
    status = 409


class HeadMismatchError(ConflictError):
    """A write's ``expected_head_seq`` is not the topic's head: nothing was appended
    (compare-and-append); ``detail.head_seq`` is the actual head."""

    code = "head_mismatch"
    status = 409


class ProducerFencedError(ConflictError):
    """A write from an older ``epoch`` of a producer than one the topic has already seen:
    a newer instance of the producer took over, nothing was appended."""

    code = "producer_fenced"
    status = 409


class CursorConflictError(ConflictError):
    """A cursor commit's ``expect_seq`` did not match the committed seq (compare-and-set)."""

    code = "cursor_conflict"
    status = 409


# 422/429/503 ----------------------------------------------------------------------


class TopicFullError(TopicsError):
    code = "topic_full"
    status = 422


class ThrottledError(TopicsError):
    code = "throttled"
    status = 429

    @classmethod
    def for_limit(cls, limit: str, maximum: int, retry_after: float = 1.0) -> ThrottledError:
        return cls(
            f"resource cap {limit} ({maximum}) reached; retry later",
            detail={"limit": limit, "max": maximum},
            retry_after=retry_after,
        )


class NotReadyError(TopicsError):
    code = "not_ready"
    status = 503


class ShuttingDownError(TopicsError):
    code = "shutting_down"
    status = 503


# 507 (our extension: the contract's table has no code for a full disk) -----------


class InsufficientStorageError(TopicsError):
    """The data directory's disk is full (or below the free-space reserve).

    ``detail.outcome`` tells a client what to do: ``"not_stored"`` (refused before anything
    changed: retrying later is safe) or ``"unknown"`` (the change was accepted in memory
    while the disk filled up; it becomes durable if space returns before a restart, so
    retry with the same idempotency key to learn which).
    """

    code = "insufficient_storage"
    status = 507


# 503 storage_unavailable (our extension, issue 31) -----------------------------------


class StorageUnavailableError(TopicsError):
    """A read needed a segment file that could not be opened or read (EMFILE, EIO, ...).

    Only the call that needed the file fails; the server keeps serving and the next call
    reads the file again, so retrying after ``Retry-After`` is safe.
    """

    code = "storage_unavailable"
    status = 503

    @classmethod
    def for_read(cls, path: str, exc: OSError) -> StorageUnavailableError:
        reason = exc.strerror or type(exc).__name__
        return cls(
            f"a segment file could not be read ({reason}); retry shortly",
            detail={"file": path.rsplit("/", 1)[-1], "errno": exc.errno},
            retry_after=1.0,
        )
