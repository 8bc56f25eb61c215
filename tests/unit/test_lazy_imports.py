"""``import topics`` loads the types and errors only; the engine, its facades, the Reader
and the HTTP client load on first use (``topics.__getattr__``).

Spark starts a new Python process to plan every streaming query, and that process
imports ``topics.spark``: trio and the engine were about 0.2 s of each query's start.
Each check runs in a fresh interpreter, since this one has imported everything already.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import topics

ROOT = Path(__file__).resolve().parents[2]

#: Modules a process that only names types, errors or plans a Spark read never needs.
HEAVY = (
    "trio",
    "anyio",
    "httpx",
    "topics.engine",
    "topics.reader",
    "topics.frontends.inproc",
    "topics.log.topic_log",
    "topics._persistence.recovery",
)


def _loaded_after(code: str) -> set[str]:
    check = f"import sys\n{code}\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return set(out.stdout.split())


def test_import_topics_leaves_the_engine_unloaded() -> None:
    assert _loaded_after("import topics; topics.TopicNotFoundError; topics.Record") == set()


def test_a_spark_planner_leaves_the_engine_unloaded() -> None:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    assert _loaded_after("import topics.spark") == set()


def test_lazy_names_load_on_first_use() -> None:
    code = "from topics import open, Reader; import topics; topics.AsyncEngine"
    assert {"trio", "topics.engine", "topics.reader"} <= _loaded_after(code)


def test_every_public_name_resolves() -> None:
    for name in topics.__all__:
        assert getattr(topics, name) is not None, name
    assert topics.AsyncEngine is topics.Engine
    assert set(topics.__all__) <= set(dir(topics))
    with pytest.raises(AttributeError, match="no_such_name"):
        topics.no_such_name  # noqa: B018
