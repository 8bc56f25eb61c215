"""The members a record in a write may have: the one declaration every surface checks.

A typo must not be stored silently (``{"data": 1, "tga": "x"}`` would lose its tag), so a
member not declared here is ``400 invalid_request`` naming it, like an unknown config field.
The engine checks (``Engine.write`` and so the HTTP write route, its fast lane, WebSocket
publish and the embedded API); the client sends every member and gets the server's 400.

A feature that adds a per-record member adds it to :data:`RECORD_FIELDS` here, and nowhere
else needs to learn about it for the check to let it through.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .errors import InvalidRequestError

__all__ = [
    "QUEUE_RECORD_FIELDS",
    "RECORD_FIELDS",
    "check_record_fields",
    "first_unknown_field",
    "unknown_field_error",
]

RECORD_FIELDS: frozenset[str] = frozenset(
    {
        "data",
        "tag",
        "node",
        "meta",
        # queue jobs (docs/QUEUES.md "Scheduled jobs", "Dedupe keys")
        "deliver_at",
        "delay_ms",
        "dedupe_key",
    }
)
#: Members only a write to a queue topic takes. The engine turns them into meta stamps
#: before the batch is encoded (topics/queues/job_ops.py), so on any other topic they reach the
#: check below and are refused with a message saying why.
QUEUE_RECORD_FIELDS: frozenset[str] = frozenset({"deliver_at", "delay_ms", "dedupe_key"})
_ENCODED_FIELDS = RECORD_FIELDS - QUEUE_RECORD_FIELDS


def first_unknown_field(records: Sequence[object]) -> tuple[int, str] | None:
    """The first (record index, member) not in :data:`RECORD_FIELDS`, or None.

    Non-mappings are left for the record encoder to reject in its own words.
    """
    allowed = _ENCODED_FIELDS
    # Every write pays for this: one C-level union of all the records' keys answers the
    # usual case (~60 ns a record against ~900 for an isinstance(Mapping) loop). Anything
    # odd (a non-mapping record iterates as something else, or is not iterable) falls
    # through to the exact walk below, which only then costs its ABC checks.
    try:
        if set().union(*records) <= allowed:  # type: ignore[arg-type]
            return None
    except TypeError:
        pass
    for i, record in enumerate(records):
        if isinstance(record, Mapping) and not record.keys() <= allowed:
            return i, sorted(str(k) for k in record if k not in allowed)[0]
    return None


def unknown_field_error(index: int, name: str) -> InvalidRequestError:
    if name in QUEUE_RECORD_FIELDS:
        return InvalidRequestError.for_field(
            f"records[{index}].{name}", "only applies to the records of a queue topic"
        )
    known = ", ".join(sorted(_ENCODED_FIELDS))
    jobs = ", ".join(sorted(QUEUE_RECORD_FIELDS))
    return InvalidRequestError.for_field(
        f"records[{index}].{name}",
        f"is not a record field (one of {known}) (a queue's records also take {jobs})",
    )


def check_record_fields(records: Sequence[Any]) -> None:
    """Raise :func:`unknown_field_error` for the first unknown member (for callers that have
    no earlier per-record check to order it after)."""
    bad = first_unknown_field(records)
    if bad is not None:
        raise unknown_field_error(*bad)
