"""The ``topics cursors`` commands: consumer groups' named cursors (docs/CLIENT.md, "Consumer
groups"), listed, measured, reset and deleted as ``kafka-consumer-groups`` does for Kafka's.

Rules:
1. ``ls T [G]`` is a table for people (GROUP, SEQ, HEAD, LAG, UPDATED); ``lag T G`` prints
   the bare number, for scripts and alerts, and ``lag T`` one ``GROUP  LAG`` line per group.
   ``stat T`` shows each group's seq and lag too (:func:`cursor_items`).
2. ``reset T G`` moves one group: ``--to-earliest`` (before the first retained record),
   ``--to-latest`` (the head: nothing left to read), ``--to SEQ`` (``-N``: N before the head,
   as ``read --from -N``), ``--shift-by N`` (from where it stands, kept within earliest..head)
   or ``--to-time WHEN`` (before the first record written at or after WHEN). A group never
   committed is created there. ``--shift-by`` is a compare-and-set against the seq it was
   computed from: a consumer committing meanwhile makes it fail (409, exit 4) rather than
   moving the group by the wrong amount. ``--dry-run`` says where it would go and commits
   nothing.
3. ``rm T G`` of a cursor that does not exist says so on stderr and exits 3, like ``rm``.
"""

from __future__ import annotations

import time
from typing import Any

from topics.cli.filters import FilterSyntaxError, parse_time
from topics.cli.format import pairs, table
from topics.cli.records import before_head
from topics.cli.session import EXIT_NOT_FOUND, EXIT_OK, Session, UsageError
from topics.client import Client
from topics.cursor_types import CursorInfo
from topics.errors import CursorNotFoundError
from topics.types import TopicState

__all__ = ["cursor_items", "lag", "ls", "reset", "rm"]


def _cursors(cli: Session) -> list[CursorInfo]:
    a = cli.args
    if a.group is not None:
        return [cli.client.get_cursor(a.topic, a.group)]  # cursor_not_found: exit 3
    return sorted(cli.client.list_cursors(a.topic), key=lambda c: c.cursor)


def ls(cli: Session) -> None:
    cursors = _cursors(cli)
    if cli.json:
        cli.emit({"cursors": [c.to_dict() for c in cursors]})
        return
    rows = [(c.cursor, c.seq, c.head_seq, c.lag, cli.style.ts(c.updated_ts)) for c in cursors]
    table(rows, ("GROUP", "SEQ", "HEAD", "LAG", "UPDATED"), cli.out)


def lag(cli: Session) -> None:
    cursors = _cursors(cli)
    if cli.json:
        one = cli.args.group is not None
        cli.emit(cursors[0].to_dict() if one else {"cursors": [c.to_dict() for c in cursors]})
    elif cli.args.group is not None:
        cli.out.write(f"{cursors[0].lag}\n")
    else:
        pairs([(c.cursor, c.lag) for c in cursors], cli.out)


def cursor_items(cursors: list[CursorInfo]) -> list[tuple[str, object]]:
    """``stat``'s lines for the topic's groups: ``cursor.G  seq=S lag=L``."""
    ordered = sorted(cursors, key=lambda c: c.cursor)
    return [(f"cursor.{c.cursor}", f"seq={c.seq} lag={c.lag}") for c in ordered]


def _committed(client: Client, topic: str, group: str) -> int | None:
    try:
        return client.get_cursor(topic, group).seq
    except CursorNotFoundError:
        return None  # never committed: reads as 0, and a reset creates it


def _seq_at(client: Client, topic: str, ts: int) -> int:
    """The cursor before the first record written at or after ``ts`` (the head if none)."""
    page = client.diff(topic, from_ts=ts, limit=1, include_data=False, include_meta=False)
    while not page.records and not page.caught_up:  # past deleted or expired records
        page = client.diff(
            topic, from_seq=page.next_from_seq, limit=1, include_data=False, include_meta=False
        )
    return page.records[0].seq - 1 if page.records else page.next_from_seq


def _target(cli: Session, state: TopicState, current: int | None) -> int:
    a = cli.args
    low = max(0, state.earliest_seq - 1)  # just before the first retained record
    if a.to_earliest:
        return low
    if a.to_latest:
        return state.head_seq
    if a.to_seq is not None:
        return a.to_seq if a.to_seq >= 0 else before_head(state, -a.to_seq)
    if a.shift_by is not None:
        shifted: int = (current or 0) + a.shift_by
        return min(state.head_seq, max(low, shifted))
    try:
        ts = parse_time(a.to_time, int(time.time() * 1000))
    except FilterSyntaxError as exc:
        raise UsageError(f"--to-time: {exc}") from None
    return _seq_at(cli.client, a.topic, ts)


def reset(cli: Session) -> None:
    a = cli.args
    state = cli.client.get_topic(a.topic, touch=False)
    current = _committed(cli.client, a.topic, a.group)
    seq = _target(cli, state, current)
    if a.dry_run:
        result: dict[str, Any] = {"topic": a.topic, "cursor": a.group, "seq": seq,
                                  "head_seq": state.head_seq,
                                  "lag": max(0, state.head_seq - seq), "dry_run": True}  # fmt: skip
    else:
        expect = (current or 0) if a.shift_by is not None else None  # rule 2
        result = cli.client.put_cursor(a.topic, a.group, seq, expect_seq=expect).to_dict()
    if cli.json:
        cli.emit(result)
        return
    was = "-" if current is None else current
    dry = " (dry run: not committed)" if a.dry_run else ""
    cli.out.write(f"{a.group} on {a.topic}: {was} -> {seq} (lag {result['lag']}){dry}\n")


def rm(cli: Session) -> int:
    res = cli.client.delete_cursor(cli.args.topic, cli.args.group)
    if cli.json:
        cli.emit(res.to_dict())
    elif res.deleted:
        cli.out.write(f"deleted cursor {cli.args.group} of {cli.args.topic}\n")
    else:
        cli.err.write(f"topics: {cli.args.topic}: no cursor {cli.args.group} (nothing deleted)\n")
    return EXIT_OK if res.deleted else EXIT_NOT_FOUND
