"""Facts about the machine a benchmark run happened on, read without side effects."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return [float("nan")] * 3


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _mem_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def which(tool: str) -> str | None:
    # Debian puts nats-server in /usr/sbin, which a non-root PATH may lack.
    return shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin")


def _version(cmd: list[str], pattern: str) -> str | None:
    exe = which(cmd[0])
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, *cmd[1:]], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(pattern, done.stdout + done.stderr)
    return match.group(1) if match else "?"


def _package(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def _core() -> str:
    try:
        from topics._core import IMPLEMENTATION
    except ImportError:
        return "?"
    return str(IMPLEMENTATION)


def facts() -> dict[str, Any]:
    nproc = _version(["nproc"], r"(\d+)")
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "nproc": int(nproc) if nproc and nproc.isdigit() else os.cpu_count(),
        "cpu_model": _cpu_model(),
        "mem_gib": _mem_gib(),
        "kernel": platform.release(),
        "os": _os_release(),
        "python": platform.python_version(),
        "topics_core": _core(),
        "git_commit": _git("rev-parse", "--short", "HEAD"),
        "git_dirty": bool(dirty) if dirty is not None else None,
        "tools": {
            "redis-server": _version(["redis-server", "--version"], r"v=(\S+)"),
            "nats-server": _version(["nats-server", "--version"], r"v?(\d+\.\d+\.\d+)"),
            "redis-benchmark": _version(["redis-benchmark", "--version"], r"(\d+\.\d+\.\d+)"),
            "wrk": _version(["wrk", "-v"], r"wrk (\S+)"),
            "java": _version(["java", "-version"], r'version "([^"]+)"'),
        },
        "python_packages": {
            name: _package(name)
            for name in ("redis", "nats-py", "httpx", "hypercorn", "trio", "pyspark", "matplotlib")
        },
    }


def _os_release() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.system()
