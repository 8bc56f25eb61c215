"""Records (§2 writes, §3 diffs, §5 deletes): their schemas and operations."""

from __future__ import annotations

from .errors import BODY, GATE, STORE
from .operation import BODY_NOTE, Operation, json_body, ok_response, with_arrow
from .schema import (
    LIMITS,
    TOMBSTONE_REASONS,
    Schema,
    boolean,
    integer,
    nullable,
    obj,
    ref,
    string,
    u64,
    with_perf,
)

#: The write conditions of issue 19, on POST /v0/topics/:topic and a WebSocket publish.
WRITE_CONDITIONS: dict[str, Schema] = {
    "expected_head_seq": {
        "type": ["integer", "null"],
        "minimum": 0,
        "description": "Compare-and-append: append only if the topic's head_seq is exactly "
        "this (0 for an absent topic this write creates; deletes and eviction never move the "
        "head), else 409 head_mismatch and nothing is appended. Checked after deduplication.",
    },
    "producer_id": {
        "type": ["string", "null"],
        "minLength": 1,
        "maxLength": 256,
        "description": "Producer fencing, with epoch (both or neither): per topic, a write from "
        "an epoch below the highest seen for this producer is 409 producer_fenced. The "
        "producer's last batch's idempotency_key is deduplicated without a time window.",
    },
    "epoch": {
        "type": ["integer", "null"],
        "minimum": 0,
        "description": "This producer instance's epoch (raise it on every restart).",
    },
}


def schemas() -> dict[str, Schema]:
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
        "WriteRequest": obj(
            {
                "records": {
                    "type": "array",
                    "items": ref("WriteRecord"),
                    "minItems": 1,
                    "description": f"1..TOPICS_MAX_BATCH_RECORDS (default "
                    f"{LIMITS.max_batch_records}) records, assigned contiguous seqs in order; "
                    "more is 400 batch_too_large.",
                },
                "node": nullable(ref("NodeId")) | {"description": "Batch default $node."},
                "idempotency_key": {
                    "type": ["string", "null"],
                    "minLength": 1,
                    "maxLength": 256,
                    "description": "Dedupe key (§0.8), scoped to the topic; wins over the "
                    "Idempotency-Key header.",
                },
                "create": {
                    "type": ["boolean", "null"],
                    "description": "Override auto_create for this write (false: 404 if absent).",
                },
                "config": nullable(ref("TopicConfigInput"))
                | {"description": "Applied only when this write creates the topic."},
                "disable_backpressure": boolean(
                    "Trusted-loader opt-out of the CPU-pressure 429.", default=False
                ),
                "return_seqs": {
                    "type": ["boolean", "null"],
                    "description": "false omits seqs from the answer (wins over ?return_seqs).",
                },
                "dedupe": {
                    "type": ["string", "null"],
                    "enum": ["until_ack", "window", None],
                    "description": "Queue topics only: how the records' dedupe_key holds. "
                    "until_ack (default): while the job is live (until acked, dead-lettered or "
                    "deleted); window: for dedupe_ms after the write, acked or not.",
                },
                "dedupe_ms": {
                    "type": ["integer", "null"],
                    "minimum": 1,
                    "maximum": 31_536_000_000,
                    "description": "The window of dedupe: window (required with it, 400 "
                    "otherwise).",
                },
                "replace": {
                    "type": ["boolean", "null"],
                    "description": "A held key whose job was never handed out is replaced: the "
                    "old job is deleted and the new one appended (a new seq, at the tail). A "
                    "claimed holder is never replaced.",
                },
                **WRITE_CONDITIONS,
            },
            ["records"],
            closed=True,
            description="An append (§2). Unknown members are 400 invalid_request.",
        ),
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
        "DiffRequest": obj(
            {
                "from_seq": u64("Exclusive cursor: records with $seq > from_seq.", default=0),
                "limit": u64(
                    f"Max records; 0 = default 256; clamped to TOPICS_MAX_LIMIT (default "
                    f"{LIMITS.max_limit}), never rejected.",
                    default=256,
                ),
                "node": ref("NodeFilter"),
                "include_tags": boolean("Include $tag.", default=False),
                "include_meta": boolean("Include meta.", default=True),
                "include_data": boolean(
                    "Include data (false: metadata-only tailing).", default=True
                ),
                "wait_ms": u64("Long-poll when caught up; clamped to 30000.", default=0),
                "max_batch_bytes": integer(
                    "Soft byte budget of the answer (at least one record is always "
                    "returned); default 1 MiB, clamped to 8 MiB.",
                    minimum=1,
                    default=1 << 20,
                ),
                "cursor": ref("CursorName")
                | {
                    "description": "Start after this named cursor's committed seq instead of "
                    "from_seq (not both); a cursor never committed reads from 0."
                },
                "commit": boolean(
                    "With cursor: commit the answer's next_from_seq to it before answering "
                    "(at most once: an answer lost on the way is not read again; commit "
                    "explicitly with PUT .../cursors/{cursor} for at least once).",
                    default=False,
                ),
                "from_ts": u64(
                    "Start at the first record with $ts >= from_ts (ms) instead of from_seq "
                    "(not both); the answer echoes the resolved from_seq. Older than every "
                    "live record: exactly a read from from_seq 0, tombstone included."
                ),
                "to_ts": u64(
                    "Inclusive end by time: the last record with $ts <= to_ts; caught_up and "
                    "lag count to the end, end_reached says the cursor is there."
                ),
                "to_seq": u64("Inclusive end by seq (with to_ts: the earlier end)."),
                "where": ref("Where"),
                "format": string(
                    "records, or cloudevents: each record as a CloudEvents 1.0 event.",
                    enum=["records", "cloudevents"],
                    default="records",
                ),
                "ce_type_field": string(
                    "With cloudevents: the meta member giving each event's type "
                    "(else topics.record).",
                    minLength=1,
                    default="type",
                ),
            },
            closed=True,
            description="A diff (§3). An empty body means all defaults. Unknown members are "
            "400 invalid_request.",
        ),
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
        "DeleteRecordsRequest": obj(
            {
                "before_seq": nullable(u64("Delete records with $seq < before_seq.")),
                "match": nullable(ref("Match")),
            },
            closed=True,
            description="A record delete (§5): before_seq and/or match (both = AND); neither "
            "is 400 invalid_request. null = absent.",
        ),
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
        body=json_body("WriteRequest", required=True, description="The batch."),
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
            "DiffRequest",
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
        body=json_body(
            "DeleteRecordsRequest", required=True, description="before_seq and/or match."
        ),
        ok=ok_response("DeleteRecordsResult", "How many were deleted and the topic after."),
        errors=(*GATE, *STORE, *BODY, "topic_not_found"),
    ),
)
