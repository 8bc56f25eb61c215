"""State a key can grow: named cursors per key and per topic, producer ids per topic.

Issue #30, finding 6: a read-only key could create named cursors without a per-key bound
(50,000 with 255-character names added 65 MiB, and a metrics scrape built every one of
them), and the only bounds were per-topic constants. What must hold (_cursor_ops rule 5,
_cursors rule 5, _producers rule 5, docs/OPERATIONS.md "Limits and hostile clients"):

1. ``TOPICS_MAX_CURSORS_PER_KEY`` bounds the cursors one key creates over every topic,
   however it creates them (PUT, a diff with ``commit``), with ``429 throttled``,
   ``detail.limit`` ``max_cursors_per_key``; commits to its existing cursors go on, another
   key is not affected, and deleting a cursor frees its slot.
2. The count survives a restart (the creating key is stored with the cursor, by an id
   derived from the key: reordering ``TOPICS_API_KEYS`` moves no cursor to another key).
3. ``TOPICS_MAX_CURSORS_PER_TOPIC`` and ``TOPICS_MAX_PRODUCERS_PER_TOPIC`` are settings.
4. Nothing already stored changes when a creation is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import spawn_server

ADMIN = "bounds-admin"
READER = "bounds-reader"
KEYS = f"{ADMIN},{READER}:read"
PER_KEY = 3
PER_TOPIC = 4
PRODUCERS = 2


def _env() -> dict[str, str]:
    return {
        "TOPICS_API_KEYS": KEYS,
        "TOPICS_MAX_CURSORS_PER_KEY": str(PER_KEY),
        "TOPICS_MAX_CURSORS_PER_TOPIC": str(PER_TOPIC),
        "TOPICS_MAX_PRODUCERS_PER_TOPIC": str(PRODUCERS),
    }


def _throttled(r: httpx.Response, limit: str, cap: int) -> None:
    assert r.status_code == 429, r.text
    error = r.json()["error"]
    assert error["code"] == "throttled"
    assert error["detail"] == {"limit": limit, "max": cap}


def _commit(http: httpx.Client, topic: str, cursor: str, seq: int = 1) -> httpx.Response:
    return http.put(f"/v0/topics/{topic}/cursors/{cursor}", json={"seq": seq})


def _cursors(http: httpx.Client, topic: str) -> dict[str, Any]:
    r = http.get(f"/v0/topics/{topic}/cursors")
    assert r.status_code == 200, r.text
    return {c["cursor"]: c["seq"] for c in r.json()["cursors"]}


def test_one_key_creates_at_most_its_cursors_over_every_topic(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = spawn_server(_env(), "--data-dir", str(data))
    try:
        with server.client(ADMIN) as admin, server.client(READER) as reader:
            for topic in ("a", "b"):
                r = admin.post(f"/v0/topics/{topic}", json={"records": [{"data": 1}] * 3})
                assert r.status_code == 201, r.text
            for i in range(PER_KEY):  # spread over two topics: the bound is the key's
                assert _commit(reader, "ab"[i % 2], f"r{i}").status_code == 200
            before = {t: _cursors(admin, t) for t in ("a", "b")}
            _throttled(_commit(reader, "b", "r-next"), "max_cursors_per_key", PER_KEY)
            r = reader.post("/v0/topics/b/diff", json={"cursor": "r-next", "commit": True})
            _throttled(r, "max_cursors_per_key", PER_KEY)
            assert {t: _cursors(admin, t) for t in ("a", "b")} == before
            # Its own cursors still commit; reading without a commit needs no slot.
            assert _commit(reader, "a", "r0", 2).status_code == 200
            r = reader.post("/v0/topics/b/diff", json={"cursor": "r-next"})
            assert r.status_code == 200, r.text
            # Another key has its own count (and the topic cap is a setting too).
            for name in ("admin-0", "admin-1"):  # "a" now holds r0, r2 and these two
                assert _commit(admin, "a", name).status_code == 200
            _throttled(_commit(admin, "a", "admin-2"), "max_cursors_per_topic", PER_TOPIC)
            # Deleting one (a read-only key may not: a key with the delete scope does) frees
            # the slot of the key that created it.
            assert admin.delete("/v0/topics/a/cursors/r0").json()["deleted"] is True
            assert _commit(reader, "b", "r-next").status_code == 200
    finally:
        assert server.stop() == 0, server.stderr()
    # Rule 2: after a restart the key still holds its PER_KEY cursors, with the keys listed
    # in another order (the admin key, first before, now second) and one more key in front.
    reordered = {**_env(), "TOPICS_API_KEYS": f"bounds-new:read,{READER}:read,{ADMIN}"}
    again = spawn_server(reordered, "--data-dir", str(data))
    try:
        with (
            again.client(READER) as reader,
            again.client("bounds-new") as new,
            again.client(ADMIN) as admin,
        ):
            _throttled(_commit(reader, "a", "after-restart"), "max_cursors_per_key", PER_KEY)
            assert _commit(reader, "b", "r-next", 3).status_code == 200
            r = admin.post("/v0/topics/c", json={"records": [{"data": 1}]})
            assert r.status_code == 201, r.text
            for i in range(PER_KEY):  # the key now in the reader's old place starts empty
                assert _commit(new, "c", f"n{i}").status_code == 200
    finally:
        assert again.stop() == 0, again.stderr()


def test_producer_ids_per_topic_are_a_setting() -> None:
    server = spawn_server(_env())
    try:
        with server.client(ADMIN) as http:
            for i in range(PRODUCERS):
                body = {"records": [{"data": i}], "producer_id": f"p{i}", "epoch": 0}
                assert http.post("/v0/topics/p", json=body).status_code in (200, 201)
            body = {"records": [{"data": "x"}], "producer_id": "p-next", "epoch": 0}
            _throttled(http.post("/v0/topics/p", json=body), "max_producers_per_topic", PRODUCERS)
            assert http.get("/v0/topics/p").json()["head_seq"] == PRODUCERS
    finally:
        assert server.stop() == 0, server.stderr()


@pytest.mark.parametrize("value", ["-1", "many"])
def test_a_bad_bound_stops_the_server_at_start(value: str) -> None:
    try:
        server = spawn_server({"TOPICS_MAX_CURSORS_PER_KEY": value})
    except AssertionError as exc:  # spawn_server: "topics-server exited 2: <its stderr>"
        refused = str(exc)
    else:
        server.stop()
        pytest.fail(f"the server started with TOPICS_MAX_CURSORS_PER_KEY={value}")
    assert "max_cursors_per_key" in refused.lower()
