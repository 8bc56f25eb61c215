"""The Spark examples run end to end with one command each (smaller loads)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.paths import EXAMPLES


def _run(script: str, *args: str) -> str:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "the example printed nothing"
    return done.stdout


@pytest.mark.slow
def test_spark_pipeline_example_runs_end_to_end() -> None:
    _run("spark_pipeline.py", "--orders", "2000")


@pytest.mark.slow
def test_streaming_pipeline_restarts_from_its_checkpoint_exactly_once() -> None:
    out = _run("spark_stream_pipeline.py", "--orders", "3000")
    assert "totals match every order exactly once" in out
    assert "stream read 1501 orders in micro-batches [1]" in out  # the restart resumed


@pytest.mark.slow
def test_lookup_udf_example_enriches_seqs_through_the_embedded_reader() -> None:
    out = _run("spark_lookup.py", "--records", "20000", "--lookups", "20000")
    assert "lookups/s" in out
