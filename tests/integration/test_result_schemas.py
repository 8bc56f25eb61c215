"""The result schemas of the OpenAPI document are built from the result types' fields
(topics/result_fields.py) and agree with the JSON the server really answers.

A tour of requests over the in-process app collects each answer under its schema; every
answer validates against the document, holds no member its schema does not declare and
every member it requires, and across the tour every declared member shows up at least
once (so neither the type nor the document can carry a member the other lacks).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped, unused-ignore]
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from topics.cursor_types import CursorInfo, DeleteCursorResult
from topics.frontends.http import ROUTE_MODULES
from topics.frontends.http.openapi import build_document
from topics.probe_types import HealthResult, ReadyResult
from topics.queue_types import (
    AckResult,
    ClaimResult,
    ExtendResult,
    Job,
    NackResult,
    RedriveResult,
)
from topics.result_fields import OffWire, WireField, wire_members
from topics.router_types import (
    DeleteRouterResult,
    PutRouterResult,
    RouterInfo,
    RouterPage,
    RouterSummary,
)
from topics.types import (
    DeleteRecordsResult,
    DeleteTopicResult,
    DiffResult,
    PutTopicResult,
    Tombstone,
    TopicPage,
    TopicState,
    TopicSummary,
    WriteResult,
)
from topics.watch_types import TopicWatermarks, WatchCreated
from topics.wire.metrics import metric_families

from .conftest import InProc

#: The document's schema of each result type built from its fields.
RESULTS: dict[str, type] = {
    "WriteResult": WriteResult,
    "DiffResult": DiffResult,
    "Tombstone": Tombstone,
    "DeleteRecordsResult": DeleteRecordsResult,
    "TopicPutResult": PutTopicResult,
    "TopicState": TopicState,
    "TopicSummary": TopicSummary,
    "TopicList": TopicPage,
    "TopicDeleteResult": DeleteTopicResult,
    "CursorInfo": CursorInfo,
    "CursorItem": CursorInfo,
    "CursorDeleteResult": DeleteCursorResult,
    "ClaimResult": ClaimResult,
    "AckResult": AckResult,
    "NackResult": NackResult,
    "ExtendResult": ExtendResult,
    "Job": Job,
    "RedriveResult": RedriveResult,
    "RouterPutResult": PutRouterResult,
    "RouterState": RouterInfo,
    "RouterSummary": RouterSummary,
    "RouterList": RouterPage,
    "RouterDeleteResult": DeleteRouterResult,
    "TopicWatermarks": TopicWatermarks,
    "WatchSession": WatchCreated,
    "Health": HealthResult,
    "Ready": ReadyResult,
}
URI = "urn:topics:openapi"


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return build_document(route for module in ROUTE_MODULES for route in module.ROUTES)


def _wire_names(cls: type) -> list[str]:
    for f in dataclasses.fields(cls):
        assert isinstance(f.metadata["wire"], WireField | OffWire), f"{cls.__name__}.{f.name}"
    return [name for name, _, _ in wire_members(cls)]


@pytest.mark.parametrize("name", RESULTS)
def test_each_result_schema_lists_its_types_wire_fields_with_descriptions(
    document: dict[str, Any], name: str
) -> None:
    schema = document["components"]["schemas"][name]
    members = [m for m in schema["properties"] if m != "performance"]
    assert members == _wire_names(RESULTS[name])
    for member in members:
        assert schema["properties"][member]["description"].strip(), member


def test_the_metrics_snapshot_schema_lists_every_family(document: dict[str, Any]) -> None:
    """MetricsSnapshot is made from topics.wire.metrics: every family the snapshot carries,
    required, described by its HELP text."""
    schema = document["components"]["schemas"]["MetricsSnapshot"]
    names = [family.name for family in metric_families()]
    assert list(schema["properties"]) == [*names, "performance"]
    assert schema["required"] == [*names, "performance"]
    for family in metric_families():
        assert schema["properties"][family.name]["description"].startswith(family.help)


def test_a_new_metric_reaches_the_snapshot_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    """A family added to topics.wire.metrics' tables is documented without an edit of
    frontends/http/openapi/."""
    import topics.wire.metrics as metrics

    extra = ("made_up_total", "counter", "A WAL counter this test makes up.")
    monkeypatch.setattr(metrics, "_WAL_METRICS", (*metrics._WAL_METRICS, extra))
    doc = build_document(route for module in ROUTE_MODULES for route in module.ROUTES)
    member = doc["components"]["schemas"]["MetricsSnapshot"]["properties"]
    assert member["topics_wal_made_up_total"] == {
        "type": "integer",
        "description": "A WAL counter this test makes up.",
    }


async def _tour(inproc: InProc) -> list[tuple[str, dict[str, Any]]]:
    """Answers of every result shape, each variant of its optional members included."""
    seen: list[tuple[str, dict[str, Any]]] = []
    async with inproc.client() as http:

        async def call(schema: str, method: str, path: str, body: object = None) -> Any:
            resp = await http.request(method, path, json=body)
            assert resp.status_code < 300, resp.text
            answer: dict[str, Any] = resp.json()
            seen.append((schema, answer))
            return answer

        await call("Health", "GET", "/v0/health")
        await call("Health", "GET", "/healthz")
        await call("TopicPutResult", "PUT", "/v0/topics/t", {"cap_records": 3})
        await call(
            "WriteResult", "POST", "/v0/topics/t", {"records": [{"data": i} for i in range(6)]}
        )
        await call(
            "WriteResult", "POST", "/v0/topics/t", {"records": [{"data": 1}], "return_seqs": False}
        )
        diff = await call("DiffResult", "POST", "/v0/topics/t/diff", {})
        seen.append(("Tombstone", diff["tombstone"]))
        await call("DiffResult", "POST", "/v0/topics/t/diff", {"from_ts": 0, "to_seq": 5})
        await call("TopicState", "GET", "/v0/topics/t")
        await call("TopicPutResult", "PUT", "/v0/topics/q", {"type": "queue"})
        job = {"data": 1, "dedupe_key": "k"}
        await call("WriteResult", "POST", "/v0/topics/q", {"records": [job]})
        await call("WriteResult", "POST", "/v0/topics/q", {"records": [job]})  # held: dedupe
        await call("TopicState", "GET", "/v0/topics/q")
        await call(
            "WriteResult",
            "POST",
            "/v0/topics/q",
            {"records": [{"data": 2, "tag": "a", "node": "n"}]},
        )
        claim = await call("ClaimResult", "POST", "/v0/topics/q/claim", {"node": "w", "max": 2})
        await call("ClaimResult", "POST", "/v0/topics/q/claim", {"node": "w"})  # none left
        seen.extend(("Job", job) for job in claim["claimed"])
        seqs = [job["$seq"] for job in claim["claimed"]]
        await call(
            "ExtendResult",
            "POST",
            "/v0/topics/q/extend",
            {"node": "w", "seqs": seqs, "lease_ms": 1000},
        )
        await call("NackResult", "POST", "/v0/topics/q/nack", {"node": "w", "seqs": seqs[:1]})
        await call("AckResult", "POST", "/v0/topics/q/ack", {"node": "w", "seqs": [*seqs[1:], 99]})
        dead = {"type": "queue", "max_deliveries": 1, "dead_letter": "dq.dlq"}
        await call("TopicPutResult", "PUT", "/v0/topics/dq", dead)
        await call("WriteResult", "POST", "/v0/topics/dq", {"records": [{"data": 3}]})
        lost = await call("ClaimResult", "POST", "/v0/topics/dq/claim", {"node": "w"})
        dq_seqs = [job["$seq"] for job in lost["claimed"]]
        await call("NackResult", "POST", "/v0/topics/dq/nack", {"node": "w", "seqs": dq_seqs})
        await call("ClaimResult", "POST", "/v0/topics/dq/claim", {"node": "w"})
        redriven = await call("RedriveResult", "POST", "/v0/topics/dq.dlq/redrive", {})
        assert redriven["moved"] == 1, redriven  # the nacked job: a batch
        await call("RedriveResult", "POST", "/v0/topics/dq.dlq/redrive", {})  # nothing left
        page = await call("TopicList", "GET", "/v0/topics?page_size=1")
        seen.extend(("TopicSummary", s) for s in page["topics"])
        await call("CursorInfo", "PUT", "/v0/topics/t/cursors/g", {"seq": 5})
        await call("CursorInfo", "GET", "/v0/topics/t/cursors/g")
        listed = await call("CursorList", "GET", "/v0/topics/t/cursors")
        seen.extend(("CursorItem", c) for c in listed["cursors"])
        await call("CursorDeleteResult", "DELETE", "/v0/topics/t/cursors/g")
        for dest in ("t2", "t3"):
            await call(
                "RouterPutResult", "PUT", f"/v0/routers/t-{dest}", {"source": "t", "dest": dest}
            )
        routers = await call("RouterList", "GET", "/v0/routers?page_size=1")
        seen.extend(("RouterSummary", r) for r in routers["routers"])
        filtered = {"source": "t", "dest": "t4", "filter": "a", "guarantee": "exactly_once"}
        await call("RouterPutResult", "PUT", "/v0/routers/t-t4", filtered)
        await call("RouterPutResult", "PUT", "/v0/routers/t-t4", filtered)  # unchanged: 200
        await call("RouterState", "GET", "/v0/routers/t-t4")
        await call("RouterState", "GET", "/v0/routers/t-t3")
        await call("RouterDeleteResult", "DELETE", "/v0/routers/t-t2")
        watch = await call("WatchSession", "POST", "/v0/watch", {"topics": {"t": {}}})
        seen.extend(("TopicWatermarks", w) for w in watch["topics"].values())
        await call("WatchSession", "POST", "/v0/watch", {"topic_prefix": {"t": {}}})
        await call("DeleteRecordsResult", "POST", "/v0/topics/t/delete", {"before_seq": 6})
        await call("Ready", "GET", "/v0/ready")
        await call("Ready", "GET", "/readyz")
        await call("TopicDeleteResult", "DELETE", "/v0/topics/t")
    return seen


async def test_the_server_answers_exactly_the_members_the_result_types_declare(
    inproc: InProc, document: dict[str, Any]
) -> None:
    registry: Registry[Any] = Registry().with_resource(
        URI, Resource.from_contents(document, default_specification=DRAFT202012)
    )
    schemas = document["components"]["schemas"]
    shown: dict[str, set[str]] = {name: set() for name in RESULTS}
    shown.update(CursorList=set())
    for name, answer in await _tour(inproc):
        pointer = f"{URI}#/components/schemas/{name}"
        Draft202012Validator({"$ref": pointer}, registry=registry).validate(answer)
        declared = set(schemas[name]["properties"])
        assert set(answer) <= declared, f"{name}: undeclared {set(answer) - declared}"
        assert set(schemas[name].get("required", ())) <= set(answer)
        shown[name] |= set(answer)
    for name, members in shown.items():
        missing = set(schemas[name]["properties"]) - members
        assert not missing, f"{name}: no answer of the tour had {missing}"
