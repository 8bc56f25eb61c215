"""A real topics-server whose data directory fills up: a small tmpfs, as root.

What must hold (docs/OPERATIONS.md "Limits and hostile clients", docs/HTTP.md "Probes"):
writes that cannot be stored get 507 ``insufficient_storage``; ``/v0/ready`` answers 503
``not_ready`` with ``detail.storage`` while they do, and ``/v0/metrics`` says
``topics_storage_degraded 1``; once space is freed both flip back by themselves, writes
succeed again, and after a restart every acknowledged record is there.

Two ways in: with ``TOPICS_MIN_FREE_BYTES=0`` the WAL itself meets ENOSPC (a short write
that is cut back, wal.py Rule 9); with a reserve, writes are refused before that. Mounting
a tmpfs needs root (CAP_SYS_ADMIN): elsewhere these tests skip, and the same paths are
covered on a fake disk by tests/crash/test_disk_full.py. Each test is bounded (a few
seconds: the server polls free space every second).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import ServerProcess, spawn_server

pytestmark = pytest.mark.slow

TMPFS_BYTES = 8 << 20
RECORD_CHARS = 48 << 10
MAX_WRITES = 400
WAIT_S = 20.0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs mounted for this test (skips where mounting is not allowed)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True)


def _fill(mnt: Path, leave_bytes: int) -> Path:
    """A filler file that leaves about ``leave_bytes`` free."""
    filler = mnt / "filler"
    st = os.statvfs(mnt)
    size = st.f_bavail * st.f_frsize - leave_bytes
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, size))
    return filler


def _wait_ready(http: httpx.Client, want: int) -> httpx.Response:
    deadline = time.monotonic() + WAIT_S
    while True:
        r = http.get("/v0/ready")
        if r.status_code == want or time.monotonic() > deadline:
            return r
        time.sleep(0.05)


def _metric(http: httpx.Client, name: str) -> Any:
    return http.get("/v0/metrics", headers={"accept": "application/json"}).json()[name]


@pytest.mark.parametrize(
    ("reserve", "state"), [(0, "disk_full"), (2 << 20, "below_reserve")], ids=["enospc", "reserve"]
)
def test_a_full_disk_answers_507_then_recovers_when_space_is_freed(
    small_disk: Path, reserve: int, state: str
) -> None:
    data = small_disk / "data"
    server = spawn_server({"TOPICS_MIN_FREE_BYTES": str(reserve)}, "--data-dir", str(data))
    try:
        acked = _fill_refuse_and_recover(server, small_disk, reserve, state)
    finally:
        # Stopped here, not by the module's fixture: the tmpfs goes with this test.
        assert server.stop() == 0, server.stderr()
    again = spawn_server({"TOPICS_MIN_FREE_BYTES": "0"}, "--data-dir", str(data))
    try:
        got = _read_all(again)
    finally:
        assert again.stop() == 0, again.stderr()
    missing = [seq for seq in acked if got.get(seq) != acked[seq]]
    assert not missing, f"acknowledged records lost: {missing[:5]}"


def _fill_refuse_and_recover(
    server: ServerProcess, small_disk: Path, reserve: int, state: str
) -> dict[int, str]:
    """Write until 507, check the probes, free space, check recovery; the acked records."""
    acked: dict[int, str] = {}
    with server.client() as http:
        assert _wait_ready(http, 200).status_code == 200
        assert http.put("/v0/topics/f", json={"durability": "fsync"}).status_code in (200, 201)
        filler = _fill(small_disk, reserve + (1 << 20))
        refused = None
        for i in range(MAX_WRITES):
            value = f"{i:06d}" + "x" * RECORD_CHARS
            r = http.post("/v0/topics/f", json={"records": [{"data": value}]})
            if r.status_code == 507:
                refused = r.json()["error"]
                break
            assert r.status_code in (200, 201), r.text
            acked[r.json()["seqs"][0]] = value
        assert refused is not None, f"no 507 after {MAX_WRITES} writes"
        assert refused["code"] == "insufficient_storage"
        assert refused["detail"]["outcome"] in ("not_stored", "unknown")
        assert acked, "the disk filled before the first write"
        # Every later change is refused up front; reads go on; the probes tell the truth.
        r = http.post("/v0/topics/f", json={"records": [{"data": "refused"}]})
        assert r.status_code == 507
        assert r.json()["error"]["detail"]["outcome"] == "not_stored"
        assert http.post("/v0/topics/f/diff", json={"limit": 1}).status_code == 200
        ready = http.get("/v0/ready")
        assert ready.status_code == 503
        assert ready.json()["error"]["code"] == "not_ready"
        assert ready.json()["error"]["detail"]["storage"] == state
        assert _metric(http, "topics_storage_degraded") == 1
        assert http.get("/v0/health").status_code == 200  # alive: do not restart it
        filler.unlink()  # space returns
        assert _wait_ready(http, 200).status_code == 200
        assert _metric(http, "topics_storage_degraded") == 0
        assert _metric(http, "topics_storage_free_bytes") > reserve
        r = http.post("/v0/topics/f", json={"records": [{"data": "after"}]})
        assert r.status_code in (200, 201), r.text
        acked[r.json()["seqs"][0]] = "after"
    return acked


def test_deleting_a_topic_is_the_way_out_from_inside(small_disk: Path) -> None:
    """No filler to remove: the disk is full of one topic's records. Writes are refused,
    the topic delete is accepted (store.py rule 10, _durability rule 4), its bytes are
    freed within seconds and writes are accepted again, with no restart."""
    reserve = 2 << 20
    data = small_disk / "data"
    server = spawn_server({"TOPICS_MIN_FREE_BYTES": str(reserve)}, "--data-dir", str(data))
    try:
        with server.client() as http:
            assert _wait_ready(http, 200).status_code == 200
            assert http.put("/v0/topics/keep", json={"durability": "fsync"}).status_code == 201
            assert http.post("/v0/topics/keep", json={"records": [{"data": "kept"}]}).is_success
            for i in range(MAX_WRITES):
                value = f"{i:06d}" + "x" * RECORD_CHARS
                r = http.post("/v0/topics/bulk", json={"records": [{"data": value}]})
                if r.status_code == 507:
                    break
                assert r.status_code in (200, 201), r.text
            else:
                pytest.fail(f"no 507 after {MAX_WRITES} writes")
            assert _wait_ready(http, 503).json()["error"]["detail"]["storage"] == "below_reserve"
            r = http.delete("/v0/topics/bulk")
            assert r.status_code == 200, r.text
            assert r.json()["deleted"] is True
            assert _wait_ready(http, 200).status_code == 200, "the delete freed no space"
            assert _metric(http, "topics_storage_free_bytes") > reserve
            r = http.post("/v0/topics/keep", json={"records": [{"data": "after"}]})
            assert r.status_code == 200, r.text
    finally:
        assert server.stop() == 0, server.stderr()
    again = spawn_server({"TOPICS_MIN_FREE_BYTES": "0"}, "--data-dir", str(data))
    try:
        with again.client() as http:
            assert _wait_ready(http, 200).status_code == 200
            page = http.post("/v0/topics/keep/diff", json={}).json()
            assert [r["data"] for r in page["records"]] == ["kept", "after"]
            assert http.get("/v0/topics/bulk").status_code == 404
    finally:
        assert again.stop() == 0, again.stderr()


def _read_all(server: ServerProcess) -> dict[int, str]:
    got: dict[int, str] = {}
    with server.client() as http:
        assert _wait_ready(http, 200).status_code == 200
        cursor = 0
        while True:
            page = http.post("/v0/topics/f/diff", json={"from_seq": cursor, "limit": 1000}).json()
            got.update({rec["$seq"]: rec["data"] for rec in page["records"]})
            cursor = page["next_from_seq"]
            if page["caught_up"]:
                return got
