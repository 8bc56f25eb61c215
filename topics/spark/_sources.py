"""Where a Spark read gets its pages: a data directory (``path``) or a server (``url``).

Role: the reader, the stream reader and the planner see one small interface,
:class:`Source`, so that every rule about ranges, gaps and offsets is written once. A
``Page`` is one diff window (contract §3) with its records split into raw spans.

Rules:
1. Records stay bytes: a page's records are one ``pyarrow.RecordBatch`` built by
   ``topics.wire.arrow`` (one C pass over the diff's rendered records, no Python object
   per record): ``seq``/``ts`` int64, ``node``/``tag``/``data``/``meta`` strings with
   ``data``/``meta`` the exact JSON text the engine stored. Only the columns in ``want``
   (``topics._core.columns.WANT_*``) are built, and the diff is asked not to render
   the others at all (column pruning).
2. Sources are picklable and open their Reader or connection lazily, in the process that
   uses them (the driver plans, executors read).
3. ``split_points`` gives the seqs where a range may be cut into partitions: segment
   boundaries for a data directory (a task then reads whole segments), fixed strides for
   a server, where no segment layout is visible.
4. A page stops at ``hi``: records above it are left out. A data-directory page joins
   consecutive diff windows (up to ``PAGE_RECORDS``) into one batch, so Spark gets few,
   large batches; a tombstone only ever heads a page. A server page is one answer of
   up to ``URL_PAGE_RECORDS``, fetched as Arrow IPC: the diff route's Arrow answer joins
   consecutive windows of the server's ``TOPICS_MAX_LIMIT`` up to that many records
   (``record_routes`` rule 7), so no server setting needs raising. A server without the
   Arrow answer answers JSON, one window.
5. Planning a data-directory read needs only each topic's head and segment bounds, but a
   ``topics.Reader`` recovers every record (about 0.3 s per million), and Spark plans in
   a fresh Python worker each time. So the planning view (topics, heads, segments) is
   kept in a small file in the temp directory, keyed by the data directory's file state
   (``_handle`` rule 4): planning a quiet directory reads that file; any change to the
   directory misses it and a Reader is opened. The data directory itself is never
   written.
6. A streaming query plans in a Python process Spark starts afresh for that query (the
   stream reader's runner), so every import of this package is part of each query's
   start. Modules only a task, a url-mode read or a write uses (``pyarrow.compute``,
   ``pyarrow.json``, ``http.client``; the Reader, in ``_handle``; the engine, in
   ``_write``) are imported where they are used, and ``import topics`` leaves the engine
   and trio unloaded: a planner that finds its view file (rule 5) imports none of them.
7. ``refresh()`` defers refreshing the process's Reader to its next use (a page, a
   time bound): planning reads heads and segments from the planning view, which is
   keyed by the directory's exact file state, so a planner whose Reader is older than
   the directory but whose view file is current (another process rebuilt it) plans
   without a recovery.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]

from .._core.columns import WANT_DATA, WANT_LINES, WANT_META, WANT_TAG
from ..errors import TopicNotFoundError
from ..types import DiffResult, Tombstone
from ..wire.arrow import ARROW_STREAM, decode_diff, diff_batch
from ._handle import ReaderHandle, directory_state

if TYPE_CHECKING:
    from .. import Reader
    from ._http import HttpClient

__all__ = ["HttpSource", "Page", "PathSource", "Source", "fixed_cuts", "segment_cuts"]

#: Records per diff call: the contract's ceiling (TOPICS_MAX_LIMIT).
PAGE_LIMIT = 1000
#: Records per data-directory page (rule 4): diff windows joined into one batch.
PAGE_RECORDS = 16_000
#: Records per server diff answer (rule 4): larger answers cost the server less per
#: record (measured: 1000 -> 1.6 M, 8000 -> 5 M records/s).
URL_PAGE_RECORDS = 16_000
#: Bytes per server diff answer (the route's ceiling is 8 MiB).
PAGE_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class Page:
    batch: Any  # pyarrow.RecordBatch (rule 1), None when the page has no records
    lines: bytes | None  # the data texts as JSON lines, with WANT_LINES
    tombstone: Tombstone | None
    next_from_seq: int
    head_seq: int
    earliest_seq: int
    caught_up: bool

    @property
    def count(self) -> int:
        return 0 if self.batch is None else int(self.batch.num_rows)


class Source(Protocol):
    def topic_names(self, prefix: str) -> list[str]: ...
    def head_seq(self, topic: str) -> int: ...
    def refresh(self) -> None: ...
    def page(self, topic: str, from_seq: int, hi: int, want: int, where: object = None) -> Page: ...
    def seq_before_ts(self, topic: str, ts: int) -> int: ...
    def split_points(self, topic: str, lo: int, hi: int, target: int) -> list[int]: ...
    def close(self) -> None: ...


def _diff_flags(want: int) -> dict[str, bool]:
    return {
        "include_tags": bool(want & WANT_TAG),
        "include_data": bool(want & WANT_DATA),
        "include_meta": bool(want & WANT_META),
    }


class PathSource:
    """Pages from a data directory through the process's shared ``topics.Reader``."""

    def __init__(self, path: str) -> None:
        if not os.path.isdir(path):
            raise FileNotFoundError(f"path: no topics data directory at {path!r}")
        self.handle = ReaderHandle(path)
        self._view: dict[str, dict[str, Any]] | None = None
        # The last view and the directory state it was built or loaded for: a stream
        # reader refreshes before every offset, mostly over an unchanged directory.
        self._seen: tuple[object, dict[str, dict[str, Any]]] | None = None
        self._stale = False

    def topic_names(self, prefix: str) -> list[str]:
        return [t for t in self._plan_view() if t.startswith(prefix)]

    def head_seq(self, topic: str) -> int:
        view = self._plan_view().get(topic)
        if view is None:
            raise TopicNotFoundError.for_topic(topic)
        return int(view["head"])

    def refresh(self) -> None:
        self._view = None
        self._stale = True  # rule 7

    def _reader(self) -> Reader:
        if self._stale:
            self._stale = False
            return self.handle.fresh()
        return self.handle.get()

    def _plan_view(self) -> dict[str, dict[str, Any]]:
        """{topic: {"head": seq, "segments": [[first, last], ...]}} (rule 5)."""
        if self._view is not None:
            return self._view
        path = self.handle.path
        state = directory_state(path)
        if self._seen is not None and self._seen[0] == state:
            self._view = self._seen[1]
            return self._view
        key = hashlib.sha256(repr((path, state)).encode()).hexdigest()
        cache = os.path.join(
            tempfile.gettempdir(),
            f"topics-spark-plan-{hashlib.sha256(path.encode()).hexdigest()[:16]}.json",
        )
        try:
            with open(cache) as f:
                saved = json.load(f)
            if saved.get("key") == key:
                self._view = dict(saved["topics"])
                self._seen = (state, self._view)
                return self._view
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass  # absent, stale or unreadable: rebuild it
        self._stale = False
        reader = self.handle.fresh()
        view = {
            t: {"head": reader.head_seq(t), "segments": reader.segments(t)} for t in reader.topics()
        }
        if directory_state(path) == state:  # nothing changed while the Reader recovered
            tmp = f"{cache}.{os.getpid()}.tmp"
            try:
                with open(tmp, "w") as f:
                    json.dump({"key": key, "topics": view}, f)
                os.replace(tmp, cache)
            except OSError:
                pass  # a read-only temp directory: plan without the file
            self._seen = (state, view)
        self._view = view
        return view

    def page(self, topic: str, from_seq: int, hi: int, want: int, where: object = None) -> Page:
        reader = self._reader()
        tags, data, meta = bool(want & WANT_TAG), bool(want & WANT_DATA), bool(want & WANT_META)

        def window(cursor: int) -> DiffResult:
            return reader.diff(
                topic,
                from_seq=cursor,
                limit=PAGE_LIMIT,
                include_tags=tags,
                include_data=data,
                include_meta=meta,
                where=where,
            )

        parts: list[bytes] = []
        count, cursor = 0, from_seq
        first = res = window(cursor)
        while True:  # rule 4: join windows until the page is full, caught up or past hi
            if res.record_count:
                parts.append(res.records_json)
                count += res.record_count
            cursor = res.next_from_seq
            if res.caught_up or cursor >= hi or count >= PAGE_RECORDS:
                break
            nxt = window(cursor)
            if nxt.tombstone is not None:
                break  # the next page starts with it
            res = nxt
        batch = lines = None
        if parts:
            joined = (
                parts[0] if len(parts) == 1 else b"[" + b",".join(p[1:-1] for p in parts) + b"]"
            )
            batch, _, lines = diff_batch(joined, want, hi=hi)
        return Page(
            batch, lines, first.tombstone, cursor, res.head_seq, res.earliest_seq, res.caught_up
        )

    def seq_before_ts(self, topic: str, ts: int) -> int:
        res = self._reader().diff(
            topic, from_ts=ts, limit=1, include_data=False, include_meta=False
        )
        return int(res.from_seq or 0)

    def split_points(self, topic: str, lo: int, hi: int, target: int) -> list[int]:
        view = self._plan_view().get(topic)
        segments = [] if view is None else [(int(a), int(b)) for a, b in view["segments"]]
        return segment_cuts(segments, lo, hi, target)

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
            from ._http import HttpClient  # rule 6

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

    def page(self, topic: str, from_seq: int, hi: int, want: int, where: object = None) -> Page:
        client = self.client
        request: dict[str, Any] = {
            "from_seq": from_seq,
            "limit": URL_PAGE_RECORDS,  # windows joined in an Arrow answer (rule 4)
            "max_batch_bytes": PAGE_BYTES,
            **_diff_flags(want),
        }
        if where is not None:
            request["where"] = where
        body = client.diff(topic, request, accept=ARROW_STREAM)
        if client.content_type.startswith(ARROW_STREAM):
            batch, fields = decode_diff(body)
            lines = None
            if want & WANT_LINES:  # typed data: JSON lines from the data texts
                batch, _, lines = _rebuild(batch, want, hi)
            else:
                batch = _cut(batch, hi)
        else:  # a server without the Arrow answer: split the JSON body
            start = body.index(b'"records":') + len(b'"records":')
            batch, end, lines = diff_batch(body, want & ~WANT_LINES, start=start)
            fields = json.loads(b"{" + _after_records(body, end))
            if want & WANT_LINES:
                batch, _, lines = _rebuild(batch, want, hi)
            else:
                batch = _cut(batch, hi)
        tomb = fields.get("tombstone")
        return Page(
            batch if batch.num_rows else None,
            lines,
            _tombstone(tomb) if isinstance(tomb, dict) else None,
            int(fields["next_from_seq"]),
            int(fields["head_seq"]),
            int(fields["earliest_seq"]),
            bool(fields["caught_up"]),
        )

    def seq_before_ts(self, topic: str, ts: int) -> int:
        body = {"from_ts": ts, "limit": 1, "include_data": False, "include_meta": False}
        return int(json.loads(self.client.diff(topic, body)).get("from_seq", 0))

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


