"""The ``topics`` commands that move records: ``write`` (JSON lines in batches, cli.py rule 4),
``read`` (diff pages) and ``tail`` (a watch), with ``--since/--until/--to/--where``."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import IO, Any

import ujson

from topics._core.scan import BodyError, split_write_body
from topics.cli.filters import FilterSyntaxError, bounded_starts, parse_time, parse_where
from topics.cli.format import Progress, RawRecord, raw_from_record, raw_page
from topics.cli.input import BadLine, check_data_line, send_batch
from topics.cli.session import Session, UsageError
from topics.client import Client, WatchRecord
from topics.client._topic_wait import wait_for_topics as topic_wait_steps
from topics.consumer import drive
from topics.errors import TopicsError
from topics.types import DiffResult, Record, TopicState, WriteResult
from topics.watch_types import (
    BacklogExceededEvent,
    CaughtUpEvent,
    EndReachedEvent,
    JoinRefusedEvent,
    TombstoneEvent,
    TopicAddedEvent,
    TopicDeletedEvent,
)


def _lines(cli: Session) -> tuple[IO[bytes], int | None]:
    path = cli.args.file
    if path in (None, "-"):
        return sys.stdin.buffer, None
    f = open(path, "rb")  # noqa: SIM115 - closed by write()
    return f, os.fstat(f.fileno()).st_size


def _record(cli: Session, line: bytes, lineno: int) -> dict[str, Any]:
    if not cli.args.records:
        check_data_line(line, lineno)  # named by its line, before anything is sent
        record: dict[str, Any] = {"data": line}  # rule 4: the line's bytes, verbatim
        if cli.args.tag:
            record["tag"] = cli.args.tag
        return record
    try:
        records, _ = split_write_body(b'{"records":[' + line + b"]}")
    except BodyError as exc:
        raise BadLine(lineno, f"not a record object ({exc.problem})") from None
    assert records is not None
    return records[0]


def _batches(cli: Session, f: IO[bytes]) -> Iterator[tuple[list[dict[str, Any]], int]]:
    batch: list[dict[str, Any]] = []
    size = 0
    cli.batch_lines = []
    for lineno, raw in enumerate(f, 1):
        line = raw.strip()
        if not line:
            continue
        try:
            batch.append(_record(cli, line, lineno))
        except BadLine as exc:
            if not cli.args.skip_bad:
                raise
            cli.err.write(f"topics: skipped {exc}\n")
            cli.skipped += 1
            continue
        cli.batch_lines.append(lineno)
        size += len(raw)
        if len(batch) >= cli.args.batch or size >= cli.args.batch_bytes:
            yield batch, size
            batch, size = [], 0
            cli.batch_lines = []
    if batch:
        yield batch, size


def write(cli: Session) -> None:
    f, total = _lines(cli)
    show = cli.args.progress or (cli.args.progress is None and cli.err.isatty())
    progress = Progress(cli.err, total, bool(show))
    first = last = None
    count = batches = 0
    # --expect-head chains: each batch must land right after the previous one.
    expected = cli.args.expect_head
    try:
        for batch, size in _batches(cli, f):
            res = _write_batch(
                cli,
                cli.args.topic,
                batch,
                node=cli.args.node,
                return_seqs=False,
                expected_head_seq=expected,
                producer_id=cli.args.producer_id,
                epoch=cli.args.epoch,
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
        cli.err.write(f"topics: stopped after {count:,} records in {batches} batches{where}\n")
        raise
    finally:
        progress.finish()
        if f is not sys.stdin.buffer:
            f.close()
    summary = {"topic": cli.args.topic, "records": count, "batches": batches}
    summary.update(first_seq=first, last_seq=last)
    if cli.args.skip_bad:
        summary["skipped_lines"] = cli.skipped
    skipped = f"; skipped {cli.skipped:,} bad lines" if cli.skipped else ""
    if cli.json:
        cli.emit(summary)
    elif count:
        noun = "record" if count == 1 else "records"
        cli.out.write(
            f"wrote {count:,} {noun} to {cli.args.topic} (seqs {first}..{last}){skipped}\n"
        )
    else:
        cli.out.write(f"nothing to write (no input lines){skipped}\n")


def _write_batch(
    cli: Session, topic: str, batch: list[dict[str, Any]], **options: Any
) -> WriteResult | None:
    """One batch, its refused lines named or skipped (topics/cli/input.py)."""
    res, skipped = send_batch(
        lambda records: cli.client.write(topic, records, **options),
        batch,
        cli.batch_lines,
        cli.args.skip_bad,
        cli.err,
    )
    cli.skipped += skipped
    return res


def _show_record(cli: Session, topic: str | None, rec: Record | RawRecord) -> None:
    """``data`` as the JSON text the server stored (topics/cli/format.py rule 1)."""
    raw = rec if isinstance(rec, RawRecord) else raw_from_record(rec)
    if cli.json:
        cli.out.write(raw.json_line(topic) + "\n")
        return
    cli.out.write(cli.style.record_line(topic, raw) + "\n")


def _bounds(cli: Session) -> dict[str, Any]:
    """--since/--until/--to/--where as diff or watch options (topics/cli/filters.py)."""
    a = cli.args
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


def read(cli: Session) -> None:
    a = cli.args
    bounds = _bounds(cli)
    if "from_ts" in bounds and (a.from_seq is not None or a.last is not None):
        raise UsageError("give --from, --last or --since, not two of them")
    if a.from_seq is not None and a.last is not None:
        raise UsageError("give --from or -n/--last, not both")
    start = a.from_seq or 0
    if a.last is not None:
        start = last_n_starts(cli.client, [a.topic], a.last)[a.topic]
    elif start < 0:  # --from -N: N before the head (kcat -o -N)
        start = last_n_starts(cli.client, [a.topic], -start)[a.topic]
    cursor, shown = start, 0
    cloudevents = a.format == "cloudevents"
    while True:
        page = cli.client.diff(
            a.topic, from_seq=cursor, limit=a.limit, include_tags=True, format=a.format,
            **bounds,
        )  # fmt: skip
        bounds.pop("from_ts", None)  # resolved: go on from the cursor
        if page.tombstone is not None:
            cli.warn_tombstone(a.topic, page.tombstone)
        items: list[Any] = list(page.events) if cloudevents else page_records(page)
        for item in items:
            if a.max is not None and shown >= a.max:
                return
            if isinstance(item, Record | RawRecord):
                _show_record(cli, None, item)
            else:  # an event is printed as JSON whatever the output mode
                cli.out.write(ujson.dumps(item, escape_forward_slashes=False) + "\n")
            shown += 1
        cursor = page.next_from_seq
        if page.caught_up:
            return


def page_records(page: DiffResult) -> list[RawRecord]:
    """A diff page's records, ``data``/``meta`` verbatim (topics/cli/format.py rule 1)."""
    raw = raw_page(page.records_json) if page.record_count else []
    return raw if raw is not None else [raw_from_record(r) for r in page.records]


