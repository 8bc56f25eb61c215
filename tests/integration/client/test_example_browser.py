"""examples/browser_eventsource.py in a real headless chromium, as a user would use it.

The example runs as one command (its own server, API key from ``TOPICS_API_KEYS``); the
page is opened at the URL it prints and driven through its own inputs and buttons over the
DevTools pipe (tests/support/chromium.py). What the page lists is what a reader sees.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.chromium import Chromium
from tests.support.paths import EXAMPLES

pytestmark = pytest.mark.slow

EXAMPLE = EXAMPLES / "browser_eventsource.py"
KEY = "browser-example-key"

ROWS = """[...document.querySelectorAll('#events li')]
  .map((li) => [li.className, li.dataset.seq ? Number(li.dataset.seq) : null, li.textContent])"""


@pytest.fixture
def example() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """The example on a free port: the page URL it prints, and the process (which must
    stop cleanly on SIGTERM)."""
    # Slow ticks: ``demo`` keeps 100 records, and none may be gone before the page watches.
    cmd = [sys.executable, str(EXAMPLE), "--port", "0", "--interval", "0.5", "--duration", "300"]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TOPICS_API_KEYS": KEY},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.fullmatch(r"page: (http://127\.0\.0\.1:\d+/\?topic=demo)\n", line)
    try:
        assert found, f"no page line: {line!r}; stderr: {proc.stderr.read() if proc.stderr else ''}"
        yield found[1], proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err


def _rows(page: Chromium) -> list[list[object]]:
    rows: list[list[object]] = page.evaluate(ROWS)
    return rows


def test_the_page_shows_demo_records_writes_and_tombstones(
    example: tuple[str, subprocess.Popen[str]], tmp_path: Path
) -> None:
    url, proc = example
    base = url.split("/?", 1)[0]
    with (
        httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEY}"}) as http,
        Chromium.open(url, tmp_path / "profile") as page,
    ):
        # ?topic=demo starts a watch at once, which the keyed server refuses until the key is in.
        page.wait_for("document.getElementById('state').textContent.startsWith('401')")
        assert "unauthorized" in page.evaluate("document.getElementById('state').textContent")
        assert _rows(page) == []
        page.evaluate("document.getElementById('key').value = " + repr(KEY))
        page.evaluate("document.getElementById('watch').click()")

        page.wait_for("document.querySelectorAll('#events li.record').length >= 3")
        rows = _rows(page)
        assert rows[:3] == [
            ["record", 1, '#1 {"tick":1,"text":"tick 1"}'],
            ["record", 2, '#2 {"tick":2,"text":"tock 2"}'],
            ["record", 3, '#3 {"tick":3,"text":"tick 3"}'],
        ]
        assert [r[1] for r in rows] == list(range(1, len(rows) + 1))
        page.wait_for("document.getElementById('state').textContent === 'live'")

        # A record from another writer (this test, over HTTP) arrives in the same stream.
        written = http.post("/v0/topics/demo", json={"records": [{"data": {"from": "test"}}]})
        seq = written.raise_for_status().json()["first_seq"]
        page.wait_for(f"!!document.querySelector('#events li[data-seq=\"{seq}\"]')")
        rows = _rows(page)
        assert rows[seq - 1] == ["record", seq, f'#{seq} {{"from":"test"}}']
        assert [r[1] for r in rows] == list(range(1, len(rows) + 1))  # in order, no gaps

        # The page's own write form: the record it writes comes back through the stream.
        page.evaluate("document.getElementById('text').value = 'hello from the page'")
        page.evaluate("document.getElementById('send').click()")
        note = page.wait_for(
            "document.getElementById('written').textContent.startsWith('written as #')"
            " && document.getElementById('written').textContent"
        )
        own = int(note.removeprefix("written as #"))
        page.wait_for(f"!!document.querySelector('#events li[data-seq=\"{own}\"]')")
        assert _rows(page)[own - 1] == ["record", own, f'#{own} {{"text":"hello from the page"}}']
        page.screenshot(tmp_path / "browser_eventsource_demo.png")

        # Records lost before the watch began are a visible tombstone row, not a silent gap.
        http.put("/v0/topics/capped", json={"cap_records": 3}).raise_for_status()
        records = [{"data": {"n": n}} for n in range(1, 6)]
        http.post("/v0/topics/capped", json={"records": records}).raise_for_status()
        page.evaluate("document.getElementById('topic').value = 'capped'")
        page.evaluate("document.getElementById('watch').click()")
        page.wait_for("document.getElementById('state').textContent === 'live'")
        assert _rows(page) == [
            ["tombstone", None, "tombstone: #1..#2 lost (from_seq_too_old)"],
            ["record", 3, '#3 {"n":3}'],
            ["record", 4, '#4 {"n":4}'],
            ["record", 5, '#5 {"n":5}'],
        ]
        shot = page.screenshot(tmp_path / "browser_eventsource_tombstone.png")

        # Stopping the example with the page still watching: the stream is closed by the
        # server, and the page says so instead of freezing on its last state.
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        state = page.wait_for(
            "(t => (t.startsWith('server closing') || t === 'reconnecting...') && t)"
            "(document.getElementById('state').textContent)"
        )
        assert state in (
            "server closing (server_shutdown), the browser will reconnect",
            "reconnecting...",
        )
    assert shot.read_bytes().startswith(b"\x89PNG")
