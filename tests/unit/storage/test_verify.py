"""topics._storage.verify: every kind of file, damaged three ways (a flipped bit, a cut, a
zeroed 4 KiB page), is named with its topic and a seq range that covers the damage."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import topics
import topics._persistence.store as store_module
import topics._storage.verify_frames as verify_frames
from tests.support.datadir_damage import (
    SEG_HEADER,
    Segment,
    build,
    copy,
    flip_bit,
    segments,
    small_files,
    truncate,
    write_some,
    zero_page,
)
from topics._storage.fs import FileHandle, RealFs
from topics._storage.manifest import write_manifest
from topics._storage.verify import Finding, VerifyReport, check_file, load_view, verify_data_dir


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("verify") / "data"
    build(path)
    return path


@pytest.fixture
def data(pristine: Path, tmp_path: Path) -> Path:
    return copy(pristine, tmp_path / "data")


def run(path: Path) -> VerifyReport:
    report = verify_data_dir(RealFs(), str(path))
    assert report.ran, report.error
    return report


def damage_of(report: VerifyReport) -> list[Finding]:
    return [f for f in report.findings if f.severity != "advice"]


def only(findings: list[Finding]) -> Finding:
    assert len(findings) == 1, findings
    return findings[0]


def wal_files(root: Path) -> list[Path]:
    return sorted((root / "wal").iterdir())


def test_a_clean_directory_has_no_findings(data: Path) -> None:
    report = run(data)
    assert report.findings == ()
    assert report.manifest_generation == 2
    files = [p for p in data.rglob("*") if p.is_file() and p.name != "LOCK"]
    assert report.files_checked == len(files)
    assert report.bytes_checked == sum(p.stat().st_size for p in files)
    assert len(wal_files(data)) >= 3  # the WAL rotated: older files and a newest one


def sealed_middle(root: Path) -> Segment:
    sealed = [s for s in segments(root) if s.sealed and s.topic == "beta"]
    return sealed[len(sealed) // 2]


def covers(finding: Finding, seq: int) -> bool:
    first, last = finding.first_seq, finding.last_seq
    assert first is not None, finding
    assert last is not None, finding
    return first <= seq <= last


def damage(how: str, path: Path, offset: int) -> None:
    if how == "flip":
        flip_bit(path, offset)
    elif how == "truncate":
        truncate(path, offset)
    else:
        zero_page(path, offset)


@pytest.mark.parametrize("how", ["flip", "truncate", "zero"])
def test_a_damaged_sealed_segment_names_its_topic_and_seqs(data: Path, how: str) -> None:
    seg = sealed_middle(data)
    k = len(seg.offsets) // 2
    at = SEG_HEADER + seg.offsets[k] + 60  # in frame k's data, before its trailer byte
    damage(how, data / seg.rel, at)
    found = only(damage_of(run(data)))
    assert (found.path, found.kind, found.topic, found.severity) == (
        seg.rel,
        "segment",
        "beta",
        "data",
    )
    assert found.problem in {"crc", "truncated", "bad frame"}
    assert covers(found, seg.seq_at(at))
    assert found.last_seq == seg.seqs[-1]
    assert not found.widened
    assert found.offset is not None
    assert found.offset <= at


@pytest.mark.parametrize("chunk", [100, 1000])
@pytest.mark.parametrize("how", [None, "flip", "zero"])
def test_files_larger_than_a_read_chunk(
    data: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, how: str | None
) -> None:
    """Chunks smaller than a frame (100 bytes) and holding several (1000): the same answers
    as whole-file reads, for segments and WAL files alike."""
    monkeypatch.setattr(verify_frames, "CHUNK_BYTES", chunk)
    seg = sealed_middle(data)
    at = SEG_HEADER + seg.offsets[len(seg.offsets) // 2] + 60
    if how is None:
        assert run(data).findings == ()
        return
    damage(how, data / seg.rel, at)
    newest = make_newest(data, 2)
    damage(how, newest, 5000)
    found = damage_of(run(data))
    assert [f.path for f in found] == [seg.rel, f"wal/{newest.name}"]
    assert covers(found[0], seg.seq_at(at))
    assert "valid frames follow" in found[1].detail


def test_a_fresh_directory_is_clean(tmp_path: Path) -> None:
    topics.open(str(tmp_path / "fresh")).close()
    assert run(tmp_path / "fresh").findings == ()


def test_a_zeroed_segment_header_covers_the_whole_segment(data: Path) -> None:
    seg = sealed_middle(data)
    zero_page(data / seg.rel, 0)
    found = only(damage_of(run(data)))
    assert (found.path, found.problem) == (seg.rel, "header")
    assert (found.first_seq, found.last_seq) == (seg.seqs[0], seg.seqs[-1])


def test_the_unsealed_segment_is_checked_up_to_its_recorded_length_only(data: Path) -> None:
    seg = next(s for s in segments(data) if not s.sealed and s.topic == "alpha")
    with open(data / seg.rel, "ab") as f:  # a live writer's bytes past the recorded length
        f.write(os.urandom(300))
    assert run(data).findings == ()
    at = SEG_HEADER + seg.offsets[-1] + 60
    flip_bit(data / seg.rel, at)
    found = only(damage_of(run(data)))
    assert (found.path, found.topic, found.problem) == (seg.rel, "alpha", "crc")
    # No index to bound it: the manifest's head bounds it, and it says so.
    assert covers(found, seg.seq_at(at))
    assert found.widened


@pytest.mark.parametrize("how", ["flip", "truncate", "zero"])
def test_a_damaged_index_names_its_segment_range(data: Path, how: str) -> None:
    seg = sealed_middle(data)
    idx = data / f"{seg.rel}.idx"
    damage(how, idx, {"flip": 50, "truncate": 60, "zero": 0}[how])
    found = only(damage_of(run(data)))
    assert (found.path, found.kind, found.topic, found.severity) == (
        f"{seg.rel}.idx",
        "index",
        "beta",
        "data",
    )
    assert (found.first_seq, found.last_seq) == (seg.seqs[0], seg.seqs[-1])


def test_a_listed_segment_that_is_gone_is_missing(data: Path) -> None:
    seg = sealed_middle(data)
    (data / seg.rel).unlink()
    (data / f"{seg.rel}.idx").unlink()
    found = only(damage_of(run(data)))
    assert (found.path, found.problem, found.topic) == (seg.rel, "missing", "beta")
    assert all(covers(found, s) for s in seg.seqs)
    assert found.widened


MANIFESTS = ("manifest/MANIFEST-0000000000000001", "manifest/MANIFEST-0000000000000002")


@pytest.mark.parametrize("how", ["flip", "truncate", "zero"])
@pytest.mark.parametrize("which", [0, 1])
def test_one_damaged_manifest_is_data_damage_not_fatal(data: Path, how: str, which: int) -> None:
    damage(how, data / MANIFESTS[which], {"flip": 100, "truncate": 200, "zero": 0}[how])
    report = run(data)
    found = only([f for f in report.findings if f.kind == "manifest"])
    assert (found.path, found.severity) == (MANIFESTS[which], "data")
    assert report.manifest_generation == 2 - which  # the other one is what recovery loads
    assert not [f for f in report.findings if f.severity == "fatal"]


def test_a_manifest_with_valid_checksums_but_no_topics_shape_is_reported(data: Path) -> None:
    write_manifest(RealFs(), str(data / "manifest"), 3, {"covered_lsn": 1, "topics": [{"x": 1}]})
    report = run(data)
    found = only(damage_of(report))
    assert (found.path, found.problem) == ("manifest/MANIFEST-0000000000000003", "header")
    assert report.manifest_generation == 2


@pytest.mark.parametrize("how", ["flip", "truncate", "zero"])
def test_no_valid_manifest_is_fatal(data: Path, how: str) -> None:
    for rel in MANIFESTS:
        damage(how, data / rel, {"flip": 100, "truncate": 200, "zero": 0}[how])
    report = run(data)
    fatal = [f for f in report.findings if f.severity == "fatal"]
    assert {f.path for f in fatal} == {*MANIFESTS, "manifest/"}
    assert any("cannot start" in f.detail for f in fatal)
    assert report.manifest_generation is None


@pytest.mark.parametrize("how", ["flip", "truncate", "zero"])
def test_damage_in_an_older_wal_file_is_data_damage(data: Path, how: str) -> None:
    older = wal_files(data)[1]
    at = {"flip": 5000, "truncate": 5000, "zero": 4096}[how]
    damage(how, older, at)
    found = only(damage_of(run(data)))
    assert (found.path, found.kind) == (f"wal/{older.name}", "wal")
    assert found.offset is not None
    assert found.offset <= at


def make_newest(root: Path, index: int) -> Path:
    """Remove the WAL files after ``wal_files(root)[index]``, as if it were the last one."""
    files = wal_files(root)
    for later in files[index + 1 :]:
        later.unlink()
    return files[index]


def test_a_torn_tail_of_the_newest_wal_file_is_advice(data: Path) -> None:
    newest = make_newest(data, 2)
    truncate(newest, newest.stat().st_size - 7)
    found = only(list(run(data).findings))
    assert (found.path, found.problem, found.severity) == (
        f"wal/{newest.name}",
        "torn tail",
        "advice",
    )


def test_a_bad_last_frame_of_the_newest_wal_file_is_a_torn_tail(data: Path) -> None:
    newest = make_newest(data, 2)
    flip_bit(newest, newest.stat().st_size - 10)
    assert only(list(run(data).findings)).severity == "advice"


@pytest.mark.parametrize("how", ["flip", "zero"])
def test_damage_inside_the_newest_wal_file_is_data_damage(data: Path, how: str) -> None:
    newest = make_newest(data, 2)
    at = 4096 if how == "zero" else 5000
    damage(how, newest, at)
    found = only(damage_of(run(data)))
    assert (found.path, found.kind) == (f"wal/{newest.name}", "wal")
    assert "valid frames follow" in found.detail


def test_a_torn_header_of_the_newest_wal_file_is_advice_only_when_empty(data: Path) -> None:
    newest = wal_files(data)[-1]
    zero_page(newest, 0)  # the header and the frames after it: acknowledged entries lost
    assert only(damage_of(run(data))).path == f"wal/{newest.name}"
    truncate(newest, 20)  # a crash while the file was being created
    assert only(list(run(data).findings)).severity == "advice"


def test_an_older_wal_file_cut_at_a_frame_boundary_breaks_the_lsn_chain(data: Path) -> None:
    files = wal_files(data)
    older = files[1]
    raw = older.read_bytes()
    last_frame = 40
    while True:  # the start of its last frame
        size = 20 + int.from_bytes(raw[last_frame : last_frame + 4], "little")
        if last_frame + size >= len(raw):
            break
        last_frame += size
    truncate(older, last_frame)
    found = only(damage_of(run(data)))
    assert (found.path, found.problem) == (f"wal/{files[2].name}", "lsn")


def test_a_wal_file_missing_in_the_numbering_is_data_damage(data: Path) -> None:
    files = wal_files(data)
    files[2].unlink()
    found = only(damage_of(run(data)))
    assert (found.path, found.problem) == (f"wal/{files[2].name}", "missing")


@pytest.mark.parametrize("how", ["flip", "truncate", "zero"])
def test_a_damaged_heads_table_is_advice(data: Path, how: str) -> None:
    damage(how, data / "heads", {"flip": 2, "truncate": 10, "zero": 0}[how])
    found = only(list(run(data).findings))
    assert (found.path, found.kind, found.severity) == ("heads", "heads", "advice")


def test_leftover_temp_files_are_advice(data: Path) -> None:
    (data / "manifest" / "MANIFEST-0000000000000003.tmp").write_bytes(b"half")
    report = run(data)
    assert [(f.path, f.severity) for f in report.findings] == [
        ("manifest/MANIFEST-0000000000000003.tmp", "advice")
    ]
    assert not report.damaged


def test_check_file_checks_one_file(data: Path) -> None:
    seg = sealed_middle(data)
    flip_bit(data / f"{seg.rel}.idx", 50)
    view = load_view(RealFs(), str(data))
    assert check_file(RealFs(), str(data), seg.rel, view)[0].kind == "index"
    assert check_file(RealFs(), str(data), f"{seg.rel}.idx", view)[0].kind == "index"
    assert (
        check_file(RealFs(), str(data), "segments/0000000000000009-0000000000000001.seg", view)
        == []
    )
    assert check_file(RealFs(), str(data), "LOCK", view) == []


class _WatchFs(RealFs):
    """Records every call that could change the directory; can make one file vanish or
    refuse to open."""

    def __init__(self, vanish: str = "", refuse: str = "") -> None:
        self.vanish, self.refuse = vanish, refuse
        self.writes: list[tuple[str, str]] = []

    def open(self, path: str, *, write: bool = False, create: bool = False) -> FileHandle:
        if write or create:
            self.writes.append(("open", path))
        if self.vanish and path.endswith(self.vanish):
            raise FileNotFoundError(path)
        if self.refuse and path.endswith(self.refuse):
            raise PermissionError(13, "Permission denied", path)
        return super().open(path, write=write, create=create)

    def _changes(self, op: str) -> Any:
        def record(path: str, *args: Any) -> None:
            self.writes.append((op, path))

        return record

    def __getattribute__(self, name: str) -> Any:
        if name in ("rename", "remove", "makedirs", "sync_dir", "lock"):
            return object.__getattribute__(self, "_changes")(name)
        return object.__getattribute__(self, name)


def test_verify_only_reads(data: Path) -> None:
    fs = _WatchFs()
    before = sorted((p, p.stat().st_mtime_ns) for p in data.rglob("*"))
    assert verify_data_dir(fs, str(data)).findings == ()
    assert fs.writes == []
    assert sorted((p, p.stat().st_mtime_ns) for p in data.rglob("*")) == before


def test_a_file_that_vanishes_after_the_listing_is_not_damage(data: Path) -> None:
    fs = _WatchFs(vanish=wal_files(data)[0].name)
    report = verify_data_dir(fs, str(data))
    assert report.ran
    assert report.findings == ()


def test_it_cannot_run_on_what_is_not_a_readable_data_directory(data: Path, tmp_path: Path) -> None:
    assert "cannot list" in (verify_data_dir(None, str(tmp_path / "nowhere")).error or "")
    (tmp_path / "file").write_text("x")
    assert not verify_data_dir(None, str(tmp_path / "file")).ran
    (tmp_path / "empty").mkdir()
    assert "not a topics data directory" in (
        verify_data_dir(None, str(tmp_path / "empty")).error or ""
    )
    seg = sealed_middle(data)
    refused = verify_data_dir(_WatchFs(refuse=seg.rel.split("/")[1]), str(data))
    assert not refused.ran
    assert seg.rel in (refused.error or "")


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[Path, threading.Event]]:
    """An engine writing to two capped topics with a checkpoint every 50 ms, so segments
    seal, old ones are removed and the WAL rotates and is trimmed while verify reads."""
    path = tmp_path / "live"
    stop = threading.Event()
    with small_files(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(store_module, "CHECKPOINT_INTERVAL_S", 0.05)
        engine = topics.open(str(path))
        for name in ("alpha", "beta"):
            engine.put_topic(name, {"durability": "fsync", "cap_records": 300})
        write_some(engine, 5, 0)

        def writer() -> None:
            n = 100
            while not stop.is_set():
                write_some(engine, 1, n)
                n += 1

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        try:
            yield path, stop
        finally:
            stop.set()
            thread.join(10)
            engine.close()


def test_verify_beside_a_live_engine_finds_no_damage(live: tuple[Path, threading.Event]) -> None:
    path, _ = live
    deadline = time.monotonic() + 3.0
    generations = set()
    while time.monotonic() < deadline:
        report = verify_data_dir(None, str(path))
        assert report.ran, report.error
        assert not report.damaged, [f for f in report.findings if f.severity != "advice"]
        generations.add(report.manifest_generation)
    # Checkpoints ran (segments sealed and dropped, the WAL trimmed) while it read.
    assert len(generations) >= 2
