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
5. The CLI's bounds and filter in the tail and the browse (issue 18): ``since``/``until``/
   ``to seq``/``where`` keep only matching records and stop at the end, which the page
   says; a where the server refuses shows the server's message and leaves the running
   tail and the last page alone; one that does not parse is not sent.
6. filters.js (the console's port of topics/cli/filters.py) and the CLI read one table of
   filters and times the same way: under node, and in the page itself.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.chromium import HEADLESS_FLAGS, Browser, Chromium, find_chromium
from topics.cli.filters import FilterSyntaxError, parse_time, parse_where

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
        filters = anonymous.get("/console/filters.js")  # the CLI's filter syntax, ported
        assert filters.status_code == 200
        assert filters.headers["content-type"].startswith("text/javascript")
        assert page.text.index("/console/filters.js") < page.text.index("/console/console.js")
        for helper in ("jsontree.js", "stats.js"):  # the record tree, the charts: no CDN
            served = anonymous.get(f"/console/{helper}")
            assert served.status_code == 200
            assert served.headers["content-type"].startswith("text/javascript")
            assert page.text.index(f"/console/{helper}") < page.text.index("/console/console.js")
        assert "://" not in page.text.replace("http://www.w3.org", "")  # nothing from elsewhere
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
    assert '<td class="num backoff">0</td>' in html  # nacked jobs waiting out a delay
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
        assert '<summary class="j-line">{"sku":"A1"}</summary>' in html  # the backlog record
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


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """One chromium for the module's console tests: each test's page gets a browser
    context of its own (``_console``), so no storage or open stream outlives its test."""
    with Chromium.launch(tmp_path_factory.mktemp("chromium") / "profile") as shared:
        yield shared


@contextlib.contextmanager
def _console(server: ServerProcess, browser: Browser) -> Iterator[Chromium]:
    with browser.page(f"{server.base_url}/console") as page:
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
    keyed: ServerProcess, browser: Browser
) -> None:
    with keyed.client(KEY) as http:
        http.post("/v0/topics/c-orders", json={"records": [{"data": {"n": 1}}]}).raise_for_status()
        http.put("/v0/topics/c-orders/cursors/billing", json={"seq": 1}).raise_for_status()
        with _console(keyed, browser) as page:
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


def test_console_edits_a_topic_config(keyed: ServerProcess, browser: Browser) -> None:
    with keyed.client(KEY) as http:
        http.put("/v0/topics/c-config", json={"cap_records": 10}).raise_for_status()
        with _console(keyed, browser) as page:
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
    keyed: ServerProcess, browser: Browser
) -> None:
    with keyed.client(KEY) as http:
        records = [{"data": i} for i in range(5)]
        http.post("/v0/topics/c-doomed", json={"records": records}).raise_for_status()
        with _console(keyed, browser) as page:
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
    keyed: ServerProcess, browser: Browser
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
        with _console(keyed, browser) as page:
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


# -- the CLI's bounds and filter (issue 18) -------------------------------------------------

FILTERS_JS = Path(__file__).parents[2] / "frontends" / "http" / "console" / "filters.js"

#: Filters as a user types them, read by topics/cli/filters.py and by filters.js.
WHERE_CASES = [
    'a="\\q"',  # not a JSON escape
    "a=\u0663",  # another script's digit: text
    "a=1e400",  # too large for JSON
    "kind=refund",
    "data.kind!=refund",
    "amount>3",
    "amount>=3",
    "a<3",
    "a<=-2.5",
    "tag=chat-42:*",
    "kind in refund,chargeback",
    "a in 1, 2 ,x",
    'a in "x,y",z,true,null',
    "has meta.urgent",
    "has tag",
    "a=1 and (b=2 or not c=3)",
    "a=1 or b=2 and c=3",
    "not not a=1",
    "NOT a=1 AND b=2 Or c=3",
    "((a=1) or (b=2))",
    "or=1",
    'id="42"',
    'tag="a*"',
    """x="it's\"""",
    r'x="a \"b\" c"',
    r'x="\u00e9\n"',
    "x=true",
    "x=false",
    "x=null",
    "x=TRUE",
    "x=1.0",
    "x=-0",
    "x=1e3",
    "x=1.5E-2",
    "x=007",
    "x=12345678901234567890",
    "x=-12345678901234567890",
    "x=1.2.3",
    "x=-",
    "x=*",
    "x=ü*",
    "café=crème",
    "node=w-1",
    "meta.type=order.created",
    "data.a.b=1",
    " kind = refund ",
    "kind\t=\trefund\n",
    "a=1\x1c",  # Python's whitespace, not JavaScript's
    "a=\u00a0b",
    "a=\ufeffb",  # JavaScript's whitespace, not Python's
    "",
    "   ",
    "kind",
    "kind=",
    "=1",
    "a=1 b=2",
    "(a=1",
    "a=1)",
    "()",
    "a in",
    "a in 1,",
    "a in (1)",
    "a!1",
    'a="x',
    "a=b=c",
    '"a"=1',
    "has",
    "has =",
    "not",
    "a=(",
    "a ~ 1",
    "a=1 and",
    "a=1 or or b=2",
    "a=1 it's",
    """a=1 "b'\"""",
    "a=1\n b=2",
    "a=1 \ufeffb",  # messages quote the input as Python's repr() does
    "a=1 \x7f",
    "a=1 \u200bz",
    'a="\x01',
    "a=1 é\U0001f600",
]

