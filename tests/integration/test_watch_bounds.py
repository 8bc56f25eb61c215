"""Issue 18 on the live surfaces: per-topic from_ts/to_seq with an end frame, where and
cloudevents on POST /v0/watch + SSE and on WebSocket subscribe."""

from __future__ import annotations

import ujson

from topics.wire import cursor

from .conftest import InProc
from .test_watch_sse import Event, is_event, post_watch, records_of, sse, write
from .test_ws import op_is, ws_client


async def test_sse_from_ts_to_seq_where_and_the_end_frame(inproc: InProc) -> None:
    engine = inproc.engine
    async with inproc.client() as http:
        await write(http, "sa", {"k": 1}, {"k": 2})
        inproc.clock.advance(100)
        await write(http, "sa", {"k": 1}, {"k": 2}, {"k": 1})
        await write(http, "sb", {"k": 2})
        ts = (await engine.diff("sa")).records[2].ts
        resolved = (await engine.diff("sa", from_ts=ts)).from_seq
        assert resolved == 2
        body = await post_watch(
            http,
            {
                "topics": {"sa": {"from_ts": ts, "to_seq": 6}, "sb": {}},
                "where": ["data.k", "Eq", 1],
            },
        )
        assert body["topics"]["sa"]["from_seq"] == resolved
        await write(http, "sb", {"k": 1})  # seq 2
        async with sse(inproc, body["wid"]) as client:
            await client.until(lambda: len(client.events("caught-up")) == 2)
            await write(http, "sa", {"k": 1}, {"k": 1})  # seqs 6 and 7: 7 is past the end
            items = await client.read_until(is_event("end-reached"))
            end = next(i for i in items if isinstance(i, Event) and i.event == "end-reached")
            assert ujson.loads(end.data) == {"topic": "sa", "next_from_seq": 6, "head_seq": 7}
            assert cursor.decode(end.id)["sa"] == 6
            await write(http, "sb", {"k": 2}, {"k": 1})  # seqs 3, 4
            await client.read_until(
                lambda i: (
                    isinstance(i, Event)
                    and i.event == "record"
                    and '"sb"' in i.data
                    and '"$seq":4' in i.data
                )
            )
        sa = [
            r["$seq"]
            for e in client.events("record")
            if ujson.loads(e.data)["topic"] == "sa"
            for r in ujson.loads(e.data)["records"]
        ]
        assert sa == [3, 5, 6]
        sb = [s for s in records_of(client) if s not in sa]
        assert sb[-2:] == [2, 4]  # sb's k=2 records (1, 3) were filtered out
        # The ended topic left the session: a new stream on it reads only sb.
        async with sse(inproc, body["wid"]) as again:
            await again.until(lambda: len(again.events("caught-up")) == 1)
            assert ujson.loads(again.events("caught-up")[0].data)["topic"] == "sb"


async def test_sse_cloudevents(inproc: InProc) -> None:
    async with inproc.client() as http:
        await write(http, "ce", {"a": 1})
        body = await post_watch(http, {"topics": {"ce": {}}, "format": "cloudevents"})
        async with sse(inproc, body["wid"]) as client:
            await client.read_until(is_event("record"))
    (ev,) = ujson.loads(client.events("record")[0].data)["records"]
    assert (ev["id"], ev["specversion"], ev["data"]) == ("ce@1", "1.0", {"a": 1})


async def test_post_watch_refuses_bad_bounds(inproc: InProc) -> None:
    async with inproc.client() as http:
        await write(http, "bad", 1)
        for body, field in (
            ({"topics": {"bad": {"from_ts": 1, "from_seq": 1}}}, "topics.bad.from_ts"),
            ({"topics": {"bad": {}}, "where": ["x", "Eq", 1]}, "where"),
            ({"topics": {"bad": {}}, "format": "xml"}, "format"),
        ):
            r = await http.post("/v0/watch", json=body)
            assert r.status_code == 400, r.text
            assert r.json()["error"]["code"] == "invalid_request"
            assert r.json()["error"]["detail"]["field"] == field


async def test_ws_subscribe_with_bounds_where_and_end(inproc: InProc) -> None:
    engine = inproc.engine
    await engine.write("wa", [{"data": {"k": i % 2}} for i in range(6)])
    async with ws_client(inproc) as ws:
        await ws.send(
            {
                "op": "subscribe",
                "request_id": "s1",
                "topic": "wa",
                "from_seq": 1,
                "to_seq": 5,
                "where": ["data.k", "Eq", 0],
            }
        )
        frames = await ws.recv_until(op_is("end_reached"))
        assert frames[0]["op"] == "subscribed"
        got = [r["$seq"] for f in frames if f["op"] == "record" for r in f["records"]]
        assert got == [3, 5]
        assert frames[-1] == {"op": "end_reached", "topic": "wa", "next_from_seq": 5, "head_seq": 6}
        await ws.send(
            {
                "op": "subscribe",
                "topics": {"wa": {"from_ts": 0, "to_seq": 1}},
                "format": "cloudevents",
            }
        )
        frames = await ws.recv_until(op_is("end_reached"))
        (rec,) = [f for f in frames if f["op"] == "record"]
        assert rec["records"][0]["id"] == "wa@1"
        await ws.send({"op": "subscribe", "request_id": "bad", "topic": "wa", "where": 5})
        err = await ws.recv_until(op_is("error"))
        assert err[-1]["request_id"] == "bad"
        assert err[-1]["code"] == "invalid_request"


async def test_ws_end_still_commits_to_the_named_cursor(inproc: InProc) -> None:
    """commit: true commits the frames of the read that reached the end, and the end."""
    engine = inproc.engine
    await engine.write("wc", [{"data": i} for i in range(5)])
    async with ws_client(inproc) as ws:
        await ws.send(
            {"op": "subscribe", "topic": "wc", "cursor": "g", "commit": True, "to_seq": 3}
        )
        await ws.recv_until(op_is("end_reached"))
        await ws.send({"op": "ping", "request_id": "p"})
        await ws.recv_until(op_is("pong"))  # every frame before it has left (and committed)
    assert (await engine.get_cursor("wc", "g")).seq == 3
