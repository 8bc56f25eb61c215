"""SIGKILL a real ``topics-server`` under a WebSocket subscriber, restart it (issue 20 item 3).

One server holds, for each durability class, an *idle* topic (5 records) and a *busy* one
that a writer thread appends 4-record batches to until the kill; a WebSocket subscriber
follows all of them from seq 0. No sleeps: the kill comes once the writer has 40 acks.

* The subscriber's iteration ends with the server (no hang).
* Heads after the restart: an idle topic's is exactly 5, a busy topic's is the last seq
  handed out before the kill: at least every acknowledged and every delivered seq, at most
  one batch (4 seqs: the one request in flight) above the last acknowledged seq. Before
  the heads table (topics/_storage/heads.py) it jumped to the reserved watermark, up to
  4,096 seqs above.
* A new subscriber resuming at the old one's last seq per topic gets ``caught_up`` at
  every topic's head with nothing written after the restart; a ``disk``/``memory`` topic
  may carry one ``crash`` tombstone, ending at its head and covering every acknowledged seq
  it cannot deliver; ``fsync`` and idle topics none; an ``ephemeral`` topic's records are
  gone with the process (reason ``restart``).
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

import topics
from tests.crash.test_server_kill import CLASSES, _start
from tests.support.server import ServerProcess
from topics._storage.heads import boot_id
from topics.client import WatchRecord
from topics.client._transport import ClientConnectionError
from topics.watch_types import CaughtUpEvent, TombstoneEvent

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(boot_id() is None, reason="no boot id on this system: no heads table"),
]

BATCH = 4
ACKS_BEFORE_KILL = 40


class _Writer(threading.Thread):
    """Appends batches round-robin to the busy topics; remembers every acknowledged seq."""

    def __init__(self, server: ServerProcess) -> None:
        super().__init__(daemon=True)
        self.client = server.client()
        self.acked: dict[str, set[int]] = {f"busy-{c}": set() for c in CLASSES}
        self.enough = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        with contextlib.suppress(httpx.HTTPError):
            while not self.stop.is_set():
                name = f"busy-{CLASSES[i % len(CLASSES)]}"
                res = self.client.post(
                    f"/v0/topics/{name}", json={"records": [{"data": i}] * BATCH}
                )
                if res.status_code == 200:
                    body = res.json()
                    self.acked[name].update(range(body["first_seq"], body["last_seq"] + 1))
                i += 1
                if i >= ACKS_BEFORE_KILL:
                    self.enough.set()


class _Subscriber(threading.Thread):
    """One WebSocket session subscribed to ``starts``; keeps every value it receives."""

    def __init__(self, server: ServerProcess, starts: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.client = topics.Client(server.base_url)
        self.ws = self.client.ws()
        self.ws.subscribe(starts)
        self.values: list[Any] = []
        self.ended: BaseException | None = None
        self.changed = threading.Condition()

    def run(self) -> None:
        try:
            for value in self.ws:
                with self.changed:
                    self.values.append(value)
                    self.changed.notify_all()
        except (ClientConnectionError, OSError) as exc:  # (OSError: closed by the test)
            self.ended = exc
        finally:
            with self.changed:
                self.changed.notify_all()

    def caught_up(self, names: list[str], timeout_s: float) -> dict[str, int]:
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while True:
                heads = {v.topic: v.head_seq for v in self.values if isinstance(v, CaughtUpEvent)}
                if set(names) <= set(heads):
                    return heads
                left = deadline - time.monotonic()
                missing = set(names) - set(heads)
                assert left > 0, f"no caught_up for {sorted(missing)} in {timeout_s}s"
                self.changed.wait(left)

    def seqs(self, topic: str) -> list[int]:
        return [
            v.record.seq for v in self.values if isinstance(v, WatchRecord) and v.topic == topic
        ]

    def tombstones(self, topic: str) -> list[dict[str, Any]]:
        return [
            v.tombstone.to_dict()
            for v in self.values
            if isinstance(v, TombstoneEvent) and v.topic == topic
        ]


def test_a_websocket_subscriber_resumes_across_a_sigkill_with_the_truth() -> None:
    data_dir = tempfile.mkdtemp(prefix="topics-kill-ws-")
    names = [f"{k}-{c}" for c in CLASSES for k in ("idle", "busy")]
    server = _start(data_dir)
    try:
        client = server.client()
        for name in names:
            cls = name.split("-", 1)[1]
            res = client.put(f"/v0/topics/{name}", json={"durability": cls})
            assert res.status_code in (200, 201), res.text
        for cls in CLASSES:
            res = client.post(f"/v0/topics/idle-{cls}", json={"records": [{"data": 1}] * 5})
            assert res.json()["last_seq"] == 5
        before = _Subscriber(server, dict.fromkeys(names, 0))
        before.start()
        writer = _Writer(server)
        writer.start()
        assert writer.enough.wait(60), "the writer got no acks"
        server.stop(signal.SIGKILL)
        writer.stop.set()
        writer.join(10)
        before.join(10)
        # (The iteration ends; a connection cut without a close frame does not raise.)
        assert not before.is_alive(), "the subscriber hangs on a dead server"
    finally:
        if server.proc.poll() is None:
            server.stop(signal.SIGKILL)
        if server.proc.stdout is not None:
            server.proc.stdout.close()
    for closable in (before.ws, before.client, writer.client, client):
        closable.close()
    seen = {name: max(before.seqs(name), default=0) for name in names}

    server = _start(data_dir)
    try:
        client = server.client()
        deadline = time.monotonic() + 60  # it listens first, then recovers (503 not_ready)
        while client.get("/v0/ready").status_code != 200:
            assert time.monotonic() < deadline, "the restarted server never got ready"
        heads = {n: client.get(f"/v0/topics/{n}").json()["head_seq"] for n in names}
        for cls in CLASSES:
            assert heads[f"idle-{cls}"] == 5, heads
            busy = f"busy-{cls}"
            last_acked = max(writer.acked[busy])
            assert max(last_acked, seen[busy]) <= heads[busy] <= last_acked + BATCH, (
                busy,
                last_acked,
                seen[busy],
                heads[busy],
            )

        after = _Subscriber(server, seen)
        after.start()
        caught = after.caught_up(names, timeout_s=10)  # nothing was written since
        assert caught == heads
        for name in names:
            tombstones = after.tombstones(name)
            if name.endswith("-ephemeral"):
                assert all(t["reason"] == "restart" for t in tombstones), tombstones
                continue
            if name.startswith("idle-") or name.endswith("-fsync"):
                assert tombstones == [], (name, tombstones)
                continue
            delivered = set(before.seqs(name)) | set(after.seqs(name))
            lost = writer.acked[name] - delivered
            covered = {s for t in tombstones for s in range(t["gap_from"], t["gap_to"] + 1)}
            assert lost <= covered, (name, sorted(lost - covered)[:10])
            for t in tombstones:
                assert (t["reason"], t["gap_to"]) == ("crash", heads[name]), (name, t)
        after.ws.close()
        after.join(10)
        after.client.close()
        client.close()
    finally:
        assert server.stop() == 0, server.stderr()
        if server.proc.stdout is not None:
            server.proc.stdout.close()
