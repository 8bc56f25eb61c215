"""bench/_c_load.py's parsers of wrk and redis-benchmark output, on captured output (the
tools' formats: wrk 4.1, redis-benchmark 7.0), and its Lua scripts."""

from __future__ import annotations

import _c_load as cl
import pytest

WRK = """Running 3s test @ http://127.0.0.1:4000/v0/topics/bench-s16
  1 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.61ms    1.20ms  12.01ms   80.00%
    Req/Sec     6.00k   300.00     6.50k    70.00%
  Latency Distribution
     50%    2.51ms
     75%    3.00ms
     90%    4.00ms
     99%    8.95ms
  18000 requests in 3.00s, 4.00MB read
Requests/sec:   6000.00
Transfer/sec:      1.33MB
"""


def test_wrk_output_gives_rate_and_percentiles() -> None:
    out = cl.parse_wrk(WRK)
    assert out["requests"] == 18000
    assert out["req_s"] == pytest.approx(6000.0)
    assert (out["p50_ms"], out["p99_ms"]) == (pytest.approx(2.51), pytest.approx(8.95))
    assert out["socket_errors"] == 0


def test_a_wrk_run_with_error_answers_is_void() -> None:
    with pytest.raises(RuntimeError, match="non-2xx"):
        cl.parse_wrk(WRK.replace("Requests/sec", "  Non-2xx or 3xx responses: 12\nRequests/sec"))
    with pytest.raises(RuntimeError, match="unparsable"):
        cl.parse_wrk("wrk: connection refused")


def test_redis_csv_whose_test_name_holds_quotes_and_commas() -> None:
    out = cl.parse_redis_csv(
        '"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",'
        '"p99_latency_ms","max_latency_ms"\n'
        '"XADD s * d {"user":"u-4711","action":"click","n":12345}","85470.09","0.141","0.032",'
        '"0.127","0.223","0.407","7.015"\n'
    )
    assert out == {"req_s": 85470.09, "p50_ms": 0.127, "p99_ms": 0.407}
    with pytest.raises(RuntimeError):
        cl.parse_redis_csv("Could not connect to Redis at 127.0.0.1:1: Connection refused\n")


def test_a_stopped_redis_loop_reports_its_last_overall_rate() -> None:
    progress = (
        "XREVRANGE s + - COUNT 100: rps=0.0 (overall: -nan) avg_msec=-nan (overall: -nan)\r"
        "XREVRANGE s + - COUNT 100: rps=10972.1 (overall: 12837.2) avg_msec=0.618 (overall: 0.514)\r"
        "XREVRANGE s + - COUNT 100: rps=9749.0 (overall: 12321.8) avg_msec=0.689 (overall: 0.537)\r"
    )
    out = cl.parse_redis_loop(progress, 3.0)
    assert out == {"req_s": 12321.8, "avg_ms": 0.537, "seconds": 3.0}
    with pytest.raises(RuntimeError, match="no progress"):
        cl.parse_redis_loop("", 3.0)


def test_lua_scripts() -> None:
    assert 'wrk.body = [[{"records":[]}]]' in cl.lua_post('{"records":[]}')
    with pytest.raises(ValueError):
        cl.lua_post("]]")
    latest = cl.lua_latest(100)
    assert "head - 100" in latest
    assert '"limit":100' in latest
    assert "string.match(body, '\"head_seq\":(%d+)')" in latest


def test_redis_load_commands() -> None:
    counted = cl.redis_load(7000, ["XADD", "k", "*", "d", "x"], conns=16, pipeline=100, requests=5)
    assert counted.kind == "redis-benchmark"
    assert counted.cmd[-8:] == ["-n", "5", "--csv", "XADD", "k", "*", "d", "x"]
    assert counted.cmd[5:9] == ["-c", "16", "-P", "100"]
    loop = cl.redis_load(7000, ["PING"], conns=1, pipeline=1, requests=None)
    assert (loop.kind, loop.cmd[-2:]) == ("redis-benchmark-loop", ["-l", "PING"])
