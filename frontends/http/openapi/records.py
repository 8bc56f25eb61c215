"""Records (§2 writes, §3 diffs, §5 deletes): their schemas and operations."""

from __future__ import annotations

from topics.types import DeleteRecordsResult, DiffResult, Tombstone, WriteResult
from topics.wire.jsonschema import result_schema
from topics.wire.requests import DELETE_RECORDS, DIFF, WRITE

from .errors import BODY, GATE, STORE
from .operation import BODY_NOTE, Operation, json_body, ok_response, with_arrow
from .schema import (
    Schema,
    nullable,
    obj,
    ref,
    string,
    with_perf,
)


def schemas() -> dict[str, Schema]:
    """This module's entries of ``components.schemas``, in document order.

    Kept whole: a declarative table, read top to bottom like the document it makes.
    """
    return {
        "WriteRecord": obj(
            {
                "data": ref("AnyJson"),
                "tag": nullable(ref("Tag")),
                "node": nullable(ref("NodeId")),
                "meta": nullable(ref("Meta")),
                "deliver_at": {
                    "type": ["integer", "null"],
                    "minimum": 0,
                    "description": "Queue topics only: not claimable before this epoch-ms time "
                    "(at most 365 days ahead; a past time is claimable at once). Stored as "
                    "meta.$deliver_at.",
                },
                "delay_ms": {
                    "type": ["integer", "null"],
                    "minimum": 0,
                    "maximum": 31_536_000_000,
                    "description": "Queue topics only: deliver_at = now + delay_ms. Not with "
                    "deliver_at.",
                },
                "dedupe_key": {
                    "type": ["string", "null"],
                    "minLength": 1,
                    "maxLength": 256,
                    "description": "Queue topics only: a job whose key is held (see the write's "
                    "dedupe) is not appended; the answer's dedupe names the holder. Stored as "
                    "meta.$dedupe_key.",
                },
            },
            ["data"],
            closed=True,  # topics/record_fields.py: any other member is 400
            description="One record to append. tag/node/meta null = absent. Any other "
            "member is 400 invalid_request; deliver_at, delay_ms and dedupe_key only on a queue "
            "topic (elsewhere they are 400 too).",
        ),
        WRITE.name: WRITE.json_schema(),
        "WriteResult": with_perf(result_schema(WriteResult), "WritePerformance"),
        "Record": obj(
            {
                "$seq": ref("Seq"),
                "$ts": ref("TimestampMs"),
                "$node": ref("NodeId"),
                "$tag": ref("Tag"),
                "data": ref("AnyJson"),
                "meta": ref("Meta"),
            },
            ["$seq", "$ts"],
            description="A stored record (§0.4): $node/$tag/meta omitted when absent (or not "
            "asked for); data present (maybe null) unless include_data is false.",
        ),
        "Tombstone": result_schema(
            Tombstone,
            "An explicit gap [gap_from, gap_to] lost to cap/TTL (§3.3), or in a crash (reason "
            "crash: the un-synced tail of a disk/memory topic, docs/SEMANTICS.md rule 13a), or "
            "to a restart (reason restart: an ephemeral topic's records, which live only in "
            "memory); a 200 in-band signal, never an error.",
        ),
        DIFF.name: DIFF.json_schema(),
        "CloudEvent": obj(
            {
                "specversion": {"const": "1.0"},
                "id": string("topic@seq."),
                "source": string("The topic's path, /v0/topics/<topic>."),
                "type": string("meta[ce_type_field] when a string, else topics.record."),
                "time": string("$ts as RFC 3339 UTC (ms).", format="date-time"),
                "datacontenttype": {"const": "application/json"},
                "subject": string("The record's $tag, when it has one."),
                "topicsseq": ref("Seq"),
                "topicsnode": string("The record's $node, when it has one."),
                "data": ref("AnyJson"),
            },
            ["specversion", "id", "source", "type", "time", "datacontenttype", "topicsseq"],
            description="A record as a CloudEvents 1.0 structured event (format=cloudevents); "
            "data is the stored JSON, verbatim. Tombstones stay the answer's tombstone member.",
        ),
        "DiffResult": with_perf(result_schema(DiffResult), "DiffPerformance"),
        DELETE_RECORDS.name: DELETE_RECORDS.json_schema(),
        "DeleteRecordsResult": with_perf(result_schema(DeleteRecordsResult), "FsyncPerformance"),
    }


#: The operations of this area, joined to their routes by ``Route.op`` (operationId).
OPERATIONS: tuple[Operation, ...] = (
    Operation(
        op_id="writeRecords",
        tag="records",
        summary="Append records; returns the assigned seqs and head",
        description="§2. Atomic: all records commit with contiguous seqs or none do. 201 "
        "when the write created the topic. Record data/meta are stored byte-verbatim. "
        "Shed under CPU pressure (429) unless disable_backpressure is true; a full "
        "discard:reject topic is 422 topic_full; TOPICS_MAX_TOTAL_BYTES / MAX_TOPICS caps "
        "are 429 throttled (detail.limit). expected_head_seq makes it a compare-and-append "
        "(409 head_mismatch); producer_id + epoch fence older instances of a producer "
        "(409 producer_fenced)." + BODY_NOTE,
        params=["Idempotency-Key", "Content-Encoding"],
        body=json_body(WRITE.name, required=True, description="The batch."),
        ok=ok_response(
            "WriteResult", "The assigned seqs (or the deduped original ones).", (200, 201)
        ),
        errors=(
            *GATE,
            *STORE,
            *BODY,
            "batch_too_large",
            "record_too_large",
            "topic_not_found",
            "topic_full",
            "head_mismatch",
            "producer_fenced",
        ),
    ),
    Operation(
        op_id="diffRecords",
        tag="records",
        summary="Read the records after a cursor (batched, with tombstones)",
        description="§3. Read-only and safe to retry; POST because the body describes the "
        "read. Never auto-creates. limit and wait_ms over their maxima are clamped, not "
        "rejected. A long poll (wait_ms) ends early, with the current answer, when the "
        "server starts draining. Extension: with Accept: application/vnd.apache.arrow.stream "
        "the same answer comes as an Arrow IPC stream (docs/HTTP.md); JSON is the default."
        + BODY_NOTE,
        params=["Content-Encoding"],
        body=json_body(
            DIFF.name,
            required=False,
            description="The cursor and options; empty = all defaults.",
        ),
        ok=with_arrow(
            ok_response("DiffResult", "Records, the next cursor, watermarks and any tombstone.")
        ),
        errors=(*GATE, *BODY, "topic_not_found"),
    ),
    Operation(
        op_id="deleteRecords",
        tag="records",
        summary="Permanently delete records by before_seq and/or tag match",
        description="§5. Silent (no tombstone), point-in-time, effective immediately." + BODY_NOTE,
        params=["Content-Encoding"],
        body=json_body(DELETE_RECORDS.name, required=True, description="before_seq and/or match."),
        ok=ok_response("DeleteRecordsResult", "How many were deleted and the topic after."),
        errors=(*GATE, *STORE, *BODY, "topic_not_found"),
    ),
)
