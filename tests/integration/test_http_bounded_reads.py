"""Issue 18 over the real server: from_ts/to_ts/to_seq, where and CloudEvents on diff."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from .test_openapi import contract


def write(http: httpx.Client, topic: str, *records: dict[str, Any]) -> None:
    r = http.post(f"/v0/topics/{topic}", json={"records": list(records)})
    assert r.status_code in (200, 201), r.text


def diff(http: httpx.Client, topic: str, **body: Any) -> dict[str, Any]:
    r = http.post(f"/v0/topics/{topic}/diff", json=body)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = contract().check("POST", "/v0/topics/{topic}/diff", r)
    return out


def test_from_ts_echoes_the_resolved_seq_and_to_seq_ends_the_read(http: httpx.Client) -> None:
    for i in range(1, 6):
        write(http, "hb-time", {"data": {"i": i}})
    recs = diff(http, "hb-time")["records"]
    ts3 = recs[2]["$ts"]
    first_at_ts3 = next(r["$seq"] for r in recs if r["$ts"] >= ts3)
    body = diff(http, "hb-time", from_ts=ts3)
    assert body["from_seq"] == first_at_ts3 - 1
    assert [r["$seq"] for r in body["records"]] == list(range(first_at_ts3, 6))
    assert "end_reached" not in body
    body = diff(http, "hb-time", from_seq=1, to_seq=3)
    assert [r["$seq"] for r in body["records"]] == [2, 3]
    assert body["end_reached"] is True
    assert body["caught_up"] is True
    assert body["next_from_seq"] == 3
    assert body["head_seq"] == 5
    body = diff(http, "hb-time", to_ts=recs[-1]["$ts"], limit=2)
    assert body["end_reached"] is False
    assert body["caught_up"] is False


def test_where_filters_and_the_cursor_passes_refused_records(http: httpx.Client) -> None:
    write(
        http,
        "hb-where",
        {"data": {"kind": "refund", "amount": 10}},
        {"data": {"kind": "sale", "amount": 20}},
        {"data": {"kind": "refund", "amount": 30}, "meta": {"src": "pos"}},
        {"data": {"kind": "sale"}},
    )
    body = diff(http, "hb-where", where=["data.kind", "Eq", "refund"])
    assert [r["$seq"] for r in body["records"]] == [1, 3]
    assert body["next_from_seq"] == 4
    assert body["caught_up"] is True
    body = diff(
        http,
        "hb-where",
        where=["or", [["data.amount", "Ge", 20], ["meta.src", "Exists"]]],
        limit=3,
    )
    assert [r["$seq"] for r in body["records"]] == [2, 3]
    assert body["performance"]["records_scanned"] == 3


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"where": ["data.kind", "Like", "x"]}, "where"),
        ({"where": ["and", "x"]}, "where"),
        ({"from_ts": "yesterday"}, "from_ts"),
        ({"from_ts": 5, "from_seq": 2}, "from_ts"),
        ({"to_seq": -1}, "to_seq"),
        ({"format": "xml"}, "format"),
    ],
)
def test_bad_bounds_are_400_invalid_request(
    http: httpx.Client, body: dict[str, Any], field: str
) -> None:
    write(http, "hb-bad", {"data": 1})
    r = http.post("/v0/topics/hb-bad/diff", json=body)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "invalid_request"
    assert err["detail"]["field"] == field
    assert field in err["message"]


def test_cloudevents_format(http: httpx.Client) -> None:
    raw = b'{"records":[{"data":{"amount":1.50},"meta":{"type":"refund.created"},"tag":"c:1"}]}'
    r = http.post("/v0/topics/hb-ce", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 201
    r = http.post("/v0/topics/hb-ce/diff", json={"format": "cloudevents"})
    assert r.status_code == 200
    assert b'"data":{"amount":1.50}' in r.content  # spliced verbatim
    body = contract().check("POST", "/v0/topics/{topic}/diff", r)
    (ev,) = body["records"]
    assert ev["specversion"] == "1.0"
    assert ev["id"] == "hb-ce@1"
    assert ev["source"] == "/v0/topics/hb-ce"
    assert ev["type"] == "refund.created"
    assert ev["subject"] == "c:1"
    assert ev["time"].endswith("Z")
    assert body["next_from_seq"] == 1
