"""``topics verify DATA_DIR``: the table, ``--json`` and the exit codes (0 clean, 1 damage,
2 could not run). No server: the command reads the directory itself."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.datadir_damage import build, copy, flip_bit, segments, zero_page
from tests.support.paths import ROOT
from topics.cli import main


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("verify-cli") / "data"
    build(path)
    return path


@pytest.fixture
def data(pristine: Path, tmp_path: Path) -> Path:
    return copy(pristine, tmp_path / "data")


def verify(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["verify", *args])
    return code, out.getvalue(), err.getvalue()


def test_a_clean_directory_exits_0_with_a_summary(data: Path) -> None:
    code, out, err = verify(str(data))
    assert (code, err) == (0, "")
    assert out.startswith("checked ")
    assert "no damage; manifest: generation 2" in out
    as_json = json.loads(verify(str(data), "--json")[1])
    assert as_json["status"] == "clean"
    assert as_json["findings"] == []
    assert as_json["files_checked"] > 10


def test_damage_exits_1_with_a_row_per_damaged_file(data: Path) -> None:
    seg = next(s for s in segments(data) if s.sealed and s.topic == "alpha")
    flip_bit(data / seg.rel, 40 + seg.offsets[3] + 60)
    code, out, _ = verify(str(data))
    assert code == 1
    header, row, summary = out.splitlines()
    assert header.split() == ["FILE", "KIND", "TOPIC", "SEQS", "PROBLEM", "SEVERITY", "DETAIL"]
    assert row.split()[:6] == [
        seg.rel,
        "segment",
        "alpha",
        f"{seg.seqs[3]}..{seg.seqs[-1]}",
        "crc",
        "data",
    ]
    assert "1 damaged file (1 data)" in summary
    code, out, _ = verify("--json", str(data))  # the global flag before the argument too
    got = json.loads(out)
    assert (code, got["status"], got["damaged_files"]) == (1, "damaged", 1)
    finding = got["findings"][0]
    assert (finding["path"], finding["topic"], finding["first_seq"]) == (
        seg.rel,
        "alpha",
        seg.seqs[3],
    )


def test_advice_alone_is_printed_and_exits_0(data: Path) -> None:
    zero_page(data / "heads", 0)
    code, out, _ = verify(str(data))
    assert code == 0
    assert "heads" in out.splitlines()[1]
    assert "no damage (1 advice)" in out


def test_both_manifests_bad_is_fatal(data: Path) -> None:
    for name in ("MANIFEST-0000000000000001", "MANIFEST-0000000000000002"):
        flip_bit(data / "manifest" / name, 100)
    code, out, _ = verify(str(data), "--json")
    got = json.loads(out)
    assert code == 1
    assert {f["severity"] for f in got["findings"] if f["kind"] == "manifest"} == {"fatal"}
    assert got["manifest_generation"] is None


def test_exit_2_when_it_cannot_run(data: Path, tmp_path: Path) -> None:
    code, out, err = verify(str(tmp_path / "missing"))
    assert (code, out) == (2, "")
    assert err.startswith("topics: verify: cannot list")
    (tmp_path / "plain").mkdir()
    code, _, err = verify(str(tmp_path / "plain"))
    assert code == 2
    assert "not a topics data directory" in err
    code, out, _ = verify(str(tmp_path / "missing"), "--json")
    assert (code, json.loads(out)["status"]) == (2, "error")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_exit_2_when_a_file_cannot_be_read(data: Path) -> None:
    seg = segments(data)[0]
    (data / seg.rel).chmod(0)
    code, _, err = verify(str(data))
    assert code == 2
    assert seg.rel in err


def test_the_real_command_and_its_help(data: Path) -> None:
    """As a user runs it: a new interpreter, a real exit status, and ``--help`` lists it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "topics.cli", "verify", str(data)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    flip_bit(data / "manifest" / "MANIFEST-0000000000000002", 100)
    proc = subprocess.run(
        [sys.executable, "-m", "topics.cli", "verify", str(data)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 1
    helptext = subprocess.run(
        [sys.executable, "-m", "topics.cli", "--help"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    assert "verify" in helptext
    assert "1 damage found" in helptext
