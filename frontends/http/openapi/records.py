"""Records (§2 writes, §3 diffs, §5 deletes): their schemas and operations."""

from __future__ import annotations

from topics.wire.requests import DELETE_RECORDS, DIFF, WRITE

from .errors import BODY, GATE, STORE
from .operation import BODY_NOTE, Operation, json_body, ok_response, with_arrow
from .schema import (
    TOMBSTONE_REASONS,
    Schema,
    boolean,
    integer,
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
        "WriteResult": with_perf(
            obj(
                {
                    "topic": ref("TopicName"),
                    "first_seq": ref("Seq"),
                    "last_seq": ref("Seq"),
                    "seqs": {
                        "type": "array",
                        "items": ref("Seq"),
                        "description": "Omitted with return_seqs=false.",
                    },
                    "head_seq": ref("Seq"),
                    "count": integer(
                        "Records appended by this write (0 when every job was a dedupe "
                        "duplicate: first_seq is then head_seq + 1).",
                        minimum=0,
                    ),
                    "created": boolean("This write created the topic (status 201)."),
                    "deduped": boolean(
                        "An in-window idempotency_key matched: nothing appended, "
                        "the original seqs are returned."
                    ),
                    "dedupe": {
                        "type": "array",
                        "items": ref("JobDedupe"),
                        "description": "Present when a queue write carried dedupe_keys: one "
                        "entry per record whose key was held, by request index.",
                    },
                },
                ["topic", "first_seq", "last_seq", "head_seq", "count", "created", "deduped"],
            ),
            "WritePerformance",
        ),
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
        "Tombstone": obj(
            {
                "gap_from": ref("Seq"),
                "gap_to": ref("Seq"),
                "reason": string(
                    "Why the range was lost (informational; the range is authoritative).",
                    enum=TOMBSTONE_REASONS,
                ),
                "missed_estimate": integer("Approximate records lost.", minimum=0),
                "earliest_seq": ref("Seq"),
                "head_seq": ref("Seq"),
            },
            ["gap_from", "gap_to", "reason", "missed_estimate", "earliest_seq", "head_seq"],
            description="An explicit gap [gap_from, gap_to] lost to cap/TTL (§3.3), or in a "
            "crash (reason crash: the un-synced tail of a disk/memory topic, docs/SEMANTICS.md "
            "rule 13a), or to a restart (reason restart: an ephemeral topic's records, which "
            "live only in memory); a 200 in-band signal, never an error.",
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
        "DiffResult": with_perf(
            obj(
                {
                    "topic": ref("TopicName"),
                    "records": {
                        "type": "array",
                        "items": {"anyOf": [ref("Record"), ref("CloudEvent")]},
                        "description": "Records, or CloudEvents with format=cloudevents.",
                    },
                    "next_from_seq": ref("Seq"),
                    "head_seq": ref("Seq"),
                    "earliest_seq": ref("Seq"),
                    "caught_up": boolean(
                        "next_from_seq == head_seq (or the to_ts/to_seq end): the reliable "
                        "'no more now'."
                    ),
                    "tombstone": nullable(ref("Tombstone")),
                    "lag": integer("head_seq (or the end) - next_from_seq.", minimum=0),
                    "from_seq": ref("Seq")
                    | {"description": "Where from_ts resolved to (only with from_ts)."},
                    "end_reached": boolean(
                        "Only with to_ts/to_seq: the cursor is at the end; read no further."
                    ),
                },
                [
                    "topic",
                    "records",
                    "next_from_seq",
                    "head_seq",
                    "earliest_seq",
                    "caught_up",
                    "tombstone",
                    "lag",
                ],
            ),
            "DiffPerformance",
        ),
        DELETE_RECORDS.name: DELETE_RECORDS.json_schema(),
        "DeleteRecordsResult": with_perf(
            obj(
                {
                    "topic": ref("TopicName"),
                    "deleted": integer("Records removed by this call.", minimum=0),
                    "earliest_seq": ref("Seq"),
                    "head_seq": ref("Seq"),
                    "count": integer("Records left.", minimum=0),
                    "bytes": integer("Bytes left.", minimum=0),
                },
                ["topic", "deleted", "earliest_seq", "head_seq", "count", "bytes"],
            ),
            "FsyncPerformance",
        ),
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
        params=["return_seqs", "Idempotency-Key", "Content-Encoding"],
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
