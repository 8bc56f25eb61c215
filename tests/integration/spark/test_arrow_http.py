"""The diff route's Arrow IPC answer (docs/HTTP.md, extension) against its JSON answer.

Same request, both media types, over a real server: the same records (seq, ts, node,
tag, data and meta text) and the same cursors and tombstone.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.integration.spark.conftest import Server
from tests.integration.spark.helpers import http_put_topic, http_write
from topics.wire.arrow import ARROW_STREAM, decode_diff


def _both(
    url: str, topic: str, body: dict[str, Any]
) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    plain = httpx.post(f"{url}/v0/topics/{topic}/diff", json=body, timeout=30)
    arrow = httpx.post(
        f"{url}/v0/topics/{topic}/diff", json=body, headers={"Accept": ARROW_STREAM}, timeout=30
    )
    assert plain.headers["content-type"].startswith("application/json")
    assert arrow.headers["content-type"] == ARROW_STREAM
    batch, fields = decode_diff(arrow.content)
    return batch.to_pylist(), fields, plain.json()


def _as_json_records(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Arrow rows in the JSON answer's record shape."""
    out = []
    for r in rows:
        rec: dict[str, Any] = {"$seq": r["seq"], "$ts": r["ts"]}
        if r.get("node") is not None:
            rec["$node"] = r["node"]
        if r.get("tag") is not None:
            rec["$tag"] = r["tag"]
        if "data" in r:
            rec["data"] = json.loads(r["data"])
        if r.get("meta") is not None:
            rec["meta"] = json.loads(r["meta"])
        out.append(rec)
    return out


@pytest.mark.parametrize(
    "flags",
    [
        {"include_tags": True},
        {},
        {"include_tags": True, "include_meta": False},
        {"include_data": False},
    ],
)
def test_arrow_answer_equals_the_json_answer(server: Server, flags: dict[str, Any]) -> None:
    topic = "arrow-eq"
    if not httpx.get(f"{server.url}/v0/topics/{topic}", timeout=30).is_success:
        http_write(
            server.url,
            topic,
            [
                {
                    "data": {"i": i, "s": 'é\n"q"', "f": 1.5, "n": None, "l": [i]},
                    "tag": f"t\u00e9{i % 3}" if i % 4 else None,
                    "meta": {"m": i} if i % 2 else None,
                }
                for i in range(250)
            ],
        )
        http_write(server.url, topic, [{"data": None}, {"data": "text"}, {"data": 7}], node="n\x01")
    cursor = 0
    while True:
        body = {"from_seq": cursor, "limit": 100, **flags}
        rows, fields, plain = _both(server.url, topic, body)
        assert _as_json_records(rows) == plain["records"]
        if not flags.get("include_tags"):
            assert "tag" not in (rows[0] if rows else {"tag": 0}) or not rows
        same = {k: v for k, v in plain.items() if k not in ("records", "performance")}
        assert {k: v for k, v in fields.items() if k != "performance"} == same
        cursor = plain["next_from_seq"]
        if plain["caught_up"]:
            break
    assert cursor == 253


def test_arrow_answer_carries_the_tombstone(server: Server) -> None:
    topic = "arrow-capped"
    http_put_topic(server.url, topic, {"cap_records": 10})
    http_write(server.url, topic, [{"data": {"i": i}} for i in range(30)])
    rows, fields, plain = _both(server.url, topic, {"from_seq": 0})
    assert fields["tombstone"] == plain["tombstone"] is not None
    assert fields["tombstone"]["reason"] == "cap"
    assert [r["seq"] for r in rows] == [r["$seq"] for r in plain["records"]]


def test_arrow_answer_of_an_empty_window_and_errors_stay_json(server: Server) -> None:
    http_write(server.url, "arrow-empty", [{"data": 1}])
    rows, fields, plain = _both(server.url, "arrow-empty", {"from_seq": 1})
    assert rows == plain["records"] == []
    assert fields["caught_up"] is True
    missing = httpx.post(
        f"{server.url}/v0/topics/arrow-missing/diff",
        json={},
        headers={"Accept": ARROW_STREAM},
        timeout=30,
    )
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "topic_not_found"


def test_an_arrow_answer_joins_windows_up_to_the_asked_limit(server: Server) -> None:
    """The server's TOPICS_MAX_LIMIT is the default 1000: a JSON answer stops there, an
    Arrow answer joins consecutive windows up to ``limit`` with the same cursors."""
    topic = "arrow-joined"
    for start in range(0, 2500, 500):
        http_write(server.url, topic, [{"data": {"i": i}} for i in range(start, start + 500)])
    http_write(server.url, "arrow-joined-filtered", [{"data": {"k": i % 4}} for i in range(3000)])
    json_rows: list[dict[str, Any]] = []
    cursor = 0
    while True:  # the JSON answers, 1000 records at most each
        page = httpx.post(
            f"{server.url}/v0/topics/{topic}/diff",
            json={"from_seq": cursor, "limit": 2200},
            timeout=30,
        ).json()
        assert len(page["records"]) <= 1000
        json_rows += page["records"]
        cursor = page["next_from_seq"]
        if page["caught_up"]:
            break

    def arrow(topic: str, body: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        answer = httpx.post(
            f"{server.url}/v0/topics/{topic}/diff",
            json=body,
            headers={"Accept": ARROW_STREAM},
            timeout=30,
        )
        batch, fields = decode_diff(answer.content)
        return batch.to_pylist(), fields

    rows, fields = arrow(topic, {"from_seq": 0, "limit": 2200})
    assert [r["seq"] for r in rows] == list(range(1, 2201))
    assert (fields["next_from_seq"], fields["caught_up"]) == (2200, False)
    rest, fields = arrow(topic, {"from_seq": 2200, "limit": 5000})
    assert (fields["next_from_seq"], fields["caught_up"]) == (2500, True)
    assert _as_json_records(rows + rest) == json_rows
    # A byte bound still holds, and a filtered read joins windows by records kept.
    small, fields = arrow(topic, {"from_seq": 0, "limit": 5000, "max_batch_bytes": 20_000})
    assert 0 < len(small) < 2500
    assert fields["next_from_seq"] == small[-1]["seq"]
    where = ["data.k", "Eq", 1]
    kept, fields = arrow("arrow-joined-filtered", {"limit": 5000, "where": where})
    assert [r["seq"] for r in kept] == list(range(2, 3001, 4))
    assert fields["caught_up"] is True
