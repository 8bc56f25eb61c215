"""The console's look (issue 34, item 5), in the real headless chromium against the server.

1. The delete confirmation bar is not drawn until a delete is asked for: ``hidden`` on
   ``#confirm`` used to lose to ``.toolbar{display:flex}``, so every topic panel showed a
   red Confirm/Cancel bar (checked by layout, not by the attribute, which was always set).
2. The charts (stats.js), drawn from the ``/v0/metrics`` snapshots the page polls: a
   topic's writes/s and reads/s (cursor commits) rise while records are written and a
   cursor commits, a queue's depth shows its ready jobs, a cursor's lag is charted per
   cursor, and the charts keep gaining points while the page is open; the topics table and
   the cursor table carry sparklines; the header's counters follow the server.
3. Record data is a one-line summary that unfolds into a tree whose nodes fold on their
   own, and its copy button puts the record's JSON on the clipboard.

Screenshots of each state go to the test's tmp_path (look at them; they are not committed).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.chromium import Browser, Chromium

from .conftest import ServerProcess
from .test_console import KEY, PNG_MAGIC, _click, _console, _open_topic, _set, _submit, _text

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    return start_server({"TOPICS_API_KEYS": KEY})


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    with Chromium.launch(tmp_path_factory.mktemp("chromium") / "profile") as shared:
        yield shared


def _shot(page: Chromium, path: Path, at: str) -> None:
    """A PNG of the page scrolled to the element ``at`` (to look at; not committed)."""
    page.evaluate(f"document.querySelector({json.dumps(at)}).scrollIntoView(); true")
    assert page.screenshot(path).read_bytes().startswith(PNG_MAGIC)


_CONFIRM_SHOWN = (
    "getComputedStyle(document.querySelector('#confirm')).display !== 'none'"
    " && document.querySelector('#confirm').getBoundingClientRect().height > 0"
)


def test_the_confirm_bar_is_not_drawn_until_a_delete_is_asked_for(
    server: ServerProcess, browser: Browser, tmp_path: Path
) -> None:
    with server.client(KEY) as http:
        http.post("/v0/topics/a-keep", json={"records": [{"data": 1}]}).raise_for_status()
        with _console(server, browser) as page:
            _open_topic(page, "a-keep")
            assert page.evaluate(_CONFIRM_SHOWN) is False
            _shot(page, tmp_path / "panel.png", "#delete-records-form")
            _set(page, "#delete-before", "2")
            _submit(page, "#delete-records-form")
            page.wait_for(_CONFIRM_SHOWN)
            _shot(page, tmp_path / "panel-confirm.png", "#delete-records-form")
            _click(page, "#confirm-no")
            page.wait_for(f"!({_CONFIRM_SHOWN})")
        assert http.get("/v0/topics/a-keep").json()["count"] == 1


def _chart(name: str, what: str) -> str:
    fig = f"document.querySelector('#detail-charts figure[data-chart={name}]')"
    return {
        "last": f"({fig} ? {fig}.dataset.last : null)",
        "points": f"({fig} ? Number({fig}.querySelector('svg').dataset.points) : 0)",
        "legend": f"({fig} ? {fig}.querySelector('figcaption').textContent : '')",
    }[what]


def _until(page: Chromium, expression: str, act: Callable[[], object], timeout: float = 40) -> None:
    """Do ``act`` (a write, a commit) every half second until ``expression`` holds."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"never: {expression}; page shows {page.evaluate('document.body.innerText')}"
            )
        act()
        time.sleep(0.5)


