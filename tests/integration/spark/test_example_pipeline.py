"""The Spark examples run end to end with one command each (smaller loads).

Each runs as its ``__main__`` in this process, against the folder's SparkSession: a JVM
start per example cost more than the examples themselves. An example borrows a running
session (``examples/_spark_local.py``) and starts the rest of what its command starts
(a topics-server subprocess); a subprocess run checks the command line itself imports.
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys

import pytest
from pyspark.sql import SparkSession

from tests.support.paths import EXAMPLES

SCRIPTS = ["spark_pipeline.py", "spark_stream_pipeline.py", "spark_lookup.py"]


def _run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], script: str, *args: str
) -> str:
    monkeypatch.syspath_prepend(str(EXAMPLES))  # what `python examples/<script>` puts first
    monkeypatch.setattr(sys, "argv", [str(EXAMPLES / script), *args])
    runpy.run_path(str(EXAMPLES / script), run_name="__main__")
    out = capsys.readouterr().out
    assert out.strip(), "the example printed nothing"
    return out


@pytest.mark.slow
def test_spark_pipeline_example_runs_end_to_end(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _run(monkeypatch, capsys, "spark_pipeline.py", "--orders", "2000")


@pytest.mark.slow
def test_streaming_pipeline_restarts_from_its_checkpoint_exactly_once(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _run(monkeypatch, capsys, "spark_stream_pipeline.py", "--orders", "3000")
    assert "totals match every order exactly once" in out
    assert "stream read 1501 orders in micro-batches [1]" in out  # the restart resumed


@pytest.mark.slow
def test_lookup_udf_example_enriches_seqs_through_the_embedded_reader(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _run(monkeypatch, capsys, "spark_lookup.py", "--records", "20000", "--lookups", "20000")
    assert "lookups/s" in out


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_each_example_s_command_line_starts(script: str) -> None:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("usage: "), done.stdout
