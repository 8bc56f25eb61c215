"""The one error mapper of the HTTP frontend (STYLE §6).

Every failure of every route ends here (the dispatcher serves every HTTP route; the
WebSocket endpoint maps its refusals here too): a :class:`~topics.errors.TopicsError` becomes its status, the §0.5 envelope (with the
request id and the performance object) and, for 429/503, a ``Retry-After`` header; any
other exception is logged with its traceback and answered with a generic ``500 internal``
that reveals nothing.

Rules:
1. Handlers raise; they never build error bodies.
2. ``401`` carries ``WWW-Authenticate: Bearer``; ``405`` carries ``Allow``.
3. Nothing a client sent (headers, query, body) is logged: only method, route pattern and
   request id, so a token can never reach a log line.
"""

from __future__ import annotations

import logging

from topics.errors import TopicsError
from topics.wire.envelope import error_body, internal_error_body, performance, retry_after_seconds

from .state import Reply, RequestContext

__all__ = ["error_reply", "internal_reply", "reply_for"]

log = logging.getLogger("topics.http")


def error_reply(ctx: RequestContext, exc: TopicsError) -> Reply:
    """Map a :class:`TopicsError` to its reply (status, envelope, headers)."""
    body = error_body(exc, ctx.request_id, performance(ctx.elapsed_ms()))
    headers: list[tuple[bytes, bytes]] = []
    retry_after = retry_after_seconds(exc)
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    if exc.status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="topics"'))
    elif exc.status == 405 and exc.detail and isinstance(exc.detail.get("allowed"), list):
        headers.append((b"allow", ", ".join(exc.detail["allowed"]).encode()))
    return Reply(exc.status, body, headers=headers)


def internal_reply(ctx: RequestContext, exc: BaseException) -> Reply:
    """Log an unexpected exception and answer a generic 500 (rule 3: no request data)."""
    pattern = ctx.route.pattern if ctx.route is not None else "?"
    log.error(
        "unhandled error in %s %s (request_id=%s)",
        ctx.method,
        pattern,
        ctx.request_id,
        exc_info=(type(exc), exc, exc.__traceback__),
    )
    return Reply(500, internal_error_body(ctx.request_id, performance(ctx.elapsed_ms())))


def reply_for(ctx: RequestContext, exc: Exception) -> Reply:
    """The reply for any exception a handler raised."""
    if isinstance(exc, TopicsError):
        if exc.status == 500:
            # A deliberate 500 (e.g. storage failed): the message is meant for the client,
            # and the operator needs the log line.
            log.error("internal error in %s (request_id=%s): %s", ctx.method, ctx.request_id, exc)
        return error_reply(ctx, exc)
    return internal_reply(ctx, exc)
