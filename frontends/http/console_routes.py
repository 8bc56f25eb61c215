"""The web console: one HTML page, two scripts, one stylesheet, served at ``/console``.

The console is a static client of the ``/v0`` API (docs/OPERATIONS.md, "The web console"):
it polls ``GET /v0/topics`` and ``GET /v0/routers``, reads queue counters from
``GET /v0/topics/:q`` and the named cursors' lag from ``GET /v0/metrics``, and tails a topic
through ``POST /v0/watch`` plus the browser's ``EventSource``. A topic's panel writes records,
browses from a seq or a time (``diff``), lists its cursors, edits its config and deletes
records or the topic (after a confirmation step); a queue's dead letters can be redriven. The
tail and the browse take an end (``to_ts``/``to_seq``) and a ``where`` written in the CLI's
syntax, which ``filters.js`` (a port of topics/cli/filters.py) turns into the tuple sent.
``stats.js`` draws rates, queue depth and cursor lag over time, and the header's counters,
from the ``/v0/metrics`` snapshots the page polls; ``jsontree.js`` shows record data as a
collapsible tree with a copy button. Each action is the same ``/v0`` call any client makes,
with the key typed into the page.

Rules:
1. The files are package data (``topics.frontends.http/console/*``), read once and kept in
   memory; only the names in :data:`ASSETS` are served, anything else under ``/console/`` is
   ``404 not_found`` (no path is ever joined from the request).
2. The page and its assets need no key (a browser cannot send one on navigation), so the
   routes are probe-like: no readiness or pressure gate, no in-flight slot, and a key only
   when ``TOPICS_PROBE_AUTH`` is set. Every API call the page makes is authenticated as usual
   with the key typed into it (``Authorization: Bearer``; ``?token=`` only on the stream).
3. Responses forbid framing, sniffing and referrers (a stream URL may carry ``?token=``),
   and restrict the page to its own origin (Content-Security-Policy).
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from topics.errors import NotFoundError

from .routing import Route
from .state import Reply, RequestContext

__all__ = ["ASSETS", "ROUTES", "asset_bytes"]

#: Served file name -> Content-Type.
ASSETS: dict[str, bytes] = {
    "index.html": b"text/html; charset=utf-8",
    "console.js": b"text/javascript; charset=utf-8",
    "filters.js": b"text/javascript; charset=utf-8",
    "jsontree.js": b"text/javascript; charset=utf-8",
    "stats.js": b"text/javascript; charset=utf-8",
    "console.css": b"text/css; charset=utf-8",
}

_HEADERS: list[tuple[bytes, bytes]] = [
    (b"cache-control", b"no-cache"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (
        b"content-security-policy",
        b"default-src 'self'; connect-src 'self'; img-src 'self' data:; "
        b"frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    ),
]


@cache
def asset_bytes(name: str) -> bytes:
    """The bytes of one console file (rule 1); ``KeyError`` for a name not in ASSETS."""
    if name not in ASSETS:
        raise KeyError(name)
    return (
        resources.files(__package__ or "topics.frontends.http")
        .joinpath("console", name)
        .read_bytes()
    )


def _serve(name: str) -> Reply:
    return Reply(200, asset_bytes(name), content_type=ASSETS[name], headers=list(_HEADERS))


async def page(ctx: RequestContext) -> Reply:
    """GET /console — the console page."""
    return _serve("index.html")


async def asset(ctx: RequestContext) -> Reply:
    """GET /console/{asset} — the script, the stylesheet (or the page again)."""
    if ctx.name not in ASSETS:
        raise NotFoundError(
            f"no console file {ctx.name!r}; the console is at /console",
            detail={"path": ctx.path},
        )
    return _serve(ctx.name)


ROUTES = (
    Route("GET", "/console", page, probe=True, pressure="never", api=False),
    Route("GET", "/console/{asset}", asset, probe=True, pressure="never", api=False),
)
