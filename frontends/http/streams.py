"""What every streamed HTTP answer shares (SSE watch, the queue's ``/work``) and what the
WebSocket frontend borrows, in a module of its own so neither imports the other's routes.

Rules:
1. A streaming handler returns a :class:`StreamReply`; the dispatcher gives the request's
   in-flight slot back and calls its ``run(send, receive)`` (a stream is bounded by the
   §11 connection caps instead).
2. :class:`Outbound` is one connection's bounded outbound queue and its writer (the
   watch routes' rules 1, 4 and 5 say how SSE uses it; the WebSocket frontend uses it the
   same way): a frame waiting on a full queue for ``buffer_grace_ms`` calls ``on_grace``
   (lossy topics jump to their head); past ``slow_consumer_timeout_ms`` the stream ends
   with the slow-consumer frame; a final frame drops whatever is queued behind it.
3. :func:`accepts_event_stream` is the one ``Accept`` parser of the stream routes.
4. :func:`wait_for_disconnect` is how a stream learns its client went away: it reads the
   request side until ``http.disconnect``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import trio

from topics.errors import TopicsError
from topics.watch_types import SlowConsumerError, WatchSettings

from .asgi import Receive, Send
from .state import HttpState, Reply

__all__ = ["Outbound", "StreamReply", "accepts_event_stream", "wait_for_disconnect"]

P = TypeVar("P")


@dataclass(slots=True)
class StreamReply(Reply):
    """A reply that streams: the dispatcher calls ``run(send, receive)`` instead of
    sending ``body``, after giving the in-flight slot back (rule 1 of the module)."""

    run: Callable[[Send, Receive], Awaitable[None]] | None = None


# -- the bounded outbound queue (shared with frontends/ws.py) --------------------------------


class Outbound(Generic[P]):
    """One connection's bounded outbound queue and the writer that drains it (rules 1, 4, 5).

    The pump calls :meth:`put`; :meth:`run_writer` runs beside it in the connection's
    nursery, whose cancel scope is given to :meth:`bind` and is cancelled when the writer
    is done. ``on_sent(commit)`` runs after each frame that carried a ``commit`` value left.
    """

    def __init__(
        self,
        state: HttpState,
        settings: WatchSettings,
        write: Callable[[P], Awaitable[None]],
        *,
        shutdown_frame: Callable[[], P],
        slow_frame: Callable[[TopicsError], P],
        heartbeat: P | None = None,
        heartbeat_s: float = math.inf,
        on_sent: Callable[[Any], None] | None = None,
        on_grace: Callable[[], object] | None = None,
        on_abandon: Callable[[], object] | None = None,
        join: Callable[[list[P]], P] | None = None,
    ) -> None:
        self._state = state
        self._settings = settings
        self._write = write
        self._shutdown_frame = shutdown_frame
        self._slow_frame = slow_frame
        self._heartbeat = heartbeat
        self._heartbeat_s = heartbeat_s if heartbeat is not None else math.inf
        self._on_sent = on_sent
        self.on_grace = on_grace
        self.on_abandon = on_abandon
        self._join = join
        self._send, self._recv = trio.open_memory_channel[tuple[P, Any]](settings.queue_frames)
        self._final: P | None = None
        self._scope: trio.CancelScope | None = None
        self.finished = trio.Event()
        self.final_sent = False
        self._queued = 0  # frames in the queue (not the stop wake-up)
        self._writing = False
        self._on_idle: trio.CancelScope | None = None  # see ``when_idle``
        #: When bytes last left on this connection, by the writer or past it (``sent``).
        self.last_sent = trio.current_time()

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing being written: a frame may go out past the queue."""
        # (<= 0: a sender blocked on a full queue counts its frame only once it resumes.)
        return self._queued <= 0 and not self._writing and self._final is None

    def when_idle(self, scope: trio.CancelScope | None) -> None:
        """Cancel ``scope`` once nothing is queued or being written (or the queue ends)."""
        self._on_idle = scope

    def _check_drained(self) -> None:
        if self._on_idle is not None and (self._queued <= 0 or self._final is not None):
            self._on_idle.cancel()
            self._on_idle = None

    def sent(self) -> None:
        """Bytes left past the queue (a direct send): they count as traffic for the
        heartbeat, which only fills silence."""
        self.last_sent = trio.current_time()

    def put_nowait(self, payload: P, commit: Any = None) -> None:
        """Queue a frame on an idle connection (the queue has room: it is empty)."""
        self._send.send_nowait((payload, commit))
        self._queued += 1

    def bind(self, scope: trio.CancelScope) -> None:
        """The connection's scope: cancelled once the writer is done (or must give up)."""
        self._scope = scope

    @property
    def ending(self) -> bool:
        return self._final is not None

    def stop(self, final: P) -> None:
        """End the connection with ``final`` after the frame being written (rule 4)."""
        if self._final is not None:
            return
        self._final = final
        self._discard()
        self._check_drained()
        with contextlib.suppress(trio.WouldBlock, trio.ClosedResourceError):
            self._send.send_nowait(_WAKE)  # an idle writer wakes up and sees _final

    async def put(self, payload: P, commit: Any = None) -> None:
        """Queue a frame; on a full queue apply the slow-consumer rules (rule 1)."""
        item = (payload, commit)
        try:
            self._send.send_nowait(item)
            self._queued += 1
            return
        except trio.WouldBlock:
            pass
        settings = self._settings
        start = trio.current_time()
        with trio.move_on_at(start + settings.buffer_grace_ms / 1000):
            await self._send.send(item)
            self._queued += 1
            return
        if self.on_grace is not None:
            self.on_grace()
        with trio.move_on_at(start + settings.slow_consumer_timeout_ms / 1000):
            await self._send.send(item)
            self._queued += 1
            return
        waited_s = round(trio.current_time() - start, 1)
        self.stop(
            self._slow_frame(
                SlowConsumerError(
                    f"the client read nothing for {waited_s} s; reconnect with Last-Event-ID",
                    detail={"slow_consumer_timeout_ms": settings.slow_consumer_timeout_ms},
                )
            )
        )
        # The writer is stuck in a send: give the final frame its chance, then give up.
        with trio.move_on_after(settings.final_frame_timeout_ms / 1000):
            await self.finished.wait()
        if not self.finished.is_set() and self.on_abandon is not None:
            # hypercorn shields its socket writes, so a send to a client that reads nothing
            # cannot be cancelled: free the session and the connection slot now; the stuck
            # task goes when the kernel gives the connection up.
            self.on_abandon()
        if self._scope is not None:
            self._scope.cancel()
        await trio.lowlevel.checkpoint()

    def shutdown(self) -> None:
        """The server is shutting down: end with the shutdown frame (rule 4)."""
        self.stop(self._shutdown_frame())

    async def run_writer(self) -> None:
        """Drain the queue into the connection until it ends (rules 4, 5)."""
        try:
            await self._drain()
            final = self._final
            if final is not None:
                with trio.move_on_after(self._settings.final_frame_timeout_ms / 1000):
                    await self._write(final)
                    self.final_sent = True
        finally:
            self.finished.set()
            if self._scope is not None:
                self._scope.cancel()

    async def _drain(self) -> None:
        # One cancel scope serves as the heartbeat timer for many frames: its deadline is
        # pushed back after each write and lifted (inf) while writing, so a slow write is
        # never cut by it; a new scope is needed only after a heartbeat actually fired.
        # (Creating scopes per frame cost more than the rest of the delivery path.)
        recv, write, on_sent, hb_s = self._recv, self._write, self._on_sent, self._heartbeat_s
        join = self._join
        while self._final is None:
            with trio.CancelScope() as timer:
                while self._final is None:
                    timer.deadline = self.last_sent + hb_s
                    item = await recv.receive()
                    timer.deadline = math.inf
                    if item is _WAKE or self._final is not None:
                        break
                    self._queued -= 1
                    items = [item]
                    if join is not None:
                        # Whatever else is queued leaves in the same write (one send).
                        while self._queued > 0:
                            try:
                                more = recv.receive_nowait()
                            except trio.WouldBlock:
                                break
                            if more is _WAKE:
                                break
                            self._queued -= 1
                            items.append(more)
                    payload = (
                        item[0] if join is None or len(items) == 1 else join([i[0] for i in items])
                    )
                    self._writing = True
                    try:
                        await write(payload)
                    finally:
                        self._writing = False
                    self.last_sent = trio.current_time()
                    if on_sent is not None:
                        for i in items:
                            if i[1] is not None:
                                on_sent(i[1])
                    self._check_drained()
            if timer.cancelled_caught and self._final is None:
                if trio.current_time() < self.last_sent + hb_s:
                    continue  # frames went out past the queue meanwhile: not silent
                assert self._heartbeat is not None
                # Marked as writing too: a stream must not retire its writer mid-heartbeat.
                self._writing = True
                try:
                    await write(self._heartbeat)
                finally:
                    self._writing = False
                self.last_sent = trio.current_time()
                self._check_drained()

    def _discard(self) -> None:
        """Drop queued frames (never sent, so their cursors were never committed)."""
        while True:
            try:
                item = self._recv.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return
            if item is not _WAKE:
                self._queued -= 1


#: Queued by ``Outbound.stop`` so an idle writer wakes up (never written).
_WAKE: Any = object()


def accepts_event_stream(headers: Mapping[bytes, bytes], *, explicit: bool = False) -> bool:
    """True when ``Accept`` admits ``text/event-stream`` with q > 0, or is absent.

    ``explicit``: only ``text/event-stream`` itself counts, neither wildcards nor a missing
    header (the ``/work`` stream, whose clients are programs that must ask for it).
    """
    raw = headers.get(b"accept")
    if raw is None:
        return not explicit
    admitted = (b"text/event-stream",) if explicit else (b"text/event-stream", b"text/*", b"*/*")
    for part in raw.lower().split(b","):
        media, _, params = part.partition(b";")
        if media.strip() not in admitted:
            continue
        q = 1.0
        for param in params.split(b";"):
            key, _, value = param.partition(b"=")
            if key.strip() == b"q":
                try:
                    q = float(value.strip() or b"1")
                except ValueError:
                    q = 0.0
        if q > 0:
            return True
    return False


async def wait_for_disconnect(receive: Receive) -> None:
    """Return once the client has gone away (rule 4)."""
    while (await receive())["type"] != "http.disconnect":
        pass
