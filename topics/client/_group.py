"""Consumer groups on the client: a named server-side cursor per topic (topics/_cursor_ops.py).

Two shapes, both at least once (a record is committed only after the consumer is done
with it, so a consumer killed in between sees it again, never loses it):

* :class:`ServerCursorStore` is the watch iterator's cursor store kept on the server:
  ``client.watch(["orders"], group="billing")`` resumes where the group's cursor stands and
  commits each frame once the consumer has taken its items.
* :func:`consume` (``client.consume``) is the pull loop of the worker helper for logs: read
  a batch from the cursor, call the handler per record, commit the batch with
  ``expect_seq`` (a rival consumer of the same group that moved the cursor meanwhile
  makes it ``cursor_conflict``, not a silent overwrite).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from topics.cursor_types import ConsumeStats
from topics.errors import CursorNotFoundError, TopicNotFoundError
from topics.types import Record

if TYPE_CHECKING:
    from ._async import AsyncClient
    from ._sync import Client

__all__ = ["ConsumeStats", "ServerCursorStore", "aconsume", "consume"]


class ServerCursorStore:
    """A cursor store whose map lives on the server as cursor ``group`` of each topic.

    ``load`` reads the group's cursor of every topic (a topic the group never committed
    is left out, so the watch starts it as asked); ``save`` commits the topics whose seq
    moved. It uses a synchronous client of its own (the async watch calls it in a thread).
    """

    def __init__(self, client: Client, group: str, topics: Iterable[str]) -> None:
        self.client = client
        self.group = group
        self.topics = list(topics)
        self._saved: dict[str, int] = {}

    def load(self) -> dict[str, int] | None:
        out: dict[str, int] = {}
        for topic in self.topics:
            try:
                out[topic] = self.client.get_cursor(topic, self.group).seq
            except (CursorNotFoundError, TopicNotFoundError):
                continue  # the watch starts it as asked (or reports the missing topic)
        self._saved = dict(out)
        return out or None

    def save(self, cursors: Mapping[str, int]) -> None:
        for topic, seq in cursors.items():
            if topic in self.topics and self._saved.get(topic) != seq:
                self.client.put_cursor(topic, self.group, seq)
                self._saved[topic] = seq


def consume(
    client: Client,
    topic: str,
    group: str,
    handler: Callable[[Record], Any],
    *,
    limit: int = 0,
    wait_ms: int = 5000,
    until_caught_up: bool = False,
    should_stop: Callable[[], bool] = lambda: False,
) -> ConsumeStats:
    """Handle every record of ``topic`` after group ``group``'s cursor, committing each
    batch after its last record was handled (module docstring).

    Raises: cursor_conflict when another consumer moved the group's cursor meanwhile
    (the batch it was handling is not committed), topic_not_found.
    """
    stats = ConsumeStats()
    try:
        current = client.get_cursor(topic, group).seq
    except CursorNotFoundError:
        current = 0
    stats.committed_seq = current
    while not should_stop():
        wait = 0 if until_caught_up else wait_ms
        res = client.diff(topic, from_seq=current, limit=limit, wait_ms=wait)
        for rec in res.records:
            handler(rec)
            stats.records += 1
        if res.next_from_seq != current:
            stats.batches += 1
            client.put_cursor(topic, group, res.next_from_seq, expect_seq=current)
            current = stats.committed_seq = res.next_from_seq
        if until_caught_up and res.caught_up:
            break
    return stats


async def aconsume(
    client: AsyncClient,
    topic: str,
    group: str,
    handler: Callable[[Record], Any],
    *,
    limit: int = 0,
    wait_ms: int = 5000,
    until_caught_up: bool = False,
    should_stop: Callable[[], bool] = lambda: False,
) -> ConsumeStats:
    """The async :func:`consume` (the handler may be a plain or a coroutine function)."""
    stats = ConsumeStats()
    try:
        current = (await client.get_cursor(topic, group)).seq
    except CursorNotFoundError:
        current = 0
    stats.committed_seq = current
    while not should_stop():
        wait = 0 if until_caught_up else wait_ms
        res = await client.diff(topic, from_seq=current, limit=limit, wait_ms=wait)
        for rec in res.records:
            out = handler(rec)
            if inspect.isawaitable(out):
                await out
            stats.records += 1
        if res.next_from_seq != current:
            stats.batches += 1
            await client.put_cursor(topic, group, res.next_from_seq, expect_seq=current)
            current = stats.committed_seq = res.next_from_seq
        if until_caught_up and res.caught_up:
            break
    return stats
