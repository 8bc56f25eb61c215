"""SIGKILL a real ``topics-server`` over HTTP, restart it on the same data directory (issue 20).

One server holds, for each durability class, an *idle* topic (5 records, then nothing) and
a *busy* one (a writer thread appending until the kill). An SSE watcher follows each busy
topic before the kill. After the restart:

* an idle topic keeps its head exactly (the killed process left its head in the heads
  table, storage/heads.py; no wait for the release of ops/durability.py Rule 2a), and reads
  with no tombstone;
* every acknowledged ``fsync`` record survives, and an ``fsync`` topic never reports a
  loss (the seqs a crash skips held nothing anyone was told of: silent);
* a ``disk``/``memory`` topic reports at most a ``crash`` tombstone, never ``cap``, and
  every acknowledged record is either readable or inside its range;
* a watcher resuming at its old cursor, at an idle topic's head, or inside a skipped range
  gets ``caught-up`` at once, with nothing written after the restart.
"""

from __future__ import annotations

import contextlib
import signal
import tempfile
import threading
import time
from typing import Any

import httpx
import pytest
import ujson

from tests.support.server import ServerProcess, spawn_server
from topics.wire.sse import Event, SSEDecoder

pytestmark = pytest.mark.slow

CLASSES = ["ephemeral", "memory", "disk", "fsync"]
ENV = {"TOPICS_ALLOW_INSECURE_NO_AUTH": "1"}


def _start(data_dir: str) -> ServerProcess:
    return spawn_server(ENV, "--data-dir", data_dir)


class _Writer(threading.Thread):
    """Appends batches round-robin to the busy topics; remembers every acknowledged seq."""

    def __init__(self, server: ServerProcess) -> None:
        super().__init__(daemon=True)
        self.client = server.client()
        self.acked: dict[str, set[int]] = {f"busy-{c}": set() for c in CLASSES}
        self.stop = threading.Event()
        self.going = threading.Event()  # set once 200 batches were sent: time to kill

    def run(self) -> None:
        i = 0
        with contextlib.suppress(httpx.HTTPError):
            while not self.stop.is_set():
                name = f"busy-{CLASSES[i % len(CLASSES)]}"
                res = self.client.post(f"/v0/topics/{name}", json={"records": [{"data": i}] * 4})
                if res.status_code == 200:
                    body = res.json()
                    self.acked[name].update(range(body["first_seq"], body["last_seq"] + 1))
                i += 1
                if i == 200:
                    self.going.set()


