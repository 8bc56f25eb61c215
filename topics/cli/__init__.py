"""``topics``: the command line of a topics server (every call goes through ``topics.Client``).

::

    topics ls                          topics stat orders
    topics put jobs type=queue lease_ms=60000
    topics write orders < events.jsonl topics read orders --from 0
    topics read pay -n 10              topics tail orders audit
    topics rm orders                   topics cursors ls|lag|reset|rm orders [GROUP]
    topics router put|get|ls|rm ...    topics queue claim|ack|nack|extend ...
    topics jobs schedule jobs '{"n": 1}' --in 5m --dedupe-key n1
    topics dlq ls jobs.dlq             topics dlq redrive jobs.dlq [--to jobs] [--origin jobs]
    topics verify ./data               (no server: reads the data directory, topics/cli/verify_cmd.py)
    topics backup nightly.tar          topics restore nightly.tar ./data   (offline)

Global options, before or after the subcommand (topics/cli/args.py): ``--url`` (default
``$TOPICS_URL``, else ``http://127.0.0.1:4000``; ``host:port`` and ``:port`` too),
``--api-key`` (default ``$TOPICS_API_KEY``), ``--json`` (machine-readable output: one JSON
document, or JSON lines for ``read``/``tail``), ``--timeout``, ``--raw-ts``, ``--color``,
``--version``. How records are shown (verbatim data, ISO times, colour) is
topics/cli/format.py; bad input lines, topics/cli/input.py.

Rules:
1. Output for people is a table or ``key  value`` lines on stdout; ``--json`` prints the
   API's own shapes (results' ``to_dict()``), records as one JSON object per line.
2. Loss is never silent: a tombstone is reported on stderr (a read from the start once per
   terminal session, topics/cli/losses.py; not at all with ``--quiet``), and in ``--json``
   mode always as a ``{"tombstone": {...}}`` line among the records.
3. Errors go to stderr as ``topics: <code>: <message> (request id <id>)``; with ``--json``
   the error object is also printed on stdout. Exit codes: 0 ok, 1 other server error,
   2 usage, 3 not found, 4 conflict (also an ack/nack/extend that found a lease not held),
   5 throttled/unavailable (after retries), 6 cannot reach the server, 130 interrupted
   (``verify`` has its own: 0 clean, 1 damage found, 2 could not run).
   Flags are never abbreviated; an unknown one is a usage error naming the closest flag
   (topics/cli/suggest.py).
4. ``write`` reads JSON lines (stdin or a file) and sends each line's bytes verbatim as a
   record's ``data`` (``--records``: each line is a whole record object, its ``data`` and
   ``meta`` still verbatim), in batches of ``--batch`` records (and at most
   ``--batch-bytes``), each batch one idempotent write; a progress bar on stderr when it
   is a terminal (``--progress`` forces it).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from topics.cli.format import dumps
from topics.cli.input import BadLine
from topics.cli.parser import build_parser
from topics.cli.session import (
    EXIT_CONFLICT,
    EXIT_CONNECTION,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    Session,
    UsageError,
)
from topics.cli.suggest import parse_command_line
from topics.client import Client, ClientConnectionError, RetryPolicy
from topics.errors import ConflictError, NotFoundError, TopicsError

__all__ = ["build_parser", "main"]


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
    notes = "".join(f"; {note}" for note in getattr(exc, "__notes__", ()))  # did you mean
    sys.stderr.write(f"topics: {exc.code}: {exc.message}{notes}{where}\n")
    if as_json:
        obj = exc.to_dict()
        if rid:
            obj["request_id"] = rid
        sys.stdout.write(dumps({"error": obj}) + "\n")
    return exit_code(exc)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``topics`` command line; returns the exit code (rule 3)."""
    args = parse_command_line(build_parser(), argv)
    local: Callable[[argparse.Namespace], int] | None = getattr(args, "local", None)
    if local is not None:  # reads files on this machine (verify): no server, no client
        try:
            return local(args)
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED
    run: Callable[[Session], int | None] = args.run
    retry = RetryPolicy(timeout_s=max(args.timeout, 1.0))
    try:
        with Client(args.url, args.api_key, timeout_s=args.timeout, retry=retry) as client:
            code = run(Session(args, client))
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
