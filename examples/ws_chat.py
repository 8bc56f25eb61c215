"""A chat room over the WebSocket data plane (``/v0/ws``) with ``topics.AsyncClient``.

Starts its own memory-only ``topics-server``; Alice and Bob each open one WebSocket,
subscribe to the room (with their node id, so nobody hears their own echo), and talk.
Runs under trio (``anyio`` would run it under asyncio just the same).

Run: .venv/bin/python examples/ws_chat.py
"""

from __future__ import annotations

import trio
from http_client import server  # the same throwaway-server helper

import topics
from topics.client import WatchRecord

SCRIPT = [("alice", "hi bob"), ("bob", "hi alice!"), ("alice", "bye")]


async def person(url: str, me: str, heard: list[str], ready: trio.Event, go: trio.Event) -> None:
    async with topics.AsyncClient(url) as client, await client.ws() as ws:
        await ws.subscribe("room:lobby", tail=True, node=me)  # skip my own messages
        ready.set()
        await go.wait()
        mine = [text for who, text in SCRIPT if who == me]
        others = len(SCRIPT) - len(mine)
        for text in mine:
            await ws.publish("room:lobby", [{"data": {"from": me, "text": text}}], node=me)
        async for ev in ws:
            if isinstance(ev, WatchRecord):
                heard.append(f"{me} heard {ev.data['from']}: {ev.data['text']}")
                others -= 1
                if others == 0:
                    return


async def chat(url: str) -> None:
    async with topics.AsyncClient(url) as client:
        await client.put_topic("room:lobby", {"durability": "memory"})
    heard: list[str] = []
    go = trio.Event()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            ready = [trio.Event(), trio.Event()]
            nursery.start_soon(person, url, "alice", heard, ready[0], go)
            nursery.start_soon(person, url, "bob", heard, ready[1], go)
            for r in ready:
                await r.wait()
            go.set()
    for line in heard:
        print(line)


def main() -> None:
    with server() as url:
        trio.run(chat, url)


if __name__ == "__main__":
    main()
