"""Fixtures for the engine behaviour tests: a memory-only engine on a ManualClock.

Tests that need other limits override the ``limits`` fixture with
``_support.with_limits(...)`` (a direct parametrization of the fixture name).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from topics._clock import ManualClock
from topics.engine import Engine, open_engine
from topics.settings import Limits

from ._support import START_MS


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START_MS)


@pytest.fixture
def limits() -> Limits:
    return Limits()


@pytest.fixture
async def engine(clock: ManualClock, limits: Limits) -> AsyncIterator[Engine]:
    async with open_engine(None, clock=clock, limits=limits) as eng:
        yield eng
