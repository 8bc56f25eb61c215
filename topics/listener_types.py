"""How the engine tells a frontend that something it delivers changed (issue 29, item 3;
docs/ARCHITECTURE.md "How the engine tells a frontend").

A frontend that can deliver without a task of its own (an idle SSE stream, an idle
``/work`` stream on a socket the fast lane owns) hands the engine a listener through a
method (``WatchStream.attach``, ``WorkSession.poll``); the engine calls it back,
synchronously, inside the call that made the change (a write, an ack, a topic creation
that a prefix watch joins, the relay's pass). That is the one way the engine reaches up
into a frontend: frontends never set attributes of engine objects
(``tests/unit/test_engine_objects.py``), and the engine never imports a frontend.

Rules:
1. ``changed`` runs inside an engine call: it must not block and must not raise (the
   engine logs what it raises and goes on, but the frontend's delivery is then lost
   until its next change).
2. ``changed`` returns True when it dealt with the change, False when its task should:
   a watch feed then wakes the task waiting on it (``WatchFeed.wait``). A queue has no
   task of the frontend's to wake: a /work stream that cannot deliver hands over to its
   own pump, and the queue calls a listener once per ``poll`` whatever it returns.
3. The engine keeps the bound method, not the listener, where it calls one per watcher
   per change (``WatchFeed.notify``, ``QueueState.listeners``): that call costs what the
   callable attribute it replaced cost.
"""

from __future__ import annotations

from typing import Any, Protocol

from .watch_types import RecordBatch

__all__ = ["ChangeListener", "GroupSink", "StreamListener"]


class ChangeListener(Protocol):
    """A frontend told that what it delivers may have changed (rules 1, 2): a watched
    topic was written, trimmed, deleted or joined (watch), or jobs arrived or a lease
    ended (a /work session's queue)."""

    def changed(self) -> bool:
        """Deliver what can go now without blocking; False: wake the task instead."""
        ...


class StreamListener(ChangeListener, Protocol):
    """A watch stream's frontend: told of changes, and that the engine ended the stream
    (superseded by a newer one, its session removed: ``WatchStream.end`` says which)."""

    def stopped(self) -> None:
        """Interrupt whatever waits and send the stream's final frame."""
        ...


class GroupSink(Protocol):
    """A frontend stream that takes a ready batch of its one topic without a task (the
    hub's rule 8; it joins with ``WatchStream.group``).

    ``write_group`` is the same function for every sink of one frontend (a static method):
    the pass calls it once per group with the batch and the group's sinks, and it returns
    the sinks it could not take the batch for (they are served one by one, as the hub's
    rule 1 says). A sink that took the batch has its bytes sent, or queued behind a
    partial write, and commits its session cursor itself once they left.
    """

    @staticmethod
    def write_group(batch: RecordBatch, sinks: list[Any]) -> list[Any]: ...
