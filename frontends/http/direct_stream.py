"""What the directly written streams share (watch SSE rule 7, /work rule 5): the
direct-or-pump state machine, in a module of its own that names no route.

A stream on a connection the fast lane owns can write its chunks to the socket itself
(``direct.RawSocket``). While it can do that without blocking it is *idle*: no task of its
own but the request's, which only waits for the client to go away, wakes at the stream's
deadline (a heartbeat, a lease coming due) and asks the stream what to do then. Whatever
does not fit (a partial write, a backlog, pressure, a final frame, shutdown) *hands
over*: the request task leaves the idle wait and runs the stream's pump, which writes
with blocking sends until the stream ends or, for a stream that can, is idle again.

Rules:
1. :meth:`DirectStream.idle` is the one idle wait: one cancel scope serves the server's
   drain, the stream's deadline (``deadline()``) and :meth:`hand_over`; on each wake-up
   without a hand-over it calls ``tick()``. It returns False when the client went away
   (``gone``), True when the pump must run (handed over, or the server drains).
2. :meth:`try_write` writes without blocking and keeps ``last_sent`` (heartbeats only fill
   silence); what the kernel did not take is the stream's to queue (``rest``), which hands
   over. A dead socket is marked broken: the disconnect ends the stream.
3. :meth:`send_raw` is the pump's blocking write on the socket; a broken socket parks
   the writer until the disconnect watcher (:meth:`watch_disconnect`) ends the stream.
4. Nothing here raises into the engine: the hooks the engine calls (a watch delivery, a
   queue poll) catch their own errors and hand over.

The slow-consumer policy and the bounded queue are ``streams.Outbound``; the pacing
under CPU pressure is :func:`pace`, shared with the WebSocket frontend's subscriptions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from .asgi import Receive, Send
from .direct import RawSocket, chunk
from .state import HttpState
from .streams import wait_for_disconnect

__all__ = ["MAX_PACE_MS", "DirectStream", "pace"]


#: Longest pause between paced reads under CPU pressure.
MAX_PACE_MS = 1000


class DirectStream:
    """The shared state of a stream that may write to its socket directly (rules 1-3).

    Subclasses say when the idle wait must look again (``deadline``), what to do when it
    does (``tick``), and whether the pump has taken over (``handed_over``).
    """

    __slots__ = ("_wake", "gone", "last_sent", "raw", "state")

    def __init__(self, state: HttpState) -> None:
        self.state = state
        self.raw: RawSocket | None = None
        self.gone = False  # the client went away
        self.last_sent = 0.0  # trio time bytes last left
        self._wake: trio.CancelScope | None = None

    def find_socket(self, send: Send) -> None:
        """Take the socket behind ``send`` if the lane owns it and direct writes are on
        (the ``sse_direct`` setting); otherwise every byte goes through ASGI ``send``."""
        if self.state.settings.sse_direct:
            self.raw = RawSocket.find(send)
            if self.raw is not None:
                self.state.direct_streams += 1

    def forget_socket(self) -> None:
        """The stream is over (called from its ``finally``): it no longer counts as direct."""
        if self.raw is not None:
            self.raw = None
            self.state.direct_streams -= 1

    # -- what a stream says ---------------------------------------------------------------

    def handed_over(self) -> bool:
        raise NotImplementedError

    def deadline(self) -> float:
        raise NotImplementedError

    def tick(self) -> None:
        """The idle wait woke at ``deadline()`` with nothing handed over."""

    # -- the idle wait (rule 1) -------------------------------------------------------------

    async def idle(self, receive: Receive) -> bool:
        if self.gone:
            return False
        state = self.state
        while not self.handed_over():
            with state.long_poll() as scope:
                self._wake = scope
                scope.deadline = self.deadline()
                while True:
                    if (await receive())["type"] == "http.disconnect":
                        self.gone = True
                        self._wake = None
                        return False
            self._wake = None
            if self.handed_over() or state.shutting_down:
                break
            self.tick()
        return True

    def hand_over(self) -> None:
        """Wake the idle wait: the pump takes over (the caller has said why)."""
        if self._wake is not None:
            self._wake.cancel()

    def bring_forward(self, deadline: float) -> None:
        """Make the idle wait look again by ``deadline`` (never later than it would)."""
        wake = self._wake
        if wake is not None and deadline < wake.deadline:
            wake.deadline = deadline

    # -- writes (rules 2, 3) ----------------------------------------------------------------

    def try_write(self, data: bytes) -> int:
        """Write ``data`` without blocking: the bytes the kernel took, or -1 if the
        socket is dead (the disconnect will end the stream)."""
        assert self.raw is not None
        n = self.raw.try_send(data)
        if n > 0:
            self.sent()
        return n

    def sent(self) -> None:
        self.last_sent = trio.current_time()

    def heartbeat_due(self, every_s: float) -> bool:
        return trio.current_time() >= self.last_sent + every_s

    async def send_raw(self, data: bytes, *, framed: bool = False) -> None:
        """The pump's blocking write to the socket (chunk-framed here unless ``framed``)."""
        raw = self.raw
        assert raw is not None
        try:
            await raw.send_all(data if framed else chunk(data))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raw.broken = True
            await trio.sleep_forever()  # the disconnect ends the connection
        self.sent()

    async def watch_disconnect(self, receive: Receive, scope: trio.CancelScope) -> None:
        """Beside a pump: end it (``scope``) once the client goes away."""
        await wait_for_disconnect(receive)
        self.gone = True
        scope.cancel()


async def pace(state: HttpState, advise: Callable[[int], Awaitable[None]] | None) -> None:
    """One paced read under CPU pressure: ``advise(retry_after_ms)`` (the one advisory
    429 frame, when not sent yet), then a pause of the pressure's retry hint, at most
    ``MAX_PACE_MS``."""
    retry_ms = state.pressure.retry_after_ms()
    if advise is not None:
        await advise(retry_ms)
    await trio.sleep(min(retry_ms, MAX_PACE_MS) / 1000)
