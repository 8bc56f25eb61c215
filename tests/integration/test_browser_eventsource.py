"""A real browser's EventSource against the real server (§7, the watch page).

Headless Debian chromium loads a small page from a page server run by this test; the
page opens ``new EventSource(stream_url)`` on a ``topics-server`` subprocess and reports
every event it sees back to the page server (``POST /result``). The test then forces a
server-side disconnect (a second stream on the same wid supersedes the browser's, whose
stream ends with ``connection-closing``), writes records while the browser is away and
lets that second stream *receive* them, so the session cursor moves past what the browser
has. The browser reconnects by itself after ``retry: 2000`` with its Last-Event-ID, which
rewinds the session: it must end up with every record exactly once.

The page is served from another origin than the API (the server sends no CORS headers,
by design: production browsers reach it through a same-origin proxy), so chromium runs
with ``--disable-web-security``; nothing else about EventSource changes.
"""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.chromium import HEADLESS_FLAGS, find_chromium

from .conftest import ServerProcess

pytestmark = pytest.mark.slow

PAGE = """<!doctype html>
<html><body><pre id="log"></pre><script>
const state = {n: 0, seen: [], opens: [], closings: [], ids: [], errors: 0};
function report() {
  state.n += 1;  // reports may arrive out of order: the page server keeps the newest
  fetch("/result", {method: "POST", body: JSON.stringify(state)});
}
const es = new EventSource(STREAM_URL);
es.addEventListener("connection-established", (e) => {
  state.opens.push(JSON.parse(e.data)); report();
});
es.addEventListener("record", (e) => {
  for (const r of JSON.parse(e.data).records) state.seen.push(r["$seq"]);
  state.ids.push(e.lastEventId); report();
});
es.addEventListener("connection-closing", (e) => {
  state.closings.push(JSON.parse(e.data).reason); report();
});
es.onerror = () => { state.errors += 1; report(); };
</script></body></html>
"""

CHROMIUM_FLAGS = [*HEADLESS_FLAGS, "--disable-web-security"]


class _Results:
    def __init__(self) -> None:
        self.latest: dict[str, Any] = {}
        self.cond = threading.Condition()

    def wait_for(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not (self.latest and pred(self.latest)):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"the page did not get there; it reported {self.latest}")
                self.cond.wait(left)


@pytest.fixture
def page_server() -> Iterator[tuple[str, _Results, dict[str, str]]]:
    results = _Results()
    page: dict[str, str] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page.get("html", "").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            report = json.loads(data)
            with results.cond:
                # Each report is a fetch of its own, handled on a thread of its own: an
                # older one can land after a newer one, and must not replace it.
                if report["n"] > results.latest.get("n", 0):
                    results.latest = report
                    results.cond.notify_all()
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/page", results, page
    finally:
        srv.shutdown()
        srv.server_close()


def _open_stream(base_url: str, wid: str) -> socket.socket:
    host, port = base_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(
        f"GET /v0/watch/{wid} HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    return sock


def _read_until(sock: socket.socket, marker: bytes, buf: bytes = b"") -> bytes:
    while marker not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"stream closed before {marker!r}: {buf!r}")
        buf += chunk
    return buf


def test_browser_eventsource_resumes_with_last_event_id_without_loss_or_duplicates(
    start_server: Callable[..., ServerProcess],
    page_server: tuple[str, _Results, dict[str, str]],
) -> None:
    chromium = find_chromium()
    server = start_server()
    page_url, results, page = page_server
    with server.client() as http:

        def write(*values: int) -> None:
            r = http.post("/v0/topics/t", json={"records": [{"data": v} for v in values]})
            r.raise_for_status()

        write(1, 2, 3, 4, 5)
        wid = http.post("/v0/watch", json={"topics": {"t": {"from_seq": 0}}}).json()["wid"]
        page["html"] = PAGE.replace("STREAM_URL", json.dumps(f"{server.base_url}/v0/watch/{wid}"))
        with tempfile.TemporaryDirectory(
            prefix="topics-chromium-", ignore_cleanup_errors=True
        ) as profile:
            browser = subprocess.Popen(
                [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", page_url],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                results.wait_for(lambda s: s["seen"] == [1, 2, 3, 4, 5], timeout=60)
                # Server-side disconnect: a second stream on the wid supersedes the browser's.
                with _open_stream(server.base_url, wid) as other:
                    buf = _read_until(other, b"caught-up")
                    results.wait_for(lambda s: s["closings"] == ["superseded"])
                    write(6, 7, 8)  # the browser is away; this stream takes them...
                    _read_until(other, b'"$seq":8', buf)
                    # ...so the session cursor is at 8 while the browser's last id says 5.
                    results.wait_for(lambda s: len(s["opens"]) == 2, timeout=30)
                write(9, 10)
                results.wait_for(lambda s: len(s["seen"]) >= 10)
                time.sleep(0.3)  # anything extra (a duplicate) would show up now
                final = dict(results.latest)
            finally:
                browser.kill()
                browser.wait()
    assert final["seen"] == list(range(1, 11))  # no loss, no duplicates
    first, second = final["opens"]
    assert first["topics"]["t"]["from_seq"] == 0
    # The reconnect resolved to the browser's Last-Event-ID ({"t": 5}), not the session's 8.
    assert second["topics"]["t"]["from_seq"] == 5
    assert final["closings"] == ["superseded"]
