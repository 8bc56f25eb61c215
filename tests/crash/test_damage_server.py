"""Issue 32's scenario on the real ``topics-server``: two ``fsync`` topics of 20,000
records, a clean stop, one byte flipped in the middle of one topic's sealed segment, a
restart. Before issue 32 the server refused to start; now it serves both topics: every
record of the other one, every readable record of the damaged one with a ``corrupt``
tombstone over exactly the seqs it lost, writes after the head, ``/v0/ready`` 200, and
``/v0/health``/``/v0/metrics`` name the damage.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import httpx

from tests.support.server import spawn_server
from topics._core import iter_frames
from topics._storage.fs import RealFs
from topics._storage.manifest import load_manifest
from topics._storage.segment_files import HEADER_SIZE, segment_path

RECORDS = 20_000
BATCH = 1000


def _read_all(client: httpx.Client, topic: str) -> tuple[list[int], list[Any]]:
    seqs: list[int] = []
    tombstones: list[Any] = []
    from_seq = 0
    while True:
        res = client.post(f"/v0/topics/{topic}/diff", json={"from_seq": from_seq, "limit": 5000})
        assert res.status_code == 200, res.text
        body = res.json()
        if body["tombstone"] is not None:
            tombstones.append(body["tombstone"])
        seqs += [r["$seq"] for r in body["records"]]
        from_seq = body["next_from_seq"]
        if body["caught_up"]:
            return seqs, tombstones


def _flip_mid_sealed_segment(data_dir: str, topic: str) -> tuple[str, int, int]:
    """Flip one byte in the middle of ``topic``'s first sealed segment; returns the file's
    name and the seq range it can no longer read."""
    loaded = load_manifest(RealFs(), os.path.join(data_dir, "manifest"))
    assert loaded is not None
    (entry,) = [t for t in loaded[1]["topics"] if t["name"] == topic]
    seg = next(s for s in entry["segments"] if s["sealed"])
    path = segment_path(os.path.join(data_dir, "segments"), int(entry["id"]), int(seg["base"]))
    with open(path, "r+b") as f:
        raw = f.read()
        mid = (len(raw) - HEADER_SIZE) // 2
        f.seek(HEADER_SIZE + mid)
        f.write(bytes([raw[HEADER_SIZE + mid] ^ 0x01]))
    spans = iter_frames(raw[HEADER_SIZE:], int(seg["salt"]), True)
    bad = next(i for i, (off, n) in enumerate(spans) if off + n > mid)
    base = int(seg["base"])
    return os.path.basename(path), base + bad, base + int(seg["count"]) - 1


def test_one_flipped_byte_costs_its_range_only() -> None:
    data_dir = tempfile.mkdtemp(prefix="topics-damage-")
    try:
        server = spawn_server({}, "--data-dir", data_dir)
        with server.client() as http:
            for name in ("a", "b"):
                assert http.put(f"/v0/topics/{name}", json={"durability": "fsync"}).is_success
                for i in range(0, RECORDS, BATCH):
                    recs = [{"data": {"i": i + j, "pad": "p" * 60}} for j in range(BATCH)]
                    res = http.post(f"/v0/topics/{name}", json={"records": recs})
                    assert res.status_code == 200, res.text
        assert server.stop() == 0
        name, first, last = _flip_mid_sealed_segment(data_dir, "a")
        assert last - first + 1 < RECORDS // 2

        server = spawn_server({}, "--data-dir", data_dir)
        with server.client() as http:
            assert http.get("/v0/ready").status_code == 200
            assert _read_all(http, "b") == (list(range(1, RECORDS + 1)), [])
            seqs, tombstones = _read_all(http, "a")
            assert seqs == [s for s in range(1, RECORDS + 1) if not first <= s <= last]
            assert [(t["reason"], t["gap_from"], t["gap_to"]) for t in tombstones] == [
                ("corrupt", first, last)
            ]
            res = http.post("/v0/topics/a", json={"records": [{"data": "after"}]})
            assert res.status_code == 200, res.text
            assert res.json()["last_seq"] == RECORDS + 1
            assert http.get("/v0/ready").status_code == 200
            health = http.get("/v0/health")
            assert health.status_code == 200
            body = health.json()
            assert body["status"] == "degraded"
            assert [
                (d["file"], d["topic"], d["first_seq"], d["last_seq"]) for d in body["damaged"]
            ] == [(f"segments/{name}", "a", first, last)]
            metrics = http.get("/v0/metrics", headers={"accept": "application/json"}).json()
            assert metrics["topics_storage_damaged_files"] == 1
        assert server.stop() == 0
        log_text = server.stderr()
        assert name in log_text
        assert "topics verify" in log_text
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
