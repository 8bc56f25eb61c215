"""Router routes (§6) over HTTP: PUT/GET/DELETE /v0/routers/:router and GET /v0/routers,
their errors, scopes and prefix allowlist (§0.2), the topics_routers gauge (§8.3), and
forwarding seen through the dest's diff.

The real server (subprocess) covers the end-to-end path; the in-process app covers auth
and limits deterministically.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trio.testing

from .conftest import InProc, ServerProcess, settings_with


def _error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code
    return error  # type: ignore[no-any-return]


# -- the real server ---------------------------------------------------------------------


def test_put_get_list_delete_and_forwarding(http: httpx.Client) -> None:
    assert http.put("/v0/topics/h.orders", json={}).status_code == 201
    body = {"source": "h.orders", "dest": "h.audit", "filter": ["tag", "Glob", "pub:*"]}
    r = http.put("/v0/routers/h.orders->h.audit", json=body)
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["router"] == "h.orders->h.audit"
    assert created["created"] is True
    assert created["filter"] == ["tag", "Glob", "pub:*"]
    assert (created["guarantee"], created["allow_cycle"]) == ("at_least_once", False)
    assert created["performance"]["server_total_ms"] >= 0
    again = http.put("/v0/routers/h.orders->h.audit", json=body)
    assert (again.status_code, again.json()["created"]) == (200, False)

    records = [{"data": {"n": 1}, "tag": "pub:1", "node": "w1"}, {"data": 2, "tag": "priv"}]
    assert http.post("/v0/topics/h.orders", json={"records": records}).status_code == 200
    diff = http.post("/v0/topics/h.audit/diff", json={"wait_ms": 10_000, "include_tags": True})
    got = diff.json()["records"]
    assert [(r["data"], r["$tag"], r["$node"]) for r in got] == [({"n": 1}, "pub:1", "w1")]

    info = http.get("/v0/routers/h.orders->h.audit").json()
    assert info["forwarded_total"] == 1
    assert info["cursor"] == 2
    listed = http.get("/v0/routers", params={"prefix": "h."}).json()
    assert [r["router"] for r in listed["routers"]] == ["h.orders->h.audit"]
    assert "next_cursor" not in listed

    deleted = http.delete("/v0/routers/h.orders->h.audit")
    assert deleted.json() == {
        "router": "h.orders->h.audit",
        "deleted": True,
        "performance": deleted.json()["performance"],
    }
    assert http.delete("/v0/routers/h.orders->h.audit").json()["deleted"] is False
    _error(http.get("/v0/routers/h.orders->h.audit"), 404, "router_not_found")


def test_errors_have_the_contract_codes(http: httpx.Client) -> None:
    http.put("/v0/topics/e.a", json={})
    _error(http.put("/v0/routers/e.r", json={"source": "e.a"}), 400, "invalid_request")
    _error(
        http.put("/v0/routers/e.r", json={"source": "e.a", "dest": "e.a"}), 400, "invalid_request"
    )
    _error(
        http.put("/v0/routers/e.r", json={"source": "e.a", "dest": "e.b", "x": 1}),
        400,
        "invalid_request",
    )
    _error(http.put("/v0/routers/e.r"), 400, "invalid_request")  # no body: source missing
    _error(
        http.put("/v0/routers/e%20r", json={"source": "e.a", "dest": "e.b"}), 400, "invalid_request"
    )
    body = {"source": "e.none", "dest": "e.b", "create_dest": False}
    err = _error(http.put("/v0/routers/e.r", json=body), 404, "topic_not_found")
    assert err["detail"] == {"topic": "e.b", "field": "dest"}
    _error(http.get("/v0/topics/e.none"), 404, "topic_not_found")  # no source was made
    assert (
        http.put("/v0/routers/e.a->e.b", json={"source": "e.a", "dest": "e.b"}).status_code == 201
    )
    err = _error(
        http.put("/v0/routers/e.b->e.a", json={"source": "e.b", "dest": "e.a"}), 409, "router_cycle"
    )
    assert err["detail"]["cycle"] == ["e.b", "e.a", "e.b"]
    http.put("/v0/topics/e.c", json={})
    err = _error(
        http.put("/v0/routers/e.c->e.b", json={"source": "e.c", "dest": "e.b"}),
        409,
        "topic_exists_incompatible",
    )
    assert err["detail"]["reason"] == "router_dest_fan_in"
    _error(http.get("/v0/routers", params={"cursor": "!!"}), 400, "invalid_request")
    _error(http.post("/v0/routers/e.a->e.b", json={}), 405, "method_not_allowed")


def test_absent_source_and_dest_are_auto_created(http: httpx.Client) -> None:
    r = http.put("/v0/routers/ac.r", json={"source": "ac.src", "dest": "ac.dst"})
    assert (r.status_code, r.json()["created"]) == (201, True), r.text
    for topic in ("ac.src", "ac.dst"):
        state = http.get(f"/v0/topics/{topic}").json()
        assert (state["head_seq"], state["count"]) == (0, 0)
    assert http.post("/v0/topics/ac.src", json={"records": [{"data": 7}]}).status_code == 200
    diff = http.post("/v0/topics/ac.dst/diff", json={"wait_ms": 10_000}).json()
    assert [rec["data"] for rec in diff["records"]] == [7]


def test_auto_create_keeps_to_the_allowlist_and_max_routers(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server(
        {"TOPICS_API_KEYS": "root,tenant::t1.|shared.", "TOPICS_MAX_ROUTERS": "1"}
    )
    with server.client("tenant") as tenant, server.client("root") as root:
        # a source or dest outside the key's prefixes: 403, and nothing is created
        for body in (
            {"source": "other.src", "dest": "t1.d"},
            {"source": "t1.s", "dest": "other.dst"},
        ):
            _error(tenant.put("/v0/routers/t1.x", json=body), 403, "forbidden")
        r = tenant.put("/v0/routers/t1.r", json={"source": "t1.src", "dest": "shared.dst"})
        assert r.status_code == 201, r.text
        # the router cap refuses before anything is auto-created: no phantom topics
        r = root.put("/v0/routers/t1.r2", json={"source": "t1.src2", "dest": "t1.dst2"})
        assert _error(r, 429, "throttled")["detail"] == {"limit": "max_routers", "max": 1}
        names = [t["topic"] for t in root.get("/v0/topics").json()["topics"]]
        assert names == ["shared.dst", "t1.src"]


def test_deleting_a_topic_lists_the_removed_routers(http: httpx.Client) -> None:
    http.put("/v0/topics/c.src", json={})
    http.put("/v0/routers/c.one", json={"source": "c.src", "dest": "c.d1"})
    http.put("/v0/routers/c.two", json={"source": "c.src", "dest": "c.d2"})
    r = http.delete("/v0/topics/c.src")
    assert r.json()["routers_removed"] == ["c.one", "c.two"]
    assert http.get("/v0/routers", params={"prefix": "c."}).json()["routers"] == []


def test_list_pages_with_an_opaque_cursor(http: httpx.Client) -> None:
    http.put("/v0/topics/p.src", json={})
    for i in range(5):
        r = http.put(f"/v0/routers/p.r{i}", json={"source": "p.src", "dest": f"p.d{i}"})
        assert r.status_code == 201
    names: list[str] = []
    cursor = None
    while True:
        params = {"prefix": "p.", "page_size": "2", **({"cursor": cursor} if cursor else {})}
        page = http.get("/v0/routers", params=params).json()
        names += [r["router"] for r in page["routers"]]
        cursor = page.get("next_cursor")
        if cursor is None:
            break
    assert names == [f"p.r{i}" for i in range(5)]
    by_dest = http.get("/v0/routers", params={"dest": "p.d3"}).json()["routers"]
    assert [r["router"] for r in by_dest] == ["p.r3"]
    assert (
        http.get("/v0/routers", params={"source": "p.src"}).json()["routers"][0]["source"]
        == "p.src"
    )


def test_metrics_count_routers(server: ServerProcess) -> None:
    with server.client() as c:
        c.put("/v0/topics/m.src", json={})
        c.put("/v0/routers/m.r", json={"source": "m.src", "dest": "m.dst"})
        stats = c.get("/v0/metrics", headers={"accept": "application/json"}).json()
        assert stats["topics_routers"] >= 1
        text = c.get("/v0/metrics").text
        assert "# TYPE topics_routers gauge" in text


# -- in-process: auth and limits --------------------------------------------------------

KEYS = "admin,reader:read,deleter:d,adm:admin,writer:w,tenant::t1.|shared.,ro1:r:t1."


@pytest.mark.parametrize("http_settings", [settings_with(KEYS)])
async def test_scopes_per_route(inproc: InProc) -> None:
    await inproc.engine.put_topic("t1.src")
    body = {"source": "t1.src", "dest": "t1.dst"}
    async with (
        inproc.client("reader") as reader,
        inproc.client("deleter") as deleter,
        inproc.client("adm") as adm,
        inproc.client("writer") as writer,
        inproc.client("admin") as full,
    ):
        _error(await reader.put("/v0/routers/t1.r", json=body), 403, "forbidden")
        _error(await writer.put("/v0/routers/t1.r", json=body), 403, "forbidden")
        _error(await deleter.put("/v0/routers/t1.r", json=body), 403, "forbidden")
        assert (await adm.put("/v0/routers/t1.r", json=body)).status_code == 201
        assert (await reader.get("/v0/routers/t1.r")).status_code == 200
        assert (await reader.get("/v0/routers")).status_code == 200
        _error(await adm.get("/v0/routers/t1.r"), 403, "forbidden")
        _error(await reader.delete("/v0/routers/t1.r"), 403, "forbidden")
        _error(await adm.delete("/v0/routers/t1.r"), 403, "forbidden")
        assert (await deleter.delete("/v0/routers/t1.r")).json()["deleted"] is True
        async with inproc.client() as anon:
            _error(await anon.get("/v0/routers"), 401, "unauthorized")
        assert (await full.get("/v0/routers")).status_code == 200


@pytest.mark.parametrize("http_settings", [settings_with(KEYS)])
async def test_the_prefix_allowlist_covers_name_source_and_dest(inproc: InProc) -> None:
    engine = inproc.engine
    for topic in ("t1.src", "shared.src", "other.src"):
        await engine.put_topic(topic)
    async with inproc.client("tenant") as tenant, inproc.client("admin") as admin:
        ok = await tenant.put("/v0/routers/t1.r", json={"source": "t1.src", "dest": "shared.d"})
        assert ok.status_code == 201
        # the router name, the source and the dest are each checked, before any change
        err = _error(
            await tenant.put("/v0/routers/other.r", json={"source": "t1.src", "dest": "t1.d"}),
            403,
            "forbidden",
        )
        assert err["detail"] == {"router": "other.r"}
        err = _error(
            await tenant.put("/v0/routers/t1.x", json={"source": "other.src", "dest": "t1.d"}),
            403,
            "forbidden",
        )
        assert err["detail"] == {"source": "other.src"}
        err = _error(
            await tenant.put("/v0/routers/t1.y", json={"source": "t1.src", "dest": "other.d"}),
            403,
            "forbidden",
        )
        assert err["detail"] == {"dest": "other.d"}
        assert engine._registry.get("other.d") is None
        assert engine._registry.get("t1.d") is None
        _error(await tenant.get("/v0/routers/other.r"), 403, "forbidden")
        _error(await tenant.delete("/v0/routers/other.r"), 403, "forbidden")
        # listing shows only routers whose name, source and dest are all allowed
        for name, src, dst in [
            ("t1.leak", "other.src", "t1.leakdst"),
            ("shared.r", "shared.src", "shared.d2"),
            ("other.r", "other.src", "other.d"),
            ("t1.own", "t1.src", "t1.own.d"),
        ]:
            r = await admin.put(f"/v0/routers/{name}", json={"source": src, "dest": dst})
            assert r.status_code == 201
        listed = (await tenant.get("/v0/routers")).json()
        assert [r["router"] for r in listed["routers"]] == ["shared.r", "t1.own", "t1.r"]
        narrowed = (await tenant.get("/v0/routers", params={"prefix": "t1."})).json()
        assert [r["router"] for r in narrowed["routers"]] == ["t1.own", "t1.r"]
        everything = (await admin.get("/v0/routers")).json()
        assert len(everything["routers"]) == 5
    async with inproc.client("ro1") as ro1:  # t1.r feeds shared.d, a name ro1 may not see
        listed = (await ro1.get("/v0/routers")).json()
        assert [r["router"] for r in listed["routers"]] == ["t1.own"]


@pytest.mark.parametrize("http_settings", [settings_with("", max_routers=1)])
async def test_max_routers_is_429_and_creates_no_dest(inproc: InProc) -> None:
    await inproc.engine.put_topic("a")
    async with inproc.client() as c:
        assert (await c.put("/v0/routers/r1", json={"source": "a", "dest": "b"})).status_code == 201
        r = await c.put("/v0/routers/r2", json={"source": "a", "dest": "c"})
        err = _error(r, 429, "throttled")
        assert err["detail"] == {"limit": "max_routers", "max": 1}
        assert "retry-after" in r.headers
        assert inproc.engine._registry.get("c") is None
        again = await c.put(
            "/v0/routers/r1", json={"source": "a", "dest": "b", "preserve_tag": False}
        )
        assert again.status_code == 200


async def test_forwarding_through_the_app_in_process(inproc: InProc) -> None:
    async with inproc.client() as c:
        await c.put("/v0/topics/src", json={})
        await c.put(
            "/v0/routers/src->dst",
            json={"source": "src", "dest": "dst", "guarantee": "exactly_once"},
        )
        raw = b'{"records":[{"data":{"x":1.50},"meta":{"m":[1, 2]}}]}'
        r = await c.post(
            "/v0/topics/src", content=raw, headers={"content-type": "application/json"}
        )
        assert r.status_code == 200
        await trio.testing.wait_all_tasks_blocked()
        page = await c.post("/v0/topics/dst/diff", json={})
        assert b'"data":{"x":1.50}' in page.content  # verbatim through the route
        assert b',"m":[1, 2]}' in page.content
        info = (await c.get("/v0/routers/src->dst")).json()
        assert (info["forwarded_total"], info["guarantee"]) == (1, "exactly_once")
