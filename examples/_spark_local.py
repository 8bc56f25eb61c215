"""What the Spark examples share: a local SparkSession and a topics-server subprocess.

Imported by ``spark_pipeline.py``, ``spark_stream_pipeline.py`` and ``spark_lookup.py``
(run from the repository root as ``.venv/bin/python examples/<name>.py``; Python puts
this folder on the path). Importing it points Spark's Python workers at this
interpreter, which has ``topics`` and ``pyarrow``, before any session starts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from pyspark.sql import SparkSession

import topics.spark
from topics.client import Client

LISTENING = "topics-server listening on "


@contextmanager
def local_spark(app: str) -> Iterator[SparkSession]:
    """``local[2]``, no UI or progress bars, two shuffle partitions, UTC, the ``topics``
    format registered; stopped after.

    When this process already runs a SparkSession (the test suite runs the examples
    against its own, so each run does not start a JVM), the example uses that one with
    these SQL settings, puts its settings back after and leaves it running."""
    running = SparkSession.getActiveSession()
    if running is not None:
        settings = {"spark.sql.shuffle.partitions": "2", "spark.sql.session.timeZone": "UTC"}
        saved = {key: running.conf.get(key) for key in settings}
        for key, value in settings.items():
            running.conf.set(key, value)
        try:
            yield running
        finally:
            for key, old in saved.items():
                if old is None:
                    running.conf.unset(key)
                else:
                    running.conf.set(key, old)
        return
    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    topics.spark.register(spark)
    try:
        yield spark
    finally:
        spark.stop()


def start_server(data_dir: str) -> tuple[subprocess.Popen[str], str]:
    """``topics-server`` on ``data_dir`` and a free loopback port; its URL once it
    listens. It takes the directory's one writer lock."""
    cmd = [sys.executable, "-m", "topics.frontends.server", "--port", "0", "--data-dir", data_dir]
    env = dict(os.environ, TOPICS_LOG_LEVEL="WARNING")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(LISTENING):
            return proc, line.split()[-1]
    raise SystemExit(f"topics-server did not start (exit {proc.wait()})")


def stop_server(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)


@contextmanager
def spark_and_server(app: str, data_dir: str) -> Iterator[tuple[SparkSession, str]]:
    """A topics-server on ``data_dir`` and a local SparkSession, both stopped after."""
    proc, url = start_server(data_dir)
    try:
        with local_spark(app) as spark:
            yield spark, url
    finally:
        stop_server(proc)


def every_record_data(url: str, topic: str) -> list[Any]:
    """Each record's ``data`` of ``topic``, in seq order, through the diff route."""
    out: list[Any] = []
    with Client(url) as client:
        cursor = 0
        while True:
            page = client.diff(topic, from_seq=cursor, limit=1000)
            out += [rec.data for rec in page.records]
            cursor = page.next_from_seq
            if page.caught_up:
                return out
