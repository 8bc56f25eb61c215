"""A browser page that watches a topic live with ``EventSource``, served beside the API.

One process, one port: a memory-only engine, the ``/v0`` API and the page at ``/``. The page
must share the API's origin because the server sends no CORS headers (on purpose); in
production a reverse proxy gives the browser that one origin, here a small ASGI wrapper
does. A demo task appends a tick to the topic ``demo`` every second so there is something to
watch. ``demo`` keeps its last 100 records, so a page opened later shows the loss as a
tombstone before the records.

Run: .venv/bin/python examples/browser_eventsource.py            # then open the printed URL
     TOPICS_API_KEYS=s3cret .venv/bin/python examples/browser_eventsource.py   # it asks for the key
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import signal
from collections.abc import Awaitable, Callable, MutableMapping
from functools import partial
from pathlib import Path
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

import topics
from topics.auth import KeyStore
from topics.frontends.http import HttpSettings, TopicsHttpApp, create_app

PAGE = Path(__file__).resolve().parent / "browser" / "index.html"
DEMO_TOPIC = "demo"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class PageBesideApi:
    """ASGI: ``GET /`` is the page; every other request goes to the topics app untouched."""

    def __init__(self, api: TopicsHttpApp, page: bytes) -> None:
        self.api = api
        self.page = page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/" and scope["method"] == "GET":
            headers = [
                (b"content-type", b"text/html; charset=utf-8"),
                (b"cache-control", b"no-cache"),
                # A stream URL may carry ?token=: never let it leave in a Referer header.
                (b"referrer-policy", b"no-referrer"),
            ]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": self.page})
            return
        await self.api(scope, receive, send)


async def write_demo_records(engine: topics.Engine, interval: float) -> None:
    await engine.put_topic(DEMO_TOPIC, {"cap_records": 100})
    lines = itertools.cycle(["tick", "tock"])
    for n in itertools.count(1):
        await engine.write(DEMO_TOPIC, [{"data": {"tick": n, "text": f"{next(lines)} {n}"}}])
        await trio.sleep(interval)


async def stopped(duration: float | None) -> None:
    """Return on Ctrl-C, SIGTERM or after ``duration`` seconds."""
    with (
        trio.move_on_after(duration if duration is not None else math.inf),
        trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals,
    ):
        async for _ in signals:
            return


async def run(port: int, interval: float, duration: float | None) -> None:
    # The variable topics-server reads (unset: dev mode, no keys, loopback only). Popped, as
    # the server does, so the plaintext key does not outlive parsing.
    keys = KeyStore.from_spec(os.environ.pop("TOPICS_API_KEYS", None))
    async with topics.open_engine(None) as engine:
        api = create_app(engine, HttpSettings(keys=keys))
        config = Config()
        config.bind = [f"127.0.0.1:{port}"]
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            app = PageBesideApi(api, PAGE.read_bytes())
            # hypercorn types an ASGI app more narrowly than the plain mappings used here.
            serve_app = partial(serve, app, config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]
            binds = await nursery.start(serve_app)
            print(f"page: {binds[0]}/?topic={DEMO_TOPIC}", flush=True)
            print("open it in a browser; Ctrl-C stops", flush=True)
            async with trio.open_nursery() as demo:
                demo.start_soon(write_demo_records, engine, interval)
                await stopped(duration)
                demo.cancel_scope.cancel()
            # Open streams get a connection-closing frame and end, so hypercorn can drain.
            api.state.begin_shutdown()
            stop.set()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=4010, help="0 picks a free port")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between ticks")
    parser.add_argument("--duration", type=float, help="stop after this many seconds")
    args = parser.parse_args()
    trio.run(run, args.port, args.interval, args.duration)


if __name__ == "__main__":
    main()
