"""Server-owned meta keys: a client's ``meta`` may not carry a top-level key beginning ``$``.

Why: the engine stamps its own facts into a record's meta (``$deliver_at``,
``$dedupe_key``/``$dedupe_until``, ``$dead_letter_*``, ``$redrive_*``) and reads them back as
the truth: a job's schedule, a dead letter's origin queue. A client that could write them
could park a queue's /work streams on an absurd ``$deliver_at`` or forge a dead letter naming
another tenant's queue (issue #30, finding 5). So every record a client writes through
``Engine.write`` (and so the HTTP write route, its fast lane, WebSocket publish, the Spark
sink and the embedded API) is checked, and a reserved key is ``400 invalid_request`` naming
it. The record encoder does the check (``encode_batch``'s ``server_meta``): its JSON scan of
each meta notes a ``$`` key as it passes, so a write pays no walk of its own for it (issue
29). A queue write is checked here instead, before its job options stamp their own ``$``
keys into the records (:func:`check_client_meta`).

Clients set a job's schedule and dedupe key through the record members ``deliver_at``,
``delay_ms`` and ``dedupe_key`` (docs/QUEUES.md), which the engine stamps after this check.
The engine's own writes that go through ``Engine.write`` with stamped meta (dead letters)
hand the bytes over as :class:`ServerMeta`, which the check lets through; routers and
redrive append below ``Engine.write`` and never meet it. Only top-level keys are reserved:
the server stamps nothing deeper, so ``{"x": {"$ref": 1}}`` is the client's own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import ujson

from .errors import InvalidRequestError

__all__ = [
    "RESERVED_PREFIX",
    "ServerMeta",
    "check_client_meta",
    "reserved_key",
    "reserved_meta_error",
]

RESERVED_PREFIX = "$"


def _has_reserved_hint(raw: bytes) -> bool:
    """Whether raw JSON holds a "$" or the same "$" as an escape (two fast searches)."""
    return raw.find(b"$") >= 0 or raw.find(b"\\u0024") >= 0


class ServerMeta(bytes):
    """Meta bytes the engine stamped itself (a dead letter's copy): not client input."""

    __slots__ = ()


def reserved_key(meta: object) -> str | None:
    """The first top-level key of ``meta`` that begins with ``$``, or None.

    Raw JSON costs a substring test unless a ``$`` (or its escape) is in it somewhere;
    meta that is not valid JSON is left for the record encoder to refuse in its own words.
    """
    if type(meta) is dict:
        value: object = meta
    elif isinstance(meta, bytes | bytearray | memoryview):
        raw = bytes(meta)
        if not _has_reserved_hint(raw):
            return None
        value = _loads(raw)
    elif isinstance(meta, Mapping):
        value = meta
    else:
        return None
    if not isinstance(value, Mapping):
        return None
    for key in value:
        if isinstance(key, str) and key.startswith(RESERVED_PREFIX):
            return key
    return None


def _loads(raw: bytes) -> object:
    try:
        return ujson.loads(raw)
    except (ValueError, OverflowError):
        pass
    try:  # what ujson refuses that the stdlib parser still reads
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def check_client_meta(records: Sequence[Any]) -> None:
    """Refuse a client's records whose meta carries a server-owned key (``400``).

    Every write pays for this, so the usual batch (raw meta bytes, or none) is cleared by
    C-level steps: one comprehension, one join, one search for a ``$`` or its escape over
    all the metas at once (a match across two metas only sends the batch down the exact
    per-record walk). Dict meta, odd records or a ``$`` anywhere take that walk.
    """
    if not isinstance(records, list | tuple):
        return  # the batch check refuses it in its own words
    try:
        present = [m for m in [r.get("meta") for r in records] if m is not None]
        if not present:
            return
        if type(present[0]) is dict:  # the embedded API's form: its keys, joined
            if "$" not in "".join([k for m in present for k in m]):
                return
        elif not _has_reserved_hint(b"".join(present)):
            return
    except (AttributeError, TypeError):
        pass  # a record that is no mapping, mixed or odd meta: the exact walk
    for i, record in enumerate(records):
        if not isinstance(record, Mapping):
            continue  # the encoder refuses it in its own words
        meta = record.get("meta")
        if meta is None or type(meta) is ServerMeta:
            continue
        error = reserved_meta_error(i, meta)
        if error is not None:
            raise error


def reserved_meta_error(index: int, meta: object) -> InvalidRequestError | None:
    """The ``400`` for record ``index`` whose ``meta`` has a reserved key (None if none):
    this check's answer, and the engine's for the encoder's ``meta_reserved`` refusal."""
    key = reserved_key(meta)
    if key is None:
        return None
    return InvalidRequestError.for_field(
        f"records[{index}].meta",
        f'has the key "{key}": meta keys beginning with "$" are the server\'s '
        "(a queue job's schedule and dedupe key are the record members deliver_at, "
        "delay_ms and dedupe_key)",
    )
