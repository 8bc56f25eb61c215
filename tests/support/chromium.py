"""Headless Debian chromium driven over the DevTools protocol on a pipe.

``--remote-debugging-pipe`` makes chromium read protocol commands on its fd 3 and write
answers on its fd 4, NUL-terminated JSON: no port, no WebSocket client, nothing to
install. A test opens a page, evaluates JavaScript in it until the page shows what it
should, and can save a screenshot::

    with Chromium.open(url, tmp_path / "profile") as page:
        page.wait_for("document.querySelectorAll('li').length >= 3")
        page.screenshot(tmp_path / "page.png")

Starting chromium costs a few tenths of a second; tests that each need a clean page can
share one browser and give each test a browser context of its own (cookies, local and
session storage, cache: nothing of one context is seen by another), which costs a tenth::

    with Chromium.launch(tmp_path / "profile") as browser, browser.page(url) as page:
        ...
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["CHROMIUM_FLAGS", "HEADLESS_FLAGS", "Browser", "Chromium", "find_chromium"]

#: Headless on a machine with no network but loopback: without the background-networking
#: flags chromium keeps dialling out and gets refused.
HEADLESS_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]
CHROMIUM_FLAGS = [*HEADLESS_FLAGS, "--window-size=1000,800"]


def find_chromium() -> str:
    """The chromium binary, or skip the test."""
    for found in (shutil.which("chromium"), "/usr/bin/chromium"):
        if found and os.access(found, os.X_OK):
            return found
    pytest.skip("chromium is not installed (Debian: apt-get install chromium)")


class _Pipe:
    """The DevTools pipe of one chromium process: commands out on one fd, answers in on
    the other. Every page of the browser talks through it, each with its session id."""

    def __init__(self, proc: subprocess.Popen[bytes], to_browser: int, from_browser: int) -> None:
        self.proc = proc
        self._out = to_browser
        self._in = from_browser
        self._buf = b""
        self._ids = iter(range(1, 1 << 62))

    @classmethod
    @contextlib.contextmanager
    def spawn(cls, url: str, profile: Path) -> Iterator[_Pipe]:
        """Start chromium on ``url`` with a fresh profile; kill it on exit."""
        commands_r, commands_w = os.pipe()
        answers_r, answers_w = os.pipe()
        # Lifted above 4 so that placing them on fds 3 and 4 cannot clobber one another.
        child_in = fcntl.fcntl(commands_r, fcntl.F_DUPFD, 10)
        child_out = fcntl.fcntl(answers_w, fcntl.F_DUPFD, 10)
        for fd in (commands_r, answers_w):
            os.close(fd)

        def on_fds_3_and_4() -> None:
            os.dup2(child_in, 3)
            os.dup2(child_out, 4)

        args = [find_chromium(), *CHROMIUM_FLAGS, "--remote-debugging-pipe"]
        proc = subprocess.Popen(
            [*args, f"--user-data-dir={profile}", url],
            preexec_fn=on_fds_3_and_4,
            pass_fds=(3, 4),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(child_in)
        os.close(child_out)
        try:
            yield cls(proc, commands_w, answers_r)
        finally:
            proc.kill()
            proc.wait()
            os.close(commands_w)
            os.close(answers_r)

    def call(self, method: str, params: dict[str, Any], session: str | None, timeout: float) -> Any:
        """Send one protocol command (to ``session``'s page when given); its result."""
        msg_id = next(self._ids)
        msg: dict[str, Any] = {"id": msg_id, "method": method, "params": params}
        if session is not None and not method.startswith("Target."):
            msg["sessionId"] = session
        os.write(self._out, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                answer = json.loads(raw)
                if answer.get("id") != msg_id:
                    continue  # an event, or the answer to a command given up on
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._in], [], [], left)[0]:
                raise TimeoutError(f"chromium did not answer {method} within {timeout} s")
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium exited (code {self.proc.poll()})")
            self._buf += chunk


class Browser:
    """One headless chromium whose pages each live in a browser context of their own."""

    def __init__(self, pipe: _Pipe) -> None:
        self._pipe = pipe
        self.proc = pipe.proc

    @contextlib.contextmanager
    def page(self, url: str) -> Iterator[Chromium]:
        """A page on ``url`` in a new browser context, which is thrown away on exit (with
        whatever the page stored, and any stream it kept open)."""
        pipe = self._pipe
        context = pipe.call("Target.createBrowserContext", {}, None, 30)["browserContextId"]
        try:
            made = {"url": url, "browserContextId": context}
            target = pipe.call("Target.createTarget", made, None, 30)["targetId"]
            attach = {"targetId": target, "flatten": True}
            yield Chromium(pipe, pipe.call("Target.attachToTarget", attach, None, 30)["sessionId"])
        finally:
            if pipe.proc.poll() is None:
                pipe.call("Target.disposeBrowserContext", {"browserContextId": context}, None, 30)


class Chromium:
    """One page of a headless chromium, attached over the DevTools pipe."""

    def __init__(self, pipe: _Pipe, session: str | None = None) -> None:
        self._pipe = pipe
        self.proc = pipe.proc
        self._session = session

    @classmethod
    @contextlib.contextmanager
    def open(cls, url: str, profile: Path) -> Iterator[Chromium]:
        """Start chromium on ``url`` with a fresh profile; kill it on exit."""
        with _Pipe.spawn(url, profile) as pipe:
            browser = cls(pipe)
            browser._attach()
            yield browser

    @staticmethod
    @contextlib.contextmanager
    def launch(profile: Path) -> Iterator[Browser]:
        """Start chromium with a fresh profile for :meth:`Browser.page`; kill it on exit."""
        with _Pipe.spawn("about:blank", profile) as pipe:
            yield Browser(pipe)

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30) -> Any:
        """Send one protocol command (to the page once attached) and return its result."""
        return self._pipe.call(method, params or {}, self._session, timeout)

    def _attach(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            targets = self.call("Target.getTargets")["targetInfos"]
            pages = [t for t in targets if t["type"] == "page"]
            if pages:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"chromium opened no page: {targets}")
            time.sleep(0.05)
        attached = self.call(
            "Target.attachToTarget", {"targetId": pages[0]["targetId"], "flatten": True}
        )
        self._session = attached["sessionId"]

    def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` in the page (awaited if it is a promise)."""
        params = {"expression": expression, "returnByValue": True, "awaitPromise": True}
        result = self.call("Runtime.evaluate", params)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30) -> Any:
        """Evaluate ``expression`` until it is truthy; return that value."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(RuntimeError):  # mid-navigation: no document yet
                value = self.evaluate(expression)
                if value:
                    return value
            if time.monotonic() > deadline:
                shown = self.evaluate("document.body ? document.body.innerText : ''")
                raise AssertionError(f"the page never got to {expression!r}; it shows:\n{shown}")
            time.sleep(0.05)

    def screenshot(self, path: Path) -> Path:
        """Save a PNG of the page to ``path``."""
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))
        return path
