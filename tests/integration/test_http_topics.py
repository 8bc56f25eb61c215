"""Topic routes over the real server: PUT/GET/DELETE /v0/topics/:topic and GET /v0/topics."""

from __future__ import annotations

import httpx


def test_put_creates_then_is_idempotent_then_updates(http: httpx.Client) -> None:
    r = http.put("/v0/topics/t-put", json={"ttl_ms": 60000, "cap_records": 10, "durable": True})
    assert r.status_code == 201
    body = r.json()
    assert body["topic"] == "t-put"
    assert body["created"] is True
    config = body["config"]
    assert config["ttl_ms"] == 60000
    assert config["cap_records"] == 10
    assert config["durability"] == "fsync"
    assert config["durable"] is True
    assert config["lease_ms"] == 30000
    assert config["dead_letter"] is None
    assert body["performance"]["server_total_ms"] >= 0

    again = http.put("/v0/topics/t-put", json={"ttl_ms": 60000, "cap_records": 10, "durable": True})
    assert again.status_code == 200
    assert again.json()["created"] is False

    changed = http.put("/v0/topics/t-put", json={"cap_records": 20})
    assert changed.status_code == 200
    assert changed.json()["config"]["cap_records"] == 20
    assert changed.json()["config"]["ttl_ms"] == 60000  # fields not named are kept


def test_put_without_body_creates_with_defaults(http: httpx.Client) -> None:
    r = http.put("/v0/topics/t-empty")
    assert r.status_code == 201
    assert r.json()["config"]["type"] == "log"


def test_put_type_change_is_409(http: httpx.Client) -> None:
    assert http.put("/v0/topics/t-type", json={}).status_code == 201
    r = http.put("/v0/topics/t-type", json={"type": "queue"})
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "topic_exists_incompatible"


def test_put_bad_config_is_400(http: httpx.Client) -> None:
    for body in ({"ttl_ms": -1}, {"nonsense": 1}, {"discard": "sometimes"}):
        r = http.put("/v0/topics/t-bad", json=body)
        assert r.status_code == 400, body
        assert r.json()["error"]["code"] == "invalid_request"
    r = http.put("/v0/topics/t-bad", content=b"[1,2]", headers={"content-type": "application/json"})
    assert r.status_code == 400
    r = http.put("/v0/topics/bad%20name", json={})
    assert r.status_code == 400


def test_get_topic_state(http: httpx.Client) -> None:
    http.put("/v0/topics/t-state", json={})
    http.post("/v0/topics/t-state", json={"records": [{"data": 1}, {"data": 2}]})
    r = http.get("/v0/topics/t-state")
    assert r.status_code == 200
    state = r.json()
    assert state["topic"] == "t-state"
    assert state["type"] == "log"
    assert (state["head_seq"], state["earliest_seq"], state["next_seq"], state["count"]) == (
        2,
        1,
        3,
        2,
    )
    assert state["bytes"] > 0
    assert state["config"]["type"] == "log"
    assert state["last_read_ts"] is not None  # touch defaults to true
    assert "queue" not in state
    assert "server_total_ms" in state["performance"]


def test_get_topic_touch_false_does_not_bump_recency(http: httpx.Client) -> None:
    http.put("/v0/topics/t-touch", json={})
    r = http.get("/v0/topics/t-touch", params={"touch": "false"})
    assert r.status_code == 200
    assert r.json()["last_read_ts"] is None
    assert http.get("/v0/topics/t-touch", params={"touch": "maybe"}).status_code == 400


def test_get_missing_topic_is_404(http: httpx.Client) -> None:
    r = http.get("/v0/topics/never-made")
    assert r.status_code == 404
    err = r.json()["error"]
    assert err["code"] == "topic_not_found"
    assert err["detail"] == {"topic": "never-made"}


def test_list_topics_paginates_with_opaque_cursor(http: httpx.Client) -> None:
    names = [f"ls.{i:02d}" for i in range(5)]
    for name in names:
        http.put(f"/v0/topics/{name}", json={})
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, str | int] = {"prefix": "ls.", "page_size": 2}
        if cursor:
            params["cursor"] = cursor
        r = http.get("/v0/topics", params=params)
        assert r.status_code == 200
        body = r.json()
        seen += [t["topic"] for t in body["topics"]]
        pages += 1
        cursor = body.get("next_cursor")
        if cursor is None:
            break
    assert seen == names
    assert pages == 3
    summary = http.get("/v0/topics", params={"prefix": "ls.00"}).json()["topics"][0]
    assert set(summary) >= {
        "topic",
        "head_seq",
        "earliest_seq",
        "count",
        "bytes",
        "durable",
        "effective_priority",
    }


def test_list_topics_rejects_bad_cursor_and_page_size(http: httpx.Client) -> None:
    r = http.get("/v0/topics", params={"cursor": "!!not-a-cursor!!"})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_request"
    assert http.get("/v0/topics", params={"page_size": "ten"}).status_code == 400
    assert http.get("/v0/topics", params={"page_size": "0"}).status_code == 400


def test_delete_topic(http: httpx.Client) -> None:
    http.put("/v0/topics/t-del", json={})
    http.post("/v0/topics/t-del", json={"records": [{"data": 1}]})
    r = http.delete("/v0/topics/t-del", params={"if_empty": "true"})
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "topic_not_empty"
    r = http.delete("/v0/topics/t-del")
    assert r.status_code == 200
    assert r.json()["deleted"] is True
    assert r.json()["routers_removed"] == []
    r = http.delete("/v0/topics/t-del")
    assert r.status_code == 200
    assert r.json()["deleted"] is False
    assert http.get("/v0/topics/t-del").status_code == 404
