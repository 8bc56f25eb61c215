"""Issue 32, the manifest: one bad generation is worked around and reported; both bad
refuse the start with a message that names the files and the three ways out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import ujson

import topics
from topics._storage.fs import RealFs
from topics._storage.manifest import ManifestCorruptionError, manifest_generations


def _two_generations(tmp_path: Path) -> tuple[Path, list[Path]]:
    data = tmp_path / "data"
    for session in range(2):
        with topics.open(str(data)) as engine:
            engine.put_topic("t", {"durability": "fsync"})
            engine.write("t", [{"data": session}])
    folder = data / "manifest"
    files = [folder / f"MANIFEST-{g:016x}" for g in manifest_generations(RealFs(), str(folder))]
    assert len(files) == 2
    return data, files


def _spoil(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[45] ^= 0xFF  # in the body: its checksum fails
    path.write_bytes(bytes(raw))


def test_a_bad_newest_generation_falls_back_and_is_reported(tmp_path: Path) -> None:
    data, files = _two_generations(tmp_path)
    _spoil(files[-1])
    with topics.open(str(data)) as engine:
        page = engine.diff("t", from_seq=0)
        assert [r["data"] for r in ujson.loads(page.records_json)] == [0, 1]
        [damage] = engine.engine._app.damage.entries()
        assert (damage.kind, damage.path) == ("manifest", f"manifest/{files[-1].name}")
        assert "nothing is lost" in damage.detail


def test_no_valid_generation_refuses_the_open_naming_files_and_ways_out(tmp_path: Path) -> None:
    data, files = _two_generations(tmp_path)
    for path in files:
        _spoil(path)
    with pytest.raises(ManifestCorruptionError) as refused, topics.open(str(data)):
        pass
    text = str(refused.value)
    for path in files:
        assert str(path) in text
    assert f"topics verify {data}" in text
    assert f"topics restore FILE {data}" in text
    assert "EMPTY" in text


def test_the_server_refuses_in_one_line_and_exits_non_zero(tmp_path: Path) -> None:
    data, files = _two_generations(tmp_path)
    for path in files:
        _spoil(path)
    proc = subprocess.run(
        [sys.executable, "-m", "topics.frontends.server", "--port", "0", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TOPICS_API_KEYS": "", "TOPICS_HOST": "127.0.0.1"},
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"topics-server: cannot open the data directory {data}"), last
    assert files[0].name in last
    assert files[1].name in last
    assert "topics verify" in last
    assert "topics restore" in last
