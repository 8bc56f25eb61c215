"""frontends/http/accepting.py: what a failing ``accept`` tells readiness (rules 1-3)."""

from __future__ import annotations

import errno
from typing import Any

import pytest

from frontends.http.accepting import WINDOW_S, AcceptWatch, WatchedListener


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Listener:
    """Answers ``accept`` from a script: an errno to raise, or a stream to return."""

    def __init__(self, script: list[Any]) -> None:
        self.script = script

    async def accept(self) -> Any:
        step = self.script.pop(0)
        if isinstance(step, int):
            raise OSError(step, errno.errorcode[step])
        return step


async def test_a_capacity_failure_holds_until_an_accept_succeeds() -> None:
    clock = _Clock()
    watch = AcceptWatch(clock)
    inner = _Listener([errno.EMFILE, errno.ENFILE, "stream"])
    listener = WatchedListener(inner, watch)  # type: ignore[arg-type]
    assert not watch.failing()
    with pytest.raises(OSError):
        await listener.accept()  # trio's loop logs it and tries again in 0.1 s
    assert watch.failing()
    assert watch.error == "EMFILE"
    clock.now += 0.1
    with pytest.raises(OSError):
        await listener.accept()
    assert (watch.failing(), watch.error) == (True, "ENFILE")
    clock.now += 0.1
    assert await listener.accept() == "stream"
    assert not watch.failing()


async def test_an_old_failure_with_no_accept_since_does_not_hold() -> None:
    clock = _Clock()
    watch = AcceptWatch(clock)
    listener = WatchedListener(_Listener([errno.EMFILE]), watch)  # type: ignore[arg-type]
    with pytest.raises(OSError):
        await listener.accept()
    clock.now += WINDOW_S
    assert watch.failing()
    clock.now += 0.01
    assert not watch.failing()


async def test_other_accept_errors_are_not_a_shortage() -> None:
    watch = AcceptWatch(_Clock())
    listener = WatchedListener(_Listener([errno.ECONNABORTED]), watch)  # type: ignore[arg-type]
    with pytest.raises(OSError):
        await listener.accept()
    assert not watch.failing()
