"""Spark fixtures: one local SparkSession for the whole folder, and a real topics-server.

The session is ``local[2,2]``: two task slots and ``maxFailures=2`` (in local mode the
second number is what allows a failed task one retry; ``spark.task.maxFailures`` is
ignored there). Python workers run this interpreter (``PYSPARK_PYTHON``), which has
``topics`` and ``pyarrow``. The server fixture runs ``python -m topics.frontends.server``
on a free loopback port over its own data directory and must exit 0 on SIGTERM.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

if shutil.which("java") is None:  # pragma: no cover - the gate machine has Java 17
    pytest.skip("Spark needs Java", allow_module_level=True)

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import SparkSession  # noqa: E402

import topics.spark  # noqa: E402

LISTENING = "topics-server listening on "
_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # pyspark 4.x warns on every pandas 3 import; it does not concern these tests.
    quiet = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
    for item in items:
        if _HERE in Path(item.fspath).parents:
            item.add_marker(quiet)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("topics-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    topics.spark.register(session)
    yield session
    session.stop()


@dataclass
class Server:
    proc: subprocess.Popen[str]
    url: str
    data_dir: Path


def start_server(data_dir: Path, port: int = 0) -> Server:
    """``python -m topics.frontends.server`` on ``data_dir``, once it listens."""
    env = dict(os.environ, TOPICS_LOG_LEVEL="WARNING", PYTHONUNBUFFERED="1")
    env.pop("TOPICS_API_KEYS", None)
    cmd = [sys.executable, "-m", "topics.frontends.server", "--port", str(port)]
    with tempfile.TemporaryFile("w+") as errors:
        proc = subprocess.Popen(
            [*cmd, "--data-dir", str(data_dir)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        assert proc.stdout is not None
        url = ""
        for line in proc.stdout:  # the server prints this line once it listens
            if line.startswith(LISTENING):
                url = line[len(LISTENING) :].strip()
                break
        if not url:
            proc.wait()
            errors.seek(0)
            pytest.fail(f"topics-server did not start (exit {proc.returncode}): {errors.read()}")
    return Server(proc, url, data_dir)


def stop_server(server: Server) -> None:
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(30) == 0


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("server-data"))
    yield running
    stop_server(running)