NOW_MS = 1_795_626_000_000  # 2026-11-25T17:00:00Z

#: --since/--until text: durations, epoch ms, the RFC 3339 / ISO 8601 calendar forms.
TIME_CASES = [
    "90s",
    "10m",
    "2h",
    "1d",
    "500ms",
    "0ms",
    "99999d",
    "1795626000000",
    " 10m ",
    "2026-11-25T17:00:00Z",
    "2026-11-25T17:00:00+01:00",
    "2026-11-25T17:00:00-00:30",
    "2026-11-25 17:00:00.5Z",
    "2026-11-25T17:00:00,25Z",
    "2026-11-25T17:00:00.1234567Z",
    "2026-11-25T17:00Z",
    "2026-11-25T17Z",
    "2026-11-25t17:00Z",
    "20261125T170000Z",
    "2026-11-25T170000-0130",
    "2026-11-25T17:00:00+01",
    "2026-11-25T17:00:00+01:00:30.5",
    "2024-02-29T00:00:00Z",
    "1969-12-31T23:59:59.9995Z",
    "0050-06-01T00:00:00Z",
    "2026-02-29T00:00:00Z",
    "2026-11-25T24:00:00Z",
    "2026-13-01T00:00:00Z",
    "2026-11-25T17:00:00+24:00",
    "2026-11-25",
    "2026-11-25T17:00:00",
    "10 m",
    "10min",
    "-5m",
    "yesterday",
    "",
]

#: Runs both tables through a TopicsFilters object; the answer is JSON text.
_JS_TABLES = """(F, where, times, now) => JSON.stringify({
  where: where.map((t) => { try { return {ok: F.whereJSON(F.parseWhere(t))}; }
                            catch (e) { return {error: e.message, name: e.name}; } }),
  time: times.map((t) => { try { return {ok: F.parseTime(t, now)}; }
                           catch (e) { return {error: e.message, name: e.name}; } }),
})"""