@contextlib.contextmanager
def _group_commit(cli: Session, events: Any, printed: dict[str, int]) -> Iterator[None]:
    """``tail --group``: the watch commits a frame to the group's cursors once the next
    item is asked for; on exit what was printed since is committed too, so the next
    ``tail --group`` goes on right after the last record printed (at least once)."""
    try:
        yield
    finally:
        group = cli.args.group
        committed = events.cursors
        for topic, seq in printed.items():
            if group is not None and seq > committed.get(topic, 0):
                cli.client.put_cursor(topic, group, seq)


def tail(cli: Session) -> None:
    topics, guard, open_ends = _tail_starts(cli)
    events = cli.client.watch(
        topics,
        tail=isinstance(topics, list),
        node=cli.args.node,
        include_tags=True,
        group=cli.args.group,
        **guard,
    )
    shown = 0
    printed: dict[str, int] = {}  # topic -> the last seq printed
    with events, _group_commit(cli, events, printed):
        for ev in events:
            if isinstance(ev, WatchRecord):
                rec = raw_from_record(ev.record)
                if ev.data_json is not None:  # the data verbatim (topics/cli/format.py)
                    rec = dataclasses.replace(rec, data_json=ev.data_json)
                _show_record(cli, ev.topic, rec)
                printed[ev.topic] = ev.seq
                shown += 1
            elif isinstance(ev, EndReachedEvent):
                if cli.args.verbose:
                    cli.err.write(f"topics: {ev.topic} reached its end at {ev.cursor}\n")
                if open_ends is not None:
                    open_ends.discard(ev.topic)
                    if not open_ends:  # every topic reached --until/--to: done
                        return
            else:
                _show_event(cli, ev)
            cli.out.flush()
            if cli.args.count is not None and shown >= cli.args.count:
                return


