"""topics over HTTP with ``topics.Client``: the embedded API, remote.

Starts its own memory-only ``topics-server`` on a free port, runs a short tour and stops it.

Run: .venv/bin/python examples/http_client.py
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

import topics
from topics.client import WatchRecord
from topics.watch_types import CaughtUpEvent, TombstoneEvent


@contextlib.contextmanager
def server() -> Iterator[str]:
    """A memory-only topics-server on a free loopback port; yields its URL."""
    cmd = [sys.executable, "-m", "topics.frontends.server", "--port", "0", "--memory"]
    env = {**os.environ, "TOPICS_LOG_LEVEL": "ERROR"}  # no dev-mode banner in the tour
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "topics-server listening on http://127.0.0.1:PORT"
        if "listening on" not in line:
            raise RuntimeError(f"topics-server did not start: {line!r}")
        yield line.rsplit(" ", 1)[1].strip()
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    with server() as url, topics.Client(url) as db:  # the one line that differs from embedded
        db.put_topic("orders", {"cap_records": 5})
        for i in range(8):
            db.write("orders", [{"data": {"order": i}, "tag": f"customer-{i % 3}"}])
        # Bytes are JSON text, sent verbatim: 19.90 stays 19.90 on the wire and on disk.
        db.write("orders", [{"data": b'{"order": 8, "total": 19.90}'}])

        page = db.diff("orders", from_seq=0)
        print("tombstone:", page.tombstone)  # the cap evicted 1..4: an explicit gap
        for rec in page.records:
            print(f"  seq={rec.seq} tag={rec.tag} data={rec.data}")
        print("raw:", page.records_json[-40:])

        try:
            db.get_topic("no-such-topic")
        except topics.TopicNotFoundError as exc:
            print(f"error: {exc.code}: {exc} (request id {exc.request_id})")  # type: ignore[attr-defined]

        # Live: watch from a cursor; records, loss and "caught up" arrive as values.
        with db.watch({"orders": page.next_from_seq - 2}) as events:
            for ev in events:
                if isinstance(ev, WatchRecord):
                    print(f"  live seq={ev.seq} data={ev.data}")
                elif isinstance(ev, TombstoneEvent):
                    print("  lost:", ev.tombstone)
                elif isinstance(ev, CaughtUpEvent):
                    print("  caught up at", ev.head_seq)
                    break
        print("state:", db.get_topic("orders").count, "records")


if __name__ == "__main__":
    main()
