"""The ``topics`` commands for routers, queues, scheduled jobs and dead letters."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import ujson

from topics.cli.filters import FilterSyntaxError, parse_time
from topics.cli.format import RawRecord, cut, pairs, short, table
from topics.cli.records import page_records
from topics.cli.session import EXIT_CONFLICT, EXIT_OK, Session, UsageError, duration_ms


def router_put(cli: Session) -> None:
    a = cli.args
    body: dict[str, Any] = {"source": a.source, "dest": a.dest}
    if a.filter is not None:
        body["filter"] = ["tag", "Glob" if a.filter.endswith("*") else "Eq", a.filter]
    for name in ("preserve_node", "preserve_tag", "create_dest", "allow_cycle"):
        if getattr(a, name) is not None:
            body[name] = getattr(a, name)
    if a.guarantee is not None:
        body["guarantee"] = a.guarantee
    res = cli.client.put_router(a.router or f"{a.source}->{a.dest}", body)
    if cli.json:
        cli.emit(res.to_dict())
    else:
        verb = "created" if res.created else "updated"
        cli.out.write(f"{verb} router {res.router}: {a.source} -> {a.dest}\n")


def router_get(cli: Session) -> None:
    info = cli.client.get_router(cli.args.router)
    if cli.json:
        cli.emit(info.to_dict())
    else:
        pairs(list(info.to_dict().items()), cli.out)


def router_ls(cli: Session) -> None:
    a = cli.args
    page = cli.client.list_routers(prefix=a.prefix, source=a.source, dest=a.dest, page_size=1000)
    routers = list(page.routers)
    while page.next_cursor is not None:
        page = cli.client.list_routers(
            prefix=a.prefix,
            source=a.source,
            dest=a.dest,
            page_size=1000,
            cursor=page.next_cursor,
        )
        routers += page.routers
    if cli.json:
        cli.emit({"routers": [r.to_dict() for r in routers]})
        return
    rows = [(r.router, r.source, r.dest, r.guarantee, r.forwarded_total) for r in routers]
    table(rows, ("ROUTER", "SOURCE", "DEST", "GUARANTEE", "FORWARDED"), cli.out)


def router_rm(cli: Session) -> None:
    res = cli.client.delete_router(cli.args.router)
    if cli.json:
        cli.emit(res.to_dict())
    else:
        what = "deleted" if res.deleted else "no such router (nothing deleted):"
        cli.out.write(f"{what} {res.router}\n")


def _leases(cli: Session) -> tuple[list[int], list[str] | None]:
    seqs: list[int] = []
    ids: list[str] = []
    for token in cli.args.seqs:
        seq, colon, lease = token.partition(":")
        if not seq.isdigit():
            raise UsageError(f"expected SEQ or SEQ:LEASE_ID, got {token!r}")
        seqs.append(int(seq))
        if colon:
            ids.append(lease)
    if ids and len(ids) != len(seqs):
        raise UsageError("give a lease id for every seq, or for none")
    return seqs, ids or None


def queue_claim(cli: Session) -> None:
    a = cli.args
    res = cli.client.claim(a.queue, node=a.node, max=a.max, lease_ms=a.lease_ms)
    if cli.json:
        cli.emit(res.to_dict())
        return
    rows = [
        (j.seq, j.lease_id, j.deliveries, cli.style.ts(j.deadline), short(j.data))
        for j in res.claimed
    ]
    table(rows, ("SEQ", "LEASE_ID", "DELIVERIES", "DEADLINE", "DATA"), cli.out)
    cli.err.write(f"claimed {res.count}; {res.ready} ready\n")


def queue_ack(cli: Session) -> int:
    seqs, ids = _leases(cli)
    res = cli.client.ack(cli.args.queue, node=cli.args.node, seqs=seqs, lease_ids=ids)
    return _lease_result(cli, res.to_dict(), "acked", res.acked, res.skipped)


def queue_nack(cli: Session) -> int:
    seqs, ids = _leases(cli)
    res = cli.client.nack(
        cli.args.queue, node=cli.args.node, seqs=seqs, delay_ms=cli.args.delay_ms,
        lease_ids=ids,
    )  # fmt: skip
    return _lease_result(cli, res.to_dict(), "nacked", res.nacked, res.skipped)


def queue_extend(cli: Session) -> int:
    seqs, ids = _leases(cli)
    res = cli.client.extend(
        cli.args.queue, node=cli.args.node, seqs=seqs, lease_ms=cli.args.lease_ms,
        lease_ids=ids,
    )  # fmt: skip
    return _lease_result(cli, res.to_dict(), "extended", res.extended, res.skipped)


def jobs_schedule(cli: Session) -> None:
    a = cli.args
    if a.at is not None and a.delay is not None:
        raise UsageError("give --at or --in, not both")
    deliver_at = delay_ms = None
    try:
        if a.at is not None:
            if re.fullmatch(r"\d+(ms|s|m|h|d)", a.at.strip()):
                raise UsageError(f"--at takes a time (RFC 3339 or epoch ms); use --in {a.at}")
            deliver_at = parse_time(a.at, 0)
        if a.delay is not None:
            delay_ms = duration_ms(a.delay)
    except FilterSyntaxError as exc:
        raise UsageError(str(exc)) from None
    data = a.data.encode()  # JSON text, sent verbatim (as write does)
    meta = a.meta.encode() if a.meta is not None else None
    res = cli.client.schedule(
        a.queue, data, deliver_at=deliver_at, delay_ms=delay_ms, dedupe_key=a.dedupe_key,
        dedupe=a.dedupe, dedupe_ms=a.dedupe_ms, replace=True if a.replace else None,
        tag=a.tag, meta=meta,
    )  # fmt: skip
    if cli.json:
        cli.emit(res.to_dict())
        return
    outcome = res.dedupe[0] if res.dedupe else None
    if outcome is not None and outcome["outcome"] == "duplicate":
        cli.out.write(
            f"not added: job {outcome['seq']} holds dedupe key {outcome['dedupe_key']!r}\n"
        )
        return
    when = "at once" if deliver_at is None and not delay_ms else (
        f"in {delay_ms} ms" if delay_ms else f"at {deliver_at}"
    )  # fmt: skip
    note = f" (replaced job {outcome['replaced_seq']})" if outcome is not None else ""
    cli.out.write(f"job {res.first_seq} in {a.queue}, claimable {when}{note}\n")


def dlq_redrive(cli: Session) -> None:
    a = cli.args
    where: dict[str, Any] = {}
    if a.origin is not None:
        where["origin"] = a.origin
    if a.match is not None:
        where["match"] = _tag_match(a.match)
    res = cli.client.redrive(a.dlq, to=a.to, max=a.max, where=where or None)
    if cli.json:
        cli.emit(res.to_dict())
        return
    for batch in res.batches:
        cli.out.write(
            f"moved {batch['count']} to {batch['to']} "
            f"(seqs {batch['first_seq']}..{batch['last_seq']})\n"
        )
    skipped = f"; {res.skipped} without a queue to go to" if res.skipped else ""
    cli.out.write(f"moved {res.moved}{skipped}; {res.remaining} left in {a.dlq}\n")


def _tag_match(pattern: str) -> list[str]:
    return ["tag", "Glob" if pattern.endswith("*") else "Eq", pattern]


def _dlq_where(origin: str | None, match: str | None) -> object:
    """``dlq ls --origin/--match`` as a server-side ``where`` (the stamps are meta members)."""
    tests: list[object] = []
    if origin is not None:
        tests.append(["meta.$dead_letter_from", "Eq", origin])
    if match is not None:
        tests.append(_tag_match(match))
    return None if not tests else tests[0] if len(tests) == 1 else ["and", tests]


def _dlq_jobs(cli: Session) -> Iterator[RawRecord]:
    a = cli.args
    where, cursor, shown = _dlq_where(a.origin, a.match), 0, 0
    while True:
        page = cli.client.diff(a.dlq, from_seq=cursor, include_tags=True, where=where)
        if page.tombstone is not None:
            cli.warn_tombstone(a.dlq, page.tombstone)
        for rec in page_records(page):
            if a.max is not None and shown >= a.max:
                return
            yield rec
            shown += 1
        cursor = page.next_from_seq
        if page.caught_up:
            return


def _stamps(rec: RawRecord) -> list[object]:
    """Where a dead-lettered job came from: the stamps the queue added to its meta
    (docs/QUEUES.md, "Dead letters"); ``None`` (shown as -) when a record has none."""
    try:
        meta = ujson.loads(rec.meta_json) if rec.meta_json is not None else {}
    except ValueError:
        meta = {}
    if not isinstance(meta, dict):
        meta = {}
    return [meta.get(f"$dead_letter_{k}") for k in ("from", "src_seq", "deliveries")]


def dlq_ls(cli: Session) -> None:
    if cli.json:  # records as `read --json` prints them, the stamps in their meta
        for rec in _dlq_jobs(cli):
            cli.out.write(rec.json_line() + "\n")
        return
    rows = [
        [rec.seq, cli.style.ts(rec.ts), *_stamps(rec), rec.tag, cut(rec.data_json.decode())]
        for rec in _dlq_jobs(cli)
    ]
    header = ("SEQ", "TIME", "FROM", "SRC_SEQ", "DELIVERIES", "TAG", "DATA")
    table(rows, header, cli.out)


def _lease_result(
    cli: Session, obj: dict[str, Any], verb: str, done: int, skipped: list[int]
) -> int:
    """What an ack, nack or extend did; a seq it could not settle fails the command (exit 4),
    named on stderr. The server only says the lease was not held by ``--node``, so every way
    that happens is named: an expired lease is as likely as a wrong node."""
    if cli.json:
        cli.emit(obj)
    else:
        cli.out.write(f"{verb} {done}\n")
    if not skipped:
        return EXIT_OK
    which = ("seq " if len(skipped) == 1 else "seqs ") + " ".join(map(str, skipped))
    them = "it" if len(skipped) == 1 else "them"
    cli.err.write(
        f"topics: not {verb}: {which} of {cli.args.queue}: no lease of node {cli.args.node} "
        f"holds {them} (never claimed, already settled, or its lease expired or went to "
        "another worker)\n"
    )
    return EXIT_CONFLICT
