"""Named cursors over the real server: PUT/GET/DELETE /v0/topics/:t/cursors/:name, the
listing with lag, diff from a cursor with commit, scopes and the prefix allowlist, and a
SIGKILL of the server (a commit that was answered survives)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.support.server import ServerProcess, spawn_server

KEYS = ",".join(
    [
        "admin-key:admin+rw+d",
        "reader:read",
        "writer:w",
        "deleter:r+d",
        "tenant:rw+a+d:ten.",
    ]
)


def _write(http: httpx.Client, topic: str, n: int) -> None:
    r = http.post(f"/v0/topics/{topic}", json={"records": [{"data": i} for i in range(n)]})
    assert r.status_code in (200, 201), r.text


def test_commit_get_list_delete(http: httpx.Client) -> None:
    _write(http, "cur-a", 5)
    r = http.put("/v0/topics/cur-a/cursors/billing", json={"seq": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    assert {k: body[k] for k in ("topic", "cursor", "seq", "head_seq", "lag")} == {
        "topic": "cur-a",
        "cursor": "billing",
        "seq": 2,
        "head_seq": 5,
        "lag": 3,
    }
    assert http.get("/v0/topics/cur-a/cursors/billing").json()["seq"] == 2
    http.put("/v0/topics/cur-a/cursors/audit", json={"seq": 5})
    listed = http.get("/v0/topics/cur-a/cursors").json()
    assert listed["topic"] == "cur-a"
    assert [(c["cursor"], c["lag"]) for c in listed["cursors"]] == [("audit", 0), ("billing", 3)]
    r = http.delete("/v0/topics/cur-a/cursors/audit")
    assert r.json() == {**r.json(), "deleted": True}
    r = http.get("/v0/topics/cur-a/cursors/audit")
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "cursor_not_found"


def test_compare_and_set_conflict_is_409_and_changes_nothing(http: httpx.Client) -> None:
    _write(http, "cur-cas", 5)
    assert http.put("/v0/topics/cur-cas/cursors/g", json={"seq": 1, "expect_seq": 0}).is_success
    r = http.put("/v0/topics/cur-cas/cursors/g", json={"seq": 4, "expect_seq": 3})
    assert r.status_code == 409
    err = r.json()["error"]
    assert err["code"] == "cursor_conflict"
    assert err["detail"]["seq"] == 1
    assert http.get("/v0/topics/cur-cas/cursors/g").json()["seq"] == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "seq"),
        ({"seq": "1"}, "seq"),
        ({"seq": 99}, "seq"),
        ({"seq": 1, "expect_seq": -1}, "expect_seq"),
        ({"seq": 1, "expected": 0}, "expected"),
    ],
)
def test_bad_commits_are_400(http: httpx.Client, body: dict[str, object], field: str) -> None:
    _write(http, "cur-bad", 3)
    r = http.put("/v0/topics/cur-bad/cursors/g", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_request"
    assert field in r.text
    assert http.get("/v0/topics/cur-bad/cursors/g").status_code == 404


def test_bad_cursor_name_and_missing_topic(http: httpx.Client) -> None:
    _write(http, "cur-name", 1)
    r = http.put("/v0/topics/cur-name/cursors/-x", json={"seq": 0})
    assert r.status_code == 400
    assert http.get("/v0/topics/no-such-topic/cursors").status_code == 404
    r = http.put("/v0/topics/no-such-topic/cursors/g", json={"seq": 0})
    assert r.json()["error"]["code"] == "topic_not_found"


def test_diff_from_a_cursor_with_commit(http: httpx.Client) -> None:
    _write(http, "cur-diff", 5)
    r = http.post("/v0/topics/cur-diff/diff", json={"cursor": "g", "commit": True, "limit": 3})
    assert [rec["$seq"] for rec in r.json()["records"]] == [1, 2, 3]
    assert http.get("/v0/topics/cur-diff/cursors/g").json()["seq"] == 3
    r = http.post("/v0/topics/cur-diff/diff", json={"cursor": "g"})
    assert [rec["$seq"] for rec in r.json()["records"]] == [4, 5]
    assert http.get("/v0/topics/cur-diff/cursors/g").json()["seq"] == 3  # no commit asked
    r = http.post("/v0/topics/cur-diff/diff", json={"cursor": "g", "from_seq": 1})
    assert r.status_code == 400
    r = http.post("/v0/topics/cur-diff/diff", json={"commit": True})
    assert r.status_code == 400


def test_cursors_go_with_their_topic(http: httpx.Client) -> None:
    _write(http, "cur-del", 3)
    http.put("/v0/topics/cur-del/cursors/g", json={"seq": 3})
    assert http.delete("/v0/topics/cur-del").json()["deleted"]
    _write(http, "cur-del", 1)
    assert http.get("/v0/topics/cur-del/cursors").json()["cursors"] == []


@pytest.fixture(scope="module")
def authed(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    server = start_server({"TOPICS_API_KEYS": KEYS})
    with server.client("admin-key") as admin:
        for name in ("open", "ten.jobs"):
            _write(admin, name, 3)
    return server


@pytest.mark.parametrize(
    ("key", "method", "path", "status"),
    [
        ("reader", "GET", "/v0/topics/open/cursors", 200),
        ("reader", "PUT", "/v0/topics/open/cursors/g", 200),
        ("reader", "GET", "/v0/topics/open/cursors/g", 200),
        ("reader", "DELETE", "/v0/topics/open/cursors/g", 403),  # delete needs delete
        ("writer", "PUT", "/v0/topics/open/cursors/g", 403),  # commit needs read
        ("writer", "GET", "/v0/topics/open/cursors", 403),
        ("deleter", "DELETE", "/v0/topics/open/cursors/g", 200),
        ("tenant", "PUT", "/v0/topics/ten.jobs/cursors/g", 200),
        ("tenant", "PUT", "/v0/topics/open/cursors/g", 403),  # outside its allowlist
        ("tenant", "GET", "/v0/topics/open/cursors", 403),
    ],
)
def test_scopes_and_prefix_allowlist(
    authed: ServerProcess, key: str, method: str, path: str, status: int
) -> None:
    with authed.client(key) as c:
        r = c.request(method, path, json={"seq": 1} if method == "PUT" else None)
        assert r.status_code == status, r.text


def test_a_commit_survives_a_sigkill_of_the_server(tmp_path: Path) -> None:
    env = {"TOPICS_ALLOW_INSECURE_NO_AUTH": "1"}
    first = spawn_server(env, "--data-dir", str(tmp_path))
    try:
        with first.client() as c:
            _write(c, "kill", 10)
            c.put("/v0/topics/kill/cursors/g", json={"seq": 3})
            r = c.post("/v0/topics/kill/diff", json={"cursor": "g", "commit": True, "limit": 4})
            assert r.json()["next_from_seq"] == 7
    finally:
        first.stop(signal.SIGKILL)
    second = spawn_server(env, "--data-dir", str(tmp_path))
    try:
        with second.client() as c:
            assert c.get("/v0/topics/kill/cursors/g").json()["seq"] == 7
            r = c.post("/v0/topics/kill/diff", json={"cursor": "g"})
            assert [rec["$seq"] for rec in r.json()["records"]] == [8, 9, 10]
    finally:
        assert second.stop() == 0


def test_metrics_report_lag_per_cursor(http: httpx.Client) -> None:
    _write(http, "cur-metrics", 6)
    http.put("/v0/topics/cur-metrics/cursors/billing", json={"seq": 2})
    snap = http.get("/v0/metrics", headers={"Accept": "application/json"}).json()
    assert snap["topics_cursor_lag"]["cur-metrics"] == {"billing": 4}
    assert snap["topics_cursor_seq"]["cur-metrics"] == {"billing": 2}
    text = http.get("/v0/metrics").text
    assert 'topics_cursor_lag{topic="cur-metrics",cursor="billing"} 4' in text


def test_metrics_show_a_tenant_only_its_own_cursors(authed: ServerProcess) -> None:
    with authed.client("admin-key") as admin:
        admin.put("/v0/topics/open/cursors/m", json={"seq": 1})
        admin.put("/v0/topics/ten.jobs/cursors/m", json={"seq": 1})
    with authed.client("tenant") as tenant:
        snap = tenant.get("/v0/metrics", headers={"Accept": "application/json"}).json()
    assert set(snap["topics_cursor_lag"]) == {"ten.jobs"}
