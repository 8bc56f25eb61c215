"""Queue routes: claim, ack, nack, extend (contract §10.2-§10.6).

All four are hot (a worker calls claim and ack once per batch), so the raw-ASGI
dispatcher serves them (``fast=True``). Each handler decodes the small JSON body, calls
one Engine method and encodes the result.

Rules:
1. Unknown body members are ``400 invalid_request`` (a typo such as ``leaseIds`` must not
   silently turn off fencing); types and ranges are checked by the engine.
2. A claim answer splices ``ClaimResult.claimed_json`` (each job's stored record with its
   lease fields, rendered once by the engine) between a hand-built head and tail; an ack
   answer is built by hand too (both are once per batch of every worker).
3. Claims are shed under CPU pressure (429, like any request); acks, nacks and extends are
   not: refusing them would only turn finished work into redeliveries.
4. ``GET /v0/topics/:q/work`` (§10.8) is served by the dispatcher too, as a stream
   (``queue_fast``): it shares the §11 long-lived connection caps with watch streams.
5. ``POST /v0/topics/:dlq/redrive`` (admin) is not hot and goes through hypercorn. The
   key's name allowlist covers every topic it writes: ``to`` is checked before the engine
   runs, the queues named by the jobs' ``$dead_letter_from`` by the engine before anything
   moves (``may_touch``).
"""

from __future__ import annotations

from typing import Any

from topics.wire.requests import ACK, CLAIM, EXTEND, NACK, REDRIVE

from .query_params import WORK_LEASE_MS, WORK_MAX, WORK_NODE
from .queue_fast import HEARTBEAT_S, open_work
from .requests import decode_json_object
from .routing import Route
from .state import Reply, RequestContext

__all__ = ["HEARTBEAT_S", "ROUTES"]

WORK_PATTERN = "/v0/topics/{topic}/work"

# The members each body accepts: declared once, in topics/wire/requests.py.
CLAIM_FIELDS = CLAIM.names
ACK_FIELDS = ACK.names
NACK_FIELDS = NACK.names
EXTEND_FIELDS = EXTEND.names
REDRIVE_FIELDS = REDRIVE.names


async def claim(ctx: RequestContext) -> Reply:
    """POST /v0/topics/:q/claim — lease up to ``max`` jobs to ``node`` (§10.2)."""
    args: dict[str, Any] = decode_json_object(ctx.body, CLAIM_FIELDS)
    result = await ctx.engine.claim(
        ctx.name,
        node=args.get("node"),  # type: ignore[arg-type]  # the engine type-checks
        max=args.get("max", 1),
        lease_ms=args.get("lease_ms"),
    )
    # The topic name is validated by the engine ([A-Za-z0-9._:-]): no escaping needed.
    head = b'{"topic":"' + result.topic.encode() + b'","claimed":'
    tail = (
        b',"count":%d,"ready":%d,"performance":{"server_total_ms":%.3f,"fsync_ms":%.3f,'
        b'"throttle_wait_ms":0.0}}'
        % (result.count, result.ready, ctx.elapsed_ms(), result.fsync_ms)
    )
    return Reply(200, b"".join((head, result.claimed_json, tail)))


async def ack(ctx: RequestContext) -> Reply:
    """POST /v0/topics/:q/ack — complete (delete) jobs held by ``node`` (§10.4)."""
    args: dict[str, Any] = decode_json_object(ctx.body, ACK_FIELDS)
    result = await ctx.engine.ack(
        ctx.name,
        node=args.get("node"),  # type: ignore[arg-type]
        seqs=args.get("seqs"),  # type: ignore[arg-type]
        lease_ids=args.get("lease_ids"),
    )
    # Built by hand like the claim answer (rule 2): the same object as
    # ``ctx.json(result.to_dict(), fsync_ms=...)`` without a dict and an encoder pass.
    skipped = b",".join(b"%d" % seq for seq in result.skipped)
    return Reply(
        200,
        b'{"topic":"%b","acked":%d,"skipped":[%b],"ready":%d,"in_flight":%d,'
        b'"performance":{"server_total_ms":%.3f,"fsync_ms":%.3f}}'
        % (
            result.topic.encode(),
            result.acked,
            skipped,
            result.ready,
            result.in_flight,
            ctx.elapsed_ms(),
            result.fsync_ms,
        ),
    )


async def nack(ctx: RequestContext) -> Reply:
    """POST /v0/topics/:q/nack — release leases for (delayed) reclaim (§10.5)."""
    args: dict[str, Any] = decode_json_object(ctx.body, NACK_FIELDS)
    result = await ctx.engine.nack(
        ctx.name,
        node=args.get("node"),  # type: ignore[arg-type]
        seqs=args.get("seqs"),  # type: ignore[arg-type]
        delay_ms=args.get("delay_ms", 0),
        lease_ids=args.get("lease_ids"),
    )
    return ctx.json(result.to_dict(), fsync_ms=result.fsync_ms)


async def extend(ctx: RequestContext) -> Reply:
    """POST /v0/topics/:q/extend — push lease deadlines out (heartbeat, §10.6)."""
    args: dict[str, Any] = decode_json_object(ctx.body, EXTEND_FIELDS)
    result = await ctx.engine.extend(
        ctx.name,
        node=args.get("node"),  # type: ignore[arg-type]
        seqs=args.get("seqs"),  # type: ignore[arg-type]
        lease_ms=args.get("lease_ms"),  # type: ignore[arg-type]
        lease_ids=args.get("lease_ids"),
    )
    return ctx.json(result.to_dict(), fsync_ms=result.fsync_ms)


async def redrive(ctx: RequestContext) -> Reply:
    """POST /v0/topics/:dlq/redrive — move dead-lettered jobs back to a queue (rule 5)."""
    args: dict[str, Any] = decode_json_object(ctx.body, REDRIVE_FIELDS)
    to = args.get("to")
    if isinstance(to, str):
        ctx.principal.check_name("to", to)
    result = await ctx.engine.redrive(
        ctx.name,
        to=to,
        max=args.get("max"),
        where=args.get("where"),
        may_touch=ctx.principal.may_touch,
    )
    return ctx.json(result.to_dict(), fsync_ms=result.fsync_ms)


ROUTES = (
    Route(
        "GET",
        WORK_PATTERN,
        open_work,
        fast=True,
        query_token=True,
        query=(WORK_NODE, WORK_MAX, WORK_LEASE_MS),
        op="openWorkStream",
    ),
    Route("POST", "/v0/topics/{topic}/claim", claim, fast=True, body=True, op="claimJobs"),
    Route(
        "POST", "/v0/topics/{topic}/ack", ack, fast=True, body=True, pressure="never", op="ackJobs"
    ),
    Route(
        "POST",
        "/v0/topics/{topic}/nack",
        nack,
        fast=True,
        body=True,
        pressure="never",
        op="nackJobs",
    ),
    Route(
        "POST",
        "/v0/topics/{topic}/extend",
        extend,
        fast=True,
        body=True,
        pressure="never",
        op="extendLeases",
    ),
    Route("POST", "/v0/topics/{topic}/redrive", redrive, body=True, op="redriveJobs"),
)
