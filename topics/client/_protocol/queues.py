"""The queue calls (contract §10): claim, ack, nack, extend and redrive."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from topics.queue_types import (
    AckResult,
    ClaimResult,
    ExtendResult,
    Job,
    NackResult,
    RedriveResult,
)

from .call import Call, Reply, dumps, perf_ms, topic_path

__all__ = ["ack", "claim", "claim_result", "extend", "nack", "redrive"]


def claim_result(obj: Mapping[str, Any], topic: str) -> ClaimResult:
    jobs = [Job.from_json(j) for j in obj.get("claimed", [])]
    return ClaimResult(
        topic=obj.get("topic", topic),
        fragments=tuple(dumps(j) for j in obj.get("claimed", [])),
        seqs=tuple(j.seq for j in jobs),
        lease_ids=tuple(j.lease_id for j in jobs),
        ready=obj.get("ready", 0),
        fsync_ms=perf_ms(obj, "fsync_ms"),
        _decoded=jobs,
    )


def claim(topic: str, node: str, max: int, lease_ms: int | None) -> Call[ClaimResult]:
    body: dict[str, object] = {"node": node, "max": max}
    if lease_ms is not None:
        body["lease_ms"] = lease_ms
    # Not idempotent: a repeat after a lost answer would lease more jobs (they come back
    # when their lease expires, but that is a delay, not a retry).
    return Call(
        "POST",
        topic_path(topic, "/claim"),
        lambda r: claim_result(r.json(), topic),
        body=dumps(body),
        idempotent=False,
    )


def _lease_body(
    node: str, seqs: Sequence[int], lease_ids: Sequence[str] | None, **extra: object
) -> bytes:
    body: dict[str, object] = {"node": node, "seqs": list(seqs)}
    if lease_ids is not None:
        body["lease_ids"] = list(lease_ids)
    body.update({k: v for k, v in extra.items() if v is not None})
    return dumps(body)


def ack(
    topic: str, node: str, seqs: Sequence[int], lease_ids: Sequence[str] | None
) -> Call[AckResult]:
    def parse(reply: Reply) -> AckResult:
        o = reply.json()
        return AckResult(
            o["topic"], o["acked"], list(o["skipped"]), o["ready"], o["in_flight"],
            perf_ms(o, "fsync_ms"),
        )  # fmt: skip

    return Call("POST", topic_path(topic, "/ack"), parse, body=_lease_body(node, seqs, lease_ids))


def nack(
    topic: str, node: str, seqs: Sequence[int], delay_ms: int, lease_ids: Sequence[str] | None
) -> Call[NackResult]:
    def parse(reply: Reply) -> NackResult:
        o = reply.json()
        return NackResult(
            o["topic"], o["nacked"], list(o["skipped"]), o["ready"], o["in_flight"],
            perf_ms(o, "fsync_ms"),
        )  # fmt: skip

    body = _lease_body(node, seqs, lease_ids, delay_ms=delay_ms)
    return Call("POST", topic_path(topic, "/nack"), parse, body=body)


def extend(
    topic: str, node: str, seqs: Sequence[int], lease_ms: int, lease_ids: Sequence[str] | None
) -> Call[ExtendResult]:
    def parse(reply: Reply) -> ExtendResult:
        o = reply.json()
        deadlines = {int(k): v for k, v in (o.get("deadlines") or {}).items()}
        return ExtendResult(
            o["topic"], o["extended"], list(o["skipped"]), deadlines, perf_ms(o, "fsync_ms")
        )

    body = _lease_body(node, seqs, lease_ids, lease_ms=lease_ms)
    return Call("POST", topic_path(topic, "/extend"), parse, body=body)


def redrive(
    topic: str, to: str | None, max: int | None, where: Mapping[str, Any] | None
) -> Call[RedriveResult]:
    def parse(reply: Reply) -> RedriveResult:
        o = reply.json()
        return RedriveResult(
            o["topic"], o["moved"], o["skipped"], o["remaining"], list(o["batches"]),
            perf_ms(o, "fsync_ms"),
        )  # fmt: skip

    body = {k: v for k, v in (("to", to), ("max", max), ("where", where)) if v is not None}
    # Not retried: a repeat after a lost answer would move up to max more jobs.
    return Call("POST", topic_path(topic, "/redrive"), parse, body=dumps(body), idempotent=False)
