"""A consumer group on a log topic: the server keeps the group's position (a named cursor).

Handles every record of TOPIC after the group's cursor, appends each handled seq to
``--out`` and commits after each batch (``client.consume``: at least once; a batch cut
short by a crash is handled again, nothing is skipped). Stop it (or kill it), restart the
server, start it again: it goes on where the group's cursor stands.

Run: .venv/bin/python examples/consumer_group.py --url http://127.0.0.1:4000 \\
         --topic orders --group billing --out handled.txt --until-caught-up

``--pause-at SEQ`` stops inside the handler of that record (after appending it), which
the guide's test uses to kill the consumer in the middle of a batch.
"""

from __future__ import annotations

import argparse
import sys
import threading

import topics
from topics.types import Record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default="http://127.0.0.1:4000")
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--out", required=True, help="append each handled seq to this file")
    p.add_argument("--batch", type=int, default=10, help="records per read (and commit)")
    p.add_argument("--until-caught-up", action="store_true", help="exit once caught up")
    p.add_argument("--pause-at", type=int, help="block in the handler of this seq")
    args = p.parse_args(argv)

    with topics.Client(args.url) as client, open(args.out, "a", encoding="utf-8") as out:
        start = next((c.seq for c in client.list_cursors(args.topic) if c.cursor == args.group), 0)
        print(f"group {args.group} resumes after seq {start}", flush=True)

        def handle(rec: Record) -> None:
            out.write(f"{rec.seq}\n")
            out.flush()
            if rec.seq == args.pause_at:
                print(f"paused at {rec.seq}", flush=True)
                threading.Event().wait()  # until killed

        stats = client.consume(
            args.topic, args.group, handle, limit=args.batch, until_caught_up=args.until_caught_up
        )
        print(f"handled {stats.records} records, committed seq {stats.committed_seq}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
