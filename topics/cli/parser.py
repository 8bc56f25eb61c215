"""The ``topics`` argument parser: every subcommand, its options and the function that runs
it (``run``); global options come from topics/cli/args.py."""

from __future__ import annotations

import argparse

from topics.cli import backup_cmds, cursors, records, verify_cmd, work
from topics.cli import topic_cmds as topics_cmds
from topics.cli.args import add_global_options
from topics.cli.suggest import Parser


def _bool_flag(p: argparse.ArgumentParser, name: str, help_on: str) -> None:
    dest = name.replace("-", "_")
    p.add_argument(f"--{name}", dest=dest, action="store_true", default=None, help=help_on)
    p.add_argument(f"--no-{name}", dest=dest, action="store_false", help=argparse.SUPPRESS)


def _quiet(p: argparse.ArgumentParser) -> None:
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no LOSS lines on stderr (--json still prints the tombstone lines)")  # fmt: skip


def _bound_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--since", metavar="WHEN",
                   help="start at records written since: 10m, 2h, 1d, RFC 3339 or epoch ms")  # fmt: skip
    p.add_argument("--until", metavar="WHEN", help="end after records written until WHEN")
    p.add_argument("--to", dest="to_seq", type=int, metavar="SEQ", help="end after this seq")
    p.add_argument("--where", metavar="FILTER",
                   help="server-side filter, e.g. 'kind=refund and amount>10' (docs/CLI.md)")  # fmt: skip


def _cursor_commands(sub: argparse._SubParsersAction[Parser]) -> None:
    """``topics cursors ls|lag|reset|rm``: consumer groups (topics/cli/cursors.py)."""
    group = sub.add_parser("cursors", help="consumer groups (named cursors): ls, lag, reset, rm")
    csub = group.add_subparsers(dest="cursors_command", required=True, metavar="COMMAND")
    for name, run, what in (("ls", cursors.ls, "list a topic's groups: seq, head, lag"),
                            ("lag", cursors.lag, "how far behind the head (one group: a number)")):  # fmt: skip
        p = csub.add_parser(name, help=what)
        p.add_argument("topic")
        p.add_argument("group", nargs="?", help="only this group")
        p.set_defaults(run=run)
    p = csub.add_parser("reset", help="move a group's cursor (creates it if new)")
    p.add_argument("topic")
    p.add_argument("group")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="before the first record kept")
    to.add_argument("--to-latest", action="store_true", help="to the head: nothing left")
    to.add_argument("--to", dest="to_seq", type=int, metavar="SEQ",
                    help="to this seq; -N: N before the head")  # fmt: skip
    to.add_argument("--shift-by", type=int, metavar="N",
                    help="N forward (negative: back) from where it is")  # fmt: skip
    to.add_argument("--to-time", metavar="WHEN",
                    help="before the first record written at or after WHEN (10m, RFC 3339, ms)")  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="say where, commit nothing")
    p.set_defaults(run=cursors.reset)
    p = csub.add_parser("rm", help="forget a group's cursor")
    p.add_argument("topic")
    p.add_argument("group")
    p.set_defaults(run=cursors.rm)


