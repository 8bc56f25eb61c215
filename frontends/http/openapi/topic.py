"""Topics (§0.10 config, §1): their schemas and operations."""

from __future__ import annotations

from topics.types import DeleteTopicResult, PutTopicResult, TopicPage, TopicState, TopicSummary
from topics.wire.jsonschema import result_schema

from .errors import BODY, GATE, NAMED, STORE
from .operation import BODY_NOTE, Operation, json_body, ok_response
from .schema import Schema, boolean, integer, nullable, obj, ref, string, u64, with_perf


def config_fields(for_input: bool) -> dict[str, Schema]:
    """The topic config members (§0.10); ``for_input``: as a PUT or write may give them.

    Kept whole: a declarative table, read top to bottom like the document it makes.
    """

    def defaulted(description: str, default: int) -> Schema:
        return u64(description, default=default)

    queue_only = " Queue only (accepted, and inert, on a log topic)."
    fields: dict[str, Schema] = {
        "type": string(
            "Topic kind; log is the plain append-only log, queue adds §10. Immutable once set "
            "(a PUT changing it is 409 topic_exists_incompatible).",
            enum=["log", "queue"],
            default="log",
        ),
        "ttl_ms": defaulted("Records older than this (by $ts) are not delivered; 0 = no TTL.", 0),
        "cap_records": defaulted("Max retained records; 0 = unbounded.", 0),
        "cap_bytes": defaulted("Max retained payload bytes; 0 = unbounded.", 0),
        "discard": string(
            "Full-topic policy: old evicts the oldest, reject refuses with 422 topic_full.",
            enum=["old", "reject"],
            default="old",
        ),
        "durable": boolean(
            "Alias: on input true = fsync, false = disk (used only without durability); on "
            "output durability == fsync.",
            default=False,
        ),
        "durability": string(
            "Commit class: ephemeral (resident only), memory (WAL, best effort), disk (WAL, "
            "group commit, the default), fsync (ack waits for fsync).",
            enum=["ephemeral", "memory", "disk", "fsync"],
            default="disk",
        ),
        "priority": {
            "type": ["integer", "null"],
            "description": "Manual delivery priority, clamped to [-1000, 1000]; null = auto.",
            "default": None,
        },
        "auto_priority": boolean(
            "Derive priority from read recency when priority is null.", default=True
        ),
        "auto_create": boolean("May a write lazily create this topic.", default=True),
        "idempotency_window_ms": defaulted("How long write dedupe keys are remembered.", 120_000),
        "dedupe_node": boolean("Node loop-prevention filtering on reads.", default=True),
        "lease_ms": integer(
            "Default lease of a claim, clamped to [100, 86400000]." + queue_only, default=30_000
        ),
        "claim_jitter_ms": integer(
            "Claim coalescing window, clamped to [0, 5000]; 0 = greedy." + queue_only, default=0
        ),
        "max_deliveries": defaulted(
            "Dead-letter after this many deliveries; 0 = never." + queue_only, 0
        ),
        "dead_letter": {
            "anyOf": [ref("TopicName"), {"type": "null"}],
            "description": "Topic that receives jobs over max_deliveries; must differ from "
            "this topic." + queue_only,
            "default": None,
        },
        "leases_durable": boolean("Durability of the leases log." + queue_only, default=False),
    }
    if for_input:
        # durability: null means "absent" (durable decides); every other field is typed.
        fields["durability"] = nullable(fields["durability"])
    return fields


def schemas() -> dict[str, Schema]:
    """This module's entries of ``components.schemas``, in document order.

    Kept whole: a declarative table, read top to bottom like the document it makes.
    """
    config_out = config_fields(False)
    return {
        "TopicConfigInput": obj(
            config_fields(True),
            closed=True,
            description="The topic config object (§0.10) on input: every field optional, "
            "omitted fields keep their current value (or the default on create). Unknown "
            "fields are 400 invalid_request (a typo must not configure nothing).",
        ),
        "TopicConfig": obj(
            config_out,
            list(config_out),
            description="The full, resolved topic config (§0.10), queue fields included.",
        ),
        "QueueCounters": obj(
            {
                "ready": integer("Claimable jobs right now.", minimum=0),
                "in_flight": integer("Jobs under an active lease.", minimum=0),
                "dead_lettered": integer(
                    "Jobs moved to dead_letter over this topic's life.", minimum=0
                ),
                "scheduled": integer(
                    "Jobs written with a deliver_at still in the future (not claimable yet; "
                    "counted in neither ready nor in_flight).",
                    minimum=0,
                ),
                "backoff": integer(
                    "Jobs nacked with a delay_ms that has not elapsed (waiting out their "
                    "backoff; counted in neither ready nor in_flight).",
                    minimum=0,
                ),
            },
            ["ready", "in_flight", "dead_lettered", "scheduled", "backoff"],
        ),
        "TopicPutResult": with_perf(result_schema(PutTopicResult)),
        "TopicState": with_perf(
            result_schema(TopicState, "Topic state (§1.2); queue is present only on a queue topic.")
        ),
        "TopicSummary": result_schema(TopicSummary),
        "TopicList": with_perf(result_schema(TopicPage)),
        "TopicDeleteResult": with_perf(result_schema(DeleteTopicResult)),
    }


#: The operations of this area, joined to their routes by ``Route.op`` (operationId).
OPERATIONS: tuple[Operation, ...] = (
    Operation(
        op_id="putTopic",
        tag="topics",
        summary="Create or configure a topic (idempotent upsert)",
        description="§1.1. 201 when this call created the topic, 200 otherwise (identical "
        "config: no-op). An empty body creates with all defaults. type cannot change "
        "(409). A new topic over TOPICS_MAX_TOPICS is 429 throttled (detail.limit)." + BODY_NOTE,
        params=["Content-Encoding"],
        body=json_body(
            "TopicConfigInput",
            required=False,
            description="The topic config object (§0.10); empty = defaults.",
        ),
        ok=ok_response("TopicPutResult", "The topic and its full resolved config.", (200, 201)),
        errors=(*GATE, *STORE, *BODY, "topic_exists_incompatible"),
    ),
    Operation(
        op_id="getTopic",
        tag="topics",
        summary="Topic state: head, earliest, count, bytes, config",
        description="§1.2 (never auto-creates). A queue topic adds the queue counters.",
        ok=ok_response("TopicState", "The topic's state."),
        errors=(*GATE, *NAMED, "topic_not_found"),
    ),
    Operation(
        op_id="listTopics",
        tag="topics",
        summary="List topics (opaque-cursor paginated)",
        description="§1.3. Filtered to the key's prefix allowlist; with several allowed "
        "prefixes a page may be short while next_cursor is present.",
        ok=ok_response("TopicList", "One page; next_cursor is absent on the last page."),
        errors=(*GATE, "invalid_request"),
    ),
    Operation(
        op_id="deleteTopic",
        tag="topics",
        summary="Delete a topic and everything in it (cascades routers)",
        description="§1.4. Idempotent: an absent topic answers 200 with deleted: false.",
        ok=ok_response("TopicDeleteResult", "What was deleted."),
        errors=(*GATE, *STORE, *NAMED, "topic_not_empty"),
    ),
)