class _Watcher(threading.Thread):
    """An SSE stream of one session; collects its events until the connection ends."""

    def __init__(self, server: ServerProcess, topics: dict[str, int]) -> None:
        super().__init__(daemon=True)
        client = server.client()
        res = client.post(
            "/v0/watch", json={"topics": {t: {"from_seq": s} for t, s in topics.items()}}
        )
        assert res.status_code in (200, 201), res.text
        self.url = res.json()["stream_url"]
        self.client = client
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.changed = threading.Condition()

    def run(self) -> None:
        decoder = SSEDecoder()
        with (
            contextlib.suppress(httpx.HTTPError),
            self.client.stream("GET", self.url, timeout=None) as res,
        ):
            for chunk in res.iter_bytes():
                for item in decoder.feed(chunk):
                    if isinstance(item, Event) and item.data:
                        with self.changed:
                            self.events.append((item.event, ujson.loads(item.data)))
                            self.changed.notify_all()

    def wait_for(self, event: str, topic: str, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while True:
                for name, data in self.events:
                    if name == event and data.get("topic") == topic:
                        return data
                left = deadline - time.monotonic()
                assert left > 0, f"no {event} for {topic} in {timeout_s}s: {self.events[-5:]}"
                self.changed.wait(left)

    def last_seq(self, topic: str) -> int:
        seqs = [
            r["$seq"]
            for name, data in self.events
            if name == "record" and data["topic"] == topic
            for r in data["records"]
        ]
        return max(seqs, default=0)


def _read_all(client: httpx.Client, topic: str, from_seq: int = 0) -> tuple[list[int], list[Any]]:
    seqs: list[int] = []
    tombstones: list[Any] = []
    while True:
        res = client.post(f"/v0/topics/{topic}/diff", json={"from_seq": from_seq, "limit": 1000})
        assert res.status_code == 200, res.text
        body = res.json()
        if body["tombstone"] is not None:
            tombstones.append(body["tombstone"])
        seqs += [r["$seq"] for r in body["records"]]
        from_seq = body["next_from_seq"]
        if body["caught_up"]:
            return seqs, tombstones


def test_sigkill_keeps_idle_heads_and_reports_only_real_loss() -> None:
    data_dir = tempfile.mkdtemp(prefix="topics-kill-")
    server = _start(data_dir)
    try:
        client = server.client()
        for cls in CLASSES:
            for kind in ("idle", "busy"):
                res = client.put(f"/v0/topics/{kind}-{cls}", json={"durability": cls})
                assert res.status_code in (200, 201), res.text
            res = client.post(f"/v0/topics/idle-{cls}", json={"records": [{"data": 1}] * 5})
            assert res.json()["last_seq"] == 5
        # (No wait for the idle topics to release their reservations, Rule 2a: a killed
        # process leaves the heads table, which keeps every head exactly.)
        watcher = _Watcher(server, {f"busy-{c}": 0 for c in CLASSES})
        watcher.start()
        writer = _Writer(server)
        writer.start()
        assert writer.going.wait(60), "the writer got no acks"
        server.stop(signal.SIGKILL)
        writer.stop.set()
        writer.join(10)
        watcher.join(10)
    finally:
        if server.proc.poll() is None:
            server.stop(signal.SIGKILL)
    seen = {f"busy-{c}": watcher.last_seq(f"busy-{c}") for c in CLASSES}
    assert all(writer.acked[f"busy-{c}"] for c in CLASSES), "the writer never got an ack"

    server = _start(data_dir)
    try:
        client = server.client()
        deadline = time.monotonic() + 60  # it listens first, then recovers (503 not_ready)
        while client.get("/v0/ready").status_code != 200:
            assert time.monotonic() < deadline, "the restarted server never got ready"
        heads = {
            name: client.get(f"/v0/topics/{name}").json()["head_seq"]
            for name in [f"{k}-{c}" for c in CLASSES for k in ("idle", "busy")]
        }
        for cls in CLASSES:
            assert heads[f"idle-{cls}"] == 5, heads  # no write in flight: exactly
            seqs, tombstones = _read_all(client, f"idle-{cls}")
            if cls != "ephemeral":  # (ephemeral records are gone by design)
                assert (seqs, tombstones) == ([1, 2, 3, 4, 5], [])
            busy = f"busy-{cls}"
            acked = writer.acked[busy]
            assert heads[busy] >= max(max(acked), seen[busy])  # no seq handed out twice
            seqs, tombstones = _read_all(client, busy)
            if cls == "ephemeral":
                continue  # nothing of it is stored: its floor moves past the head (rule 6)
            if cls == "fsync":
                assert tombstones == [], tombstones
                assert acked <= set(seqs), sorted(acked - set(seqs))[:10]
            else:
                assert all(t["reason"] == "crash" for t in tombstones), tombstones
                lost = acked - set(seqs)
                covered = {s for t in tombstones for s in range(t["gap_from"], t["gap_to"] + 1)}
                assert lost <= covered, sorted(lost - covered)[:10]

        # Watchers resuming with nothing written since the restart: caught-up at once, from
        # their old cursor, from an idle head, and from inside each busy topic's skip.
        cursors = {f"idle-{c}": 5 for c in CLASSES}
        for cls in CLASSES:
            cursors[f"busy-{cls}"] = seen[f"busy-{cls}"]
        inside = {f"busy-{c}": heads[f"busy-{c}"] - 1 for c in CLASSES}
        for topics in (cursors, inside):
            resumed = _Watcher(server, topics)
            resumed.start()
            for name in topics:
                caught = resumed.wait_for("caught-up", name, timeout_s=5)
                assert caught["head_seq"] == heads[name]
            tombs = [d for e, d in resumed.events if e == "tombstone"]
            for t in tombs:  # (an ephemeral topic's loss is from_seq_too_old on connect)
                assert t["reason"] == "crash" or t["topic"].endswith("-ephemeral"), tombs
                assert not t["topic"].endswith("-fsync"), tombs
            resumed.client.close()
    finally:
        assert server.stop() == 0, server.stderr()
