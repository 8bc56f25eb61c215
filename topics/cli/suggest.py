""" "Did you mean …?" for the ``topics`` command line, and the strict parser it hangs on.

Rules:
1. No abbreviations: every parser and subparser is a :class:`Parser`, built with
   ``allow_abbrev=False``, so ``--form`` is an unknown flag, never a silent ``--format``.
   (A prefix that is unique today would change meaning the day a flag is added.)
2. An unknown flag is a usage error (exit 2) raised by the subcommand it was given to, with
   the closest flag that subcommand has (``difflib.get_close_matches``), if one is close.
3. A topic config field the server refuses as unknown gets the closest known field as a
   note on the error (``ttl`` -> ``ttl_ms``). The server decides what is known (a newer one
   may know more fields); the CLI only suggests, from :class:`topics.config.TopicConfig`.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
from collections.abc import Iterable, Sequence
from typing import Any

from topics.config import TopicConfig
from topics.errors import InvalidRequestError, TopicsError

__all__ = ["Parser", "closest", "note_config_field", "parse_command_line"]

# A negative number is a value (``--from -10``), not a flag to correct.
_NUMBER = re.compile(r"-\d+(\.\d*)?")


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate nearest to ``word``, if any is near enough to be a typo of it."""
    found = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


class Parser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` without abbreviations (rule 1); subparsers are
    made of the same class (argparse builds them as ``type(parent)``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)


def _chosen(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost subparser the command line selected (``topics queue ack`` -> ack's)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub = action.choices.get(getattr(ns, action.dest, None) or "")
            if sub is not None:
                return _chosen(sub, ns)
    return parser


def _unknown(extra: Sequence[str], parser: argparse.ArgumentParser) -> str:
    flags = [s for a in parser._actions for s in a.option_strings if s.startswith("--")]
    message = f"unrecognized arguments: {' '.join(extra)}"
    for word in extra:
        if not word.startswith("-") or _NUMBER.fullmatch(word):
            continue
        near = closest(word.partition("=")[0], flags)
        if near is not None:
            return f"{message} (did you mean {near}?)"
    return message


def parse_command_line(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> Any:
    """``parser.parse_args(argv)``, with an unknown flag reported by the subcommand it was
    given to, with a suggestion (rule 2); exits 2 on a usage error, as argparse does."""
    ns, extra = parser.parse_known_args(argv)
    if extra:
        chosen = _chosen(parser, ns)
        chosen.error(_unknown(extra, chosen))
    return ns


_CONFIG_FIELDS = [f.name for f in dataclasses.fields(TopicConfig)] + ["durable"]


def note_config_field(exc: TopicsError) -> None:
    """Rule 3: add "did you mean ttl_ms?" to the server's refusal of ``config.ttl``."""
    field = (exc.detail or {}).get("field")
    if not isinstance(exc, InvalidRequestError) or not isinstance(field, str):
        return
    name = field.removeprefix("config.")
    if name == field or name in _CONFIG_FIELDS:
        return  # not a config field, or one we know (refused for its value)
    near = closest(name, _CONFIG_FIELDS)
    if near is not None:
        exc.add_note(f"did you mean {near}?")
