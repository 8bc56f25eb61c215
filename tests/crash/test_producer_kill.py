"""SIGKILL a real ``topics-server`` holding producer epochs, restart it on the same data
directory (issue 19; topics/ops/producers.py rule 3).

For every durability class a producer writes at epoch 1, raises to epoch 2 (that write is
synced whatever the class) and sends one more batch; the server is killed right after the
last answer. After the restart:

* epoch 1 is still fenced (``409 producer_fenced``, ``current_epoch`` 2) in every class,
  ``ephemeral`` included: an acknowledged fence survives the kill;
* the producer's new instance (epoch 3) resends its last batch under the same key, and the
  batch is in the log exactly once: answered ``deduped`` with the original seqs where the
  batch survived (always for ``fsync``), appended anew where the kill took it
  (``disk``/``memory`` may lose an acknowledged tail). ``ephemeral`` records never survive.
"""

from __future__ import annotations

import signal
import tempfile
from typing import Any

import httpx
import pytest

from tests.support.server import ServerProcess, spawn_server

pytestmark = pytest.mark.crash

CLASSES = ["ephemeral", "memory", "disk", "fsync"]


def _write(http: httpx.Client, topic: str, data: str, epoch: int, key: str) -> httpx.Response:
    body = {"records": [{"data": data}], "producer_id": "p", "epoch": epoch, "idempotency_key": key}
    return http.post(f"/v0/topics/{topic}", json=body)


def _datas(http: httpx.Client, topic: str) -> list[Any]:
    out: list[Any] = []
    from_seq = 0
    while True:
        page = http.post(f"/v0/topics/{topic}/diff", json={"from_seq": from_seq}).json()
        out += [r["data"] for r in page["records"]]
        from_seq = page["next_from_seq"]
        if page["caught_up"]:
            return out


def test_epochs_and_the_last_batch_survive_a_sigkill() -> None:
    with tempfile.TemporaryDirectory(prefix="topics-fence-") as data_dir:
        server: ServerProcess = spawn_server({}, "--data-dir", data_dir)
        last_seqs: dict[str, list[int]] = {}
        try:
            with server.client() as http:
                for cls in CLASSES:
                    topic = f"fence-{cls}"
                    put = http.put(f"/v0/topics/{topic}", json={"durability": cls})
                    assert put.status_code == 201, put.text
                    assert _write(http, topic, "a", 1, "k1").status_code == 200
                    assert _write(http, topic, "b", 2, "k2").status_code == 200
                    last = _write(http, topic, "c", 2, "k3")
                    assert last.status_code == 200, last.text
                    last_seqs[cls] = last.json()["seqs"]
        finally:
            server.stop(signal.SIGKILL)
        server = spawn_server({}, "--data-dir", data_dir)
        try:
            with server.client() as http:
                for cls in CLASSES:
                    topic = f"fence-{cls}"
                    zombie = _write(http, topic, "zombie", 1, "kz")
                    assert zombie.status_code == 409, (cls, zombie.text)
                    error = zombie.json()["error"]
                    assert (error["code"], error["detail"]["current_epoch"]) == (
                        "producer_fenced",
                        2,
                    ), cls
                    resent = _write(http, topic, "c", 3, "k3")
                    assert resent.status_code == 200, (cls, resent.text)
                    if cls == "fsync":
                        assert resent.json()["deduped"] is True
                        assert resent.json()["seqs"] == last_seqs[cls]
                    if cls != "ephemeral":
                        datas = _datas(http, topic)
                        assert datas.count("c") == 1, (cls, datas)  # exactly once
                        assert "zombie" not in datas
        finally:
            assert server.stop() == 0, server.stderr()
