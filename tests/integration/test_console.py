"""The web console (GET /console) in a real headless chromium against the real server.

1. The page and its assets are served (with their content types and security headers), an
   unknown asset is 404, and with keys configured the page still opens without one while
   the API it calls does not.
2. ``--dump-dom`` with a virtual-time budget shows the topic list (polled from /v0/topics),
   the router and the queue counters.
3. The live tail: ``/console?tail=t`` opens ``POST /v0/watch`` + EventSource; a record
   written while the page is open shows up in the DOM. An open EventSource is a pending
   fetch, which stops headless chromium's virtual clock (``--dump-dom`` would never
   return), so this part reads the DOM over the DevTools pipe (``--remote-debugging-pipe``:
   NUL-separated JSON on fds 3/4) instead, and takes the 1280x800 screenshot the same way
   (``--screenshot`` is checked on the tail-less page).
4. The actions, driven over the same pipe with the key typed into the page: write a record,
   browse from a seq and from a time, the cursors with their lag, edit a config (and a bad
   one refused), delete records and a topic only after the confirmation step, a queue's
   dead-letter count and redrive. Each is checked against the server over HTTP too.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.chromium import HEADLESS_FLAGS, Chromium, find_chromium

from .conftest import ServerProcess

pytestmark = pytest.mark.slow

CHROMIUM_FLAGS = HEADLESS_FLAGS
KEY = "console-test-key-0123456789"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run_chromium(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[bytes]:
    with tempfile.TemporaryDirectory(
        prefix="topics-chromium-", ignore_cleanup_errors=True
    ) as profile:
        return subprocess.run(
            [find_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            timeout=timeout,
            check=False,
        )


class DevTools:
    """A minimal Chrome DevTools Protocol client over ``--remote-debugging-pipe``."""

    def __init__(self, url: str, profile: str) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The browser reads commands on fd 3 and writes answers on fd 4.
        os.dup2(to_browser_r, 103)
        os.dup2(from_browser_w, 104)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.proc = subprocess.Popen(
            [
                find_chromium(),
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                "--remote-debugging-pipe",
                "--window-size=1280,800",
                url,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(3, 4),
            preexec_fn=_move_fds,
        )
        os.close(103)
        os.close(104)
        self._buf = b""
        self._next_id = 0
        self.session = ""

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in self._buf:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise AssertionError("chromium closed the DevTools pipe")
                self._buf += chunk
            raw, _, self._buf = self._buf.partition(b"\0")
            answer = json.loads(raw)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise AssertionError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer["result"]
                return result

    def attach_to_page(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pages = [
                t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page"
            ]
            if pages:
                target = pages[0]["targetId"]
                self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
                    "sessionId"
                ]
                return
            time.sleep(0.1)
        raise AssertionError("chromium opened no page")

    def dom(self) -> str:
        result = self.call(
            "Runtime.evaluate", expression="document.documentElement.outerHTML", returnByValue=True
        )
        return str(result["result"].get("value") or "")  # none while a navigation commits

    def wait_for_dom(self, pred: Callable[[str], bool], timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        html = ""
        while time.monotonic() < deadline:
            html = self.dom()
            if pred(html):
                return html
            time.sleep(0.1)
        raise AssertionError(f"the console never got there; its DOM:\n{html}")

    def screenshot(self) -> bytes:
        return base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


def _move_fds() -> None:
    """In the child: the DevTools pipe ends onto fds 3 and 4 (where chromium expects them)."""
    os.dup2(103, 3)
    os.dup2(104, 4)


@pytest.fixture
def devtools() -> Iterator[Callable[[str], DevTools]]:
    opened: list[DevTools] = []
    with tempfile.TemporaryDirectory(
        prefix="topics-chromium-", ignore_cleanup_errors=True
    ) as profile:

        def open_page(url: str) -> DevTools:
            tools = DevTools(url, profile)
            opened.append(tools)
            tools.attach_to_page()
            return tools

        yield open_page
        for tools in opened:
            tools.close()


def _populate(http: httpx.Client) -> None:
    r = http.put("/v0/topics/jobs", json={"type": "queue"})
    assert r.status_code in (200, 201), r.text
    r = http.post("/v0/topics/orders", json={"records": [{"data": {"sku": "A1"}, "tag": "c-7"}]})
    r.raise_for_status()
    r = http.post("/v0/topics/jobs", json={"records": [{"data": {"job": n}} for n in range(3)]})
    r.raise_for_status()
    r = http.put("/v0/routers/orders-copy", json={"source": "orders", "dest": "orders-mirror"})
    assert r.status_code in (200, 201), r.text


def test_console_files_are_served_without_a_key_and_the_api_still_needs_one(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server({"TOPICS_API_KEYS": KEY})
    with server.client() as anonymous:
        page = anonymous.get("/console")
        assert page.status_code == 200
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["referrer-policy"] == "no-referrer"
        assert '<script src="/console/console.js">' in page.text
        js = anonymous.get("/console/console.js")
        assert js.status_code == 200
        assert js.headers["content-type"].startswith("text/javascript")
        assert "new EventSource(" in js.text
        css = anonymous.get("/console/console.css")
        assert css.status_code == 200
        assert css.headers["content-type"].startswith("text/css")
        missing = anonymous.get("/console/..%2Fapp.py")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "not_found"
        assert anonymous.get("/v0/topics").status_code == 401
    with server.client(KEY) as keyed:
        assert keyed.get("/v0/topics").status_code == 200


def test_console_lists_topics_routers_and_queues_in_dump_dom(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    server = start_server()
    with server.client() as http:
        _populate(http)
    done = _run_chromium("--virtual-time-budget=5000", "--dump-dom", f"{server.base_url}/console")
    html = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    for topic in ("orders", "orders-mirror", "jobs"):
        assert f'<td class="mono topic-name">{topic}</td>' in html, html
    assert '<td class="mono">orders-copy</td>' in html  # the router view
    assert '<td class="num ready">3</td>' in html  # the queue view: 3 ready jobs
    assert '<td class="num in-flight">0</td>' in html
    assert 'class="status ok"' in html

    shot = tmp_path / "console.png"
    done = _run_chromium(
        "--virtual-time-budget=5000",
        f"--screenshot={shot}",
        "--window-size=1280,800",
        f"{server.base_url}/console",
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert shot.read_bytes().startswith(PNG_MAGIC)
    assert shot.stat().st_size > 10_000  # a rendered page, not a blank one


def test_console_tails_a_topic_live_with_an_api_key(
    start_server: Callable[..., ServerProcess],
    devtools: Callable[[str], DevTools],
    tmp_path: Path,
) -> None:
    server = start_server({"TOPICS_API_KEYS": KEY})
    with server.client(KEY) as http:
        _populate(http)
        # The key goes where the page keeps it: this tab's sessionStorage.
        tools = devtools("about:blank")
        tools.call("Page.enable")
        tools.call(
            "Page.addScriptToEvaluateOnNewDocument",
            source=f"sessionStorage.setItem('topics.console.apiKey', {json.dumps(KEY)});",
        )
        tools.call("Page.navigate", url=f"{server.base_url}/console?tail=orders")
        tools.wait_for_dom(lambda html: 'id="tail-state" class="dim">live' in html)
        html = tools.dom()
        assert '<td class="mono topic-name">orders</td>' in html
        assert '<td class="data">{"sku":"A1"}</td>' in html  # the backlog record, with its tag
        assert '<td class="mono">c-7</td>' in html
        r = http.post("/v0/topics/orders", json={"records": [{"data": {"live": "tail-me"}}]})
        r.raise_for_status()
        html = tools.wait_for_dom(lambda html: "tail-me" in html)
        assert '<td class="num seq">2</td>' in html
        png = tools.screenshot()
    shot = tmp_path / "console-tail.png"
    shot.write_bytes(png)
    assert png.startswith(PNG_MAGIC)
    assert shot.stat().st_size > 10_000


# -- the console's actions (produce, browse, cursors, config, deletes, DLQ), in chromium ----
#
# Each test types the API key into the page's key form, as a user does: every call the
# page makes after that carries it (the server has keys, so a call without it is 401).


@pytest.fixture(scope="module")
def keyed(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    return start_server({"TOPICS_API_KEYS": KEY})


@contextlib.contextmanager
def _console(server: ServerProcess, tmp_path: Path) -> Iterator[Chromium]:
    with Chromium.open(f"{server.base_url}/console", tmp_path / "profile") as page:
        # Without the key every call is refused (and the script is running: typing before
        # it is would submit the bare form instead).
        page.wait_for("document.querySelector('#status').textContent.startsWith('401')")
        page.evaluate(
            f"document.querySelector('#api-key').value = {json.dumps(KEY)};"
            "document.querySelector('#key-form').requestSubmit(); true"
        )
        page.wait_for("document.querySelector('#status').className === 'status ok'")
        yield page


def _open_topic(page: Chromium, topic: str) -> None:
    row = f"[...document.querySelectorAll('#topics tbody tr')].find((tr) => tr.querySelector('.topic-name') && tr.querySelector('.topic-name').textContent === {json.dumps(topic)})"
    page.wait_for(f"!!{row}")
    page.evaluate(f"{row}.querySelector('button').click(); true")
    page.wait_for("document.querySelector('#detail-state').textContent.includes('head')")


def _set(page: Chromium, selector: str, value: str) -> None:
    page.evaluate(
        f"document.querySelector({json.dumps(selector)}).value = {json.dumps(value)}; true"
    )


def _submit(page: Chromium, form: str) -> None:
    page.evaluate(f"document.querySelector({json.dumps(form)}).requestSubmit(); true")


def _click(page: Chromium, selector: str) -> None:
    page.evaluate(f"document.querySelector({json.dumps(selector)}).click(); true")


def _text(page: Chromium, selector: str) -> str:
    return str(page.evaluate(f"document.querySelector({json.dumps(selector)}).textContent"))


def test_console_produces_browses_by_seq_and_time_and_shows_cursors(
    keyed: ServerProcess, tmp_path: Path
) -> None:
    with keyed.client(KEY) as http:
        http.post("/v0/topics/c-orders", json={"records": [{"data": {"n": 1}}]}).raise_for_status()
        http.put("/v0/topics/c-orders/cursors/billing", json={"seq": 1}).raise_for_status()
        with _console(keyed, tmp_path) as page:
            _open_topic(page, "c-orders")
            page.wait_for("document.querySelector('#cursors .cursor-name') !== null")
            assert _text(page, "#cursors .cursor-lag") == "0"
            _set(page, "#produce-data", '{"sku": "B2", "price": 1.50}')
            _set(page, "#produce-tag", "t-9")
            _submit(page, "#produce-form")
            page.wait_for("document.querySelector('#produce-result').textContent === 'wrote seq 2'")
            rec = http.post("/v0/topics/c-orders/diff", json={"from_seq": 1, "include_tags": True})
            assert b'"price": 1.50}' in rec.content  # the typed text, verbatim
            assert rec.json()["records"][0]["$tag"] == "t-9"
            _set(page, "#produce-data", "{not json")
            _submit(page, "#produce-form")
            page.wait_for(
                "document.querySelector('#produce-result').textContent === 'data is not JSON'"
            )
            # The cursor lags by the new record, in the panel and in the all-cursors view.
            page.wait_for("document.querySelector('#cursors .cursor-lag').textContent === '1'")
            page.wait_for(
                "document.querySelector('#all-cursors .cursor-lag') && document.querySelector('#all-cursors .cursor-lag').textContent === '1'"
            )
            # Browse from a seq...
            _set(page, "#browse-from", "1")
            _submit(page, "#browse-form")
            page.wait_for(
                "document.querySelector('#browse-meta').textContent.startsWith('1 records')"
            )
            assert _text(page, "#browse .seq") == "2"
            # ... and from a time (from_ts): the future holds nothing, the past everything.
            _set(page, "#browse-time", "2999-01-01T00:00:00")
            _submit(page, "#browse-form")
            page.wait_for(
                "document.querySelector('#browse-meta').textContent.startsWith('0 records')"
            )
            _set(page, "#browse-time", "2001-01-01T00:00:00")
            _submit(page, "#browse-form")
            page.wait_for(
                "document.querySelector('#browse-meta').textContent.startsWith('2 records')"
            )


def test_console_edits_a_topic_config(keyed: ServerProcess, tmp_path: Path) -> None:
    with keyed.client(KEY) as http:
        http.put("/v0/topics/c-config", json={"cap_records": 10}).raise_for_status()
        with _console(keyed, tmp_path) as page:
            _open_topic(page, "c-config")
            config = json.loads(
                _text(page, "#config-json")
                or page.evaluate("document.querySelector('#config-json').value")
            )
            assert config["cap_records"] == 10
            config["cap_records"] = 5
            _set(page, "#config-json", json.dumps(config))
            _submit(page, "#config-form")
            page.wait_for("document.querySelector('#config-result').textContent === 'saved'")
            assert http.get("/v0/topics/c-config").json()["config"]["cap_records"] == 5
            _set(page, "#config-json", '{"cap_records": -1}')
            _submit(page, "#config-form")
            page.wait_for(
                "document.querySelector('#config-result').textContent.startsWith('400 invalid_request')"
            )
            assert http.get("/v0/topics/c-config").json()["config"]["cap_records"] == 5


def test_console_deletes_records_and_a_topic_only_after_confirmation(
    keyed: ServerProcess, tmp_path: Path
) -> None:
    with keyed.client(KEY) as http:
        records = [{"data": i} for i in range(5)]
        http.post("/v0/topics/c-doomed", json={"records": records}).raise_for_status()
        with _console(keyed, tmp_path) as page:
            _open_topic(page, "c-doomed")
            _set(page, "#delete-before", "3")
            _submit(page, "#delete-records-form")
            page.wait_for("!document.querySelector('#confirm').hidden")
            assert http.get("/v0/topics/c-doomed").json()["count"] == 5  # nothing yet
            _click(page, "#confirm-no")
            page.wait_for("document.querySelector('#confirm').hidden")
            assert http.get("/v0/topics/c-doomed").json()["count"] == 5
            _submit(page, "#delete-records-form")
            _click(page, "#confirm-yes")
            page.wait_for(
                "document.querySelector('#delete-result').textContent === 'deleted 2 records'"
            )
            assert http.get("/v0/topics/c-doomed").json()["earliest_seq"] == 3
            # A topic delete needs its name typed.
            _click(page, "#delete-topic")
            page.wait_for("!document.querySelector('#confirm-input').hidden")
            _set(page, "#confirm-input", "c-doome")
            _click(page, "#confirm-yes")
            page.wait_for(
                "document.querySelector('#delete-result').textContent === 'type the topic name to confirm'"
            )
            assert http.get("/v0/topics/c-doomed").status_code == 200
            _set(page, "#confirm-input", "c-doomed")
            _click(page, "#confirm-yes")
            page.wait_for(
                "document.querySelector('#delete-result').textContent === 'topic deleted'"
            )
            assert http.get("/v0/topics/c-doomed").status_code == 404


def test_console_shows_dead_letter_counts_and_redrives(
    keyed: ServerProcess, tmp_path: Path
) -> None:
    with keyed.client(KEY) as http:
        http.put(
            "/v0/topics/c-jobs",
            json={"type": "queue", "max_deliveries": 1, "dead_letter": "c-jobs-dlq"},
        ).raise_for_status()
        http.post("/v0/topics/c-jobs", json={"records": [{"data": {"n": 1}}]}).raise_for_status()
        assert http.post("/v0/topics/c-jobs/claim", json={"node": "w"}).json()["count"] == 1
        http.post("/v0/topics/c-jobs/nack", json={"node": "w", "seqs": [1]}).raise_for_status()
        assert http.post("/v0/topics/c-jobs/claim", json={"node": "w"}).json()["count"] == 0
        assert http.get("/v0/topics/c-jobs-dlq").json()["count"] == 1
        with _console(keyed, tmp_path) as page:
            row = "[...document.querySelectorAll('#queues tbody tr')].find((tr) => tr.cells[0].textContent === 'c-jobs')"
            page.wait_for(f"!!{row} && {row}.querySelector('.dlq-count').textContent === '1'")
            assert page.evaluate(f"{row}.querySelector('.dead').textContent") == "1"
            page.evaluate(f"{row}.querySelector('button').click(); true")
            page.wait_for(
                "document.querySelector('#queues-result').textContent === 'redrove 1 from c-jobs-dlq'"
            )
            page.wait_for(f"!!{row} && {row}.querySelector('.dlq-count').textContent === '0'")
        assert http.get("/v0/topics/c-jobs-dlq").json()["count"] == 0
        assert http.get("/v0/topics/c-jobs").json()["queue"]["ready"] == 1
