"""A data directory written by an earlier release opens with this code, every record intact
(docs/OPERATIONS.md, "Upgrades and rollbacks").

``tests/fixtures/datadir-<release>/`` are crash images committed once per release by
``tests/fixtures/make_release_datadir.py``: records in segments and the manifest from a
clean shutdown, more only in the WAL. Each is copied first (opening takes the lock and
checkpoints), then read through the public API and compared with its ``expected.json``.

The reverse direction is a refusal: a file of a format version newer than this code knows
stops the open with the version in the message, and the directory is left byte for byte as
it was, so the newer release it came from can still open it.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import topics
from topics._core import crc32c
from topics._storage.fs import StorageCorruptionError
from topics._storage.manifest import MANIFEST_FORMAT_VERSION
from topics._storage.wal_reader import WAL_FORMAT_VERSION

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RELEASES = sorted(p for p in FIXTURES.glob("datadir-*") if p.is_dir())


def _copy(release: Path, tmp_path: Path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(release, data, ignore=shutil.ignore_patterns("expected.json"))
    return data


def _snapshot(data: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(data)): p.read_bytes() for p in sorted(data.rglob("*")) if p.is_file()
    }


def test_there_is_a_release_fixture() -> None:
    assert RELEASES, f"no datadir-* under {FIXTURES}"


@pytest.mark.parametrize("release", RELEASES, ids=lambda p: p.name)
def test_a_release_data_dir_opens_and_reads_every_record(release: Path, tmp_path: Path) -> None:
    expected: dict[str, Any] = json.loads((release / "expected.json").read_text())
    data = _copy(release, tmp_path)
    for _ in range(2):  # as written, then as this code checkpointed it on close
        with topics.open(str(data)) as db:
            for topic, want in expected["topics"].items():
                page = db.diff(topic, from_seq=0, limit=1000, include_tags=True)
                got = [
                    {"seq": r.seq, "tag": r.tag, "data": r.data, "meta": r.meta}
                    for r in page.records
                ]
                assert got == want["records"], topic
            for topic, cursors in expected["cursors"].items():
                for name, seq in cursors.items():
                    assert db.get_cursor(topic, name).seq == seq


def _bump_wal_version(data: Path) -> None:
    """Rewrite the newest WAL file's header as a format version this code does not know."""
    newest = sorted((data / "wal").glob("*.wal"))[-1]
    raw = bytearray(newest.read_bytes())
    struct.pack_into("<H", raw, 8, WAL_FORMAT_VERSION + 1)
    struct.pack_into("<I", raw, 36, crc32c(bytes(raw[:36])))
    newest.write_bytes(bytes(raw))


def _bump_manifest_version(data: Path) -> None:
    """Rewrite every manifest's header as a format version this code does not know."""
    for path in (data / "manifest").glob("MANIFEST-*"):
        raw = bytearray(path.read_bytes())
        struct.pack_into("<H", raw, 8, MANIFEST_FORMAT_VERSION + 1)
        struct.pack_into("<I", raw, 28, crc32c(bytes(raw[:28])))
        path.write_bytes(bytes(raw))


@pytest.mark.parametrize(
    ("bump", "version"),
    [
        (_bump_wal_version, WAL_FORMAT_VERSION + 1),
        (_bump_manifest_version, MANIFEST_FORMAT_VERSION + 1),
    ],
    ids=["wal", "manifest"],
)
def test_a_newer_format_is_refused_and_left_untouched(
    bump: Any, version: int, tmp_path: Path
) -> None:
    data = _copy(RELEASES[-1], tmp_path)
    bump(data)
    before = _snapshot(data)
    with pytest.raises(StorageCorruptionError, match=f"version {version}"), topics.open(str(data)):
        pass
    after = _snapshot(data)
    after.pop("LOCK", None)
    assert after == before


def test_the_server_refuses_a_newer_format_in_one_line(tmp_path: Path) -> None:
    """topics-server on a directory a newer release wrote: exit 1 and one line naming the
    file's version and what to do, not a traceback."""
    data = _copy(RELEASES[-1], tmp_path)
    _bump_manifest_version(data)
    proc = subprocess.run(
        [sys.executable, "-m", "topics.frontends.server", "--port", "0", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TOPICS_API_KEYS": "", "TOPICS_HOST": "127.0.0.1"},
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"topics-server: cannot open the data directory {data}"), last
    assert f"version {MANIFEST_FORMAT_VERSION + 1}" in last
    assert "Upgrades and rollbacks" in last
