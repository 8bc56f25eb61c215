"""CPU-pressure detection: trio scheduling lag, sampled by one cheap periodic task (§0.6).

When the trio thread is saturated, every task — including a task that only sleeps — runs
late. The monitor sleeps ``interval`` at a time and measures by how much it overslept;
the smoothed lag above ``threshold_ms`` means new requests should be shed with
``429 throttled`` (and a ``retry_after_ms``) rather than queued behind the backlog.

Rules:
1. Sampling costs one timer wake-up per interval, nothing per request; a request only
   reads :meth:`PressureMonitor.throttled` (an attribute compare).
2. The lag is smoothed (an exponentially weighted mean), so one long garbage-collection
   pause does not shed load; sustained lag does within a few samples.
3. Tests inject a lag (:meth:`PressureMonitor.inject`) instead of loading the CPU, so the
   throttle is exercised deterministically.
"""

from __future__ import annotations

import time

import trio

__all__ = ["PressureMonitor"]

SMOOTHING = 0.5  # weight of the newest sample
MIN_RETRY_MS = 100
MAX_RETRY_MS = 5000


class PressureMonitor:
    """Measures trio scheduling lag; says when to shed load and how long clients should wait."""

    def __init__(self, threshold_ms: float, interval_ms: float = 20.0) -> None:
        self.threshold_ms = threshold_ms
        self.interval_s = max(interval_ms, 1.0) / 1000
        self.lag_ms = 0.0
        self._injected: float | None = None

    @property
    def current_lag_ms(self) -> float:
        return self._injected if self._injected is not None else self.lag_ms

    def inject(self, lag_ms: float | None) -> None:
        """Pretend the loop lags by ``lag_ms`` (None: back to the measured value)."""
        self._injected = lag_ms

    def throttled(self) -> bool:
        """True while the smoothed lag exceeds the threshold (never when disabled)."""
        return self.threshold_ms > 0 and self.current_lag_ms > self.threshold_ms

    def retry_after_ms(self) -> int:
        """How long a shed client should wait: about twice the current lag, bounded."""
        return int(min(MAX_RETRY_MS, max(MIN_RETRY_MS, 2 * self.current_lag_ms)))

    def sample(self, lag_ms: float) -> None:
        """Fold one measured lag into the smoothed value."""
        self.lag_ms += SMOOTHING * (max(0.0, lag_ms) - self.lag_ms)

    async def run(self) -> None:
        """Sample forever (cancel to stop). Start it in the server's nursery."""
        interval = self.interval_s
        while True:
            start = time.perf_counter()
            await trio.sleep(interval)
            self.sample((time.perf_counter() - start - interval) * 1000)