def test_charts_show_rates_queue_depth_and_cursor_lag_and_keep_updating(
    server: ServerProcess, browser: Browser, tmp_path: Path
) -> None:
    with server.client(KEY) as http:
        http.post("/v0/topics/a-rates", json={"records": [{"data": 0}]}).raise_for_status()
        http.put("/v0/topics/a-rates/cursors/etl", json={"seq": 1}).raise_for_status()
        http.put("/v0/topics/a-work", json={"type": "queue"}).raise_for_status()
        jobs = [{"data": {"job": n}} for n in range(3)]
        http.post("/v0/topics/a-work", json={"records": jobs}).raise_for_status()
        with _console(server, browser) as page:
            _open_topic(page, "a-rates")
            page.wait_for(f"{_chart('writes', 'points')} >= 1")

            def write() -> None:
                http.post(
                    "/v0/topics/a-rates", json={"records": [{"data": 1}] * 5}
                ).raise_for_status()

            _until(page, f"Number({_chart('writes', 'last')}) > 0", write)
            # The cursor falls behind by what was written, then commits: reads/s rises.
            head = http.get("/v0/topics/a-rates").json()["head_seq"]
            page.wait_for(f"{_chart('lag', 'legend')}.includes('etl')")

            def commit() -> None:
                http.put("/v0/topics/a-rates/cursors/etl", json={"seq": head}).raise_for_status()

            _until(page, f"Number({_chart('reads', 'last')}) > 0", commit)
            page.wait_for(f"{_chart('lag', 'last')} === '0'")
            # Still drawing: the chart gains points with each poll.
            before = page.evaluate(_chart("writes", "points"))
            page.wait_for(f"{_chart('writes', 'points')} > {before}")
            assert page.evaluate(
                "!!document.querySelector('#topics .spark.writes svg.sparkline polyline')"
            )
            page.wait_for("!!document.querySelector('#all-cursors .lag-trend svg.sparkline')")
            topics = http.get("/v0/metrics", headers={"accept": "application/json"}).json()
            page.wait_for(
                "document.querySelector('[data-counter=topics] b').textContent"
                f" === '{topics['topics_topics']}'"
            )
            assert _text(page, "[data-counter=storage] b") == "ok"
            _shot(page, tmp_path / "charts.png", "#detail-section")
            # A queue's depth: its three ready jobs, then two once one is claimed.
            _open_topic(page, "a-work")
            page.wait_for(f"({_chart('depth', 'last')} || '').startsWith('3,0,')")
            http.post("/v0/topics/a-work/claim", json={"node": "w"}).raise_for_status()
            page.wait_for(f"({_chart('depth', 'last')} || '').startsWith('2,1,')")
            assert "ready" in page.evaluate(_chart("depth", "legend"))
            _shot(page, tmp_path / "queue.png", "#detail-section")


def test_record_data_is_a_collapsible_tree_with_a_copy_button(
    server: ServerProcess, browser: Browser, tmp_path: Path
) -> None:
    data = {"order": {"id": 7, "lines": [{"sku": "A1", "qty": 2}], "paid": True}, "note": None}
    with server.client(KEY) as http:
        http.post("/v0/topics/a-tree", json={"records": [{"data": data}]}).raise_for_status()
        with _console(server, browser) as page:
            _open_topic(page, "a-tree")
            _set(page, "#browse-from", "0")
            _submit(page, "#browse-form")
            cell = "document.querySelector('#browse td.data')"
            page.wait_for(f"!!{cell} && !!{cell}.querySelector('details.j-record')")
            root = f"{cell}.querySelector('details.j-record')"
            assert page.evaluate(f"{root}.open") is False
            line = page.evaluate(f"{root}.querySelector('summary').textContent")
            assert json.loads(line) == data
            page.evaluate(f"{root}.querySelector('summary').click(); true")
            page.wait_for(f"{root}.open && !!{root}.querySelector('details.j-node')")
            # The nodes fold on their own: "lines" (depth 2) starts folded, opens on a click.
            lines = f"[...{root}.querySelectorAll('li')].find((li) => li.firstChild.textContent === '\"lines\"').querySelector('details')"
            assert page.evaluate(f"{lines}.open") is False
            page.evaluate(f"{lines}.querySelector('summary').click(); true")
            page.wait_for(f"{lines}.open")
            assert page.evaluate(f"{lines}.querySelector('.j-string').textContent") == '"A1"'
            order = f"{root}.querySelector('details.j-node details.j-node')"
            page.evaluate(f"{order}.querySelector('summary').click(); true")
            page.wait_for(f"!{order}.open")
            _shot(page, tmp_path / "tree.png", "#browse")
            # Copy: the record's data as JSON, through the clipboard API (stood in for here:
            # a headless page has no focus, which the real clipboard asks for).
            page.evaluate(
                "navigator.clipboard.writeText = (text) => { window.copiedText = text;"
                " return Promise.resolve(); }; true"
            )
            page.evaluate(f"{cell}.querySelector('button.copy').click(); true")
            page.wait_for(f"{cell}.querySelector('button.copy').textContent === 'copied'")
            assert json.loads(page.evaluate("window.copiedText")) == data


def test_tail_rows_carry_the_tree_too(
    server: ServerProcess, browser: Browser, tmp_path: Path
) -> None:
    with server.client(KEY) as http:
        http.post(
            "/v0/topics/a-tail", json={"records": [{"data": {"k": [1, 2]}}]}
        ).raise_for_status()
        with _console(server, browser) as page:
            row = "[...document.querySelectorAll('#topics tbody tr')].find((tr) => tr.querySelector('.topic-name') && tr.querySelector('.topic-name').textContent === 'a-tail')"
            page.wait_for(f"!!{row}")
            page.evaluate(f"{row}.querySelectorAll('button')[1].click(); true")
            page.wait_for("!!document.querySelector('#tail td.data summary.j-line')")
            assert _text(page, "#tail td.data summary.j-line") == '{"k":[1,2]}'
            assert page.evaluate("!!document.querySelector('#tail td.data button.copy')")
            _shot(page, tmp_path / "tail.png", "#tail-section")
