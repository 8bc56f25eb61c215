"""``GET /v0/backup`` on the real server, ``topics backup`` and ``topics restore``: who may
take one (refused before any work), what the archive holds under a write load (every
acknowledged write before the request, and per topic a prefix of the acknowledged
writes), and that the restored directory opens."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import trio
import ujson

from topics._persistence.restore import check_archive
from topics.cli import main as cli_main
from topics.client import AsyncClient, Client
from topics.engine import open_engine
from topics.errors import ForbiddenError
from topics.ops.backups import Backup

from .conftest import InProc, ServerProcess, settings_with

KEYS = "admin-key,reader:read,writer:w,tenant-admin:a:tenant.,all-scopes:r+w+d"
TOPICS = {"f1": "fsync", "f2": "fsync", "d1": "disk"}
BATCH = 20

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("backup-live")


@pytest.fixture(scope="module")
def live(start_server: Callable[..., ServerProcess], data_dir: Path) -> ServerProcess:
    server = start_server({"TOPICS_API_KEYS": KEYS}, "--data-dir", str(data_dir))
    with server.client("admin-key") as admin:
        for name, durability in TOPICS.items():
            r = admin.put(f"/v0/topics/{name}", json={"durability": durability})
            assert r.status_code in (200, 201), r.text
    return server


REFUSED = [
    (None, 401, "unauthorized"),
    ("reader", 403, "forbidden"),
    ("writer", 403, "forbidden"),
    ("all-scopes", 403, "forbidden"),
    ("tenant-admin", 403, "forbidden"),  # admin, but limited to a name prefix
]


@pytest.mark.parametrize(("key", "status", "code"), REFUSED)
def test_only_an_unlimited_admin_key_gets_a_backup(
    live: ServerProcess, key: str | None, status: int, code: str
) -> None:
    with live.client(key) as http:
        r = http.get("/v0/backup")
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code


@pytest.mark.parametrize("http_settings", [settings_with(KEYS)])
async def test_a_refused_key_never_reaches_the_engine(inproc: InProc) -> None:
    """Auth comes before any work: the engine's backup call is never made for a key the
    gate refuses (and is, for the admin key)."""
    calls: list[str] = []
    real = inproc.engine.open_backup

    async def spy() -> Backup:
        calls.append("open_backup")
        return await real()

    inproc.engine.open_backup = spy  # type: ignore[method-assign]
    for key, status, _ in REFUSED:
        async with inproc.client(key) as http:
            assert (await http.get("/v0/backup")).status_code == status
    assert calls == []
    async with inproc.client("admin-key") as http:
        assert (await http.get("/v0/backup")).status_code == 400  # memory-only
    assert calls == ["open_backup"]


async def test_a_memory_only_server_answers_a_clear_error(inproc: InProc) -> None:
    async with inproc.client() as http:
        r = await http.get("/v0/backup")
    assert r.status_code == 400, r.text
    assert r.json()["error"]["detail"] == {"reason": "memory_only"}


class _Writer:
    """One thread per topic, each appending batches back to back and keeping what was
    acknowledged: ``acked[topic][seq - 1]`` is the value written at that seq."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.acked: dict[str, list[int]] = {name: [] for name in TOPICS}
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._run, args=(t,)) for t in TOPICS]

    def _run(self, topic: str) -> None:
        acked = self.acked[topic]
        try:
            with self.server.client("admin-key") as http:
                while not self.stop.is_set():
                    values = list(range(len(acked), len(acked) + BATCH))
                    r = http.post(
                        f"/v0/topics/{topic}", json={"records": [{"data": v} for v in values]}
                    )
                    assert r.status_code == 200, r.text
                    assert r.json()["first_seq"] == len(acked) + 1, r.text
                    acked.extend(values)  # one writer per topic: seqs follow on
        except BaseException as exc:
            self.errors.append(exc)

    def snapshot(self) -> dict[str, int]:
        return {topic: len(values) for topic, values in self.acked.items()}


async def _restored_records(data_dir: str) -> dict[str, list[tuple[int, object]]]:
    out: dict[str, list[tuple[int, object]]] = {}
    async with open_engine(data_dir) as engine:
        for topic in TOPICS:
            records: list[tuple[int, object]] = []
            from_seq = 0
            while True:
                page = await engine.diff(topic, from_seq=from_seq, limit=1000)
                records += [(r["$seq"], r["data"]) for r in ujson.loads(page.records_json)]
                if page.caught_up:
                    break
                from_seq = page.next_from_seq
            out[topic] = records
    return out


