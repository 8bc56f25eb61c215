"""Fair shares of the event loop for filtered reads (issue 30): one key's costly ``where``
diffs cannot take the loop from everyone else.

A filtered diff is bounded in cost (topics/query/where.py) and in time per read
(``TOPICS_MAX_WHERE_MS``), but a client that sends such reads back to back still gets one
turn of the loop per request, like a writer whose request costs a hundredth as much: two
such clients took 70 % of a server's write rate.

Rules:

1. Each key (``Principal.owner_id``; one shared entry without auth) may spend
   ``TOPICS_WHERE_CPU_SHARE`` percent of the loop on filtered diffs. A read's cost is the
   time its synchronous part held the loop, measured around it (``perf_counter``: the loop is
   one thread, so that time is what the others waited).
2. The shares are kept as a virtual clock per key: every read moves the key's clock on by
   ``cost * 100 / share``. While the key's clock is no further ahead of now than the burst
   allowance (``BURST_S``), its reads answer at once; beyond it, the answer waits until the
   clock is back within it. So a lone filtered read, or a few, is never delayed; a stream of
   them settles at the share.
3. The wait is after the read and before the answer: the read is done (nothing else can
   see a difference), only the client's next request comes later. Nothing is queued or
   buffered per key beyond one float.
4. Embedded callers (no key at all) are not paced: the process is theirs.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["BURST_S", "WherePacer"]

#: How far ahead of now a key's clock may run before its answers wait (rule 2): a burst of
#: about ``BURST_S * share / 100`` seconds of filtered work goes through undelayed.
BURST_S = 0.2


class WherePacer:
    """Per-key virtual clocks of filtered-read cost (rules 1-2)."""

    __slots__ = ("_ahead", "share", "timer")

    def __init__(self, share: int, timer: Callable[[], float] = time.perf_counter) -> None:
        self.share = share
        self.timer = timer
        self._ahead: dict[int, float] = {}

    def charge(self, key: int, cost_s: float, now: float) -> float:
        """Record a read of ``cost_s`` by ``key`` that ended at ``now`` (the timer's); the
        seconds its answer should wait."""
        if self.share <= 0 or cost_s <= 0:
            return 0.0
        clock = max(self._ahead.get(key, now), now) + cost_s * 100.0 / self.share
        self._ahead[key] = clock
        return max(0.0, clock - now - BURST_S)
