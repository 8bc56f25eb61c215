"""The topics-server command line: configuration, refusals (exit 2) and the dev warning."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.server import spawn_server

pytestmark = pytest.mark.slow


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("TOPICS_")}
    full.update(env)
    return subprocess.run(
        [sys.executable, "-m", "topics.frontends.server", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_help_lists_every_variable() -> None:
    out = _run({}, "--help")
    assert out.returncode == 0
    for name in (
        "TOPICS_HOST",
        "TOPICS_PORT",
        "TOPICS_DATA_DIR",
        "TOPICS_API_KEYS",
        "TOPICS_PROBE_AUTH",
        "TOPICS_ALLOW_INSECURE_NO_AUTH",
        "TOPICS_MAX_BATCH_RECORDS",
        "TOPICS_MAX_BODY_BYTES",
        "TOPICS_MAX_TOPICS",
        "TOPICS_MAX_INFLIGHT_PER_KEY",
        "TOPICS_MAX_TOTAL_BYTES",
        "--memory",
        "--data-dir",
    ):
        assert name in out.stdout, name


def test_non_loopback_without_keys_refuses_to_start() -> None:
    out = _run({"TOPICS_HOST": "0.0.0.0"}, "--port", "0", "--memory")
    assert out.returncode == 2
    assert "REFUSING TO START" in out.stderr
    assert "TOPICS_ALLOW_INSECURE_NO_AUTH" in out.stderr
    out = _run({}, "--host", "::", "--port", "0", "--memory")
    assert out.returncode == 2


def test_non_loopback_starts_with_keys_or_the_insecure_opt_in() -> None:
    server = spawn_server({"TOPICS_ALLOW_INSECURE_NO_AUTH": "1"}, "--host", "0.0.0.0")
    try:
        assert server.base_url.startswith("http://0.0.0.0:")
    finally:
        assert server.stop() == 0
    assert "AUTH DISABLED" in server.stderr()


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"TOPICS_API_KEYS": "hunter2:reed"}, "unknown scope 'reed'"),
        ({"TOPICS_API_KEYS": "hunter2:read:a||b"}, "empty prefix"),
        ({"TOPICS_MAX_BATCH_RECORDS": "many"}, "TOPICS_MAX_BATCH_RECORDS"),
        ({"TOPICS_MAX_BODY_BYTES": "0"}, "max_body_bytes"),
        ({"TOPICS_PORT": "70000", "TOPICS_HOST": "127.0.0.1"}, "port"),
        ({"TOPICS_PROBE_AUTH": "perhaps"}, "TOPICS_PROBE_AUTH"),
    ],
)
def test_bad_configuration_exits_2_without_echoing_secrets(
    env: dict[str, str], needle: str
) -> None:
    port = [] if "TOPICS_PORT" in env else ["--port", "0"]
    out = _run(env, *port, "--memory")
    assert out.returncode == 2, out.stderr
    assert needle in out.stderr
    assert "hunter2" not in out.stderr + out.stdout


def test_dev_mode_warns_loudly() -> None:
    server = spawn_server({"TOPICS_LOG_LEVEL": "INFO"})
    assert server.stop() == 0
    assert "AUTH DISABLED" in server.stderr()


def test_keys_are_never_logged() -> None:
    server = spawn_server({"TOPICS_LOG_LEVEL": "DEBUG", "TOPICS_API_KEYS": "sekrit-key-1:read"})
    with server.client("sekrit-key-1") as c:
        assert c.get("/v0/topics").status_code == 200
        assert (
            c.get("/v0/topics", headers={"Authorization": "Bearer wrong-sekrit"}).status_code == 401
        )
    assert server.stop() == 0
    log = server.stderr()
    assert "sekrit" not in log
    assert "auth enabled: 1 API key" in log


def test_a_port_in_use_is_reported_as_a_failure_to_start() -> None:
    """Before the server listens, an OSError means it could not start (and says so);
    after, the same exit says ``stopped`` instead of a misleading ``cannot start``."""
    import socket

    env = {k: v for k, v in os.environ.items() if k != "TOPICS_API_KEYS"}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "topics.frontends.server", "--port", str(port), "--memory"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=False,
        )
    assert proc.returncode == 1, proc.stderr
    assert "topics-server: cannot start:" in proc.stderr
    assert "listening on" not in proc.stdout
