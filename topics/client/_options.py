"""The request options the client assembles for a write or a diff, declared once for the
HTTP methods (``_api``) and the WebSocket publish (``_ws``): only what differs from the
server's defaults goes on the wire."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from topics._limits import DIFF_BYTE_BUDGET

from ._transport import Settings

__all__ = ["bound_args", "cursor_args", "diff_args", "write_options"]


def write_options(
    settings: Settings,
    *,
    node: str | None = None,
    idempotency_key: str | None = None,
    create: bool | None = None,
    config: Mapping[str, Any] | None = None,
    return_seqs: bool = True,
    disable_backpressure: bool = False,
    dedupe: str | None = None,
    dedupe_ms: int | None = None,
    replace: bool | None = None,
    expected_head_seq: int | None = None,
    producer_id: str | None = None,
    epoch: int | None = None,
) -> dict[str, object]:
    """The write body's options; a fresh idempotency key unless one was given (or the
    client was told not to): one key per logical append, reused by its retries (so a
    retried compare-and-append whose first try did append answers ``deduped``, not
    ``head_mismatch``)."""
    if idempotency_key is None and settings.auto_idempotency_key:
        idempotency_key = uuid.uuid4().hex
    return {
        "node": node,
        "idempotency_key": idempotency_key,
        "create": create,
        "config": dict(config) if config is not None else None,
        "return_seqs": None if return_seqs else False,
        "disable_backpressure": True if disable_backpressure else None,
        "dedupe": dedupe,
        "dedupe_ms": dedupe_ms,
        "replace": replace,
        "expected_head_seq": expected_head_seq,
        "producer_id": producer_id,
        "epoch": epoch,
    }


def diff_args(
    from_seq: int,
    limit: int,
    node: str | Sequence[str] | None,
    include_tags: bool,
    include_meta: bool,
    include_data: bool,
    wait_ms: int,
    max_bytes: int,
) -> dict[str, object]:
    """The diff body: only what differs from the server's defaults."""
    args: dict[str, object] = {"from_seq": from_seq}
    if limit:
        args["limit"] = limit
    if node is not None:
        args["node"] = node if isinstance(node, str) else list(node)
    if include_tags:
        args["include_tags"] = True
    if not include_meta:
        args["include_meta"] = False
    if not include_data:
        args["include_data"] = False
    if wait_ms:
        args["wait_ms"] = wait_ms
    if max_bytes != DIFF_BYTE_BUDGET:
        args["max_batch_bytes"] = max_bytes
    return args


def bound_args(
    args: dict[str, object],
    from_ts: object,
    to_ts: object,
    to_seq: object,
    where: object,
    format: object,
    ce_type_field: object,
) -> None:
    """Issue 18's diff options, sent only when given (``from_ts`` replaces ``from_seq`` 0)."""
    if from_ts is not None:
        if args.get("from_seq") == 0:
            del args["from_seq"]
        args["from_ts"] = from_ts
    for name, value in (("to_ts", to_ts), ("to_seq", to_seq), ("where", where)):
        if value is not None:
            args[name] = list(value) if isinstance(value, tuple) else value
    if format != "records":
        args["format"] = format
    if ce_type_field is not None:
        args["ce_type_field"] = ce_type_field


def cursor_args(args: dict[str, object], cursor: str | None, commit: bool) -> None:
    """A diff from a named cursor: ``cursor`` replaces ``from_seq`` (0 is the default)."""
    if cursor is not None:
        if args.get("from_seq") == 0:
            del args["from_seq"]
        args["cursor"] = cursor
    if commit:
        args["commit"] = True
