"""Bring a bare Debian 12 machine to the point where every benchmark can run.

Debian packages (servers and load tools) come from apt-get when we are root; Python
packages come from the ``bench`` extra of pyproject.toml, installed into the project's
venv with pip. Nothing is installed that is already there.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from _machine import ROOT, which

# tool on PATH -> Debian package that ships it
DEBIAN_TOOLS = {
    "redis-server": "redis-server",
    "redis-benchmark": "redis-tools",
    "redis-cli": "redis-tools",
    "wrk": "wrk",
    "nats-server": "nats-server",
}
# importable module -> the distribution that provides it (checked against the bench extra)
PY_MODULES = {"matplotlib": "matplotlib", "nats": "nats-py", "redis": "redis"}


def venv_python() -> Path:
    return ROOT / ".venv" / "bin" / "python"


def running_in_venv() -> bool:
    # Not by the interpreter's path: a venv's python is a symlink to the base one.
    return Path(sys.prefix).resolve() == (ROOT / ".venv").resolve()


def missing_tools() -> list[str]:
    return [tool for tool in DEBIAN_TOOLS if which(tool) is None]


def install_debian(tools: list[str], log: list[str]) -> None:
    packages = sorted({DEBIAN_TOOLS[t] for t in tools})
    if not packages:
        return
    if os.geteuid() != 0 or which("apt-get") is None:
        log.append(
            f"not root (or no apt-get): install by hand: apt-get install -y {' '.join(packages)}"
        )
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-q", *packages]
    if subprocess.run(cmd, env=env, capture_output=True).returncode != 0:
        # A fresh machine has no package lists yet.
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            log.append(f"apt-get install {' '.join(packages)} failed: {done.stderr[-500:]}")
            return
    log.append(f"installed Debian packages: {' '.join(packages)}")


def bench_requirements() -> list[str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extra = data["project"].get("optional-dependencies", {}).get("bench", [])
    return [str(req) for req in extra]


def missing_modules(python: Path) -> list[str]:
    """Modules of the bench extra that ``python`` cannot import."""
    if running_in_venv():
        return [m for m in PY_MODULES if importlib.util.find_spec(m) is None]
    probe = "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))"
    done = subprocess.run(
        [str(python), "-c", probe, *PY_MODULES], capture_output=True, text=True, check=True
    )
    return done.stdout.split()


def ensure_venv(log: list[str]) -> Path:
    """The venv's python, created with the test and bench extras if there is none yet."""
    python = venv_python()
    if not python.exists():
        subprocess.run(["bash", "-c", ". scripts/_venv.sh test,bench"], cwd=ROOT, check=True)
        log.append("created .venv with the test and bench extras (scripts/_venv.sh)")
        return python
    missing = missing_modules(python)
    if missing:
        # Only the missing extra is installed: reinstalling the project itself would
        # rebuild the compiled core under anyone using this tree at the same time.
        wanted = {PY_MODULES[m] for m in missing}
        reqs = [r for r in bench_requirements() if _dist_name(r) in wanted] or sorted(wanted)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *reqs], check=True)
        log.append(f"pip installed into .venv: {' '.join(reqs)}")
    return python


def _dist_name(requirement: str) -> str:
    for i, ch in enumerate(requirement):
        if not (ch.isalnum() or ch in "-_."):
            return requirement[:i].lower()
    return requirement.lower()