def _same(a: Any, b: Any) -> bool:
    """JSON equality that tells true from 1 (Python's == does not) but 1 from 1.0 not."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def _cli_reads(parse: Callable[[], Any]) -> dict[str, Any]:
    """What topics/cli/filters.py makes of one case, shaped as the JS runner answers."""
    try:
        return {"ok": parse()}
    except FilterSyntaxError as exc:
        return {"error": str(exc), "name": "FilterSyntaxError"}


def _assert_agrees_with_the_cli(answer_text: str) -> None:
    answer = json.loads(answer_text)
    assert len(answer["where"]) == len(WHERE_CASES)
    for text, js in zip(WHERE_CASES, answer["where"], strict=True):
        cli = _cli_reads(lambda: parse_where(text))  # noqa: B023 (called right here)
        if "ok" in cli:
            assert "ok" in js, (text, cli, js)
            assert _same(json.loads(js["ok"]), cli["ok"]), (text, cli, js)
        else:
            assert js == cli, text
    assert len(answer["time"]) == len(TIME_CASES)
    for text, js in zip(TIME_CASES, answer["time"], strict=True):
        assert js == _cli_reads(lambda: parse_time(text, NOW_MS)), text  # noqa: B023


def _tables_args() -> str:
    return ", ".join(json.dumps(x) for x in (WHERE_CASES, TIME_CASES, NOW_MS))


def test_console_filter_syntax_agrees_with_the_cli_under_node() -> None:
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("node is not installed (the page test checks the same table in chromium)")
    script = (
        f"const F = require({json.dumps(str(FILTERS_JS))});\n"
        f"process.stdout.write(({_JS_TABLES})(F, {_tables_args()}));\n"
    )
    done = subprocess.run(
        [node, "-e", script], capture_output=True, timeout=60, check=False, text=True
    )
    assert done.returncode == 0, done.stderr
    _assert_agrees_with_the_cli(done.stdout)


def _orders(http: httpx.Client, topic: str) -> list[dict[str, Any]]:
    """Six records in two writes some milliseconds apart (so seq 3 ends a time range):
    refunds at odd seqs, amounts 10, 20, ... 60."""
    for part in ((1, 2, 3), (4, 5, 6)):
        records = [
            {"data": {"kind": "refund" if n % 2 else "sale", "amount": 10 * n}} for n in part
        ]
        http.post(f"/v0/topics/{topic}", json={"records": records}).raise_for_status()
        time.sleep(0.05)
    got: list[dict[str, Any]] = http.post(f"/v0/topics/{topic}/diff", json={"from_seq": 0}).json()[
        "records"
    ]
    assert [r["$seq"] for r in got] == [1, 2, 3, 4, 5, 6]
    assert got[2]["$ts"] < got[3]["$ts"]
    return got


def _tail_topic(page: Chromium, topic: str) -> None:
    row = f"[...document.querySelectorAll('#topics tbody tr')].find((tr) => tr.querySelector('.topic-name') && tr.querySelector('.topic-name').textContent === {json.dumps(topic)})"
    page.wait_for(f"!!{row}")
    page.evaluate(f"{row}.querySelectorAll('button')[1].click(); true")


def _tail_seqs(page: Chromium) -> list[int]:
    """The tail's record seqs, oldest first (the view shows the newest first)."""
    shown = page.evaluate(
        "[...document.querySelectorAll('#tail tbody tr.record .seq')].map((td) => td.textContent)"
    )
    return [int(s) for s in reversed(shown)]


