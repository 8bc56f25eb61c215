"""Queues (§10): job schemas and operations."""

from __future__ import annotations

from topics.queue_types import (
    AckResult,
    ClaimResult,
    ExtendResult,
    Job,
    NackResult,
    RedriveResult,
)
from topics.wire.jsonschema import result_schema
from topics.wire.requests import ACK, CLAIM, EXTEND, NACK, REDRIVE

from .errors import BODY, GATE, STORE
from .operation import BODY_NOTE, Operation, json_body, ok_response, sse_ok
from .schema import Schema, integer, obj, ref, string, with_perf


def schemas() -> dict[str, Schema]:
    """This module's entries of ``components.schemas``, in document order.

    Kept whole: a declarative table, read top to bottom like the document it makes.
    """
    job = result_schema(Job, "One leased job (§10.2).")
    return {
        "Job": job,
        CLAIM.name: CLAIM.json_schema(),
        "ClaimResult": with_perf(result_schema(ClaimResult)),
        ACK.name: ACK.json_schema(),
        "AckResult": with_perf(result_schema(AckResult)),
        NACK.name: NACK.json_schema(),
        "NackResult": with_perf(result_schema(NackResult)),
        EXTEND.name: EXTEND.json_schema(),
        "ExtendResult": with_perf(result_schema(ExtendResult)),
        "JobDedupe": obj(
            {
                "index": integer("The record's index in the request.", minimum=0),
                "dedupe_key": string("Its dedupe_key."),
                "seq": ref("Seq"),
                "outcome": string(
                    "duplicate: not appended, seq is the holder's; replaced: appended as seq, "
                    "the unclaimed holder replaced_seq was deleted.",
                    enum=["duplicate", "replaced"],
                ),
                "replaced_seq": ref("Seq"),
            },
            ["index", "dedupe_key", "seq", "outcome"],
        ),
        REDRIVE.name: REDRIVE.json_schema(),
        "RedriveResult": with_perf(result_schema(RedriveResult)),
        "SseJobEvent": obj(
            {"topic": ref("TopicName"), **job["properties"]},
            ["topic", *job["required"]],
            description="event: job on /work; id: is the job's $seq.",
        ),
    }


#: The operations of this area, joined to their routes by ``Route.op`` (operationId).
OPERATIONS: tuple[Operation, ...] = (
    Operation(
        op_id="claimJobs",
        tag="queues",
        summary="Lease up to max claimable jobs to a worker node",
        description="§10.2. count < max is the '(nearly) empty' signal, never an error. "
        "With claim_jitter_ms > 0 the claim waits for its cohort." + BODY_NOTE,
        params=["Content-Encoding"],
        body=json_body(CLAIM.name, required=True, description="Who and how many."),
        ok=ok_response("ClaimResult", "The leased jobs, ascending by $seq."),
        errors=(*GATE, *STORE, *BODY, "topic_not_found", "not_a_queue"),
    ),
    Operation(
        op_id="ackJobs",
        tag="queues",
        summary="Complete jobs (ack == permanent delete)",
        description="§10.4. Seqs not leased to node are skipped (idempotent)." + BODY_NOTE,
        params=["Content-Encoding"],
        body=json_body(ACK.name, required=True, description="The held seqs."),
        ok=ok_response("AckResult", "What was acked and the queue counters after."),
        errors=(*GATE, *STORE, *BODY, "batch_too_large", "topic_not_found", "not_a_queue"),
    ),
    Operation(
        op_id="nackJobs",
        tag="queues",
        summary="Release leased jobs for (delayed) reclaim",
        description="§10.5." + BODY_NOTE,
        params=["Content-Encoding"],
        body=json_body(NACK.name, required=True, description="The held seqs."),
        ok=ok_response("NackResult", "What was released and the queue counters after."),
        errors=(*GATE, *STORE, *BODY, "batch_too_large", "topic_not_found", "not_a_queue"),
    ),
    Operation(
        op_id="extendLeases",
        tag="queues",
        summary="Extend lease deadlines (heartbeat)",
        description="§10.6. Sets the deadline to now + lease_ms (sets, not adds)." + BODY_NOTE,
        params=["Content-Encoding"],
        body=json_body(EXTEND.name, required=True, description="The held seqs."),
        ok=ok_response("ExtendResult", "The new deadlines."),
        errors=(*GATE, *STORE, *BODY, "batch_too_large", "topic_not_found", "not_a_queue"),
    ),
    Operation(
        op_id="redriveJobs",
        tag="queues",
        summary="Move dead-lettered jobs back to their queue",
        description="Admin. Moves up to max live records of this dead-letter topic, in seq "
        "order, to to (or the queue each one's meta.$dead_letter_from names), one atomic "
        "batch per target: appended there as fresh jobs (data, tag and meta kept, plus "
        "$redrive_from, $redrive_src_seq, $redrive_origin, $redrive_origin_seq, "
        "$redrive_at) and deleted here in one step. The key's prefix allowlist must cover "
        "every target (403 before anything moves)." + BODY_NOTE,
        params=["Content-Encoding"],
        body=json_body(REDRIVE.name, required=False, description="Target and filter."),
        ok=ok_response("RedriveResult", "What moved, in which batches."),
        errors=(*GATE, *STORE, *BODY, "topic_not_found", "not_a_queue"),
    ),
    Operation(
        op_id="openWorkStream",
        tag="queues",
        summary="SSE auto-claim/push of jobs (PUSH mode)",
        description="§10.8. Keeps up to max jobs leased to this connection; ack/nack/extend "
        "through the POST endpoints. Disconnecting releases this connection's leases at "
        "once. Counts against the SSE connection caps (429).",
        ok=sse_ok("The stream is open."),
        errors=(
            *GATE,
            *STORE,
            "invalid_request",
            "topic_not_found",
            "not_acceptable",
            "not_a_queue",
        ),
        extra={
            "x-sse-events": {
                "job": ref("SseJobEvent"),
                "error": ref("SseErrorEvent"),
                "connection-closing": ref("SseConnectionClosingEvent"),
            }
        },
    ),
)
