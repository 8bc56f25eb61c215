"""Probes (§8), readiness, graceful shutdown, CPU-pressure shedding and the 500 path."""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable

import httpx
import pytest
import trio
import trio.testing

from tests.support.server import spawn_server
from topics.frontends.http.pressure import PressureMonitor

from .conftest import InProc, ServerProcess

# -- over the real server ----------------------------------------------------------------


def test_health_and_healthz(http: httpx.Client) -> None:
    for path in ("/v0/health", "/healthz"):
        r = http.get(path)
        assert r.status_code == 200
        body = r.json()
        assert body["status"] == "ok"
        assert body["version"] == "0.1.0"
        assert isinstance(body["uptime_ms"], int)
        assert body["uptime_ms"] >= 0
        assert "server_total_ms" in body["performance"]


def test_ready_and_readyz(http: httpx.Client) -> None:
    http.put("/v0/topics/ready-1", json={})
    for path in ("/v0/ready", "/readyz"):
        r = http.get(path)
        assert r.status_code == 200
        body = r.json()
        assert body["status"] == "ready"
        assert body["wal_replay_complete"] is True
        assert body["topics"] >= 1


def test_metrics_prometheus_text(http: httpx.Client) -> None:
    http.post("/v0/topics/metric-t", json={"records": [{"data": 1}, {"data": 2}]})
    r = http.get("/v0/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = r.text
    assert re.search(r"^topics_topics [1-9][0-9]*$", text, re.M)
    assert 'topics_topic_head_seq{topic="metric-t"} 2' in text
    assert "topics_ready 1" in text
    assert "# TYPE topics_wal_fsync_latency_us histogram" in text
    assert "topics_topic_metrics_truncated 0" in text


def test_metrics_json_snapshot(http: httpx.Client) -> None:
    http.post("/v0/topics/metric-j", json={"records": [{"data": 1}]})
    r = http.get("/v0/metrics", headers={"accept": "application/json"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["topics_topic_head_seq"]["metric-j"] == 1
    assert body["topics_ready"] == 1
    assert "server_total_ms" in body["performance"]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_drains_pending_long_poll_and_exits_zero(sig: int) -> None:
    server = spawn_server()
    try:
        with server.client() as http:
            http.post("/v0/topics/drain", json={"records": [{"data": 1}]})
        result: dict[str, httpx.Response] = {}

        def poll() -> None:
            with server.client() as c:
                result["r"] = c.post(
                    "/v0/topics/drain/diff", json={"from_seq": 1, "wait_ms": 25000}
                )

        thread = threading.Thread(target=poll)
        thread.start()
        time.sleep(0.5)  # let the long poll reach the server
        started = time.monotonic()
        assert server.stop(sig) == 0, server.stderr()
        thread.join(10)
        assert not thread.is_alive()
        r = result["r"]
        assert r.status_code == 200
        assert r.json()["caught_up"] is True
        assert time.monotonic() - started < 10  # answered at shutdown, not after 25 s
    finally:
        if server.proc.poll() is None:
            server.proc.kill()


@pytest.mark.slow
def test_data_dir_survives_restart(
    tmp_path: object, start_server: Callable[..., ServerProcess]
) -> None:
    data = str(tmp_path)
    first = spawn_server({}, "--data-dir", data)
    with first.client() as http:
        raw = b'{"records":[{"data":{"v":1.50}}]}'
        r = http.post("/v0/topics/kept", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 201
    assert first.stop() == 0, first.stderr()
    second = start_server({}, "--data-dir", data)
    with second.client() as http:
        deadline = time.monotonic() + 20
        while http.get("/v0/ready").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        r = http.post("/v0/topics/kept/diff")
        assert r.status_code == 200
        assert b'"data":{"v":1.50}' in r.content


# -- in-process --------------------------------------------------------------------------


async def test_not_ready_answers_503_except_probes(inproc: InProc) -> None:
    await inproc.engine.put_topic("nr")
    inproc.engine._recovery_progress = 0.4  # what a data-dir engine reports mid-replay
    async with inproc.client() as c:
        r = await c.get("/v0/ready")
        assert r.status_code == 503
        error = r.json()["error"]
        assert error["code"] == "not_ready"
        assert error["detail"] == {"replay_progress": 0.4}
        assert r.headers["retry-after"] == "1"
        assert (await c.get("/readyz")).status_code == 503
        for call in (
            c.get("/v0/topics"),
            c.get("/v0/topics/nr"),
            c.put("/v0/topics/nr", json={}),
            c.delete("/v0/topics/nr"),
            c.post("/v0/topics/nr", json={"records": [{"data": 1}]}),
            c.post("/v0/topics/nr/diff"),
            c.post("/v0/topics/nr/delete", json={"before_seq": 1}),
        ):
            r = await call
            assert r.status_code == 503
            assert r.json()["error"]["code"] == "not_ready"
            assert r.headers["retry-after"]
        assert (await c.get("/v0/health")).status_code == 200
        metrics = await c.get("/v0/metrics")
        assert metrics.status_code == 200
        assert "topics_ready 0" in metrics.text
        assert "topics_recovery_progress 0.4" in metrics.text
    inproc.engine._recovery_progress = 1.0


async def test_shutting_down_turns_ready_503(inproc: InProc) -> None:
    async with inproc.client() as c:
        assert (await c.get("/v0/ready")).status_code == 200
        inproc.app.state.begin_shutdown()
        r = await c.get("/v0/ready")
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "shutting_down"
        assert r.headers["retry-after"]
        assert (await c.get("/v0/health")).status_code == 200


async def test_shutdown_ends_pending_long_polls_with_an_answer(inproc: InProc) -> None:
    await inproc.engine.write("lp", [{"data": 1}])
    results: list[httpx.Response] = []
    async with inproc.client() as c:

        async def poll() -> None:
            results.append(
                await c.post("/v0/topics/lp/diff", json={"from_seq": 1, "wait_ms": 30000})
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            nursery.start_soon(poll)
            await trio.testing.wait_all_tasks_blocked()
            assert not results
            inproc.app.state.begin_shutdown()
        assert [r.status_code for r in results] == [200, 200]
        assert all(r.json()["caught_up"] for r in results)
        # a long poll that arrives during the drain does not wait at all
        r = await c.post("/v0/topics/lp/diff", json={"from_seq": 1, "wait_ms": 30000})
        assert r.status_code == 200
        assert r.json()["records"] == []


async def test_cpu_pressure_sheds_with_429_except_probes_and_opted_out_writes(
    inproc: InProc,
) -> None:
    await inproc.engine.write("cpu", [{"data": 1}])
    inproc.app.state.pressure.inject(800.0)
    async with inproc.client() as c:
        for call in (
            c.post("/v0/topics/cpu/diff"),
            c.get("/v0/topics/cpu"),
            c.get("/v0/topics"),
            c.put("/v0/topics/cpu", json={}),
            c.post("/v0/topics/cpu", json={"records": [{"data": 2}]}),
            c.post(
                "/v0/topics/cpu", json={"records": [{"data": 2}], "disable_backpressure": False}
            ),
        ):
            r = await call
            assert r.status_code == 429, r.text
            error = r.json()["error"]
            assert error["code"] == "throttled"
            assert error["detail"] == {"retry_after_ms": 1600}
            assert r.headers["retry-after"] == "2"
        r = await c.post(
            "/v0/topics/cpu", json={"records": [{"data": 3}], "disable_backpressure": True}
        )
        assert r.status_code == 200
        assert r.json()["count"] == 1
        for path in ("/v0/health", "/v0/ready", "/v0/metrics"):
            assert (await c.get(path)).status_code == 200
        inproc.app.state.pressure.inject(None)
        assert (await c.post("/v0/topics/cpu/diff")).status_code == 200


def test_pressure_monitor_smooths_and_bounds_retry() -> None:
    monitor = PressureMonitor(threshold_ms=200.0)
    assert not monitor.throttled()
    monitor.sample(1000.0)  # one long pause (say, a GC): smoothed to 500 > 200
    assert monitor.throttled()
    for _ in range(5):
        monitor.sample(0.0)
    assert not monitor.throttled()
    assert monitor.retry_after_ms() == 100  # never below the floor
    monitor.inject(10_000.0)
    assert monitor.retry_after_ms() == 5000  # never above the ceiling
    assert not PressureMonitor(threshold_ms=0).throttled()  # 0 disables


async def test_pressure_monitor_measures_a_blocked_loop() -> None:
    monitor = PressureMonitor(threshold_ms=50.0, interval_ms=1.0)
    peak: list[float] = []
    sample = monitor.sample

    def record(lag_ms: float) -> None:
        sample(lag_ms)
        peak.append(monitor.lag_ms)

    monitor.sample = record  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(monitor.run)
        await trio.sleep(0.01)
        time.sleep(0.15)  # noqa: ASYNC251  # hog the trio thread: the monitor wakes late
        await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert max(peak) > 50


async def test_unexpected_exceptions_become_a_generic_500(
    inproc: InProc, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("secret internals /etc/passwd")

    monkeypatch.setattr(inproc.engine, "get_topic", boom)
    monkeypatch.setattr(inproc.engine, "diff", boom)
    async with inproc.client() as c:
        for r in (await c.get("/v0/topics/x"), await c.post("/v0/topics/x/diff")):
            assert r.status_code == 500
            body = r.json()
            assert body["error"]["code"] == "internal"
            assert "secret" not in r.text
            assert body["error"]["request_id"] == r.headers["x-request-id"]
    assert "secret internals" in caplog.text  # the operator gets the traceback


async def test_client_disconnect_during_body_is_not_answered(inproc: InProc) -> None:
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return {"type": "http.disconnect"}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v0/topics/gone",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"10")],
        "query_string": b"",
    }
    await inproc.app(scope, receive, send)  # type: ignore[arg-type]
    assert sent == []
    assert inproc.app.state.inflight == {}


async def test_fast_and_quart_paths_share_the_error_mapper(inproc: InProc) -> None:
    async with inproc.client() as c:
        fast = await c.post("/v0/topics/bad name/diff")
        slow = await c.get("/v0/topics/bad name")
    for r in (fast, slow):
        assert r.status_code == 400
        assert set(r.json()) == {"error", "performance"}
        assert r.json()["error"]["code"] == "invalid_request"
