"""Every declared option of a write, a diff and a watch is on every surface that should
carry it (topics/wire/options.py rule 3; issue 29, item 4).

For each option of :data:`TABLES`: the Engine method's signature (and the sync facade's)
has its keyword (a watched topic's options: the Engine takes them in the ``topics`` map);
the HTTP route and the WebSocket command accept it and hand it to the Engine; the client
method sends it; the OpenAPI request schemas carry it with the declared description; and
the ``topics`` CLI has its flag, or the declaration says why not. A surface that lacks an
option fails here, whichever it is.
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable
from typing import Any

import pytest
import ujson

import topics
from topics.cli.parser import build_parser
from topics.client._api import ClientAPI
from topics.client._watch_state import WatchState
from topics.engine import Engine
from topics.errors import InvalidRequestError, TopicsError
from topics.frontends.http import ROUTE_MODULES
from topics.frontends.http.openapi import build_document
from topics.frontends.inproc import SyncEngine
from topics.wire.options import (
    DIFF_OPTIONS,
    WATCH_OPTIONS,
    WATCH_TOPIC_OPTIONS,
    WRITE_OPTIONS,
    Option,
    Options,
)

from .conftest import InProc
from .test_ws import ws_client

TABLES = (WRITE_OPTIONS, DIFF_OPTIONS, WATCH_OPTIONS, WATCH_TOPIC_OPTIONS)
#: The request schema of each table in the OpenAPI document, and its WebSocket command.
SCHEMAS = {
    "write": ("WriteRequest", "publish"),
    "diff": ("DiffRequest", None),
    "watch": ("WatchRequest", "subscribe"),
    "watch topic": ("WatchTopicOptions", "subscribe"),
}
#: A value of each ``components.schemas`` an option refers to.
REF_PROBES: dict[str, object] = {
    "NodeId": "n1",
    "NodeFilter": "n1",
    "TopicConfigInput": {},
    "CursorName": "c1",
    "WatchPrefixes": ["p."],
    "Where": "kind = 'a'",
}


def _cases(*tables: Options, where: Callable[[Option], bool] = lambda o: True) -> list[Any]:
    """(table, option) of ``tables`` for which ``where`` holds, as test parameters."""
    return [
        pytest.param(table, option, id=f"{table.op}.{option.name}")
        for table in tables
        for option in table.options
        if where(option)
    ]


def probe(option: Option) -> object:
    """A value of ``option`` that differs from its default (what a surface must pass on)."""
    schema = option.schema
    name = schema.get("$ref", "").rpartition("/")[2] or next(
        (s["$ref"].rpartition("/")[2] for s in schema.get("anyOf", ()) if "$ref" in s), ""
    )
    if name:
        return REF_PROBES[name]
    if "enum" in schema:
        return [v for v in schema["enum"] if v is not None][-1]
    kind = schema["type"]
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "boolean":
        return not schema.get("default", False)
    return 7 if kind == "integer" else "p1"


class Spy:
    """Stands in for one Engine method: records its call and refuses it."""

    def __init__(self) -> None:
        self.args: tuple[Any, ...] = ()
        self.kwargs: dict[str, Any] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.args, self.kwargs = args, kwargs
        raise InvalidRequestError("spied")


class AsyncSpy(Spy):
    async def __call__(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return Spy.__call__(self, *args, **kwargs)


# -- the declaration itself --------------------------------------------------------------


@pytest.mark.parametrize(("table", "option"), _cases(*TABLES))
def test_each_option_is_described_and_says_why_a_surface_lacks_it(
    table: Options, option: Option
) -> None:
    assert option.description.strip()
    if option.engine is None:
        assert option.no_engine, "say why the Engine does not take it (no_engine=...)"
    if option.cli is None:
        assert option.no_cli, "give it a CLI flag or say why not (no_cli=...)"
    else:
        assert not option.no_cli


# -- the Engine ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "option"),
    _cases(WRITE_OPTIONS, DIFF_OPTIONS, WATCH_OPTIONS, where=lambda o: o.engine is not None),
)
def test_the_engine_method_takes_each_option(table: Options, option: Option) -> None:
    assert table.engine is not None
    assert option.engine is not None
    # The sync facade forwards write and diff with the Engine's signature (inproc rule 4);
    # it has no watch.
    for api in (Engine, SyncEngine) if table.op in ("write", "diff") else (Engine,):
        assert option.engine in inspect.signature(getattr(api, table.engine)).parameters
        if option.ws and table.engine_ws is not None:
            assert option.engine in inspect.signature(getattr(api, table.engine_ws)).parameters


@pytest.mark.parametrize(("table", "option"), _cases(WATCH_TOPIC_OPTIONS))
async def test_the_engine_takes_each_watched_topic_option_in_the_topics_map(
    inproc: InProc, table: Options, option: Option
) -> None:
    await inproc.engine.put_topic("t")
    problem = ""
    try:
        await inproc.engine.create_watch({"t": {option.name: probe(option)}})
    except TopicsError as exc:  # a value it refuses is fine; an unknown option is not
        problem = exc.message
    assert "is not a per-topic option" not in problem, problem


# -- HTTP and WebSocket: accepted, and handed to the Engine --------------------------------


def _handed(table: Options, option: Option, spy: Spy) -> object:
    """What the Engine got for ``option``."""
    if table is WATCH_TOPIC_OPTIONS:
        topics = next(a for a in spy.args if isinstance(a, dict))  # the topics map
        return topics["t"].get(option.name)
    assert option.engine is not None
    return spy.kwargs.get(option.engine)


_HTTP = {
    "write": ("write", "/v0/topics/t", {"records": [{"data": 1}]}),
    "diff": ("diff", "/v0/topics/t/diff", {}),
    "watch": ("create_watch", "/v0/watch", {"topics": {"t": {}}}),
    "watch topic": ("create_watch", "/v0/watch", {}),
}


@pytest.mark.parametrize(("table", "option"), _cases(*TABLES))
async def test_the_http_route_accepts_each_option_and_hands_it_on(
    inproc: InProc, monkeypatch: pytest.MonkeyPatch, table: Options, option: Option
) -> None:
    method, path, body = _HTTP[table.op]
    value = probe(option)
    body = (
        {**body, "topics": {"t": {option.name: value}}}
        if table is WATCH_TOPIC_OPTIONS
        else {
            **body,
            option.name: value,
        }
    )
    spy = AsyncSpy()
    monkeypatch.setattr(inproc.engine, method, spy)
    async with inproc.client() as http:
        resp = await http.post(path, json=body)
    assert resp.json()["error"]["message"] == "spied", resp.text
    if option.engine is not None:
        assert _handed(table, option, spy) == value


_WS = {
    "write": ("write", {"op": "publish", "topic": "t", "records": [{"data": 1}]}),
    "watch": ("watch_subscribe", {"op": "subscribe", "topic": "t"}),
    "watch topic": ("watch_subscribe", {"op": "subscribe", "topic": "t"}),
}


@pytest.mark.parametrize(
    ("table", "option"),
    _cases(WRITE_OPTIONS, WATCH_OPTIONS, WATCH_TOPIC_OPTIONS, where=lambda o: o.ws),
)
async def test_the_websocket_command_accepts_each_option_and_hands_it_on(
    inproc: InProc, monkeypatch: pytest.MonkeyPatch, table: Options, option: Option
) -> None:
    method, command = _WS[table.op]
    value = probe(option)
    spy: Spy = AsyncSpy() if method == "write" else Spy()
    monkeypatch.setattr(inproc.engine, method, spy)
    async with ws_client(inproc) as ws:
        await ws.send({**command, option.name: value})
        frame = await ws.recv()
    assert (frame["op"], frame["message"]) == ("error", "spied"), frame
    if option.engine is not None:
        assert _handed(table, option, spy) == value


# -- the client ------------------------------------------------------------------------------


@pytest.mark.parametrize(("table", "option"), _cases(*TABLES))
def test_the_client_method_sends_each_option(table: Options, option: Option) -> None:
    assert option.client is not None, "every option is on the client"
    client = topics.Client("http://127.0.0.1:9")
    build = ClientAPI.__dict__[table.client].build
    value = probe(option)
    own = inspect.signature(build).parameters.get(option.client)
    # Left out, a member is the server's default: the schema's, else the client's own.
    default = option.schema.get("default", None if own is None else own.default)
    for asked in (value, not value) if isinstance(value, bool) else (value,):
        body = _client_body(table, build, client, option.client, asked)
        sent = body.get(option.name, default)
        assert sent == asked or (option.name in body and isinstance(asked, list)), body


def _client_body(
    table: Options, build: Callable[..., Any], client: topics.Client, kwarg: str, value: object
) -> dict[str, Any]:
    """The JSON body the client method builds for ``kwarg=value``."""
    if table is WRITE_OPTIONS:
        out: dict[str, Any] = ujson.loads(build(client, "t", [{"data": 1}], **{kwarg: value}).body)
    elif table is DIFF_OPTIONS:
        out = ujson.loads(build(client, "t", **{kwarg: value}).body)
    elif table is WATCH_OPTIONS:
        plan = build(client, "t", **{kwarg: value})
        out = ujson.loads(WatchState(plan.spec, None).create_call().body)
    else:
        plan = build(client, {"t": {kwarg: value}})
        out = ujson.loads(WatchState(plan.spec, None).create_call().body)["topics"]["t"]
    return out


# -- the OpenAPI document --------------------------------------------------------------------


@pytest.fixture(scope="module")
def schemas() -> dict[str, Any]:
    doc = build_document(route for module in ROUTE_MODULES for route in module.ROUTES)
    out: dict[str, Any] = doc["components"]["schemas"]
    return out


@pytest.mark.parametrize(("table", "option"), _cases(*TABLES))
def test_the_document_has_each_option_with_its_description(
    schemas: dict[str, Any], table: Options, option: Option
) -> None:
    body, command = SCHEMAS[table.op]
    assert schemas[body]["properties"][option.name]["description"] == option.description
    if command is not None and option.ws:
        ws = next(
            c
            for c in schemas["WsClientCommand"]["oneOf"]
            if c["properties"]["op"]["const"] == command
        )
        assert ws["properties"][option.name]["description"] == option.description


# -- the CLI -------------------------------------------------------------------------------


def _flags(path: list[str]) -> set[str]:
    """The option strings of the ``topics`` subcommand ``path``."""
    parser: argparse.ArgumentParser = build_parser()
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return {s for action in parser._actions for s in action.option_strings}


@pytest.mark.parametrize(("table", "option"), _cases(*TABLES, where=lambda o: o.cli is not None))
def test_the_cli_has_each_declared_flag(table: Options, option: Option) -> None:
    assert option.cli is not None
    *path, flag = option.cli.split()
    assert flag in _flags(path), f"topics {' '.join(path)} has no {flag}"