def _server_error(http: httpx.Client, path: str, body: dict[str, Any]) -> str:
    r = http.post(path, json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_request"
    return f"400 invalid_request: {error['message']}"


def test_console_tails_with_since_until_to_and_where(
    keyed: ServerProcess, browser: Browser
) -> None:
    with keyed.client(KEY) as http:
        records = _orders(http, "c-refunds")
        with _console(keyed, browser) as page:
            # since + to seq + where: the refunds among seqs 1-5, then the end.
            _set(page, "#tail-since", "1h")
            _set(page, "#tail-to", "5")
            _set(page, "#tail-where", "kind=refund")
            page.evaluate(
                "document.querySelector('#tail-where').dispatchEvent(new Event('input')); true"
            )
            assert _text(page, "#tail-where-tuple") == 'where ["data.kind","Eq","refund"]'
            _tail_topic(page, "c-refunds")
            page.wait_for(
                "document.querySelector('#tail-state').textContent === 'end reached at seq 5'"
            )
            assert _tail_seqs(page) == [1, 3, 5]
            assert page.evaluate("document.querySelector('#tail tbody tr.end').textContent") == (
                "end reached: read up to seq 5 (head 6)"
            )
            assert page.evaluate("document.querySelector('#tail-stop').disabled") is True
            body = {"from_seq": 0, "to_seq": 5, "where": ["data.kind", "Eq", "refund"]}
            served = http.post("/v0/topics/c-refunds/diff", json=body).json()
            assert [r["$seq"] for r in served["records"]] == [1, 3, 5]
            assert served["end_reached"] is True
            # until (epoch ms, as the CLI takes it), applied to the ended tail: seqs 1-3.
            for field in ("#tail-since", "#tail-to", "#tail-where"):
                _set(page, field, "")
            _set(page, "#tail-until", str(records[2]["$ts"]))
            _submit(page, "#tail-form")
            page.wait_for(
                "document.querySelector('#tail-state').textContent === 'end reached at seq 3'"
            )
            assert _tail_seqs(page) == [1, 2, 3]
            # A where the server refuses: its message beside the form, and the running
            # (unbounded) tail goes on as it was.
            _set(page, "#tail-until", "")
            _submit(page, "#tail-form")
            page.wait_for("document.querySelector('#tail-state').textContent.startsWith('live')")
            assert _tail_seqs(page) == [1, 2, 3, 4, 5, 6]
            _set(page, "#tail-where", "amount>x")
            _submit(page, "#tail-form")
            expected = _server_error(
                http, "/v0/watch", {"topics": ["c-refunds"], "where": ["data.amount", "Gt", "x"]}
            )
            page.wait_for(
                f"document.querySelector('#tail-error').textContent === {json.dumps(expected)}"
            )
            assert _text(page, "#tail-where-tuple") == 'where ["data.amount","Gt","x"]'
            assert _text(page, "#tail-state").startswith("live")
            http.post(
                "/v0/topics/c-refunds", json={"records": [{"data": {"kind": "late"}}]}
            ).raise_for_status()
            page.wait_for(
                "document.querySelector('#tail tbody tr.record .seq').textContent === '7'"
            )
            assert _tail_seqs(page) == [1, 2, 3, 4, 5, 6, 7]
            # A where that does not parse is not sent: the CLI's message under the field.
            _set(page, "#tail-where", "kind=")
            _submit(page, "#tail-form")
            page.wait_for("document.querySelector('#tail-where-tuple').className === 'tuple bad'")
            with pytest.raises(FilterSyntaxError) as bad:
                parse_where("kind=")
            assert _text(page, "#tail-where-tuple") == f"where: {bad.value}"
            assert _text(page, "#tail-error") == ""
            assert _text(page, "#tail-state").startswith("live")
            # A since the CLI would refuse is refused the same way.
            _set(page, "#tail-where", "")
            _set(page, "#tail-since", "yesterday")
            _submit(page, "#tail-form")
            with pytest.raises(FilterSyntaxError) as bad:
                parse_time("yesterday", NOW_MS)
            assert _text(page, "#tail-error") == f"since: {bad.value}"
            assert _tail_seqs(page) == [1, 2, 3, 4, 5, 6, 7]


def test_console_browses_to_an_end_with_a_where_and_agrees_with_the_cli(
    keyed: ServerProcess, browser: Browser
) -> None:
    with keyed.client(KEY) as http:
        _orders(http, "c-browse")
        with _console(keyed, browser) as page:
            # The page's own copy of filters.js reads the table as the CLI does.
            _assert_agrees_with_the_cli(
                page.evaluate(f"({_JS_TABLES})(TopicsFilters, {_tables_args()})")
            )
            _open_topic(page, "c-browse")
            _set(page, "#browse-from", "0")
            _set(page, "#browse-to", "4")
            _set(page, "#browse-where", "amount>=20 and not kind=refund or amount=50")
            _submit(page, "#browse-form")
            page.wait_for(
                "document.querySelector('#browse-meta').textContent.includes('end reached')"
            )
            assert _text(page, "#browse-meta") == (
                "2 records, next after seq 4 (caught up, end reached)"
            )
            seqs = page.evaluate(
                "[...document.querySelectorAll('#browse .seq')].map((td) => td.textContent)"
            )
            where = [
                "or",
                [
                    ["and", [["data.amount", "Ge", 20], ["not", ["data.kind", "Eq", "refund"]]]],
                    ["data.amount", "Eq", 50],
                ],
            ]
            assert _text(page, "#browse-where-tuple") == "where " + json.dumps(
                where, separators=(",", ":")
            )
            served = http.post(
                "/v0/topics/c-browse/diff", json={"from_seq": 0, "to_seq": 4, "where": where}
            ).json()
            assert seqs == [str(r["$seq"]) for r in served["records"]] == ["2", "4"]
            assert page.evaluate("document.querySelector('#browse-next').disabled") is True
            # An until time before every record: nothing, and the end is reached at once.
            _set(page, "#browse-to", "")
            _set(page, "#browse-until", "2001-01-01T00:00:00")
            _submit(page, "#browse-form")
            page.wait_for(
                "document.querySelector('#browse-meta').textContent.startsWith('0 records')"
            )
            assert "end reached" in _text(page, "#browse-meta")
            # The same where to the end of the topic: seq 5 (amount 50) and 6 too.
            _set(page, "#browse-until", "")
            _submit(page, "#browse-form")
            page.wait_for(
                "document.querySelector('#browse-meta').textContent.startsWith('4 records')"
            )
            assert "end reached" not in _text(page, "#browse-meta")
            # A where the server refuses: its message, the page of records untouched.
            _set(page, "#browse-where", "amount>x")
            _submit(page, "#browse-form")
            expected = _server_error(
                http, "/v0/topics/c-browse/diff", {"where": ["data.amount", "Gt", "x"]}
            )
            page.wait_for(
                f"document.querySelector('#browse-meta').textContent === {json.dumps(expected)}"
            )
            assert page.evaluate("document.querySelectorAll('#browse .seq').length") == 4
