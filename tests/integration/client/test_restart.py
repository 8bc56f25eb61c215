"""A producer outlives an ordinary restart of its server (issue 34, item 1).

The server is stopped, and two writes (one from ``topics.Client``, one from
``topics.AsyncClient``) start while it is down: their connections are refused. It comes
back on the same port and data directory after longer than the quick retries last
(``RetryPolicy.max_attempts`` ran out after about 3 s before), and each write lands
exactly once: a server that is not there is waited for until the call's own deadline
(docs/CLIENT.md, "Retries and idempotency", rule 5).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

import topics
from tests.support.server import free_port

from .conftest import ServerProcess

pytestmark = pytest.mark.slow

#: How long the server stays down: longer than six quick retries (at most 3.1 s of waits).
DOWN_S = 3.5


def _in_thread(fn: Callable[[], topics.WriteResult]) -> tuple[threading.Thread, list[object]]:
    """Run ``fn`` in a thread; its result or exception lands in the returned list."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_writes_started_while_the_server_restarts_land_exactly_once(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    args = ("--data-dir", str(tmp_path / "data"), "--port", str(free_port()))
    server = start_server({}, *args)
    url, name = server.base_url, "restart-writes"
    with topics.Client(url) as c:
        c.put_topic(name, {"durability": "fsync"})
    assert server.stop() == 0

    def sync_write() -> topics.WriteResult:
        with topics.Client(url, timeout_s=30) as c:
            return c.write(name, [{"data": "sync"}])

    async def async_write() -> topics.WriteResult:
        async with topics.AsyncClient(url, timeout_s=30) as c:
            return await c.write(name, [{"data": "async"}])

    started = time.monotonic()
    writers = [_in_thread(sync_write), _in_thread(lambda: anyio.run(async_write))]
    time.sleep(DOWN_S)  # a real restart: the real time it takes is what is tested
    assert [out for _, out in writers] == [[], []], "a write gave up while the server was down"
    server = start_server({}, *args)  # same port, same data
    for thread, _ in writers:
        thread.join(30)
    results = [out[0] for _, out in writers]
    assert all(isinstance(r, topics.WriteResult) for r in results), results
    assert time.monotonic() - started < 30
    with topics.Client(url) as c:
        page = c.diff(name)
    assert sorted(r.data for r in page.records) == ["async", "sync"]  # each exactly once
    assert page.head_seq == 2
