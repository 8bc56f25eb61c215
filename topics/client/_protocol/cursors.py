"""A topic's named cursors: set (optionally compare-and-set), get, list, delete."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from topics.cursor_types import CursorInfo, DeleteCursorResult
from topics.cursors.store import check_cursor_name

from .call import Call, Reply, dumps, fields_of, topic_path

__all__ = ["cursor_info", "delete_cursor", "get_cursor", "list_cursors", "put_cursor"]


def _cursor_path(topic: str, cursor: str | None = None) -> str:
    tail = "" if cursor is None else "/" + quote(check_cursor_name(cursor), safe="")
    return topic_path(topic, "/cursors" + tail)


def cursor_info(obj: Mapping[str, Any]) -> CursorInfo:
    return CursorInfo(**fields_of(CursorInfo, obj))


def put_cursor(topic: str, cursor: str, seq: int, expect_seq: int | None) -> Call[CursorInfo]:
    body: dict[str, object] = {"seq": seq}
    if expect_seq is not None:
        body["expect_seq"] = expect_seq
    # With expect_seq a repeat after a lost answer would be a 409 against its own commit.
    return Call(
        "PUT",
        _cursor_path(topic, cursor),
        lambda r: cursor_info(r.json()),
        body=dumps(body),
        idempotent=expect_seq is None,
    )


def get_cursor(topic: str, cursor: str) -> Call[CursorInfo]:
    return Call("GET", _cursor_path(topic, cursor), lambda r: cursor_info(r.json()))


def list_cursors(topic: str) -> Call[list[CursorInfo]]:
    def parse(reply: Reply) -> list[CursorInfo]:
        return [cursor_info(c) for c in reply.json().get("cursors", [])]

    return Call("GET", _cursor_path(topic), parse)


def delete_cursor(topic: str, cursor: str) -> Call[DeleteCursorResult]:
    def parse(reply: Reply) -> DeleteCursorResult:
        obj = reply.json()
        return DeleteCursorResult(obj["topic"], obj["cursor"], bool(obj["deleted"]))

    return Call("DELETE", _cursor_path(topic, cursor), parse)
