"""Auth over the real server (§0.2): 401/403, scopes per route, prefixes on paths and
listings, ?token= refused, probes, metrics; plus TOPICS_PROBE_AUTH and the per-key
in-flight cap in-process."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import httpx
import pytest
import trio
import trio.testing

from .conftest import InProc, ServerProcess, settings_with

KEYS = ",".join(
    [
        "admin-key",
        "reader:read",
        "writer:w",
        "deleter:delete",
        "adm:admin",
        "tenant:rw+a+d:tenant42:|shared.",
        "multi:r:a.|b.",
    ]
)


@pytest.fixture(scope="module")
def authed(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    server = start_server({"TOPICS_API_KEYS": KEYS})
    with server.client("admin-key") as admin:
        for name in ("open", "tenant42:jobs", "shared.events", "other:x", "a.1", "b.1", "c.1"):
            r = admin.post(f"/v0/topics/{name}", json={"records": [{"data": 1, "tag": "t"}]})
            assert r.status_code == 201, r.text
    return server


def _error(r: httpx.Response, status: int, code: str) -> dict[str, object]:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code
    return error  # type: ignore[no-any-return]


def test_missing_or_unknown_key_is_401(authed: ServerProcess) -> None:
    with authed.client() as anon:
        r = anon.get("/v0/topics")
        _error(r, 401, "unauthorized")
        assert r.headers["www-authenticate"].startswith("Bearer")
        for auth in (
            "Bearer nope",
            "Bearer",
            "Basic YWRtaW4ta2V5Og==",
            "admin-key",
            "Bearer admin-key2",
        ):
            _error(anon.get("/v0/topics", headers={"Authorization": auth}), 401, "unauthorized")
        # 401 wins over 403 and over the body: an unknown key learns nothing
        _error(
            anon.post("/v0/topics/other:x", content=b"junk", headers={"Authorization": "Bearer x"}),
            401,
            "unauthorized",
        )


def test_query_token_is_refused_on_these_routes(authed: ServerProcess) -> None:
    with authed.client() as anon:
        error = _error(anon.get("/v0/topics", params={"token": "admin-key"}), 401, "unauthorized")
        assert "?token=" in str(error["message"])
        _error(
            anon.post("/v0/topics/open/diff", params={"token": "admin-key"}), 401, "unauthorized"
        )


def test_bare_key_has_full_access(authed: ServerProcess) -> None:
    with authed.client("admin-key") as c:
        assert c.put("/v0/topics/adm-made", json={}).status_code == 201
        assert c.post("/v0/topics/adm-made", json={"records": [{"data": 1}]}).status_code == 200
        assert c.post("/v0/topics/adm-made/diff").status_code == 200
        assert c.post("/v0/topics/adm-made/delete", json={"before_seq": 2}).status_code == 200
        assert c.delete("/v0/topics/adm-made").status_code == 200
        assert c.get("/v0/metrics").status_code == 200


@pytest.mark.parametrize(
    ("key", "allowed"),
    [
        ("reader", {"list", "get", "diff", "metrics"}),
        ("writer", {"write"}),
        ("deleter", {"delete_records", "delete_topic"}),
        ("adm", {"put"}),
    ],
)
def test_scopes_per_route(authed: ServerProcess, key: str, allowed: set[str]) -> None:
    calls: dict[str, Callable[[httpx.Client], httpx.Response]] = {
        "list": lambda c: c.get("/v0/topics"),
        "get": lambda c: c.get("/v0/topics/open"),
        "diff": lambda c: c.post("/v0/topics/open/diff"),
        "metrics": lambda c: c.get("/v0/metrics"),
        "write": lambda c: c.post("/v0/topics/open", json={"records": [{"data": 2}]}),
        "delete_records": lambda c: c.post("/v0/topics/open/delete", json={"match": "none"}),
        "delete_topic": lambda c: c.delete("/v0/topics/never-existed"),
        "put": lambda c: c.put("/v0/topics/open", json={}),
    }
    with authed.client(key) as c:
        for name, call in calls.items():
            r = call(c)
            if name in allowed:
                assert r.status_code in (200, 201), (key, name, r.text)
            else:
                error = _error(r, 403, "forbidden")
                assert error["detail"]["missing_scopes"], (key, name)  # type: ignore[index]


def test_prefix_allowlist_on_paths(authed: ServerProcess) -> None:
    with authed.client("tenant") as c:
        assert c.get("/v0/topics/tenant42:jobs").status_code == 200
        assert (
            c.post("/v0/topics/shared.events", json={"records": [{"data": 2}]}).status_code == 200
        )
        assert c.put("/v0/topics/tenant42:new", json={}).status_code == 201
        for r in (
            c.get("/v0/topics/other:x"),
            c.post("/v0/topics/other:x/diff"),
            c.post("/v0/topics/other:x", json={"records": [{"data": 1}]}),
            c.put("/v0/topics/tenant43:x", json={}),
            c.delete("/v0/topics/open"),
            c.post("/v0/topics/other:x/delete", json={"before_seq": 1}),
        ):
            error = _error(r, 403, "forbidden")
            assert "prefix" in str(error["message"])
        # the allowlist is checked before existence: no probing of other tenants' names
        _error(c.get("/v0/topics/other:does-not-exist"), 403, "forbidden")


def test_listing_is_filtered_to_the_allowlist(authed: ServerProcess) -> None:
    with authed.client("tenant") as c:
        names = [t["topic"] for t in c.get("/v0/topics").json()["topics"]]
        assert names
        assert all(n.startswith(("tenant42:", "shared.")) for n in names)
        assert "other:x" not in names
        assert "open" not in names
        assert [
            t["topic"] for t in c.get("/v0/topics", params={"prefix": "shared."}).json()["topics"]
        ] == ["shared.events"]
        empty = c.get("/v0/topics", params={"prefix": "other"}).json()
        assert empty["topics"] == []
        assert "next_cursor" not in empty
    with authed.client("multi") as c:
        seen: list[str] = []
        cursor = None
        for _ in range(20):
            params = {"page_size": "1", **({"cursor": cursor} if cursor else {})}
            body = c.get("/v0/topics", params=params).json()
            seen += [t["topic"] for t in body["topics"]]
            cursor = body.get("next_cursor")
            if cursor is None:
                break
        assert seen == ["a.1", "b.1"]


def test_probes_are_open_and_metrics_needs_read(authed: ServerProcess) -> None:
    with authed.client() as anon:
        assert anon.get("/v0/health").status_code == 200
        assert anon.get("/healthz").status_code == 200
        assert anon.get("/v0/ready").status_code == 200
        assert anon.get("/readyz").status_code == 200
        _error(anon.get("/v0/metrics"), 401, "unauthorized")
    with authed.client("writer") as c:
        _error(c.get("/v0/metrics"), 403, "forbidden")
    with authed.client("reader") as c:
        assert c.get("/v0/metrics").status_code == 200


# -- in-process ------------------------------------------------------------------------


@pytest.mark.parametrize("http_settings", [settings_with("k1,k2:read", probe_auth=True)])
async def test_probe_auth_requires_a_key_on_probes(inproc: InProc) -> None:
    async with inproc.client() as anon:
        for path in ("/v0/health", "/healthz", "/v0/ready", "/readyz"):
            assert (await anon.get(path)).status_code == 401
    async with inproc.client("k2") as c:  # any valid key; no scope needed
        for path in ("/v0/health", "/healthz", "/v0/ready", "/readyz", "/v0/metrics"):
            assert (await c.get(path)).status_code == 200


@pytest.mark.parametrize("http_settings", [settings_with("k1,k2", max_inflight_per_key=1)])
async def test_inflight_cap_per_key_and_release_on_every_end(inproc: InProc) -> None:
    await inproc.engine.put_topic("cap")
    async with inproc.client("k1") as k1, inproc.client("k2") as k2:
        results: dict[str, httpx.Response] = {}

        async def long_poll() -> None:
            head = (await inproc.engine.get_topic("cap")).head_seq
            body = {"from_seq": head, "wait_ms": 30000}
            results["poll"] = await k1.post("/v0/topics/cap/diff", json=body)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(long_poll)
            await trio.testing.wait_all_tasks_blocked()
            r = await k1.get("/v0/topics/cap")
            assert r.status_code == 429
            assert r.json()["error"]["detail"] == {"limit": "max_inflight_per_key", "max": 1}
            assert r.headers["retry-after"]
            assert (await k2.get("/v0/topics/cap")).status_code == 200  # other keys unaffected
            assert (
                await k2.post("/v0/topics/cap", json={"records": [{"data": 1}]})
            ).status_code == 200
        assert results["poll"].status_code == 200  # the write woke it; its slot is back
        assert (await k1.get("/v0/topics/cap")).status_code == 200
        assert (await k1.get("/v0/topics/missing")).status_code == 404  # error ends release too
        assert (
            await k1.post(
                "/v0/topics/cap", content=b"{", headers={"content-type": "application/json"}
            )
        ).status_code == 400
        assert (await k1.get("/v0/topics/cap")).status_code == 200

        async with trio.open_nursery() as nursery:  # a cancelled request releases its slot
            nursery.start_soon(long_poll)
            await trio.testing.wait_all_tasks_blocked()
            assert inproc.app.state.inflight == {0: 1}
            nursery.cancel_scope.cancel()
        assert inproc.app.state.inflight == {}
        assert (await k1.get("/v0/topics/cap")).status_code == 200


@pytest.mark.parametrize("http_settings", [settings_with("", max_inflight_per_key=1)])
async def test_inflight_cap_does_not_apply_without_auth(inproc: InProc) -> None:
    await inproc.engine.put_topic("nocap")
    async with inproc.client() as c, trio.open_nursery() as nursery:
        nursery.start_soon(partial(c.post, "/v0/topics/nocap/diff", json={"wait_ms": 30000}))
        await trio.testing.wait_all_tasks_blocked()
        assert (await c.get("/v0/topics/nocap")).status_code == 200
        nursery.cancel_scope.cancel()