def _cut(batch: Any, hi: int) -> Any:
    """The rows of ``batch`` with ``seq <= hi`` (seqs ascend)."""
    if batch.num_rows and batch.column(0)[-1].as_py() > hi:
        batch = batch.slice(0, bisect.bisect_right(batch.column(0).to_pylist(), hi))
    return batch


def _rebuild(batch: Any, want: int, hi: int) -> tuple[Any, int, bytes | None]:
    """JSON lines for an Arrow page (typed data reads need them; ``_columns`` rule 5,
    in Arrow compute); the rows up to ``hi``."""
    import pyarrow.compute as pc  # type: ignore[import-untyped]  # rule 6

    batch = _cut(batch, hi)
    if not batch.num_rows:
        return batch, 0, b""
    data = batch.column(batch.schema.get_field_index("data")).fill_null("{}")
    data = pc.replace_substring(pc.replace_substring(data, "\n", " "), "\r", " ")
    data = pc.if_else(pc.starts_with(data, "{"), data, "{}")
    joined = pc.binary_join_element_wise(data, "\n", "")  # each text + "\n"
    flat = pa.concat_arrays([joined]).buffers()  # a fresh array: offsets start at 0
    size = int(np.frombuffer(flat[1], dtype=np.int32)[len(joined)])
    return batch, 0, flat[2].to_pybytes()[:size]


def _after_records(body: bytes, end: int) -> bytes:
    """The JSON answer's members after ``records`` (from the ``,`` that follows it)."""
    rest = body[end:].lstrip()
    return rest[1:] if rest.startswith(b",") else rest


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
