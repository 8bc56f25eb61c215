"""``GET /v0/backup``: an online backup of the data directory, streamed as a tar.

Rules:
1. Admin scope only (``topics.auth.ROUTE_SCOPES``): the dispatcher refuses any other key
   (401/403) before the handler runs, so a refused request costs no flush nor any read. An admin
   key limited to name prefixes is refused too (403): the archive holds every tenant.
2. Everything that can fail is done before the status line (the engine's
   ``open_backup``: 400 memory-only, 429 another backup running, a failed WAL), so
   errors keep the contract's envelope; after it only the body is sent.
3. The answer has an exact ``Content-Length`` (the archive's size is known from the
   plan), so a cut transfer is visible to any client, and a ``Content-Disposition`` that
   names the file. Never gzipped: segments and WAL frames are already dense, and the
   CPU is the writers'.
4. A client that goes away ends the stream at once and releases the pinned files.
"""

from __future__ import annotations

import time

import trio

from topics.errors import ForbiddenError

from .asgi import Receive, Send
from .respond import finish
from .routing import Route
from .state import Reply, RequestContext
from .streams import StreamReply, wait_for_disconnect

__all__ = ["ROUTES"]

CONTENT_TYPE = b"application/x-tar"


async def backup(ctx: RequestContext) -> Reply:
    """GET /v0/backup — the data directory as a tar (admin)."""
    if ctx.principal.prefixes:
        raise ForbiddenError(
            "a backup holds every topic: it needs an admin key without a name prefix allowlist",
            detail={"required_scopes": ["admin"]},
        )
    opened = await ctx.engine.open_backup()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(opened.info["created_ms"] / 1000))
    disposition = f'attachment; filename="topics-backup-{stamp}.tar"'.encode()
    reply = StreamReply(
        200,
        b"",
        CONTENT_TYPE,
        [
            (b"content-disposition", disposition),
            (b"content-length", str(opened.size).encode()),
            (b"cache-control", b"no-store"),
        ],
    )
    status, headers, _ = finish(ctx, reply)

    async def run(send: Send, receive: Receive) -> None:
        async def body(chunk: bytes) -> None:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})

        try:
            await send({"type": "http.response.start", "status": status, "headers": headers})
            async with trio.open_nursery() as nursery:

                async def gone() -> None:
                    await wait_for_disconnect(receive)
                    nursery.cancel_scope.cancel()  # rule 4

                nursery.start_soon(gone)
                await opened.stream(body)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                nursery.cancel_scope.cancel()
        finally:
            opened.close()

    reply.run = run
    return reply


ROUTES = (Route("GET", "/v0/backup", backup, op="backup"),)
