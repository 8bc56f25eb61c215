"""Waiting for topics that do not exist yet: ``watch(..., wait_for_topic=True)`` and the
CLI's ``tail --wait``, written once as steps (:mod:`topics.consumer`'s drivers run them on
either client).

A watch session cannot name a topic that does not exist (``topic_not_found``), and a
prefix watch would also bring in every other topic under the name, so the wait polls
``get_topic`` until each named topic exists: the first poll at once, then after 50 ms,
doubling up to 1 s (a producer that starts a little after its consumer is found within a
second, and a long wait costs one request a second).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from operator import methodcaller
from typing import Any

from topics.consumer import Effect, Sleep
from topics.errors import NotFoundError

__all__ = ["FIRST_DELAY_S", "MAX_DELAY_S", "wait_for_topics"]

FIRST_DELAY_S = 0.05
MAX_DELAY_S = 1.0


def wait_for_topics(
    topics: Iterable[str], on_wait: Callable[[str], object] | None = None
) -> Generator[Effect, Any, set[str]]:
    """Steps that end once every topic of ``topics`` exists; their value is the set of
    topics that did not exist at first (a watch reads those from their first record).
    ``on_wait(topic)`` is called once per missing topic, when the wait for it begins."""
    missing: set[str] = set()
    for topic in topics:
        delay = FIRST_DELAY_S
        while True:
            try:
                yield methodcaller("get_topic", topic, touch=False)
                break
            except NotFoundError:
                if topic not in missing:
                    missing.add(topic)
                    if on_wait is not None:
                        on_wait(topic)
            yield Sleep(delay)
            delay = min(delay * 2, MAX_DELAY_S)
    return missing
