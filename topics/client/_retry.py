"""When to send a call again, and how long to wait first (contract §0.6, §0.8, §11).

Pure: the sync and async drivers ask :meth:`RetryPolicy.delay_s` after each failed
attempt and sleep with their own clock.

Rules:
1. Only answers that mean "not done, come back later" are retried: ``429 throttled``,
   ``503 not_ready``/``shutting_down`` and a proxy's bare 502/504. Everything else is an
   answer, not a transient failure.
2. A call is sent again only when that is safe: it is idempotent (reads, upserts,
   ack/nack/extend, and writes carrying an ``idempotency_key``, which the client adds to
   every write by default), or the connection failed before the request could be sent.
3. The wait is jittered exponential backoff, ``uniform(b/2, b)`` with
   ``b = min(max_delay_s, base_delay_s * 2**attempt)``, but never shorter than what the
   server asked for: ``error.detail.retry_after_ms`` when present (milliseconds), else the
   ``Retry-After`` header (whole seconds). A little jitter goes on top of the server's
   value too, so clients throttled together do not return together.
4. Retries stop after ``max_attempts`` attempts in all or when the next wait would pass
   ``timeout_s`` since the first attempt; then the last error is raised.
5. A server that is not there (the connection failed, or ``502``/``503``/``504``: a
   restart in progress, refused connections, a proxy with no backend) is retried without
   counting attempts, until the call's own deadline (``Exchange``: the client's
   ``timeout_s`` after the first attempt, plus a long poll's wait, and never past
   ``timeout_s`` here): an ordinary restart takes seconds, longer than ``max_attempts``
   quick retries last. Its waits stop growing at ``reconnect_delay_s``, so a server that
   comes back is found within that long.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["RETRY_STATUSES", "RetryPolicy", "server_delay_s"]

RETRY_STATUSES = frozenset({429, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a client retries (rules 1-4).

    Attributes:
        max_attempts: attempts in all, the first included (1 = never retry).
        base_delay_s: the first backoff step.
        max_delay_s: the largest backoff step (a server's Retry-After may be longer).
        timeout_s: give up when the next wait would end later than this after the first
            attempt.
        reconnect_delay_s: the largest backoff step while the server is not there
            (rule 5).
    """

    max_attempts: int = 6
    base_delay_s: float = 0.1
    max_delay_s: float = 5.0
    timeout_s: float = 60.0
    reconnect_delay_s: float = 1.0

    def delay_s(
        self,
        attempt: int,
        started: float,
        server_s: float | None,
        *,
        unreachable_until: float | None = None,
    ) -> float | None:
        """The wait before attempt ``attempt + 1`` (``attempt`` counts from 1), or None to
        give up. ``started`` is the ``time.monotonic()`` of the first attempt.
        ``unreachable_until``: the server was not there (rule 5); retry without counting
        attempts until this ``time.monotonic()`` deadline."""
        top = self.max_delay_s
        deadline = started + self.timeout_s
        if unreachable_until is not None:
            top = min(top, self.reconnect_delay_s)
            deadline = min(deadline, unreachable_until)
        elif attempt >= self.max_attempts:
            return None
        if self.max_attempts <= 1:  # retry=False: never, whatever the failure
            return None
        step = min(top, self.base_delay_s * 2 ** min(attempt - 1, 62))
        delay = random.uniform(step / 2, step)
        if server_s is not None:
            delay = max(delay, server_s * random.uniform(1.0, 1.1))
        if time.monotonic() + delay > deadline:
            return None
        return delay


NO_RETRY = RetryPolicy(max_attempts=1)


def server_delay_s(headers: Mapping[str, str], error: Mapping[str, Any] | None) -> float | None:
    """What the server asked us to wait (rule 3), in seconds, or None."""
    detail = error.get("detail") if error else None
    if isinstance(detail, dict):
        ms = detail.get("retry_after_ms")
        if isinstance(ms, int | float) and not isinstance(ms, bool) and ms >= 0:
            return float(ms) / 1000
    raw = headers.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    if raw.isdigit():
        return float(raw)
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
