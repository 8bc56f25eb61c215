"""The Spark source across a server SIGKILL and restart (issue 20 item 3).

A ``disk`` topic holds 5 records that reached the WAL file (an ``fsync`` write after them
is acknowledged only once everything before it is synced); the server is killed at once,
inside the 100 ms reservation window, and restarted on the same port. A Structured
Streaming query that read 1..5 before the kill goes on with the default ``on_gap=fail``:

* nothing was lost, so there is no tombstone: the next run reads exactly 6..11, the
  records written before and after the restart (before the heads table, a kill within
  100 ms of the write made the head jump to 4,101, and a ``crash`` tombstone over
  9..4101 failed the query);
* when recovery cannot know how far the seqs went (the topic was being written at the
  kill, and the heads file is removed, as a power loss would make it untrustworthy), the
  query fails at once naming the range a ``crash`` may have taken, ending at the new
  head, instead of stalling or passing over it.
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from pyspark.sql import DataFrame, SparkSession

from tests.integration.spark.conftest import Server, start_server, stop_server
from tests.integration.spark.helpers import http_put_topic, http_write
from topics._storage.heads import HEADS_FILE, boot_id

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(boot_id() is None, reason="no boot id on this system: no heads table"),
]


class _Sink:
    def __init__(self) -> None:
        self.seqs: list[int] = []

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self.seqs += sorted(r.seq for r in df.select("seq").collect())


def _stream(spark: SparkSession, url: str, checkpoint: Path, sink: _Sink) -> None:
    query = (
        spark.readStream.format("topics")
        .option("url", url)
        .option("topic", "events")
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def _kill_and_restart(server: Server, forget_heads: bool = False) -> Server:
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(30)
    if server.proc.stdout is not None:
        server.proc.stdout.close()
    if forget_heads:
        (server.data_dir / HEADS_FILE).unlink()
    port = urlsplit(server.url).port
    assert port is not None
    restarted = start_server(server.data_dir, port)
    _wait_ready(restarted.url)
    return restarted


def _wait_ready(url: str, timeout_s: float = 60) -> None:
    """Until recovery is done: the server listens first, then answers 503 not_ready."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(base_url=url) as client:
        while client.get("/v0/ready").status_code != 200:
            assert time.monotonic() < deadline, "the restarted server never got ready"


def test_a_stream_resumes_across_a_sigkill_with_no_false_gap(
    spark: SparkSession, tmp_path: Path
) -> None:
    server = start_server(tmp_path / "data")
    http_put_topic(server.url, "events", {"durability": "disk"})
    http_put_topic(server.url, "barrier", {"durability": "fsync"})
    http_write(server.url, "events", [{"data": {"i": i}} for i in range(5)])
    sink = _Sink()
    _stream(spark, server.url, tmp_path / "checkpoint", sink)
    assert sink.seqs == [1, 2, 3, 4, 5]
    with httpx.Client(base_url=server.url) as client:  # (one connection: quick)
        res = client.post("/v0/topics/events", json={"records": [{"data": 5}, {"data": 6}]})
        assert res.json()["last_seq"] == 7
        client.post("/v0/topics/events", json={"records": [{"data": 7}]}).raise_for_status()
        # Everything before an acknowledged fsync write is on disk.
        client.post("/v0/topics/barrier", json={"records": [{"data": 0}]}).raise_for_status()
    server = _kill_and_restart(server)  # (most likely inside the reservation window)
    try:
        first = http_write(server.url, "events", [{"data": {"i": i}} for i in range(8, 11)])
        assert first["first_seq"] == 9  # the head was kept exactly
        _stream(spark, server.url, tmp_path / "checkpoint", sink)
        assert sink.seqs == list(range(1, 12))
        rows = spark.read.format("topics").option("url", server.url).option("topic", "events")
        assert sorted(r.seq for r in rows.load().collect()) == list(range(1, 12))
    finally:
        stop_server(server)


class _Writer(threading.Thread):
    """Appends to ``events`` until the server dies; ``going`` once 10 writes were acked."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.going = threading.Event()

    def run(self) -> None:
        with contextlib.suppress(httpx.HTTPError), httpx.Client(base_url=self.url) as client:
            for i in itertools.count():
                client.post("/v0/topics/events", json={"records": [{"data": i}]})
                if i == 10:
                    self.going.set()


def test_a_stream_fails_naming_the_range_a_crash_may_have_taken(
    spark: SparkSession, tmp_path: Path
) -> None:
    server = start_server(tmp_path / "data")
    http_put_topic(server.url, "events", {"durability": "disk"})
    http_write(server.url, "events", [{"data": {"i": i}} for i in range(5)])
    sink = _Sink()
    _stream(spark, server.url, tmp_path / "checkpoint", sink)
    assert sink.seqs == [1, 2, 3, 4, 5]
    writer = _Writer(server.url)
    writer.start()
    assert writer.going.wait(60)
    server = _kill_and_restart(server, forget_heads=True)  # killed while being written
    writer.join(30)
    try:
        head = httpx.get(f"{server.url}/v0/topics/events").json()["head_seq"]
        with pytest.raises(
            Exception, match=rf"seqs \d+\.\.{head} were lost \(tombstone reason 'crash'\)"
        ):
            _stream(spark, server.url, tmp_path / "checkpoint", _Sink())
    finally:
        stop_server(server)