def test_a_backup_under_write_load_restores_every_acknowledged_prefix(
    live: ServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    writer = _Writer(live)
    for thread in writer.threads:
        thread.start()
    try:
        time.sleep(0.7)
        before = writer.snapshot()  # acknowledged before the request is sent
        archive = str(tmp_path / "backup.tar")
        with Client(live.base_url, "admin-key") as client:
            size = client.backup(archive)
        time.sleep(0.3)  # the load goes on after the backup, too
    finally:
        writer.stop.set()
        for thread in writer.threads:
            thread.join()
    assert not writer.errors, writer.errors
    assert size == os.path.getsize(archive)
    assert not os.path.exists(archive + ".tmp")
    assert all(n >= BATCH for n in before.values()), before

    restored = str(tmp_path / "restored")
    assert cli_main(["restore", archive, restored]) == 0
    assert "restored" in capsys.readouterr().out
    # The restored directory passes `topics verify` (nothing damaged, nothing fatal) ...
    assert cli_main(["verify", restored]) == 0
    capsys.readouterr()
    # ... and starts.
    records = trio.run(_restored_records, restored)
    for topic, durability in TOPICS.items():
        got = records[topic]
        k = len(got)
        # A prefix of the acknowledged writes: seqs 1..k, each with its acknowledged value.
        assert [seq for seq, _ in got] == list(range(1, k + 1)), (topic, durability)
        assert [v for _, v in got] == writer.acked[topic][:k], (topic, durability)
        # Everything acknowledged before the backup was asked for is in it.
        assert k >= before[topic], (topic, durability, k, before[topic])
        # ... and the snapshot was taken while the load went on, not after it.
        assert k < len(writer.acked[topic]), (topic, k, len(writer.acked[topic]))


def test_the_backup_answer_says_what_it_is(live: ServerProcess) -> None:
    with (
        live.client("admin-key") as http,
        http.stream("GET", "/v0/backup") as r,
    ):
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/x-tar"
        assert r.headers["content-disposition"].startswith('attachment; filename="topics-backup-')
        body = r.read()
    assert len(body) == int(r.headers["content-length"])
    assert body[:7] == b"BACKUP\0"


def test_the_cli_saves_a_backup_and_refuses_to_restore_over_data(
    live: ServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = str(tmp_path / "cli.tar")
    url = live.base_url
    assert cli_main(["backup", archive, "--url", url, "--api-key", "admin-key"]) == 0
    assert "saved a backup" in capsys.readouterr().out
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    assert cli_main(["restore", archive, str(target)]) == 1
    assert "not empty" in capsys.readouterr().err
    assert os.listdir(target) == ["keep.txt"]
    assert cli_main(["restore", archive, str(target), "--force", "--json"]) == 0
    out = ujson.loads(capsys.readouterr().out)
    assert out["topics"] >= len(TOPICS)
    # A reader key gets the server's refusal, and no file is left behind.
    denied = str(tmp_path / "denied.tar")
    assert cli_main(["backup", denied, "--url", url, "--api-key", "reader"]) != 0
    assert "forbidden" in capsys.readouterr().err
    assert not os.path.exists(denied)
    assert not os.path.exists(denied + ".tmp")


def test_a_server_s_own_directory_is_refused(
    live: ServerProcess, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = str(tmp_path / "b.tar")
    with Client(live.base_url, "admin-key") as client:
        client.backup(archive)
    assert cli_main(["restore", archive, str(data_dir), "--force"]) != 0
    assert "is held by another" in capsys.readouterr().err
    assert os.listdir(data_dir / "wal")  # --force removed nothing: the lock came first
    with httpx.Client(base_url=live.base_url) as http:
        assert http.get("/v0/health").status_code == 200


def test_a_client_that_goes_away_mid_stream_frees_the_backup_slot(live: ServerProcess) -> None:
    with live.client("admin-key") as http:
        body = [{"data": "x" * 1000} for _ in range(500)]
        for _ in range(60):  # ~30 MB: more than the socket buffers hold
            assert http.post("/v0/topics/bulk", json={"records": body}).status_code in (200, 201)
        with http.stream("GET", "/v0/backup") as r:
            assert r.status_code == 200
            assert int(r.headers["content-length"]) > 30_000_000
            next(r.iter_raw(65536))
        # Closed after one chunk: the server ends the stream and releases the pins, so
        # the next backup is not refused as a second one running.
        deadline = time.monotonic() + 10
        while True:
            with http.stream("GET", "/v0/backup") as again:
                if again.status_code == 200 or time.monotonic() > deadline:
                    break
                assert again.status_code == 429
            time.sleep(0.1)
        assert again.status_code == 200


async def test_the_async_client_saves_the_same_archive(live: ServerProcess, tmp_path: Path) -> None:
    path = str(tmp_path / "async.tar")
    async with AsyncClient(live.base_url, "admin-key") as client:
        size = await client.backup(path)
        with pytest.raises(ForbiddenError):
            async with AsyncClient(live.base_url, "reader") as reader:
                await reader.backup(str(tmp_path / "denied.tar"))
    _check_saved(path, size, str(tmp_path / "denied.tar"))


def _check_saved(path: str, size: int, denied: str) -> None:
    assert size == os.path.getsize(path)
    assert check_archive(path)["format"] == 1
    assert not os.path.exists(denied)
    assert not os.path.exists(denied + ".tmp")
