"""The clock seam: the only place topics reads wall-clock time.

Rule 1: engine code asks ``clock.now_ms()``; nothing else calls ``time.time()``.
Rule 2: ``ManualClock`` lets tests move time (TTL, idempotency windows, priority decay,
leases) without sleeping.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...


class SystemClock:
    """Wall-clock time from the OS."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that only moves when told to (tests, simulations)."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError("a clock never runs backwards")
        self._now += ms

    def set(self, ms: int) -> None:
        self._now = ms
