"""The connection deadlines ``topics-server`` reads from its environment at start."""

from __future__ import annotations

import pytest

from topics.frontends.http.connection import CLOSE_HANDSHAKE_TIMEOUT_S
from topics.frontends.server import ConfigError, ServerConfig, _help_epilog, _parser, load_config

DEADLINES = (
    "TOPICS_HTTP_KEEP_ALIVE_MS",
    "TOPICS_HTTP_HEAD_TIMEOUT_MS",
    "TOPICS_HTTP_BODY_TIMEOUT_MS",
    "TOPICS_WS_CLOSE_TIMEOUT_MS",
)


def _config(env: dict[str, str]) -> ServerConfig:
    return load_config(_parser().parse_args(["--memory"]), env)


def test_the_websocket_close_deadline_defaults_to_the_guards_constant() -> None:
    assert _config({}).ws_close_timeout_s == CLOSE_HANDSHAKE_TIMEOUT_S


@pytest.mark.parametrize(("raw", "seconds"), [("1000", 1.0), (" 250 ", 0.25), ("", 5.0)])
def test_the_websocket_close_deadline_is_read_in_milliseconds(raw: str, seconds: float) -> None:
    assert _config({"TOPICS_WS_CLOSE_TIMEOUT_MS": raw}).ws_close_timeout_s == seconds


@pytest.mark.parametrize("name", DEADLINES)
@pytest.mark.parametrize(
    ("raw", "complaint"),
    [("soon", "is not a number"), ("-5", "must not be negative"), ("0", "greater than 0")],
)
def test_a_nonsense_deadline_refuses_to_start(name: str, raw: str, complaint: str) -> None:
    with pytest.raises(ConfigError, match=complaint) as refused:
        _config({name: raw})
    assert name in str(refused.value)


def test_help_lists_every_deadline() -> None:
    epilog = _help_epilog()
    for name in DEADLINES:
        assert name in epilog