def build_parser() -> argparse.ArgumentParser:
    """The ``topics`` parser.

    Kept whole: a declarative table of subcommands, in the order ``topics --help`` lists them.
    """
    parser = Parser(  # no abbreviations, here and in every subparser (_cli_suggest rule 1)
        prog="topics",
        description="Talk to a topics server (the /v0 HTTP API); `verify` checks a data "
        "directory on this machine.",
        epilog="exit codes: 0 ok, 1 server error, 2 usage, 3 not found, 4 conflict (or a lease "
        "not held), 5 throttled/unavailable, 6 cannot connect, 130 interrupted; verify: 0 "
        "clean, 1 damage found, 2 could not run",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("ls", help="list topics")
    p.add_argument("--prefix")
    p.set_defaults(run=topics_cmds.ls)
    p = sub.add_parser("stat", help="show a topic's state and config")
    p.add_argument("topic")
    p.set_defaults(run=topics_cmds.stat)
    p = sub.add_parser("put", help="create or configure a topic: FIELD=VALUE ...")
    p.add_argument("topic")
    p.add_argument("fields", nargs="*", metavar="FIELD=VALUE", help="e.g. type=queue ttl_ms=60000")
    p.set_defaults(run=topics_cmds.put)
    p = sub.add_parser("rm", help="delete a topic and everything in it")
    p.add_argument("topic")
    p.add_argument("--if-empty", action="store_true", help="only if it holds no records")
    p.set_defaults(run=topics_cmds.rm)
    p = sub.add_parser("delete-records", help="delete records by seq bound and/or tag")
    p.add_argument("topic")
    p.add_argument("--before-seq", type=int)
    p.add_argument("--match", help="a tag, or a prefix ending in * (e.g. user-7:*)")
    p.set_defaults(run=topics_cmds.delete_records)

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
    p.set_defaults(run=records.write)
    p = sub.add_parser("read", help="print records after a seq")
    p.add_argument("topic")
    p.add_argument("--from", dest="from_seq", type=int, metavar="SEQ",
                   help="start after this seq (default 0: the start); -N: N before the head")  # fmt: skip
    p.add_argument("-n", "--last", type=int, metavar="N", help="only the last N records")
    p.add_argument("--limit", type=int, default=1000, help="records per request")
    p.add_argument("--max", type=int, help="stop after this many records")
    _bound_options(p)
    p.add_argument("--format", choices=("records", "cloudevents"), default="records",
                   help="cloudevents: print each record as a CloudEvents 1.0 JSON event")  # fmt: skip
    _quiet(p)
    p.set_defaults(run=records.read)
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
    p.add_argument("--from", dest="from_seq", type=int, metavar="SEQ",
                   help="start after this seq (default: new); -N: N before the head")  # fmt: skip
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
    _quiet(p)
    p.set_defaults(run=records.tail)
    p = sub.add_parser("health", help="server liveness")
    p.set_defaults(run=topics_cmds.health)
    p = sub.add_parser(
        "verify",
        help="check a data directory's checksums, indexes and manifests (read-only, on this "
        "machine, safe beside a running server)",
        description="Check every CRC, index and manifest of DATA_DIR without a server. Exit "
        "0 clean (advice findings are printed), 1 damage found, 2 could not run.",
    )
    p.add_argument("data_dir", metavar="DATA_DIR", help="the server's data directory")
    p.set_defaults(local=verify_cmd.run)
    p = sub.add_parser("backup", help="save an online backup of the server's data (admin)")
    p.add_argument("file", metavar="FILE", help="the tar to write (- for stdout)")
    p.set_defaults(run=backup_cmds.backup_cmd)
    p = sub.add_parser("restore", help="restore a backup into a data directory (offline)")
    p.add_argument("file", metavar="FILE", help="a tar saved by topics backup")
    p.add_argument("data_dir", metavar="DATA_DIR", help="the directory a server will open")
    p.add_argument("--force", action="store_true",
                   help="replace the data of a non-empty DATA_DIR")  # fmt: skip
    p.set_defaults(run=backup_cmds.restore_cmd)

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
    p.set_defaults(run=work.router_put)
    p = rsub.add_parser("get", help="show a router")
    p.add_argument("router")
    p.set_defaults(run=work.router_get)
    p = rsub.add_parser("ls", help="list routers")
    p.add_argument("--prefix")
    p.add_argument("--source")
    p.add_argument("--dest")
    p.set_defaults(run=work.router_ls)
    p = rsub.add_parser("rm", help="delete a router")
    p.add_argument("router")
    p.set_defaults(run=work.router_rm)

    _cursor_commands(sub)

    queue = sub.add_parser("queue", help="queues: claim, ack, nack, extend")
    qsub = queue.add_subparsers(dest="queue_command", required=True, metavar="COMMAND")
    for name, run in (("claim", work.queue_claim), ("ack", work.queue_ack),
                      ("nack", work.queue_nack), ("extend", work.queue_extend)):  # fmt: skip
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
    p.set_defaults(run=work.jobs_schedule)

    dlq = sub.add_parser("dlq", help="dead-letter topics: ls, redrive")
    dsub = dlq.add_subparsers(dest="dlq_command", required=True, metavar="COMMAND")
    p = dsub.add_parser("ls", help="list dead-lettered jobs with the queue each came from")
    p.add_argument("dlq", help="the dead-letter topic")
    p.add_argument("--origin", help="only jobs dead-lettered from this queue")
    p.add_argument("--match", metavar="TAG", help="only jobs with this tag (PREFIX* for a prefix)")
    p.add_argument("--max", type=int, help="list at most N jobs")
    p.set_defaults(run=work.dlq_ls)
    p = dsub.add_parser("redrive", help="move dead-lettered jobs back to their queue (admin)")
    p.add_argument("dlq", help="the dead-letter topic")
    p.add_argument("--to", help="this queue instead of each job's origin")
    p.add_argument("--max", type=int, help="jobs to move at most (default 1000)")
    p.add_argument("--origin", help="only jobs dead-lettered from this queue")
    p.add_argument("--match", metavar="TAG", help="only jobs with this tag (PREFIX* for a prefix)")
    p.set_defaults(run=work.dlq_redrive)
    add_global_options(parser)  # accepted before or after the subcommand
    return parser
