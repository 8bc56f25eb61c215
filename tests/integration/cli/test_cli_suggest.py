"""No abbreviated flags, and "did you mean" for unknown flags and config fields (issue 34)."""

from __future__ import annotations

import argparse
import json

import pytest

from topics.cli import build_parser
from topics.cli.args import _subparsers

from .conftest import Run
from .test_cli import name, ok


def test_no_parser_takes_abbreviations() -> None:
    parser = build_parser()
    every: list[argparse.ArgumentParser] = [parser, *_subparsers(parser)]
    assert len(every) > 20
    assert all(p.allow_abbrev is False for p in every)


@pytest.mark.cli_process
def test_an_abbreviated_flag_is_refused_with_the_flag_it_looks_like(topics_cli: Run) -> None:
    t = name("abbrev")
    ok(topics_cli("write", t, input="1\n"))
    form = topics_cli("read", t, "--form", "cloudevents")
    assert (form.returncode, form.stdout) == (2, "")
    assert "unrecognized arguments: --form cloudevents (did you mean --format?)" in form.stderr
    assert "usage: topics read" in form.stderr  # the subcommand's own usage
    pre = topics_cli("ls", "--pre", t)
    assert pre.returncode == 2
    assert "(did you mean --prefix?)" in pre.stderr
    glob = topics_cli("queue", "ack", t, "--node", "w", "1", "--jsno")
    assert glob.returncode == 2
    assert "(did you mean --json?)" in glob.stderr
    eq = topics_cli("read", t, "--limt=5")
    assert "(did you mean --limit?)" in eq.stderr
    far = topics_cli("read", t, "--zzzzzz")
    assert far.returncode == 2
    assert "did you mean" not in far.stderr


@pytest.mark.cli_process
def test_an_unknown_config_field_is_refused_with_the_field_it_looks_like(
    topics_cli: Run,
) -> None:
    t = name("cfg")
    ok(topics_cli("put", t, "cap_records=5"))
    typo = topics_cli("put", t, "ttl=60000")
    assert typo.returncode == 1
    assert typo.stderr.startswith(
        "topics: invalid_request: config.ttl: unknown config field; did you mean ttl_ms?"
    ), typo.stderr
    as_json = topics_cli("--json", "put", t, "cap_record=1")
    assert json.loads(as_json.stdout)["error"]["code"] == "invalid_request"
    assert "did you mean cap_records?" in as_json.stderr
    unlike = topics_cli("put", t, "zzzz=1")
    assert unlike.returncode == 1
    assert "did you mean" not in unlike.stderr
    # Nothing was changed by the refused puts.
    config = json.loads(ok(topics_cli("--json", "stat", t)))["config"]
    assert (config["ttl_ms"], config["cap_records"]) == (0, 5)
