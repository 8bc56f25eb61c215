"""``topics``: the command line of a topics server (every call goes through ``topics.Client``).

::

    topics ls                          topics stat orders
    topics put jobs type=queue lease_ms=60000
    topics write orders < events.jsonl topics read orders --from 0
    topics tail orders audit           topics rm orders
    topics router put|get|ls|rm ...    topics queue claim|ack|nack|extend ...
    topics jobs schedule jobs '{"n": 1}' --in 5m --dedupe-key n1
    topics dlq redrive jobs.dlq [--to jobs] [--origin jobs] [--match TAG]

Global options, before or after the subcommand (topics/_cli_args.py): ``--url`` (default
``$TOPICS_URL``, else ``http://127.0.0.1:4000``; ``host:port`` and ``:port`` too),
``--api-key`` (default ``$TOPICS_API_KEY``), ``--json`` (machine-readable output: one JSON
document, or JSON lines for ``read``/``tail``), ``--timeout``, ``--raw-ts``, ``--color``,
``--version``. How records are shown (verbatim data, ISO times, colour) is
topics/_cli_format.py; bad input lines, topics/_cli_input.py.

Rules:
1. Output for people is a table or ``key  value`` lines on stdout; ``--json`` prints the
   API's own shapes (results' ``to_dict()``), records as one JSON object per line.
2. Loss is never silent: a tombstone is reported on stderr, and in ``--json`` mode also as
   a ``{"tombstone": {...}}`` line among the records.
3. Errors go to stderr as ``topics: <code>: <message> (request id <id>)``; with ``--json``
   the error object is also printed on stdout. Exit codes: 0 ok, 1 other server error,
   2 usage, 3 not found, 4 conflict, 5 throttled/unavailable (after retries), 6 cannot
   reach the server, 130 interrupted.
4. ``write`` reads JSON lines (stdin or a file) and sends each line's bytes verbatim as a
   record's ``data`` (``--records``: each line is a whole record object, its ``data`` and
   ``meta`` still verbatim), in batches of ``--batch`` records (and at most
   ``--batch-bytes``), each batch one idempotent write; a progress bar on stderr when it
   is a terminal (``--progress`` forces it).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, NoReturn

import ujson

from topics._cli_args import add_global_options
from topics._cli_format import RawRecord, Style, raw_from_record, raw_page, use_colour
from topics._cli_input import BadLine, check_data_line, send_batch
from topics._core.scan import BodyError, split_write_body
from topics.cli_filters import FilterSyntaxError, bounded_starts, parse_time, parse_where
from topics.client import Client, ClientConnectionError, RetryPolicy, WatchRecord
from topics.errors import ConflictError, NotFoundError, TopicsError
from topics.types import Record, Tombstone, WriteResult
from topics.watch_types import (
    BacklogExceededEvent,
    CaughtUpEvent,
    EndReachedEvent,
    TombstoneEvent,
    TopicAddedEvent,
    TopicDeletedEvent,
)

__all__ = ["main"]

DEFAULT_URL = "http://127.0.0.1:4000"
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_CONFLICT = 0, 1, 2, 3, 4
EXIT_UNAVAILABLE, EXIT_CONNECTION, EXIT_INTERRUPTED = 5, 6, 130


class UsageError(Exception):
    """A bad argument found after parsing (exit 2)."""


# -- output ------------------------------------------------------------------------------


def dumps(value: Any) -> str:
    return ujson.dumps(value, ensure_ascii=False, escape_forward_slashes=False)


def table(rows: Sequence[Sequence[object]], header: Sequence[str], out: IO[str]) -> None:
    """An aligned text table; numbers are right-aligned."""
    cells = [[str(c) if c is not None else "-" for c in row] for row in rows]
    widths = [len(h) for h in header]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    numeric = [bool(rows) and all(isinstance(r[i], int) for r in rows) for i in range(len(header))]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    out.write(line(header) + "\n")
    for row in cells:
        out.write(line(row) + "\n")


def pairs(items: Sequence[tuple[str, object]], out: IO[str]) -> None:
    width = max((len(k) for k, _ in items), default=0)
    for key, value in items:
        shown = dumps(value) if isinstance(value, dict | list) else value
        out.write(f"{key.ljust(width)}  {'-' if shown is None else shown}\n")


def short(value: Any, limit: int = 60) -> str:
    text = dumps(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Progress:
    """A one-line progress bar on a terminal (no dependency): percent when the input size
    is known, records, bytes and rate, redrawn at most 10 times a second."""

    def __init__(self, out: IO[str], total_bytes: int | None, enabled: bool) -> None:
        self.out, self.total, self.enabled = out, total_bytes, enabled
        self.records = self.bytes = 0
        self.started = self._drawn = time.monotonic()

    def update(self, records: int, nbytes: int) -> None:
        self.records += records
        self.bytes += nbytes
        now = time.monotonic()
        if self.enabled and now - self._drawn >= 0.1:
            self._drawn = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        rate = self.records / max(now - self.started, 1e-6)
        text = f"{self.records:,} records  {self.bytes / 1e6:,.1f} MB  {rate:,.0f} rec/s"
        if self.total:
            frac = min(1.0, self.bytes / self.total)
            filled = int(frac * 30)
            text = f"[{'#' * filled}{'.' * (30 - filled)}] {frac:4.0%}  " + text
        self.out.write("\r" + text)
        self.out.flush()

    def finish(self) -> None:
        if self.enabled:
            self._draw(time.monotonic())
            self.out.write("\n")
            self.out.flush()
            self.enabled = False  # once


# -- commands ------------------------------------------------------------------------------


class Cli:
    def __init__(self, args: argparse.Namespace, client: Client) -> None:
        self.args = args
        self.style = Style(use_colour(args.color, sys.stdout), args.raw_ts)
        self.err_style = Style(use_colour(args.color, sys.stderr), args.raw_ts)
        self.batch_lines: list[int] = []  # input line numbers of the batch being built
        self.skipped = 0  # lines left out by write --skip-bad
        self.client = client
        self.out: IO[str] = sys.stdout
        self.err: IO[str] = sys.stderr
        self.json: bool = args.json

    def emit(self, value: Any) -> None:
        self.out.write(dumps(value) + "\n")

    def warn_tombstone(self, topic: str, tomb: Tombstone) -> None:
        loss = self.err_style.paint("loss", f"LOSS in {topic}")
        self.err.write(
            f"topics: {loss}: seqs {tomb.gap_from}..{tomb.gap_to} are gone "
            f"({tomb.reason}, ~{tomb.missed_estimate} records)\n"
        )
        if self.json:
            self.emit({"tombstone": {"topic": topic, **tomb.to_dict()}})

    # topics --------------------------------------------------------------------------

    def ls(self) -> None:
        topics = list(self.client.iter_topics(prefix=self.args.prefix))
        if self.json:
            self.emit({"topics": [t.to_dict() for t in topics]})
            return
        rows = [
            (t.topic, t.type, t.head_seq, t.earliest_seq, t.count, t.bytes, t.durability)
            for t in topics
        ]
        header = ("TOPIC", "TYPE", "HEAD", "EARLIEST", "COUNT", "BYTES", "DURABILITY")
        table(rows, header, self.out)

    def stat(self) -> None:
        state = self.client.get_topic(self.args.topic, touch=False)
        if self.json:
            self.emit(state.to_dict())
            return
        items: list[tuple[str, object]] = [
            ("topic", state.topic),
            ("type", state.type),
            ("head_seq", state.head_seq),
            ("earliest_seq", state.earliest_seq),
            ("next_seq", state.next_seq),
            ("count", state.count),
            ("bytes", state.bytes),
            ("effective_priority", state.effective_priority),
            ("last_write_ts", self.style.ts(state.last_write_ts)),
            ("last_read_ts", self.style.ts(state.last_read_ts)),
        ]
        if state.queue is not None:
            items += [(f"queue.{k}", v) for k, v in state.queue.items()]
        items += [(f"config.{k}", v) for k, v in state.config.to_dict().items()]
        pairs(items, self.out)

    def put(self) -> None:
        config: dict[str, Any] = {}
        for item in self.args.fields:
            key, eq, raw = item.partition("=")
            if not eq or not key:
                raise UsageError(f"expected FIELD=VALUE, got {item!r}")
            try:
                config[key] = ujson.loads(raw)
            except ValueError:
                config[key] = raw  # a bare word is a string: type=queue
        res = self.client.put_topic(self.args.topic, config)
        if self.json:
            self.emit(res.to_dict())
        else:
            self.out.write(f"{'created' if res.created else 'updated'} {res.topic}\n")

    def rm(self) -> int:
        res = self.client.delete_topic(self.args.topic, if_empty=self.args.if_empty)
        if self.json:
            self.emit(res.to_dict())
        elif res.deleted:
            removed = f" (routers removed: {', '.join(res.routers_removed)})"
            self.out.write(f"deleted {res.topic}{removed if res.routers_removed else ''}\n")
        else:
            self.err.write(f"topics: {res.topic}: no such topic (nothing deleted)\n")
        # Like `rm` of a missing file: a script must see that nothing was there.
        return EXIT_OK if res.deleted else EXIT_NOT_FOUND

    def delete_records(self) -> None:
        match: object = None
        if self.args.match is not None:
            op = "Glob" if self.args.match.endswith("*") else "Eq"
            match = ["tag", op, self.args.match]
        if self.args.before_seq is None and match is None:
            raise UsageError("give --before-seq, --match, or both")
        res = self.client.delete_records(
            self.args.topic, before_seq=self.args.before_seq, match=match
        )
        if self.json:
            self.emit(res.to_dict())
        else:
            self.out.write(f"deleted {res.deleted} records; {res.count} remain in {res.topic}\n")

    # records -------------------------------------------------------------------------

    def _lines(self) -> tuple[IO[bytes], int | None]:
        path = self.args.file
        if path in (None, "-"):
            return sys.stdin.buffer, None
        f = open(path, "rb")  # noqa: SIM115 - closed by write()
        return f, os.fstat(f.fileno()).st_size

    def _record(self, line: bytes, lineno: int) -> dict[str, Any]:
        if not self.args.records:
            check_data_line(line, lineno)  # named by its line, before anything is sent
            record: dict[str, Any] = {"data": line}  # rule 4: the line's bytes, verbatim
            if self.args.tag:
                record["tag"] = self.args.tag
            return record
        try:
            records, _ = split_write_body(b'{"records":[' + line + b"]}")
        except BodyError as exc:
            raise BadLine(lineno, f"not a record object ({exc.problem})") from None
        assert records is not None
        return records[0]

    def _batches(self, f: IO[bytes]) -> Iterator[tuple[list[dict[str, Any]], int]]:
        batch: list[dict[str, Any]] = []
        size = 0
        self.batch_lines = []
        for lineno, raw in enumerate(f, 1):
            line = raw.strip()
            if not line:
                continue
            try:
                batch.append(self._record(line, lineno))
            except BadLine as exc:
                if not self.args.skip_bad:
                    raise
                self.err.write(f"topics: skipped {exc}\n")
                self.skipped += 1
                continue
            self.batch_lines.append(lineno)
            size += len(raw)
            if len(batch) >= self.args.batch or size >= self.args.batch_bytes:
                yield batch, size
                batch, size = [], 0
                self.batch_lines = []
        if batch:
            yield batch, size

    def write(self) -> None:
        f, total = self._lines()
        show = self.args.progress or (self.args.progress is None and self.err.isatty())
        progress = Progress(self.err, total, bool(show))
        first = last = None
        count = batches = 0
        # --expect-head chains: each batch must land right after the previous one.
        expected = self.args.expect_head
        try:
            for batch, size in self._batches(f):
                res = self._write_batch(
                    self.args.topic,
                    batch,
                    node=self.args.node,
                    return_seqs=False,
                    expected_head_seq=expected,
                    producer_id=self.args.producer_id,
                    epoch=self.args.epoch,
                )
                if res is None:  # every line of it was skipped (--skip-bad)
                    continue
                if expected is not None:
                    expected = res.last_seq
                first = res.first_seq if first is None else first
                last = res.last_seq
                count += res.count
                batches += 1
                progress.update(res.count, size)
        except (TopicsError, UsageError, BadLine):
            progress.finish()
            where = f" (seqs {first}..{last})" if count else ""
            self.err.write(f"topics: stopped after {count:,} records in {batches} batches{where}\n")
            raise
        finally:
            progress.finish()
            if f is not sys.stdin.buffer:
                f.close()
        summary = {"topic": self.args.topic, "records": count, "batches": batches}
        summary.update(first_seq=first, last_seq=last)
        if self.args.skip_bad:
            summary["skipped_lines"] = self.skipped
        skipped = f"; skipped {self.skipped:,} bad lines" if self.skipped else ""
        if self.json:
            self.emit(summary)
        elif count:
            noun = "record" if count == 1 else "records"
            self.out.write(
                f"wrote {count:,} {noun} to {self.args.topic} (seqs {first}..{last}){skipped}\n"
            )
        else:
            self.out.write(f"nothing to write (no input lines){skipped}\n")

    def _write_batch(
        self, topic: str, batch: list[dict[str, Any]], **options: Any
    ) -> WriteResult | None:
        """One batch, its refused lines named or skipped (topics/_cli_input.py)."""
        res, skipped = send_batch(
            lambda records: self.client.write(topic, records, **options),
            batch,
            self.batch_lines,
            self.args.skip_bad,
            self.err,
        )
        self.skipped += skipped
        return res

    def _show_record(self, topic: str | None, rec: Record | RawRecord) -> None:
        """``data`` as the JSON text the server stored (topics/_cli_format.py rule 1)."""
        raw = rec if isinstance(rec, RawRecord) else raw_from_record(rec)
        if self.json:
            self.out.write(raw.json_line(topic) + "\n")
            return
        self.out.write(self.style.record_line(topic, raw) + "\n")

    def _bounds(self) -> dict[str, Any]:
        """--since/--until/--to/--where as diff or watch options (topics/cli_filters.py)."""
        a = self.args
        out: dict[str, Any] = {}
        now = int(time.time() * 1000)
        try:
            if a.since is not None:
                out["from_ts"] = parse_time(a.since, now)
            if a.until is not None:
                out["to_ts"] = parse_time(a.until, now)
            if a.where is not None:
                out["where"] = parse_where(a.where)
        except FilterSyntaxError as exc:
            raise UsageError(str(exc)) from None
        if a.to_seq is not None:
            out["to_seq"] = a.to_seq
        return out

    def read(self) -> None:
        a = self.args
        bounds = self._bounds()
        if "from_ts" in bounds and a.from_seq:
            raise UsageError("give --from or --since, not both")
        cursor, shown = a.from_seq, 0
        cloudevents = a.format == "cloudevents"
        while True:
            page = self.client.diff(
                a.topic, from_seq=cursor, limit=a.limit, include_tags=True, format=a.format,
                **bounds,
            )  # fmt: skip
            bounds.pop("from_ts", None)  # resolved: go on from the cursor
            if page.tombstone is not None:
                self.warn_tombstone(a.topic, page.tombstone)
            items: list[Any] = list(page.events) if cloudevents else self._page_records(page)
            for item in items:
                if a.max is not None and shown >= a.max:
                    return
                if isinstance(item, Record | RawRecord):
                    self._show_record(None, item)
                else:  # an event is printed as JSON whatever the output mode
                    self.out.write(ujson.dumps(item, escape_forward_slashes=False) + "\n")
                shown += 1
            cursor = page.next_from_seq
            if page.caught_up:
                return

    @staticmethod
    def _page_records(page: Any) -> list[Record] | list[RawRecord]:
        raw = raw_page(page.records_json) if page.record_count else []
        return raw if raw is not None else page.records

    @contextlib.contextmanager
    def _group_commit(self, events: Any, printed: dict[str, int]) -> Iterator[None]:
        """``tail --group``: the watch commits a frame to the group's cursors once the next
        item is asked for; on exit what was printed since is committed too, so the next
        ``tail --group`` goes on right after the last record printed (at least once)."""
        try:
            yield
        finally:
            group = self.args.group
            committed = events.cursors
            for topic, seq in printed.items():
                if group is not None and seq > committed.get(topic, 0):
                    self.client.put_cursor(topic, group, seq)

    def tail(self) -> None:
        topics: dict[str, Any] | list[str] = self.args.topics
        if not topics and not self.args.prefix:
            raise UsageError("name a topic or give --prefix")
        if self.args.wait:
            wait_for_topics(self.client, self.args.topics, self.err)
        if self.args.from_seq is not None:
            topics = {t: self.args.from_seq for t in self.args.topics}
        elif self.args.last is not None:
            topics = last_n_starts(self.client, self.args.topics, self.args.last)
        elif self.args.wait:
            topics = dict.fromkeys(self.args.topics, 0)  # it was created after we started
        shown = 0
        guard: dict[str, Any] = {}
        if self.args.prefix:  # topics under it now (from --from's side) and created later
            guard["topic_prefix"] = self.args.prefix
        if self.args.max_backlog is not None:
            guard["max_backlog"] = self.args.max_backlog
        bounds = self._bounds()  # --since/--until/--to/--where (docs/CLI.md, "Filters")
        if "from_ts" in bounds and (self.args.from_seq is not None or self.args.last is not None):
            raise UsageError("give --since, --from or --last, not two of them")
        if "where" in bounds:
            guard["where"] = bounds.pop("where")
        if bounds:
            topics = bounded_starts(topics, bounds)
        open_ends = set(topics) if "to_ts" in bounds or "to_seq" in bounds else None
        events = self.client.watch(
            topics,
            tail=isinstance(topics, list),
            node=self.args.node,
            include_tags=True,
            group=self.args.group,
            **guard,
        )
        printed: dict[str, int] = {}  # topic -> the last seq printed
        with events, self._group_commit(events, printed):
            for ev in events:
                if isinstance(ev, WatchRecord):
                    rec = raw_from_record(ev.record)
                    if ev.data_json is not None:  # the data verbatim (topics/_cli_format.py)
                        rec = dataclasses.replace(rec, data_json=ev.data_json)
                    self._show_record(ev.topic, rec)
                    printed[ev.topic] = ev.seq
                    shown += 1
                elif isinstance(ev, TombstoneEvent):
                    self.warn_tombstone(ev.topic, ev.tombstone)
                elif isinstance(ev, TopicDeletedEvent):
                    self.err.write(f"topics: {ev.topic} was deleted\n")
                elif isinstance(ev, EndReachedEvent):
                    if self.args.verbose:
                        self.err.write(f"topics: {ev.topic} reached its end at {ev.cursor}\n")
                    if open_ends is not None:
                        open_ends.discard(ev.topic)
                        if not open_ends:  # every topic reached --until/--to: done
                            return
                elif isinstance(ev, BacklogExceededEvent):
                    self.err.write(
                        f"topics: {ev.topic} was {ev.backlog} records behind (more than "
                        f"--max-backlog {ev.max_backlog}): skipped to seq {ev.head_seq}\n"
                    )
                elif isinstance(ev, TopicAddedEvent) and self.args.verbose:
                    self.err.write(f"topics: {ev.topic} joined (--prefix {ev.prefix})\n")
                elif isinstance(ev, CaughtUpEvent) and self.args.verbose:
                    self.err.write(f"topics: {ev.topic} caught up at {ev.head_seq}\n")
                self.out.flush()
                if self.args.count is not None and shown >= self.args.count:
                    return

    # routers ---------------------------------------------------------------------------

    def router_put(self) -> None:
        a = self.args
        body: dict[str, Any] = {"source": a.source, "dest": a.dest}
        if a.filter is not None:
            body["filter"] = ["tag", "Glob" if a.filter.endswith("*") else "Eq", a.filter]
        for name in ("preserve_node", "preserve_tag", "create_dest", "allow_cycle"):
            if getattr(a, name) is not None:
                body[name] = getattr(a, name)
        if a.guarantee is not None:
            body["guarantee"] = a.guarantee
        res = self.client.put_router(a.router or f"{a.source}->{a.dest}", body)
        if self.json:
            self.emit(res.to_dict())
        else:
            verb = "created" if res.created else "updated"
            self.out.write(f"{verb} router {res.router}: {a.source} -> {a.dest}\n")

    def router_get(self) -> None:
        info = self.client.get_router(self.args.router)
        if self.json:
            self.emit(info.to_dict())
        else:
            pairs(list(info.to_dict().items()), self.out)

    def router_ls(self) -> None:
        a = self.args
        page = self.client.list_routers(
            prefix=a.prefix, source=a.source, dest=a.dest, page_size=1000
        )
        routers = list(page.routers)
        while page.next_cursor is not None:
            page = self.client.list_routers(
                prefix=a.prefix,
                source=a.source,
                dest=a.dest,
                page_size=1000,
                cursor=page.next_cursor,
            )
            routers += page.routers
        if self.json:
            self.emit({"routers": [r.to_dict() for r in routers]})
            return
        rows = [(r.router, r.source, r.dest, r.guarantee, r.forwarded_total) for r in routers]
        table(rows, ("ROUTER", "SOURCE", "DEST", "GUARANTEE", "FORWARDED"), self.out)

    def router_rm(self) -> None:
        res = self.client.delete_router(self.args.router)
        if self.json:
            self.emit(res.to_dict())
        else:
            what = "deleted" if res.deleted else "no such router (nothing deleted):"
            self.out.write(f"{what} {res.router}\n")

    # queues ----------------------------------------------------------------------------

    def _leases(self) -> tuple[list[int], list[str] | None]:
        seqs: list[int] = []
        ids: list[str] = []
        for token in self.args.seqs:
            seq, colon, lease = token.partition(":")
            if not seq.isdigit():
                raise UsageError(f"expected SEQ or SEQ:LEASE_ID, got {token!r}")
            seqs.append(int(seq))
            if colon:
                ids.append(lease)
        if ids and len(ids) != len(seqs):
            raise UsageError("give a lease id for every seq, or for none")
        return seqs, ids or None

    def queue_claim(self) -> None:
        a = self.args
        res = self.client.claim(a.queue, node=a.node, max=a.max, lease_ms=a.lease_ms)
        if self.json:
            self.emit(res.to_dict())
            return
        rows = [(j.seq, j.lease_id, j.deliveries, j.deadline, short(j.data)) for j in res.claimed]
        table(rows, ("SEQ", "LEASE_ID", "DELIVERIES", "DEADLINE", "DATA"), self.out)
        self.err.write(f"claimed {res.count}; {res.ready} ready\n")

    def queue_ack(self) -> None:
        seqs, ids = self._leases()
        res = self.client.ack(self.args.queue, node=self.args.node, seqs=seqs, lease_ids=ids)
        self._lease_result(res.to_dict(), f"acked {res.acked}", res.skipped)

    def queue_nack(self) -> None:
        seqs, ids = self._leases()
        res = self.client.nack(
            self.args.queue, node=self.args.node, seqs=seqs, delay_ms=self.args.delay_ms,
            lease_ids=ids,
        )  # fmt: skip
        self._lease_result(res.to_dict(), f"nacked {res.nacked}", res.skipped)

    def queue_extend(self) -> None:
        seqs, ids = self._leases()
        res = self.client.extend(
            self.args.queue, node=self.args.node, seqs=seqs, lease_ms=self.args.lease_ms,
            lease_ids=ids,
        )  # fmt: skip
        self._lease_result(res.to_dict(), f"extended {res.extended}", res.skipped)

    # jobs: scheduled jobs and dedupe keys; dead letters ------------------------------

    def jobs_schedule(self) -> None:
        a = self.args
        if a.at is not None and a.delay is not None:
            raise UsageError("give --at or --in, not both")
        deliver_at = delay_ms = None
        try:
            if a.at is not None:
                if re.fullmatch(r"\d+(ms|s|m|h|d)", a.at.strip()):
                    raise UsageError(f"--at takes a time (RFC 3339 or epoch ms); use --in {a.at}")
                deliver_at = parse_time(a.at, 0)
            if a.delay is not None:
                delay_ms = _duration_ms(a.delay)
        except FilterSyntaxError as exc:
            raise UsageError(str(exc)) from None
        data = a.data.encode()  # JSON text, sent verbatim (as write does)
        meta = a.meta.encode() if a.meta is not None else None
        res = self.client.schedule(
            a.queue, data, deliver_at=deliver_at, delay_ms=delay_ms, dedupe_key=a.dedupe_key,
            dedupe=a.dedupe, dedupe_ms=a.dedupe_ms, replace=True if a.replace else None,
            tag=a.tag, meta=meta,
        )  # fmt: skip
        if self.json:
            self.emit(res.to_dict())
            return
        outcome = res.dedupe[0] if res.dedupe else None
        if outcome is not None and outcome["outcome"] == "duplicate":
            self.out.write(
                f"not added: job {outcome['seq']} holds dedupe key {outcome['dedupe_key']!r}\n"
            )
            return
        when = "at once" if deliver_at is None and not delay_ms else (
            f"in {delay_ms} ms" if delay_ms else f"at {deliver_at}"
        )  # fmt: skip
        note = f" (replaced job {outcome['replaced_seq']})" if outcome is not None else ""
        self.out.write(f"job {res.first_seq} in {a.queue}, claimable {when}{note}\n")

    def dlq_redrive(self) -> None:
        a = self.args
        where: dict[str, Any] = {}
        if a.origin is not None:
            where["origin"] = a.origin
        if a.match is not None:
            where["match"] = ["tag", "Glob" if a.match.endswith("*") else "Eq", a.match]
        res = self.client.redrive(a.dlq, to=a.to, max=a.max, where=where or None)
        if self.json:
            self.emit(res.to_dict())
            return
        for batch in res.batches:
            self.out.write(
                f"moved {batch['count']} to {batch['to']} "
                f"(seqs {batch['first_seq']}..{batch['last_seq']})\n"
            )
        skipped = f"; {res.skipped} without a queue to go to" if res.skipped else ""
        self.out.write(f"moved {res.moved}{skipped}; {res.remaining} left in {a.dlq}\n")

    def _lease_result(self, obj: dict[str, Any], summary: str, skipped: list[int]) -> None:
        if self.json:
            self.emit(obj)
            return
        note = (
            f"; skipped (not held by this node): {' '.join(map(str, skipped))}" if skipped else ""
        )
        self.out.write(summary + note + "\n")

    def health(self) -> None:
        obj = self.client.health()
        obj.pop("performance", None)
        if self.json:
            self.emit(obj)
        else:
            pairs(list(obj.items()), self.out)


def last_n_starts(client: Client, topics: Sequence[str], n: int) -> dict[str, int]:
    """``tail -n N``: start each topic N records before its head."""
    if n < 0:
        raise UsageError("-n/--last: give a number of records >= 0")
    return {t: max(0, client.get_topic(t, touch=False).head_seq - n) for t in topics}


def wait_for_topics(client: Client, topics: Sequence[str], err: IO[str]) -> None:
    """``tail --wait``: poll until every named topic exists (no watch can name a topic that
    does not exist; a prefix watch would also bring in every other topic under the name)."""
    said = False
    for topic in topics:
        delay = 0.05
        while True:
            try:
                client.get_topic(topic, touch=False)
                break
            except NotFoundError:
                if not said:
                    err.write(f"topics: waiting for {topic} to exist\n")
                    err.flush()
                    said = True
                time.sleep(delay)
                delay = min(delay * 2, 1.0)


# -- the parser ----------------------------------------------------------------------------


def _bool_flag(p: argparse.ArgumentParser, name: str, help_on: str) -> None:
    dest = name.replace("-", "_")
    p.add_argument(f"--{name}", dest=dest, action="store_true", default=None, help=help_on)
    p.add_argument(f"--no-{name}", dest=dest, action="store_false", help=argparse.SUPPRESS)


def _bound_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--since", metavar="WHEN",
                   help="start at records written since: 10m, 2h, 1d, RFC 3339 or epoch ms")  # fmt: skip
    p.add_argument("--until", metavar="WHEN", help="end after records written until WHEN")
    p.add_argument("--to", dest="to_seq", type=int, metavar="SEQ", help="end after this seq")
    p.add_argument("--where", metavar="FILTER",
                   help="server-side filter, e.g. 'kind=refund and amount>10' (docs/CLI.md)")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="topics",
        description="Talk to a topics server (the /v0 HTTP API).",
        epilog="exit codes: 0 ok, 1 server error, 2 usage, 3 not found, 4 conflict, "
        "5 throttled/unavailable, 6 cannot connect, 130 interrupted",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("ls", help="list topics")
    p.add_argument("--prefix")
    p.set_defaults(run=Cli.ls)
    p = sub.add_parser("stat", help="show a topic's state and config")
    p.add_argument("topic")
    p.set_defaults(run=Cli.stat)
    p = sub.add_parser("put", help="create or configure a topic: FIELD=VALUE ...")
    p.add_argument("topic")
    p.add_argument("fields", nargs="*", metavar="FIELD=VALUE", help="e.g. type=queue ttl_ms=60000")
    p.set_defaults(run=Cli.put)
    p = sub.add_parser("rm", help="delete a topic and everything in it")
    p.add_argument("topic")
    p.add_argument("--if-empty", action="store_true", help="only if it holds no records")
    p.set_defaults(run=Cli.rm)
    p = sub.add_parser("delete-records", help="delete records by seq bound and/or tag")
    p.add_argument("topic")
    p.add_argument("--before-seq", type=int)
    p.add_argument("--match", help="a tag, or a prefix ending in * (e.g. user-7:*)")
    p.set_defaults(run=Cli.delete_records)

    p = sub.add_parser("write", help="append JSON lines (stdin or FILE) as records")
    p.add_argument("topic")
    p.add_argument("file", nargs="?", help="JSON lines file (default: stdin)")
    p.add_argument("--records", action="store_true", help="each line is a record object")
    p.add_argument("--tag", help="tag every record (data lines only)")
    p.add_argument("--node", help="origin node of the records")
    p.add_argument("--batch", type=int, default=1000, help="records per request")
    p.add_argument("--batch-bytes", type=int, default=4 << 20, help="bytes per request")
    p.add_argument(
        "--expect-head",
        type=int,
        help="append only if the topic's head_seq is N (each later batch: the previous one's "
        "last seq); else stop with head_mismatch",
    )
    p.add_argument("--producer-id", help="fence older epochs of this producer (with --epoch)")
    p.add_argument("--epoch", type=int, help="this producer instance's epoch")
    p.add_argument("--skip-bad", action="store_true",
                   help="leave out lines that are not records (reported on stderr with their "
                   "line number) instead of stopping there")  # fmt: skip
    _bool_flag(p, "progress", "show a progress bar (default: when stderr is a terminal)")
    p.set_defaults(run=Cli.write)
    p = sub.add_parser("read", help="print records after a seq")
    p.add_argument("topic")
    p.add_argument("--from", dest="from_seq", type=int, default=0, help="start after this seq")
    p.add_argument("--limit", type=int, default=1000, help="records per request")
    p.add_argument("--max", type=int, help="stop after this many records")
    _bound_options(p)
    p.add_argument("--format", choices=("records", "cloudevents"), default="records",
                   help="cloudevents: print each record as a CloudEvents 1.0 JSON event")  # fmt: skip
    p.set_defaults(run=Cli.read)
    p = sub.add_parser("tail", help="follow topics live (watch)")
    p.add_argument("topics", nargs="*")
    p.add_argument("--group", help="consumer group: resume after its cursor, commit to it")
    p.add_argument(
        "--prefix",
        action="append",
        help="also every topic under this name prefix (from the head, or from the start with "
        "--from), and topics created under it later, from their first record (repeatable)",
    )
    p.add_argument(
        "--max-backlog",
        type=int,
        help="a topic more than N records behind skips to its head (reported on stderr)",
    )
    p.add_argument("--from", dest="from_seq", type=int, help="start after this seq (default: new)")
    p.add_argument("--node", help="skip records written by this node")
    p.add_argument("--count", type=int, help="exit after this many records")
    _bound_options(p)
    p.add_argument("-n", "--last", type=int, metavar="N",
                   help="start with the last N records of each topic (default: new only)")  # fmt: skip
    p.add_argument("--wait", action="store_true",
                   help="a topic that does not exist yet: wait for it, then follow it from its "
                   "first record")  # fmt: skip
    p.add_argument(
        "-v", "--verbose", action="store_true", help="report caught-up events and joined topics"
    )
    p.set_defaults(run=Cli.tail)
    p = sub.add_parser("health", help="server liveness")
    p.set_defaults(run=Cli.health)

    router = sub.add_parser("router", help="routers: put, get, ls, rm")
    rsub = router.add_subparsers(dest="router_command", required=True, metavar="COMMAND")
    p = rsub.add_parser("put", help="create or change a router")
    p.add_argument("router", nargs="?", help="name (default SOURCE->DEST)")
    p.add_argument("--source", required=True)
    p.add_argument("--dest", required=True)
    p.add_argument("--filter", help="forward only this tag, or tags with a prefix ending in *")
    p.add_argument("--guarantee", choices=("at_least_once", "exactly_once"))
    for name in ("preserve-node", "preserve-tag", "create-dest", "allow-cycle"):
        _bool_flag(p, name, f"{name.replace('-', '_')} (--no-{name} for false)")
    p.set_defaults(run=Cli.router_put)
    p = rsub.add_parser("get", help="show a router")
    p.add_argument("router")
    p.set_defaults(run=Cli.router_get)
    p = rsub.add_parser("ls", help="list routers")
    p.add_argument("--prefix")
    p.add_argument("--source")
    p.add_argument("--dest")
    p.set_defaults(run=Cli.router_ls)
    p = rsub.add_parser("rm", help="delete a router")
    p.add_argument("router")
    p.set_defaults(run=Cli.router_rm)

    queue = sub.add_parser("queue", help="queues: claim, ack, nack, extend")
    qsub = queue.add_subparsers(dest="queue_command", required=True, metavar="COMMAND")
    for name, run in (("claim", Cli.queue_claim), ("ack", Cli.queue_ack),
                      ("nack", Cli.queue_nack), ("extend", Cli.queue_extend)):  # fmt: skip
        p = qsub.add_parser(name, help=f"{name} jobs")
        p.add_argument("queue")
        p.add_argument("--node", required=True, help="the worker identity")
        if name == "claim":
            p.add_argument("--max", type=int, default=1)
            p.add_argument("--lease-ms", type=int)
        else:
            p.add_argument("seqs", nargs="+", metavar="SEQ[:LEASE_ID]")
        if name == "nack":
            p.add_argument("--delay-ms", type=int, default=0)
        if name == "extend":
            p.add_argument("--lease-ms", type=int, required=True)
        p.set_defaults(run=run)

    jobs = sub.add_parser("jobs", help="queue jobs: schedule (delayed, deduplicated)")
    jsub = jobs.add_subparsers(dest="jobs_command", required=True, metavar="COMMAND")
    p = jsub.add_parser("schedule", help="enqueue one job, maybe for later, maybe deduplicated")
    p.add_argument("queue")
    p.add_argument("data", help="the job's data as JSON text (sent verbatim)")
    p.add_argument("--at", help="claimable from this time: RFC 3339 or epoch ms")
    p.add_argument(
        "--in", dest="delay", metavar="DURATION", help="claimable after 500ms, 10s, 5m, 2h, 1d"
    )
    p.add_argument("--dedupe-key", help="not added while a job with this key is held")
    p.add_argument("--dedupe", choices=("until_ack", "window"), help="how the key holds")
    p.add_argument("--dedupe-ms", type=int, help="the window of --dedupe window")
    p.add_argument("--replace", action="store_true", help="replace a held job not yet claimed")
    p.add_argument("--tag")
    p.add_argument("--meta", help="meta as a JSON object")
    p.set_defaults(run=Cli.jobs_schedule)

    dlq = sub.add_parser("dlq", help="dead-letter topics: redrive")
    dsub = dlq.add_subparsers(dest="dlq_command", required=True, metavar="COMMAND")
    p = dsub.add_parser("redrive", help="move dead-lettered jobs back to their queue (admin)")
    p.add_argument("dlq", help="the dead-letter topic")
    p.add_argument("--to", help="this queue instead of each job's origin")
    p.add_argument("--max", type=int, help="jobs to move at most (default 1000)")
    p.add_argument("--origin", help="only jobs dead-lettered from this queue")
    p.add_argument("--match", metavar="TAG", help="only jobs with this tag (PREFIX* for a prefix)")
    p.set_defaults(run=Cli.dlq_redrive)
    add_global_options(parser)  # accepted before or after the subcommand
    return parser


def _duration_ms(text: str) -> int:
    m = re.fullmatch(r"(\d+)(ms|s|m|h|d)", text.strip())
    if m is None:
        raise UsageError(f"{text!r} is not a duration (500ms, 10s, 5m, 2h, 1d)")
    return int(m.group(1)) * _DURATION_UNITS[m.group(2)]


_DURATION_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


# -- errors and exit codes -------------------------------------------------------------------


def exit_code(exc: TopicsError) -> int:
    if isinstance(exc, ClientConnectionError):
        return EXIT_CONNECTION
    status = getattr(exc, "http_status", exc.status)
    if isinstance(exc, NotFoundError) or status == 404:
        return EXIT_NOT_FOUND
    if isinstance(exc, ConflictError) or status == 409:
        return EXIT_CONFLICT
    if status in (429, 502, 503, 504):
        return EXIT_UNAVAILABLE
    return EXIT_ERROR


def report(exc: TopicsError, as_json: bool) -> int:
    rid = getattr(exc, "request_id", None)
    where = f" (request id {rid})" if rid else ""
    sys.stderr.write(f"topics: {exc.code}: {exc.message}{where}\n")
    if as_json:
        obj = exc.to_dict()
        if rid:
            obj["request_id"] = rid
        sys.stdout.write(dumps({"error": obj}) + "\n")
    return exit_code(exc)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``topics`` command line; returns the exit code (rule 3)."""
    args = build_parser().parse_args(argv)
    run: Callable[[Cli], int | None] = args.run
    retry = RetryPolicy(timeout_s=max(args.timeout, 1.0))
    try:
        with Client(args.url, args.api_key, timeout_s=args.timeout, retry=retry) as client:
            code = run(Cli(args, client))
    except TopicsError as exc:
        return report(exc, args.json)
    except (UsageError, BadLine) as exc:
        sys.stderr.write(f"topics: error: {exc}\n")
        return EXIT_USAGE
    except BrokenPipeError:  # `topics read t | head`: the reader went away
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when stdout is flushed
        return EXIT_OK
    except OSError as exc:  # an input file that cannot be read
        sys.stderr.write(f"topics: error: {exc}\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return code or EXIT_OK


def _entry() -> NoReturn:
    sys.exit(main())


if __name__ == "__main__":
    _entry()
