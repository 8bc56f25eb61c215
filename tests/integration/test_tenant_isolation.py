"""Tenant isolation in-process (issue 14): the prefix allowlist over body names, filtered
metrics, and the per-key quotas (topics, routers, watch sessions, streams)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio
import ujson

from .conftest import InProc, settings_with
from .test_ws import WsClient, ws_client

# tenA and tenB are prefix-limited tenants with every scope; ops has no prefixes.
KEYS = "ops,ka::tenA-,kb::tenB-|shared."


def _error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    error: dict[str, Any] = r.json()["error"]
    assert error["code"] == code
    return error


def _names(inproc: InProc) -> list[str]:
    return list(inproc.engine._registry.names)


@pytest.mark.parametrize("http_settings", [settings_with(KEYS)])
async def test_dead_letter_outside_the_allowlist_is_403_and_changes_nothing(
    inproc: InProc,
) -> None:
    queue = {"type": "queue", "lease_ms": 1000, "max_deliveries": 1}
    async with inproc.client("ka") as ka:
        before = _names(inproc)
        r = await ka.post(
            "/v0/topics/tenA-q",
            json={"records": [{"data": 1}], "config": {**queue, "dead_letter": "tenB-secret"}},
        )
        assert _error(r, 403, "forbidden")["detail"] == {"config.dead_letter": "tenB-secret"}
        r = await ka.put("/v0/topics/tenA-q", json={**queue, "dead_letter": "tenB-secret"})
        assert _error(r, 403, "forbidden")["detail"] == {"dead_letter": "tenB-secret"}
        assert _names(inproc) == before  # nothing created, nothing stored
        # an existing queue cannot be re-pointed either
        assert (await ka.put("/v0/topics/tenA-q", json=queue)).status_code == 201
        r = await ka.put("/v0/topics/tenA-q", json={"dead_letter": "tenB-secret"})
        _error(r, 403, "forbidden")
        assert inproc.engine._registry.get("tenA-q").config.dead_letter is None  # type: ignore[union-attr]
        # inside the allowlist it works end to end: the job lands in tenA-dlq
        assert (await ka.put("/v0/topics/tenA-q", json={"dead_letter": "tenA-dlq"})).is_success
        await ka.post("/v0/topics/tenA-q", json={"records": [{"data": "job"}]})
        assert (await ka.post("/v0/topics/tenA-q/claim", json={"node": "w"})).json()["count"] == 1
        inproc.clock.advance(1001)
        assert (await ka.post("/v0/topics/tenA-q/claim", json={"node": "w"})).json()["count"] == 0
        assert inproc.engine._registry.get("tenA-dlq") is not None
        assert not any(n.startswith("tenB-") for n in _names(inproc))


@pytest.mark.parametrize("http_settings", [settings_with(KEYS)])
async def test_watch_and_routers_check_every_body_name(inproc: InProc) -> None:
    engine = inproc.engine
    for name in ("tenA-a", "tenB-b"):
        await engine.put_topic(name)
    async with inproc.client("ka") as ka, inproc.client("ops") as ops:
        r = await ka.post("/v0/watch", json={"topics": {"tenA-a": {}, "tenB-b": {}}})
        assert _error(r, 403, "forbidden")["detail"] == {"topic": "tenB-b"}
        assert engine.watch_statistics().sessions == 0
        r = await ka.put("/v0/routers/tenA-r", json={"source": "tenA-a", "dest": "tenB-new"})
        assert _error(r, 403, "forbidden")["detail"] == {"dest": "tenB-new"}
        assert engine._registry.get("tenB-new") is None
        # a router another key pointed across tenants: not readable or deletable by tenA
        assert (
            await ops.put("/v0/routers/tenA-leak", json={"source": "tenB-b", "dest": "tenA-a"})
        ).status_code == 201
        err = _error(await ka.get("/v0/routers/tenA-leak"), 403, "forbidden")
        assert err["detail"] == {"router": "tenA-leak", "field": "source"}
        assert "tenB" not in str(err)  # the foreign name is not repeated
        _error(await ka.delete("/v0/routers/tenA-leak"), 403, "forbidden")
        assert (await ops.get("/v0/routers/tenA-leak")).status_code == 200
        assert (await ka.delete("/v0/routers/tenA-none")).json()["deleted"] is False


@pytest.mark.parametrize("http_settings", [settings_with(KEYS)])
async def test_ws_publish_config_and_subscribe_are_checked(inproc: InProc) -> None:
    await inproc.engine.put_topic("tenB-b")
    async with ws_client(inproc, "ka") as ws:
        await ws.send(
            {
                "op": "publish",
                "request_id": "p",
                "topic": "tenA-q",
                "config": {"type": "queue", "max_deliveries": 1, "dead_letter": "tenB-secret"},
                "records": [{"data": 1}],
            }
        )
        err = await ws.recv()
        assert (err["request_id"], err["code"]) == ("p", "forbidden")
        assert err["detail"] == {"config.dead_letter": "tenB-secret"}
        await ws.send({"op": "subscribe", "request_id": "s", "topic": "tenB-b"})
        err = await ws.recv()
        assert (err["code"], err["detail"]) == ("forbidden", {"topic": "tenB-b"})
        await ws.send({"op": "ping", "request_id": "alive"})
        assert (await ws.recv())["op"] == "pong"
    assert inproc.engine._registry.get("tenA-q") is None


@pytest.mark.parametrize("http_settings", [settings_with(KEYS, metrics_max_topics=2)])
async def test_metrics_show_a_scoped_key_only_its_topics(inproc: InProc) -> None:
    engine = inproc.engine
    for name in ("aaa-first", "shared.x", "tenA-1", "tenA-2", "tenA-3", "tenB-1"):
        await engine.write(name, [{"data": 1}])
    json_accept = {"accept": "application/json"}
    async with inproc.client("ka") as ka, inproc.client("ops") as ops:
        mine = (await ka.get("/v0/metrics", headers=json_accept)).json()
        assert sorted(mine["topics_topic_head_seq"]) == ["tenA-1", "tenA-2"]  # capped at 2
        assert mine["topics_topic_metrics_truncated"] == 1  # tenA-3 left out
        assert mine["topics_topics"] == 6  # aggregates stay server-wide (docs/OPERATIONS.md)
        text = (await ka.get("/v0/metrics")).text
        assert 'topic="tenA-1"' in text
        for foreign in ("tenB", "shared.", "aaa-first"):
            assert foreign not in text
        everything = (await ops.get("/v0/metrics", headers=json_accept)).json()
        assert sorted(everything["topics_topic_head_seq"]) == ["aaa-first", "shared.x"]
    async with inproc.client("kb") as kb:
        theirs = (await kb.get("/v0/metrics", headers=json_accept)).json()
        assert sorted(theirs["topics_topic_head_seq"]) == ["shared.x", "tenB-1"]
        assert theirs["topics_topic_metrics_truncated"] == 0


# -- per-key quotas (§11) --------------------------------------------------------------------


@pytest.mark.parametrize("http_settings", [settings_with(KEYS, max_topics_per_key=2)])
async def test_topic_quota_covers_every_creation_path(inproc: InProc) -> None:
    engine = inproc.engine
    async with inproc.client("ka") as ka, inproc.client("kb") as kb:
        assert (await ka.put("/v0/topics/tenA-1", json={})).status_code == 201
        assert (await ka.post("/v0/topics/tenA-2", json={"records": [{"data": 1}]})).is_success
        for r in (
            await ka.put("/v0/topics/tenA-3", json={}),
            await ka.post("/v0/topics/tenA-3", json={"records": [{"data": 1}]}),
            await ka.put("/v0/routers/tenA-r", json={"source": "tenA-1", "dest": "tenA-3"}),
        ):
            err = _error(r, 429, "throttled")
            assert err["detail"] == {"limit": "max_topics_per_key", "max": 2}
            assert r.headers["retry-after"]
        assert engine.router_count == 0  # refused before anything was stored
        assert (await ka.put("/v0/topics/tenA-1", json={"ttl_ms": 5})).status_code == 200
        # another tenant's namespace is its own; deleting frees quota at once
        assert (await kb.put("/v0/topics/tenB-1", json={})).status_code == 201
        assert (await ka.delete("/v0/topics/tenA-2")).json()["deleted"] is True
        assert (await ka.put("/v0/topics/tenA-3", json={})).status_code == 201
    async with ws_client(inproc, "ka") as ws:
        await ws.send(
            {"op": "publish", "request_id": "p", "topic": "tenA-4", "records": [{"data": 1}]}
        )
        err = await ws.recv()
        assert err["code"] == "throttled", err
        assert err["detail"]["limit"] == "max_topics_per_key"
    async with inproc.client("ops") as ops:  # a key without prefixes is bounded by max_topics
        for i in range(3):
            assert (await ops.put(f"/v0/topics/free-{i}", json={})).status_code == 201


@pytest.mark.parametrize("http_settings", [settings_with(KEYS, max_topics_per_key=2)])
async def test_dead_letter_auto_create_respects_the_quota(inproc: InProc) -> None:
    queue = {"type": "queue", "lease_ms": 1000, "max_deliveries": 1, "dead_letter": "tenA-dlq"}
    async with inproc.client("ka") as ka:
        assert (await ka.put("/v0/topics/tenA-q", json=queue)).status_code == 201
        assert (await ka.put("/v0/topics/tenA-other", json={})).status_code == 201
        await ka.post("/v0/topics/tenA-q", json={"records": [{"data": 1}]})
        await ka.post("/v0/topics/tenA-q/claim", json={"node": "w"})
        inproc.clock.advance(1001)
        # the dead-letter topic would be the third: it is not created, the job stays put
        r = await ka.post("/v0/topics/tenA-q/claim", json={"node": "w"})
        assert r.json()["count"] == 0
        assert inproc.engine._registry.get("tenA-dlq") is None
        state = (await ka.get("/v0/topics/tenA-q")).json()
        assert (state["count"], state["queue"]["dead_lettered"]) == (1, 0)
        # once the namespace has room the next claim moves it
        assert (await ka.delete("/v0/topics/tenA-other")).json()["deleted"] is True
        assert (await ka.post("/v0/topics/tenA-q/claim", json={"node": "w"})).json()["count"] == 0
        state = (await ka.get("/v0/topics/tenA-q")).json()
        assert (state["count"], state["queue"]["dead_lettered"]) == (0, 1)
        assert inproc.engine._registry.get("tenA-dlq") is not None


@pytest.mark.parametrize("http_settings", [settings_with(KEYS, max_routers_per_key=1)])
async def test_router_quota_is_per_namespace(inproc: InProc) -> None:
    for name in ("tenA-s", "tenB-s"):
        await inproc.engine.put_topic(name)
    async with inproc.client("ka") as ka, inproc.client("kb") as kb:
        body = {"source": "tenA-s", "dest": "tenA-d"}
        assert (await ka.put("/v0/routers/tenA-r1", json=body)).status_code == 201
        assert (await ka.put("/v0/routers/tenA-r1", json=body)).status_code == 200  # update
        r = await ka.put("/v0/routers/tenA-r2", json={"source": "tenA-s", "dest": "tenA-e"})
        assert _error(r, 429, "throttled")["detail"] == {"limit": "max_routers_per_key", "max": 1}
        assert inproc.engine._registry.get("tenA-e") is None  # no phantom dest
        r = await kb.put("/v0/routers/tenB-r1", json={"source": "tenB-s", "dest": "tenB-d"})
        assert r.status_code == 201


@pytest.mark.parametrize("http_settings", [settings_with(KEYS, max_watch_sessions_per_key=1)])
async def test_watch_session_quota_is_per_key(inproc: InProc) -> None:
    for name in ("tenA-a", "tenB-b"):
        await inproc.engine.put_topic(name)
    async with inproc.client("ka") as ka, inproc.client("kb") as kb:
        assert (await ka.post("/v0/watch", json={"topics": {"tenA-a": {}}})).status_code == 200
        r = await ka.post("/v0/watch", json={"topics": {"tenA-a": {}}})
        err = _error(r, 429, "throttled")
        assert err["detail"] == {"limit": "max_watch_sessions_per_key", "max": 1}
        assert (await kb.post("/v0/watch", json={"topics": {"tenB-b": {}}})).status_code == 200


@pytest.mark.parametrize("http_settings", [settings_with(KEYS, max_sse_connections_per_key=1)])
async def test_ws_sse_and_work_streams_share_the_per_key_cap(inproc: InProc) -> None:
    await inproc.engine.put_topic("tenA-a")
    await inproc.engine.put_topic("tenA-q", {"type": "queue"})
    async with inproc.client("ka") as ka:
        wid = (await ka.post("/v0/watch", json={"topics": {"tenA-a": {}}})).json()["wid"]
        async with ws_client(inproc, "ka") as ws:
            assert ws.accepted
            sse = await ka.get(f"/v0/watch/{wid}", headers={"accept": "text/event-stream"})
            limit = {"limit": "max_sse_connections_per_key", "max": 1}
            assert _error(sse, 429, "throttled")["detail"] == limit
            work = await ka.get(
                "/v0/topics/tenA-q/work",
                params={"node": "w"},
                headers={"accept": "text/event-stream"},
            )
            assert _error(work, 429, "throttled")["detail"] == limit
            second = WsClient(inproc, [(b"authorization", b"Bearer ka")])
            async with trio.open_nursery() as nursery:
                await second.run(nursery)
            assert second.status == 429
            assert ujson.loads(second.body)["error"]["detail"] == limit
            other = WsClient(inproc, [(b"authorization", b"Bearer kb")])  # other keys: free
            async with trio.open_nursery() as nursery:
                await other.run(nursery)
                assert other.accepted
                await other.disconnect()
                nursery.cancel_scope.cancel()


async def test_quotas_default_to_unlimited(inproc: InProc) -> None:
    limits = inproc.engine.limits
    assert (limits.max_topics_per_key, limits.max_routers_per_key) == (0, 0)
    assert limits.max_watch_sessions_per_key == 0
    assert inproc.engine._quotas is None
