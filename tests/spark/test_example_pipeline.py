"""examples/spark_pipeline.py runs end to end with one command (a smaller load)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_pipeline.py"


@pytest.mark.slow
def test_spark_pipeline_example_runs_end_to_end() -> None:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--orders", "2000"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "the pipeline printed nothing"
