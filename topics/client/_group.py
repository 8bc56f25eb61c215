"""Consumer groups on the client: a named server-side cursor per topic (topics/cursors/ops.py).

Two shapes, both at least once (a record is committed only after the consumer is done
with it, so a consumer killed in between sees it again, never loses it):

* :class:`ServerCursorStore` is the watch iterator's cursor store kept on the server:
  ``client.watch(["orders"], group="billing")`` resumes where the group's cursor stands and
  commits each frame once the consumer has taken its items.
* ``client.consume`` is the pull loop of the worker helper for logs
  (:func:`topics.consumer.consume_steps`, the embedded ``topics.consume``'s loop): read a
  batch from the cursor, call the handler per record, commit the batch with
  ``expect_seq`` (a rival consumer of the same group that moved the cursor meanwhile
  makes it ``cursor_conflict``, not a silent overwrite).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from topics.cursor_types import ConsumeStats
from topics.errors import CursorNotFoundError, TopicNotFoundError

if TYPE_CHECKING:
    from ._client_like import ClientLike

__all__ = ["ConsumeStats", "ServerCursorStore"]


class ServerCursorStore:
    """A cursor store whose map lives on the server as cursor ``group`` of each topic.

    ``load`` reads the group's cursor of every topic (a topic the group never committed
    is left out, so the watch starts it as asked); ``save`` commits the topics whose seq
    moved. It uses a synchronous client of its own (the async watch calls it in a thread).
    """

    def __init__(self, client: ClientLike, group: str, topics: Iterable[str]) -> None:
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
