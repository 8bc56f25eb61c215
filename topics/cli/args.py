"""The ``topics`` command line's global options, accepted before or after any subcommand.

``topics ls --json`` and ``topics --json ls`` mean the same (as with kcat, nats, gh): each
global option is declared on the top parser with its default and again on every subparser
with ``default=SUPPRESS``, so a flag given after the subcommand overrides the top one and an
absent one leaves it alone (argparse copies only what a subparser parsed).

``--url`` takes ``host:port`` (``localhost:4854``), ``:port`` (loopback) or a full URL.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

from topics import __version__

__all__ = ["DEFAULT_URL", "add_global_options", "server_url"]

DEFAULT_URL = "http://127.0.0.1:4000"


def server_url(value: str) -> str:
    """``host:port``, ``:port`` or ``host`` shorthand for an ``http://`` URL."""
    value = value.strip()
    if not value:
        raise argparse.ArgumentTypeError("the server URL is empty")
    if "://" in value:
        return value.rstrip("/")
    if value.startswith(":"):
        value = "127.0.0.1" + value
    if value.isdigit():  # a bare port
        value = f"127.0.0.1:{value}"
    return "http://" + value.rstrip("/")


def _declare(p: argparse.ArgumentParser, top: bool) -> None:
    def default(value: object) -> object:
        return value if top else argparse.SUPPRESS

    env_url = os.environ.get("TOPICS_URL", "").strip() or DEFAULT_URL
    p.add_argument(
        "--url",
        type=server_url,
        default=default(server_url(env_url)),
        help=f"server: URL, host:port or :port (default $TOPICS_URL or {DEFAULT_URL})",
    )
    p.add_argument(
        "--api-key",
        default=default(os.environ.get("TOPICS_API_KEY")),
        help="bearer key (default $TOPICS_API_KEY)",
    )
    p.add_argument(
        "--json", action="store_true", default=default(False), help="machine-readable output"
    )
    p.add_argument(
        "--timeout", type=float, default=default(30.0), help="seconds per request (default 30)"
    )
    p.add_argument(
        "--raw-ts",
        action="store_true",
        default=default(False),
        help="times as milliseconds since the epoch (default: ISO 8601 UTC)",
    )
    p.add_argument(
        "--color",
        "--colour",
        dest="color",
        choices=("auto", "always", "never"),
        default=default("auto"),
        help="colour output (default auto: on a terminal, unless $NO_COLOR is set)",
    )
    p.add_argument("--version", action="version", version=f"topics {__version__} (topics-engine)")


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases share a parser
                yield sub
                yield from _subparsers(sub)


def add_global_options(parser: argparse.ArgumentParser) -> None:
    """Declare the global options on ``parser`` and every subparser below it; call it once
    the subcommands exist."""
    _declare(parser, top=True)
    for sub in _subparsers(parser):
        _declare(sub, top=False)
