"""A crash test's child process: a script that prints one line per acknowledged operation
until the parent SIGKILLs it.

The parent reads the child's stdout on a thread (so a full pipe never stalls the child),
waits for a line that says the child reached a state (``READY``, ``QUIESCED``, some number
of ``COMMIT`` lines), kills it with SIGKILL and gets every whole line it printed: only a
line that ended in a newline counts, since the kill may cut the last one. The crash suites
then reopen the data directory and compare it with those lines.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.paths import ROOT

__all__ = ["Child", "child_argv", "child_env"]


def child_argv(script: Path, *args: str) -> list[str]:
    """``python script args...``, or through the smoke shim when the parent runs under it."""
    if "boot" in sys.modules:  # running from the source tree through the smoke shim
        boot_dir = os.path.dirname(os.path.abspath(sys.modules["boot"].__file__ or ""))
        code = (
            f"import sys, runpy; sys.path.insert(0, {boot_dir!r}); import boot; "
            f"sys.argv = {[str(script), *args]!r}; "
            f"runpy.run_path({str(script)!r}, run_name='__main__')"
        )
        return [sys.executable, "-c", code]
    return [sys.executable, str(script), *args]


def child_env() -> dict[str, str]:
    """This environment with the repository first on ``PYTHONPATH``: a script run by path
    gets its own folder as ``sys.path[0]``, not the root that ``tests`` and ``topics``
    live in."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT)}


class Child:
    """``script`` running with ``args``; ``seen`` is every whole line read so far."""

    def __init__(self, script: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            child_argv(script, *args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(ROOT),
            env=child_env(),
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            if raw.endswith(b"\n"):  # a line cut by the kill never counts
                self.lines.put(raw.decode().rstrip("\n"))
        self.lines.put(None)

    def _stderr(self) -> str:
        return self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""

    def wait_until(self, done: Callable[[str], bool], what: str, timeout_s: float = 30.0) -> str:
        """Read lines into ``seen`` until ``done(line)``; that line. Fails if the child
        exits first or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=min(left, 0.1))
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"child exited before {what}:\n{self._stderr()}")
            self.seen.append(line)
            if done(line):
                return line
        raise AssertionError(f"child did not print {what} in {timeout_s}s")

    def wait_for(self, prefix: str, timeout_s: float = 30.0) -> str:
        """The first line starting with ``prefix`` (every line before it is in ``seen``)."""
        return self.wait_until(lambda line: line.startswith(prefix), prefix, timeout_s)

    def kill(self) -> list[str]:
        """SIGKILL; ``seen`` with every whole line printed before the kill."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._thread.join(timeout=10)
        while (line := self.lines.get(timeout=10)) is not None:
            self.seen.append(line)
        return self.seen

    def kill_after(self, seconds: float) -> list[str]:
        """Let it run ``seconds`` more, then :meth:`kill`."""
        time.sleep(seconds)
        return self.kill()