def _tail_starts(
    cli: Session,
) -> tuple[dict[str, Any] | list[str], dict[str, Any], set[str] | None]:
    """``tail``'s topics with their starts, the watch's guard options (prefix, backlog,
    where), and the topics that have an end (--until/--to), if any."""
    topics: dict[str, Any] | list[str] = cli.args.topics
    if not topics and not cli.args.prefix:
        raise UsageError("name a topic or give --prefix")
    if cli.args.wait:
        wait_for_topics(cli.client, cli.args.topics, cli.err)
    if cli.args.from_seq is not None and cli.args.from_seq < 0:  # N before each head
        topics = last_n_starts(cli.client, cli.args.topics, -cli.args.from_seq)
    elif cli.args.from_seq is not None:
        topics = {t: cli.args.from_seq for t in cli.args.topics}
    elif cli.args.last is not None:
        topics = last_n_starts(cli.client, cli.args.topics, cli.args.last)
    elif cli.args.wait:
        topics = dict.fromkeys(cli.args.topics, 0)  # it was created after we started
    guard: dict[str, Any] = {}
    if cli.args.prefix:  # topics under it now (from --from's side) and created later
        guard["topic_prefix"] = cli.args.prefix
    if cli.args.max_backlog is not None:
        guard["max_backlog"] = cli.args.max_backlog
    bounds = _bounds(cli)  # --since/--until/--to/--where (docs/CLI.md, "Filters")
    if "from_ts" in bounds and (cli.args.from_seq is not None or cli.args.last is not None):
        raise UsageError("give --since, --from or --last, not two of them")
    if "where" in bounds:
        guard["where"] = bounds.pop("where")
    if bounds:
        topics = bounded_starts(topics, bounds)
    open_ends = set(topics) if "to_ts" in bounds or "to_seq" in bounds else None
    return topics, guard, open_ends


def _show_event(cli: Session, ev: object) -> None:
    """A watch event other than a record or an end, on stderr (loss always; the rest with
    --verbose, except a skipped backlog, which is loss the user asked for)."""
    if isinstance(ev, TombstoneEvent):
        cli.warn_tombstone(ev.topic, ev.tombstone)
    elif isinstance(ev, TopicDeletedEvent):
        cli.err.write(f"topics: {ev.topic} was deleted\n")
    elif isinstance(ev, BacklogExceededEvent):
        cli.err.write(
            f"topics: {ev.topic} was {ev.backlog} records behind (more than "
            f"--max-backlog {ev.max_backlog}): skipped to seq {ev.head_seq}\n"
        )
    elif isinstance(ev, JoinRefusedEvent):
        cli.err.write(
            f"topics: {ev.topic} (--prefix {ev.prefix}) not followed: the watch holds "
            f"{ev.max_watch_topics} topics already (TOPICS_MAX_WATCH_TOPICS)\n"
        )
    elif isinstance(ev, TopicAddedEvent) and cli.args.verbose:
        cli.err.write(f"topics: {ev.topic} joined (--prefix {ev.prefix})\n")
    elif isinstance(ev, CaughtUpEvent) and cli.args.verbose:
        cli.err.write(f"topics: {ev.topic} caught up at {ev.head_seq}\n")


def before_head(state: TopicState, n: int) -> int:
    """The seq to read after for the last ``n`` seqs of a topic (``-n N``, ``--from -N``):
    N before its head, but not before what it retains, since asking for more than is there
    is not a loss to report."""
    return max(0, state.head_seq - n, state.earliest_seq - 1)


def last_n_starts(client: Client, topics: Sequence[str], n: int) -> dict[str, int]:
    """``-n N`` and ``--from -N``: each topic's start, N before its head."""
    if n < 0:
        raise UsageError("-n/--last: give a number of records >= 0")
    return {t: before_head(client.get_topic(t, touch=False), n) for t in topics}


def wait_for_topics(client: Client, topics: Sequence[str], err: IO[str]) -> None:
    """``tail --wait``: wait until every named topic exists (the client's own wait, as
    ``watch(..., wait_for_topic=True)`` does it), saying so once on stderr."""
    said: list[str] = []

    def on_wait(topic: str) -> None:
        if not said:
            err.write(f"topics: waiting for {topic} to exist\n")
            err.flush()
        said.append(topic)

    drive(client, topic_wait_steps(topics, on_wait))
