"""deploy/: the systemd unit and the Prometheus alert rules say what the server does.

1. ``deploy/topics-server.service`` parses as a unit, runs ``topics-server``, sets only
   variables the server reads and docs/OPERATIONS.md lists, gives the shutdown drain room
   before SIGKILL, does not restart a server that refused its settings (exit 2), and passes
   ``systemd-analyze verify`` where that binary exists (with ExecStart pointed at this
   environment's ``topics-server``, since the unit names the installed path).
2. ``deploy/alerts.yml``: every series a rule's expression names is one ``/v0/metrics``
   exports. The exported names come from the renderer itself (its ``# TYPE`` lines, plus
   ``_bucket``/``_sum``/``_count`` for a histogram), not from a list kept here; ``up`` is
   Prometheus's own scrape series.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from topics.frontends.server import EXIT_CONFIG
from topics.settings import Limits
from topics.wire.metrics import _EMPTY as EMPTY_STATISTICS
from topics.wire.metrics import render_prometheus

UNIT = ROOT / "deploy" / "topics-server.service"
ALERTS = ROOT / "deploy" / "alerts.yml"
OPERATIONS = (ROOT / "docs" / "OPERATIONS.md").read_text(encoding="utf-8")
SOURCES = [p for d in ("topics", "frontends") for p in (ROOT / d).rglob("*.py")]


def _unit() -> dict[str, dict[str, list[str]]]:
    """section -> key -> every value given (a key may repeat, e.g. Environment)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for raw in UNIT.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not a unit line: {raw!r}"
        assert current is not None, f"a key before any section: {raw!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)(ms|s|min)?", value)
    assert match, value
    return int(match[1]) * {"ms": 0.001, "s": 1, "min": 60, None: 1}[match[2]]


def test_the_unit_runs_the_server_with_settings_it_reads() -> None:
    unit = _unit()
    assert set(unit) == {"Unit", "Service", "Install"}
    service = unit["Service"]
    assert service["ExecStart"][0].split()[0].endswith("/topics-server")
    env = dict(v.partition("=")[::2] for v in service["Environment"])
    code = "\n".join(p.read_text(encoding="utf-8") for p in SOURCES)
    limits = {Limits.env_var(f.name) for f in dataclasses.fields(Limits)}
    for name in env:
        assert name in limits or f'"{name}"' in code, f"{name}: no code reads it"
        assert f"`{name}`" in OPERATIONS, f"{name}: docs/OPERATIONS.md does not list it"
    assert env["TOPICS_DATA_DIR"] == "/var/lib/topics"
    assert service["StateDirectory"] == ["topics"]
    # SIGTERM is the graceful path; SIGKILL only comes well after drain + checkpoint.
    assert service["KillSignal"] == ["SIGTERM"]
    assert service["KillMode"] == ["mixed"]
    drain = int(env["TOPICS_DRAIN_TIMEOUT_MS"]) / 1000
    assert _seconds(service["TimeoutStopSec"][0]) >= 2 * drain + 30
    assert service["Restart"] == ["on-failure"]
    assert service["RestartPreventExitStatus"] == [str(EXIT_CONFIG)]
    assert int(service["LimitNOFILE"][0]) > int(env["TOPICS_MAX_OPEN_FILES"]) + 10_000
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    server = Path(sys.executable).with_name("topics-server")
    assert server.exists(), server
    text = UNIT.read_text(encoding="utf-8")
    installed = re.search(r"^ExecStart=(\S+)", text, re.M)
    assert installed
    copy = tmp_path / UNIT.name
    copy.write_text(text.replace(installed[1], str(server)), encoding="utf-8")
    done = subprocess.run(
        ["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60
    )
    # verify exits 0 even for lines it ignores; what it says about the file is the finding.
    said = [line for line in (done.stdout + done.stderr).splitlines() if copy.name in line]
    assert done.returncode == 0, done.stdout + done.stderr
    assert not said, done.stdout + done.stderr


def _exported() -> set[str]:
    text = render_prometheus(EMPTY_STATISTICS).decode()
    names: set[str] = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        names.add(name)
        if kind == "histogram":
            names.update(f"{name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
    return names


_PROMQL_WORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "bool", "offset"}


def _series(expr: str) -> set[str]:
    """The metric names in one PromQL expression: identifiers that are not functions,
    keywords, label names (inside braces or by/without lists) or durations."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", "", expr)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        rest = expr[match.end() :].lstrip()
        if rest.startswith("(") or match[0] in _PROMQL_WORDS:
            continue
        names.add(match[0])
    return names


def _rules() -> list[dict[str, str]]:
    rules: list[dict[str, str]] = []
    for line in ALERTS.read_text(encoding="utf-8").splitlines():
        if match := re.match(r"^\s*- alert: (\S+)$", line):
            rules.append({"alert": match[1]})
        elif rules and (match := re.match(r"^\s*(expr|for|severity): (.+)$", line)):
            rules[-1][match[1]] = match[2]
    return rules


def test_every_alert_names_only_series_the_server_exports() -> None:
    exported = _exported()
    assert "topics_wal_read_only" in exported  # the renderer's names, read the right way
    rules = _rules()
    assert len(rules) >= 5
    for rule in rules:
        assert {"expr", "for", "severity"} <= set(rule), rule
        assert rule["severity"] in {"page", "ticket"}, rule
        series = _series(rule["expr"])
        assert series, rule
        assert series - {"up"} <= exported, (rule["alert"], series - exported)
    # The conditions docs/OPERATIONS.md says page someone each have a rule.
    paging = {s for r in rules if r["severity"] == "page" for s in _series(r["expr"])}
    assert {"topics_wal_read_only", "topics_storage_degraded", "topics_cursor_lag"} <= paging


def test_the_series_parser_finds_names_and_skips_the_rest() -> None:
    expr = 'histogram_quantile(0.99, sum by (le) (rate(x_bucket{job="a b"}[5m]))) > 1 and on(i) y'
    assert _series(expr) == {"x_bucket", "y"}
    assert _series("topics_nope == 1") == {"topics_nope"}
    assert "topics_nope" not in _exported()
