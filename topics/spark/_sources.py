"""Where a Spark read gets its pages: a data directory (``path``) or a server (``url``).

Role: the reader, the stream reader and the planner see one small interface,
:class:`Source`, so that every rule about ranges, gaps and offsets is written once. A
``Page`` is one diff window (contract §3) with its records split into raw spans.

Rules:
1. Records stay bytes: a page's records are the dicts ``topics._core.scan`` makes of the
   diff's JSON array, with ``data``/``meta`` as the exact JSON text the engine stored
   (``None`` for a JSON null member) and ``$seq``/``$ts``/``$node``/``$tag`` decoded.
2. Sources are picklable and open their Reader or connection lazily, in the process that
   uses them (the driver plans, executors read).
3. ``split_points`` gives the seqs where a range may be cut into partitions: segment
   boundaries for a data directory (a task then reads whole segments), fixed strides for
   a server, where no segment layout is visible.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Protocol

from .._core.scan import split_write_body
from ..types import Tombstone
from ._handle import ReaderHandle
from ._http import HttpClient

__all__ = ["HttpSource", "Page", "PathSource", "Source", "fixed_cuts", "segment_cuts"]

#: Records per diff call: the contract's ceiling (TOPICS_MAX_LIMIT).
PAGE_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class Page:
    records: list[dict[str, Any]]
    tombstone: Tombstone | None
    next_from_seq: int
    head_seq: int
    earliest_seq: int
    caught_up: bool


class Source(Protocol):
    def topic_names(self, prefix: str) -> list[str]: ...
    def head_seq(self, topic: str) -> int: ...
    def refresh(self) -> None: ...
    def page(self, topic: str, from_seq: int) -> Page: ...
    def split_points(self, topic: str, lo: int, hi: int, target: int) -> list[int]: ...
    def close(self) -> None: ...


def _split(records_json: bytes) -> list[dict[str, Any]]:
    records, _ = split_write_body(b'{"records":' + records_json + b"}")
    return records or []


class PathSource:
    """Pages from a data directory through the process's shared ``topics.Reader``."""

    def __init__(self, path: str) -> None:
        if not os.path.isdir(path):
            raise FileNotFoundError(f"path: no topics data directory at {path!r}")
        self.handle = ReaderHandle(path)

    def topic_names(self, prefix: str) -> list[str]:
        return [t for t in self.handle.get().topics() if t.startswith(prefix)]

    def head_seq(self, topic: str) -> int:
        return self.handle.get().head_seq(topic)

    def refresh(self) -> None:
        self.handle.fresh()

    def page(self, topic: str, from_seq: int) -> Page:
        res = self.handle.get().diff(
            topic, from_seq=from_seq, limit=PAGE_LIMIT, include_tags=True, include_meta=True
        )
        return Page(
            _split(res.records_json) if res.record_count else [],
            res.tombstone,
            res.next_from_seq,
            res.head_seq,
            res.earliest_seq,
            res.caught_up,
        )

    def split_points(self, topic: str, lo: int, hi: int, target: int) -> list[int]:
        return segment_cuts(self.handle.get().segments(topic), lo, hi, target)

    def close(self) -> None:
        """Nothing to do: the Reader is shared by the process (``ReaderHandle``)."""


class HttpSource:
    """Pages from a topics-server over ``POST /v0/topics/:t/diff``."""

    def __init__(self, url: str, api_key: str | None = None, timeout_s: float = 60.0) -> None:
        self.url = url
        self.api_key = api_key
        self.timeout_s = timeout_s
        self._client: HttpClient | None = None

    @property
    def client(self) -> HttpClient:
        if self._client is None:
            self._client = HttpClient(
                self.url,
                api_key=self.api_key,
                timeout_s=self.timeout_s,
                retry_timeout_s=self.timeout_s,
            )
        return self._client

    def topic_names(self, prefix: str) -> list[str]:
        return self.client.list_topics(prefix)

    def head_seq(self, topic: str) -> int:
        return int(self.client.topic_state(topic)["head_seq"])

    def refresh(self) -> None:
        """Nothing to do: every request sees the server's current state."""

    def page(self, topic: str, from_seq: int) -> Page:
        body = self.client.diff(
            topic, {"from_seq": from_seq, "limit": PAGE_LIMIT, "include_tags": True}
        )
        records, fields = split_write_body(body)
        tomb = fields.get("tombstone")
        return Page(
            records or [],
            _tombstone(tomb) if isinstance(tomb, dict) else None,
            int(fields["next_from_seq"]),  # type: ignore[call-overload]
            int(fields["head_seq"]),  # type: ignore[call-overload]
            int(fields["earliest_seq"]),  # type: ignore[call-overload]
            bool(fields["caught_up"]),
        )

    def split_points(self, topic: str, lo: int, hi: int, target: int) -> list[int]:
        return fixed_cuts(lo, hi, target)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "api_key": self.api_key, "timeout_s": self.timeout_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], state["api_key"], state["timeout_s"])  # type: ignore[misc]


def _tombstone(obj: dict[str, Any]) -> Tombstone:
    return Tombstone(
        int(obj["gap_from"]),
        int(obj["gap_to"]),
        obj["reason"],
        int(obj.get("missed_estimate", 0)),
        int(obj.get("earliest_seq", 0)),
        int(obj.get("head_seq", 0)),
    )


def segment_cuts(segments: list[tuple[int, int]], lo: int, hi: int, target: int) -> list[int]:
    """Cut seqs inside (lo, hi) at segment ends, about ``target`` seqs apart (rule 3)."""
    cuts: list[int] = []
    last = lo
    for _first, seg_last in segments:
        if seg_last <= lo:
            continue
        if seg_last >= hi:
            break
        if seg_last - last >= target:
            cuts.append(seg_last)
            last = seg_last
    return cuts


def fixed_cuts(lo: int, hi: int, target: int) -> list[int]:
    """Cut seqs inside (lo, hi) every ``target`` seqs (rule 3)."""
    return list(range(lo + target, hi, target))
