"""``watch(..., wait_for_topic=True)`` (issue 34, item 1): a watch of a topic that does not
exist yet waits for it (the CLI's ``tail --wait``, one implementation in
topics/client/_topic_wait.py) and then reads it from its first record, even when asked to
tail, since everything in it was written after the watch began. Without it the watch still
raises ``topic_not_found`` at once."""

from __future__ import annotations

import threading

import anyio
import httpx
import pytest

import topics
from topics.client import WatchRecord

from .conftest import ServerProcess, unique


def _create_later(url: str, name: str, absent: threading.Event) -> threading.Thread:
    """Once ``absent`` is set (the watch asked for the topic and was answered 404), create
    ``name`` with two records in one write."""

    def run() -> None:
        assert absent.wait(10)
        with topics.Client(url) as c:
            c.write(name, [{"data": 1, "tag": "first"}, {"data": 2}])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _saw_404(request: httpx.Request, response: httpx.Response, absent: threading.Event) -> None:
    if request.method == "GET" and response.status_code == 404:
        absent.set()


class Spy(httpx.BaseTransport):
    """The real server, telling ``absent`` when a topic lookup was answered 404."""

    def __init__(self, absent: threading.Event) -> None:
        self.inner, self.absent = httpx.HTTPTransport(), absent

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        _saw_404(request, response, self.absent)
        return response


class AsyncSpy(httpx.AsyncBaseTransport):
    """:class:`Spy` for the async client."""

    def __init__(self, absent: threading.Event) -> None:
        self.inner, self.absent = httpx.AsyncHTTPTransport(), absent

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        _saw_404(request, response, self.absent)
        return response


def test_without_waiting_a_missing_topic_raises(server: ServerProcess) -> None:
    with topics.Client(server.base_url) as c, pytest.raises(topics.TopicNotFoundError):
        next(iter(c.watch([unique("absent")])))


def test_sync_watch_waits_for_a_topic_created_after_it_started(server: ServerProcess) -> None:
    name = unique("later")
    absent = threading.Event()
    writer = _create_later(server.base_url, name, absent)
    got: list[WatchRecord] = []
    with (
        topics.Client(server.base_url, transport=Spy(absent)) as c,
        c.watch([name], tail=True, wait_for_topic=True) as events,
    ):
        for ev in events:
            if isinstance(ev, WatchRecord):
                got.append(ev)
                if len(got) == 2:
                    break
    writer.join(10)
    assert absent.is_set()
    assert [(e.seq, e.data, e.record.tag) for e in got] == [(1, 1, "first"), (2, 2, None)]


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_async_watch_waits_for_a_topic_created_after_it_started(
    backend: str, server: ServerProcess
) -> None:
    name = unique("alater")
    absent = threading.Event()
    writer = _create_later(server.base_url, name, absent)

    async def main() -> list[WatchRecord]:
        got: list[WatchRecord] = []
        async with (
            topics.AsyncClient(server.base_url, transport=AsyncSpy(absent)) as c,
            c.watch([name], tail=True, wait_for_topic=True) as events,
        ):
            async for ev in events:
                if isinstance(ev, WatchRecord):
                    got.append(ev)
                    if len(got) == 2:
                        break
        return got

    got = anyio.run(main, backend=backend)
    writer.join(10)
    assert absent.is_set()
    assert [(e.seq, e.data) for e in got] == [(1, 1), (2, 2)]
