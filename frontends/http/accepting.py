"""Whether the server is accepting connections: what readiness says when descriptors run out.

``trio.serve_listeners`` survives EMFILE/ENFILE (and ENOBUFS/ENOMEM) on ``accept``: it
logs, sleeps 0.1 s and tries again, so the process stays alive and healthy. But a server
that cannot accept is not ready: new clients wait in the listen backlog, or time out.
:class:`AcceptWatch` wraps each listener to see those failures; ``/v0/ready`` asks it
(probe_routes rule 2), as it asks the engine about a full disk.

Rules:
1. A failed accept of the capacity kind records its time and errno; any accept that
   succeeds after it clears it. Other errors pass through unrecorded (trio raises them).
2. :meth:`AcceptWatch.failing` is true while the last capacity failure is newer than the
   last success and at most ``WINDOW_S`` old: trio retries every 0.1 s while connections
   wait, so a shortage that lasts keeps it fresh, and a server nobody connects to since
   (no accept tried, none failed) is not held unready by an old failure.
3. The clock is injectable (``trio.current_time`` by default) so tests need not sleep.
4. A probe reaches the server only over a connection it already has (a keep-alive one, or
   one accepted in a moment when a descriptor was free): one that cannot connect learns
   the same thing from its connect timing out.
"""

from __future__ import annotations

import errno
from collections.abc import Callable

import trio

__all__ = ["CAPACITY_ERRNOS", "WINDOW_S", "AcceptWatch", "WatchedListener"]

#: The errors trio's accept loop treats as a passing shortage (trio/_highlevel_serve_listeners).
CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
#: How long a failure counts without a newer one (rule 2): many of trio's 0.1 s retries.
WINDOW_S = 3.0


class AcceptWatch:
    """The last capacity failure of ``accept`` and whether it still holds (module doc)."""

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock or trio.current_time
        self.failed_at: float | None = None
        self.error = ""

    def failed(self, exc: OSError) -> None:
        """Rule 1: a capacity failure now."""
        self.failed_at = self._clock()
        self.error = errno.errorcode.get(exc.errno or 0, str(exc.errno))

    def succeeded(self) -> None:
        """Rule 1: an accept went through; the shortage is over."""
        self.failed_at = None

    def failing(self) -> bool:
        """Rule 2."""
        at = self.failed_at
        return at is not None and self._clock() - at <= WINDOW_S

    def wrap(self, listeners: list[trio.SocketListener]) -> list[WatchedListener]:
        return [WatchedListener(listener, self) for listener in listeners]


class WatchedListener(trio.abc.Listener[trio.SocketStream]):
    """A listener that tells its :class:`AcceptWatch` how each ``accept`` went."""

    def __init__(self, inner: trio.SocketListener, watch: AcceptWatch) -> None:
        self.inner = inner
        self._watch = watch

    async def accept(self) -> trio.SocketStream:
        try:
            stream = await self.inner.accept()
        except OSError as exc:
            if exc.errno in CAPACITY_ERRNOS:
                self._watch.failed(exc)
            raise
        self._watch.succeeded()
        return stream

    async def aclose(self) -> None:
        await self.inner.aclose()
