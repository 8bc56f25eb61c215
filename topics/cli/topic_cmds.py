"""The ``topics`` commands on topics as a whole: ``ls``, ``stat``, ``put``, ``rm``, ``delete``
and ``health`` (topics/cli.py rule 1 for their output)."""

from __future__ import annotations

from typing import Any

import ujson

from topics.cli.cursors import cursor_items
from topics.cli.format import pairs, table
from topics.cli.session import EXIT_NOT_FOUND, EXIT_OK, Session, UsageError
from topics.cli.suggest import note_config_field
from topics.errors import TopicsError


def ls(cli: Session) -> None:
    topics = list(cli.client.iter_topics(prefix=cli.args.prefix))
    if cli.json:
        cli.emit({"topics": [t.to_dict() for t in topics]})
        return
    rows = [
        (t.topic, t.type, t.head_seq, t.earliest_seq, t.count, t.bytes, t.durability)
        for t in topics
    ]
    header = ("TOPIC", "TYPE", "HEAD", "EARLIEST", "COUNT", "BYTES", "DURABILITY")
    table(rows, header, cli.out)


def stat(cli: Session) -> None:
    state = cli.client.get_topic(cli.args.topic, touch=False)
    groups = cli.client.list_cursors(cli.args.topic)  # their lag, as `cursors ls` shows it
    if cli.json:
        cli.emit({**state.to_dict(), "cursors": [c.to_dict() for c in groups]})
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
        ("last_write_ts", cli.style.ts(state.last_write_ts)),
        ("last_read_ts", cli.style.ts(state.last_read_ts)),
    ]
    if state.queue is not None:  # whatever counts the server keeps, in its order
        items += [(f"queue.{k}", v) for k, v in state.queue.items()]
    items += cursor_items(groups)
    # `durable` is `durability == "fsync"` said again (topics/config.py rule 1): one line.
    config = state.config.to_dict()
    config.pop("durable", None)
    items += [(f"config.{k}", v) for k, v in config.items()]
    pairs(items, cli.out)


def put(cli: Session) -> None:
    config: dict[str, Any] = {}
    for item in cli.args.fields:
        key, eq, raw = item.partition("=")
        if not eq or not key:
            raise UsageError(f"expected FIELD=VALUE, got {item!r}")
        try:
            config[key] = ujson.loads(raw)
        except ValueError:
            config[key] = raw  # a bare word is a string: type=queue
    try:
        res = cli.client.put_topic(cli.args.topic, config)
    except TopicsError as exc:
        note_config_field(exc)  # ttl=… -> "did you mean ttl_ms?"
        raise
    if cli.json:
        cli.emit(res.to_dict())
    else:
        cli.out.write(f"{'created' if res.created else 'updated'} {res.topic}\n")


def rm(cli: Session) -> int:
    res = cli.client.delete_topic(cli.args.topic, if_empty=cli.args.if_empty)
    if cli.json:
        cli.emit(res.to_dict())
    elif res.deleted:
        removed = f" (routers removed: {', '.join(res.routers_removed)})"
        cli.out.write(f"deleted {res.topic}{removed if res.routers_removed else ''}\n")
    else:
        cli.err.write(f"topics: {res.topic}: no such topic (nothing deleted)\n")
    # Like `rm` of a missing file: a script must see that nothing was there.
    return EXIT_OK if res.deleted else EXIT_NOT_FOUND


def delete_records(cli: Session) -> None:
    match: object = None
    if cli.args.match is not None:
        op = "Glob" if cli.args.match.endswith("*") else "Eq"
        match = ["tag", op, cli.args.match]
    if cli.args.before_seq is None and match is None:
        raise UsageError("give --before-seq, --match, or both")
    res = cli.client.delete_records(cli.args.topic, before_seq=cli.args.before_seq, match=match)
    if cli.json:
        cli.emit(res.to_dict())
    else:
        cli.out.write(f"deleted {res.deleted} records; {res.count} remain in {res.topic}\n")


def health(cli: Session) -> None:
    obj = cli.client.health()
    obj.pop("performance", None)
    if cli.json:
        cli.emit(obj)
    else:
        pairs(list(obj.items()), cli.out)
