"""What the client's helpers need of a client: :class:`ClientLike`, :class:`AsyncClientLike`.

The watch and work iterators, the consumer group's cursor store and the twin methods are
built by :class:`topics.Client` and :class:`topics.AsyncClient`, and call back a few of
their methods. They are typed against these protocols rather than the two classes, so
that the modules the clients import never import the clients back (issue 29: no import
cycle, not even a type-only one). Each protocol lists only what those modules call.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

import httpx

from topics.cursor_types import CursorInfo
from topics.types import TopicState

from ._protocol import Call
from ._transport import Settings

__all__ = ["AsyncClientLike", "ClientLike"]

T = TypeVar("T")


class ClientLike(Protocol):
    """The synchronous client (:class:`topics.Client`), as its helpers use it."""

    @property
    def settings(self) -> Settings: ...

    @property
    def http(self) -> httpx.Client: ...

    def _run(self, call: Call[T]) -> T: ...

    def get_topic(self, topic: str, *, touch: bool = True) -> TopicState: ...

    def get_cursor(self, topic: str, cursor: str) -> CursorInfo: ...

    def put_cursor(
        self, topic: str, cursor: str, seq: int, *, expect_seq: int | None = None
    ) -> CursorInfo: ...


class AsyncClientLike(Protocol):
    """The async client (:class:`topics.AsyncClient`), as its helpers use it."""

    @property
    def settings(self) -> Settings: ...

    @property
    def http(self) -> httpx.AsyncClient: ...

    async def _run(self, call: Call[T]) -> T: ...

    async def get_topic(self, topic: str, *, touch: bool = True) -> TopicState: ...

    def sync_twin(self) -> ClientLike: ...
