"""Issue 18 on watches and WebSocket subscriptions: per-topic ``from_ts``/``to_ts``/
``to_seq``, and the subscription's ``where`` and ``format``.

Rules:
1. Per topic, ``from_ts`` replaces ``from_seq``/``tail`` (giving both is 400) and resolves
   exactly as on a diff (``_reads.ReadBounds.start``) when the watch is created; the
   answer's ``from_seq`` for that topic is the resolved seq.
2. ``to_seq``/``to_ts`` end the topic inclusively: the read that reaches the end is
   followed by an ``end`` frame, and the topic leaves the session (a resumed stream does
   not read it again). A ``to_ts`` that no record has passed yet is reached at the first
   read after the clock passes it (the next write to the topic).
3. ``where`` and ``format`` apply to every topic of the subscription (and to topics a
   ``topic_prefix`` joins later); they are part of the read options, so the read cache
   and grouped delivery only share reads between equal options.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import _args
from .._core import RENDER_DATA, RENDER_META, RENDER_TAGS
from ..errors import InvalidRequestError
from ..log.reads import ReadBounds
from ..query.cloudevents import check_format
from ..query.where import DEFAULT_MAX_COST, compile_where
from ..watch_types import TopicWatermarks

if TYPE_CHECKING:
    from ..log.topic_log import TopicLog
    from .topic import FeedOptions

__all__ = ["TopicBounds", "apply_from_ts", "split_topic_bounds", "stream_options", "topic_options"]

_FIELDS = ("from_ts", "to_ts", "to_seq")


@dataclass(frozen=True, slots=True)
class TopicBounds:
    from_ts: int | None
    to_ts: int | None
    to_seq: int | None


def split_topic_bounds(topics: object) -> tuple[Any, dict[str, TopicBounds]]:
    """Take ``from_ts``/``to_ts``/``to_seq`` out of each topic's options (rule 1).

    Returns the topics map without them (what the rest of the watch code reads) and the
    bounds by topic. A map that is not one is returned as is (checked later).
    """
    if not isinstance(topics, Mapping):
        return topics, {}
    bounds: dict[str, TopicBounds] = {}
    rest: dict[str, Any] = {}
    for name, spec in topics.items():
        if not isinstance(spec, Mapping) or not any(k in spec for k in _FIELDS):
            rest[name] = spec
            continue
        field = f"topics.{name}"
        from_ts = _opt_u64(f"{field}.from_ts", spec.get("from_ts"))
        if from_ts is not None and (spec.get("from_seq") or spec.get("tail")):
            raise InvalidRequestError.for_field(
                f"{field}.from_ts", "give from_seq, tail or from_ts, not two of them"
            )
        bounds[name] = TopicBounds(
            from_ts,
            _opt_u64(f"{field}.to_ts", spec.get("to_ts")),
            _opt_u64(f"{field}.to_seq", spec.get("to_seq")),
        )
        rest[name] = {k: v for k, v in spec.items() if k not in _FIELDS}
    return rest, bounds


def _opt_u64(field: str, value: object) -> int | None:
    return None if value is None else _args.u64(field, value)


def apply_from_ts(
    resolved: dict[str, tuple[TopicLog, int, TopicWatermarks]],
    bounds: Mapping[str, TopicBounds],
) -> None:
    """Move each topic with a ``from_ts`` to where it resolves (rule 1), in place."""
    for name, b in bounds.items():
        entry = resolved.get(name)
        if b.from_ts is None or entry is None:
            continue
        log = entry[0]
        cursor = ReadBounds(from_ts=b.from_ts).start(log, 0)
        resolved[name] = (log, cursor, TopicWatermarks(cursor, log.head, log.earliest))


def stream_options(
    opts: FeedOptions,
    where: object,
    format: object,
    ce_type_field: object,
    max_where_cost: int = DEFAULT_MAX_COST,
) -> FeedOptions:
    """The subscription's read options with its ``where`` and ``format`` (rule 3);
    ``max_where_cost`` is the plan's budget (topics/query/where.py rule 7)."""
    fmt, type_field = check_format(format, ce_type_field)
    keep = compile_where(where, max_cost=max_where_cost)
    if keep is None and fmt == "records":
        return opts
    if fmt == "cloudevents":
        return opts._replace(
            keep=keep,
            ce_type=type_field,
            flags=opts.flags | RENDER_DATA | RENDER_META | RENDER_TAGS,
        )
    return opts._replace(keep=keep)


def topic_options(opts: FeedOptions, bounds: TopicBounds | None) -> FeedOptions:
    """A topic's read options: the subscription's, with its own end (rule 2)."""
    if bounds is None or (bounds.to_seq is None and bounds.to_ts is None):
        return opts
    return opts._replace(to_seq=bounds.to_seq, to_ts=bounds.to_ts)
