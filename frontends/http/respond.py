"""Finishing replies: request id, gzip, length, sent over ASGI.

Rules:
1. Every response carries ``X-Request-ID`` (CONTRACT-NOTES 5).
2. A body is gzip-compressed only when the client accepts gzip (q > 0) and the body is at
   least ``gzip_min_bytes``: small bodies cost more CPU than they save.
3. ``finish`` is the only place transport headers are decided (the WebSocket endpoint's
   refusals use it too).
"""

from __future__ import annotations

import gzip

from .asgi import Send
from .state import Reply, RequestContext

__all__ = ["accepts_gzip", "finish", "send_reply"]


def accepts_gzip(headers: dict[bytes, bytes]) -> bool:
    """True when ``Accept-Encoding`` allows gzip (explicitly or via ``*``) with q > 0."""
    raw = headers.get(b"accept-encoding")
    if not raw or (b"gzip" not in raw and b"*" not in raw):
        return False
    for part in raw.lower().split(b","):
        coding, _, params = part.partition(b";")
        if coding.strip() not in (b"gzip", b"*"):
            continue
        for param in params.split(b";"):
            key, _, value = param.partition(b"=")
            if key.strip() == b"q":
                try:
                    if float(value.strip() or b"1") <= 0:
                        return False
                except ValueError:
                    return False
        return True
    return False


def finish(ctx: RequestContext, reply: Reply) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Status, headers (without Content-Length) and the final body of ``reply``."""
    body = reply.body
    headers = [(b"content-type", reply.content_type), (b"x-request-id", ctx.request_id.encode())]
    settings = ctx.state.settings
    if len(body) >= settings.gzip_min_bytes and accepts_gzip(ctx.headers):
        body = gzip.compress(body, compresslevel=settings.gzip_level, mtime=0)
        headers.append((b"content-encoding", b"gzip"))
        headers.append((b"vary", b"accept-encoding"))
    if reply.headers:
        headers.extend(reply.headers)
    return reply.status, headers, body


async def send_reply(send: Send, ctx: RequestContext, reply: Reply) -> None:
    """Send ``reply`` over ASGI."""
    status, headers, body = finish(ctx, reply)
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
