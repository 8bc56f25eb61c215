"""Smoke-test an installed (not editable) topics-engine: run by scripts/wheel_smoke with the
python of a fresh venv that holds only the built wheel and its declared requirements.

It imports every public package from site-packages, starts the installed ``topics-server``
on a free loopback port with a fresh data directory, and walks the HTTP surface once:
probes, topic create, write, diff, a watch session's SSE stream, the OpenAPI document and
the console's files (package data). A module or file the wheel left out fails here.
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import sysconfig
import tempfile

import httpx

PUBLIC = [
    "topics",
    "topics.engine",
    "topics.client",
    "topics.reader",
    "topics.cli",
    "topics.spark",
    "topics.frontends.server",
    "topics.frontends.http.openapi",
]


def check_imports() -> None:
    site = pathlib.Path(sysconfig.get_paths()["purelib"]).resolve()
    for name in PUBLIC:
        mod = importlib.import_module(name)
        where = pathlib.Path(mod.__file__ or "").resolve()
        assert site in where.parents, f"{name} imported from {where}, not from {site}"
    core = importlib.import_module("topics._core")
    assert core.IMPLEMENTATION == "cython", core.IMPLEMENTATION


def start_server(bin_dir: pathlib.Path, data: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [str(bin_dir / "topics-server"), "--host", "127.0.0.1", "--port", "0", "--data-dir", data],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TOPICS_LOG_LEVEL": "WARNING"},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise SystemExit(f"topics-server did not start: {line!r} (exit {proc.wait()})")
    return proc, line.rsplit(" ", 1)[1].strip()


def walk_http(base: str) -> None:
    with httpx.Client(base_url=base, timeout=10) as http:
        assert http.get("/v0/health").status_code == 200
        ready = http.get("/v0/ready")
        assert ready.status_code == 200, ready.text
        assert http.put("/v0/topics/smoke", json={"durability": "fsync"}).status_code in (200, 201)
        wrote = http.post("/v0/topics/smoke", json={"records": [{"data": {"n": 1}}]})
        assert wrote.status_code == 200, wrote.text
        diff = http.post("/v0/topics/smoke/diff", json={"from_seq": 0}).json()
        assert [r["data"] for r in diff["records"]] == [{"n": 1}], diff
        watch = http.post("/v0/watch", json={"topics": {"smoke": {"from_seq": 0}}})
        assert watch.status_code in (200, 201), watch.text
        url = watch.json()["stream_url"]
        with http.stream("GET", url) as stream:
            seen = ""
            for chunk in stream.iter_text():
                seen += chunk
                if '"n":1' in seen.replace(" ", ""):
                    break
        spec = http.get("/v0/openapi.json").json()
        assert "/v0/topics/{topic}/diff" in spec["paths"], sorted(spec["paths"])[:5]
        for page in ("/console", "/console/console.js", "/console/console.css"):
            assert http.get(page).status_code == 200, page


def main() -> int:
    check_imports()
    bin_dir = pathlib.Path(sys.executable).parent
    with tempfile.TemporaryDirectory(prefix="topics-wheel-") as data:
        proc, base = start_server(bin_dir, data)
        try:
            walk_http(base)
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
        assert code == 0, f"topics-server exited {code} on SIGTERM"
        cli = subprocess.run([str(bin_dir / "topics"), "--help"], capture_output=True, text=True)
        assert cli.returncode == 0, cli.stderr
    print(json.dumps({"wheel_smoke": "ok", "server": base}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
