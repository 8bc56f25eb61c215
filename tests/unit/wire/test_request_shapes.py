"""Request shapes are declared once (topics/wire/requests.py) and read by every decoder and
by the OpenAPI document, so the three cannot disagree on a member."""

from __future__ import annotations

import dataclasses
import json

import pytest

from topics.frontends.http import (
    ROUTE_MODULES,
    cursor_routes,
    queue_routes,
    record_routes,
    watch_routes,
)
from topics.frontends.http.openapi import build_document
from topics.wire import requests, ws
from topics.wire.requests import WRITE, WS_COMMANDS, WS_PUBLISH, RequestShape
from topics.wire.ws import OpError, Publish

SHAPES: list[RequestShape] = [
    value for value in vars(requests).values() if isinstance(value, RequestShape)
]
HTTP_SHAPES = [shape for shape in SHAPES if shape not in WS_COMMANDS]


def _document() -> dict[str, object]:
    return build_document(route for module in ROUTE_MODULES for route in module.ROUTES)


@pytest.mark.parametrize("shape", HTTP_SHAPES, ids=lambda s: s.name)
def test_the_document_publishes_each_body_shape_as_declared(shape: RequestShape) -> None:
    schemas = _document()["components"]["schemas"]  # type: ignore[index]
    assert schemas[shape.name] == shape.schema
    assert schemas[shape.name]["additionalProperties"] is False


def test_the_document_lists_every_websocket_command_as_declared() -> None:
    schemas = _document()["components"]["schemas"]  # type: ignore[index]
    assert schemas["WsClientCommand"]["oneOf"] == [c.schema for c in WS_COMMANDS]


def test_the_http_decoders_accept_exactly_the_declared_members() -> None:
    assert record_routes.WRITE_FIELDS is requests.WRITE.names
    assert record_routes.DIFF_FIELDS is requests.DIFF.names
    assert record_routes.DELETE_FIELDS is requests.DELETE_RECORDS.names
    assert watch_routes.WATCH_FIELDS is requests.WATCH.names
    assert queue_routes.CLAIM_FIELDS is requests.CLAIM.names
    assert queue_routes.ACK_FIELDS is requests.ACK.names
    assert queue_routes.NACK_FIELDS is requests.NACK.names
    assert queue_routes.EXTEND_FIELDS is requests.EXTEND.names
    assert queue_routes.REDRIVE_FIELDS is requests.REDRIVE.names
    assert cursor_routes.PUT_FIELDS is requests.CURSOR_COMMIT.names


def test_a_publish_is_a_write_to_a_named_topic() -> None:
    assert WS_PUBLISH.names == WRITE.names | {"op", "request_id", "topic"}
    publish_fields = {f.name for f in dataclasses.fields(Publish)}
    assert WS_PUBLISH.names == publish_fields


@pytest.mark.parametrize("command", WS_COMMANDS, ids=lambda c: c.name)
def test_the_websocket_decoder_refuses_a_member_its_command_does_not_declare(
    command: RequestShape,
) -> None:
    with pytest.raises(OpError, match="zz: is not a field of"):
        ws.decode_op(json.dumps({"op": command.name, "zz": 1}))


def test_the_write_members_the_document_once_missed_on_publish_are_accepted() -> None:
    op = ws.decode_op(
        '{"op":"publish","topic":"q","records":[{"data":1}],"dedupe":"window",'
        '"dedupe_ms":1000,"replace":true}'
    )
    assert isinstance(op, Publish)
    assert (op.dedupe, op.dedupe_ms, op.replace) == ("window", 1000, True)
