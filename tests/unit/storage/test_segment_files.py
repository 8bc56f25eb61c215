"""Segment files: frames round-trip byte for byte, deletion flags flip in place outside
the CRC, sealed segments are checked against their index, and reopening after a crash
keeps exactly the durable prefix."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import ujson

from tests.support.fakedisk import FakeDisk, SimulatedCrash
from topics._core import FrameError, SegmentBuffer, encode_batch, iter_frames
from topics._storage.fs import Fs, RealFs
from topics._storage.segment_edits import mark_deleted, remove_segment
from topics._storage.segment_files import (
    HEADER_SIZE,
    SegmentCorruptionError,
    SegmentWriter,
    open_for_append,
    parse_segment_name,
    read_segment,
    segment_path,
)

D = "/data/segments"
SALT = 0xC0FFEE
LIMITS = (1 << 20, 1 << 16, 64, 256, 256)


def _frames(first_seq: int, count: int, *, ts_ms: int = 1_700_000_000_000) -> bytes:
    records = [
        {"data": {"n": first_seq + i, "pad": "x" * (i % 5)}, "tag": f"t{i % 3}"}
        for i in range(count)
    ]
    frames, _tags = encode_batch(records, first_seq, ts_ms, "node-a", SALT, LIMITS, ujson.dumps)
    return frames


def _disk() -> FakeDisk:
    disk = FakeDisk()
    disk.makedirs(D)
    return disk


def _write_sealed(fs: Fs, root: str = D, count: int = 10) -> tuple[str, bytes]:
    path = segment_path(root, 7, 100)
    writer = SegmentWriter.create(fs, path, topic_id=7, base_seq=100, salt=SALT)
    first = _frames(100, 4)
    rest = _frames(104, count - 4)
    writer.append(first)
    writer.append(memoryview(rest))
    writer.seal()
    return path, first + rest


# -- names --------------------------------------------------------------------------------


def test_segment_names_are_numeric_and_parse_back() -> None:
    path = segment_path("/x/", 0xAB, 12345)
    assert path == "/x/00000000000000ab-0000000000003039.seg"
    assert parse_segment_name(path.rsplit("/", 1)[1]) == (0xAB, 12345)
    for other in ("orders.seg", "00000000000000ab-0000000000003039.seg.idx", "MANIFEST-1", "x"):
        assert parse_segment_name(other) is None


# -- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fake", "real"])
def test_append_sync_seal_read_round_trip(kind: str, tmp_path: Path) -> None:
    fs: Fs = RealFs() if kind == "real" else _disk()
    root = str(tmp_path) if kind == "real" else D
    path = segment_path(root, 7, 100)
    writer = SegmentWriter.create(fs, path, topic_id=7, base_seq=100, salt=SALT)
    a, b = _frames(100, 3), _frames(103, 5)
    writer.append(a)
    assert (writer.length, writer.synced_length, writer.frame_count) == (len(a), 0, 3)
    assert writer.sync() == len(a) == writer.synced_length
    writer.append(b)
    assert writer.length == len(a) + len(b)
    assert writer.synced_length == len(a)
    unsealed = read_segment(fs, path)
    assert unsealed.frames == a + b
    assert not unsealed.sealed
    writer.seal()
    assert writer.sealed
    assert writer.synced_length == len(a) + len(b)
    data = read_segment(fs, path)
    assert (data.topic_id, data.base_seq, data.salt, data.sealed) == (7, 100, SALT, True)
    assert data.frames == a + b
    seg = SegmentBuffer.from_frames(data.frames, data.base_seq, data.salt, verify=True)
    assert seg.count == 8
    assert seg.live_count == 8
    assert seg.decode(5)[0] == 105
    assert fs.exists(path + ".idx")


def test_the_first_sync_makes_the_segment_name_durable() -> None:
    disk = _disk()
    path = segment_path(D, 1, 1)
    writer = SegmentWriter.create(disk, path, topic_id=1, base_seq=1, salt=SALT)
    writer.append(_frames(1, 2))
    writer.sync()
    disk.crash(seed=4)
    assert read_segment(disk, path, max_length=writer.synced_length).frames == _frames(1, 2)


def test_append_refuses_partial_frames_and_seq_gaps() -> None:
    disk = _disk()
    path = segment_path(D, 1, 10)
    writer = SegmentWriter.create(disk, path, topic_id=1, base_seq=10, salt=SALT)
    frames = _frames(10, 3)
    with pytest.raises(FrameError):
        writer.append(frames[:-3])
    with pytest.raises(ValueError, match="continue"):
        writer.append(_frames(11, 1))
    writer.append(frames)
    with pytest.raises(ValueError, match="continue"):
        writer.append(_frames(14, 1))
    assert writer.length == len(frames)


def test_a_sealed_writer_refuses_more() -> None:
    disk = _disk()
    path, _ = _write_sealed(disk)
    with pytest.raises(ValueError, match="sealed"):
        open_for_append(disk, path, durable_length=0)


# -- deletion flags ------------------------------------------------------------------------


def test_mark_deleted_flips_only_the_trailer_and_the_crc_still_verifies() -> None:
    disk = _disk()
    path, frames = _write_sealed(disk)
    spans = iter_frames(frames, SALT)
    before = disk.read_bytes(path)
    ends = [spans[2][0] + spans[2][1], spans[7][0] + spans[7][1]]
    mark_deleted(disk, path, ends)
    after = disk.read_bytes(path)
    changed = [i for i, (x, y) in enumerate(zip(before, after, strict=True)) if x != y]
    assert changed == [HEADER_SIZE + e - 1 for e in ends]
    assert disk.durable_bytes(path) == after  # synced before returning
    data = read_segment(disk, path, verify=True)  # CRCs and index still agree
    seg = SegmentBuffer.from_frames(data.frames, 100, SALT, verify=True)
    assert [seg.is_live(i) for i in range(10)] == [i not in (2, 7) for i in range(10)]
    assert seg.live_count == 8


def test_mark_deleted_without_sync_is_lost_in_a_crash() -> None:
    disk = _disk()
    path, frames = _write_sealed(disk)
    first_end = iter_frames(frames, SALT)[0][1]
    mark_deleted(disk, path, [first_end], sync=False)
    disk.crash(torn=False)
    seg = SegmentBuffer.from_frames(read_segment(disk, path).frames, 100, SALT)
    assert seg.is_live(0)


def test_mark_deleted_rejects_offsets_outside_the_frames() -> None:
    disk = _disk()
    path, frames = _write_sealed(disk)
    for bad in (0, len(frames) + 1):
        with pytest.raises(ValueError, match="outside"):
            mark_deleted(disk, path, [bad])


# -- corruption ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "where",
    ["frame_body", "frame_length", "header", "index_body", "index_header", "extra_bytes", "short"],
)
def test_corruption_in_a_sealed_segment_raises(where: str) -> None:
    disk = _disk()
    path, frames = _write_sealed(disk)
    if where == "frame_body":
        disk.poke(path, HEADER_SIZE + 45, b"\x99")
    elif where == "frame_length":
        disk.poke(path, HEADER_SIZE, struct.pack("<I", 9999))
    elif where == "header":
        disk.poke(path, 20, b"\x01")
    elif where == "index_body":
        disk.poke(path + ".idx", 44, b"\x07")
    elif where == "index_header":
        disk.poke(path + ".idx", 30, b"\x07")
    elif where == "extra_bytes":
        disk.poke(path, HEADER_SIZE + len(frames), b"\x00" * 10)
    else:
        h = disk.open(path, write=True)
        h.truncate(HEADER_SIZE + len(frames) - 1)
        h.sync_all()
    with pytest.raises(SegmentCorruptionError) as info:
        read_segment(disk, path, verify=True)
    assert path in str(info.value)


def test_sealed_segment_with_a_consistent_but_wrong_index_raises() -> None:
    disk = _disk()
    path, _ = _write_sealed(disk)
    other = segment_path(D, 7, 200)
    w = SegmentWriter.create(disk, other, topic_id=7, base_seq=200, salt=SALT)
    w.append(_frames(200, 3))
    w.seal()
    disk.rename(other + ".idx", path + ".idx")  # an index from another segment
    with pytest.raises(SegmentCorruptionError, match="index"):
        read_segment(disk, path)


def test_a_flipped_payload_byte_is_caught_even_without_an_index() -> None:
    disk = _disk()
    path = segment_path(D, 1, 1)
    w = SegmentWriter.create(disk, path, topic_id=1, base_seq=1, salt=SALT)
    frames = _frames(1, 3)
    w.append(frames)
    w.sync()
    disk.poke(path, HEADER_SIZE + 45, b"\x99")
    with pytest.raises(SegmentCorruptionError, match="bad frame"):
        read_segment(disk, path, max_length=len(frames))


def test_active_segment_read_without_a_length_stops_at_a_torn_tail() -> None:
    disk = _disk()
    path = segment_path(D, 1, 1)
    w = SegmentWriter.create(disk, path, topic_id=1, base_seq=1, salt=SALT)
    frames = _frames(1, 4)
    w.append(frames)
    spans = iter_frames(frames, SALT)
    for cut in range(spans[2][0], len(frames)):
        h = disk.open(path, write=True)
        h.truncate(HEADER_SIZE + cut)
        data = read_segment(disk, path)
        assert data.frames == frames[: spans[2][0] if cut < spans[3][0] else spans[3][0]]
        h.write_at(HEADER_SIZE, frames)


def test_active_segment_missing_durable_bytes_raises() -> None:
    disk = _disk()
    path = segment_path(D, 1, 1)
    w = SegmentWriter.create(disk, path, topic_id=1, base_seq=1, salt=SALT)
    frames = _frames(1, 2)
    w.append(frames)
    with pytest.raises(SegmentCorruptionError, match="recorded durable"):
        read_segment(disk, path, max_length=len(frames) + 5)


def test_sealed_segment_read_to_a_recorded_length() -> None:
    disk = _disk()
    path, frames = _write_sealed(disk)
    spans = iter_frames(frames, SALT)
    assert read_segment(disk, path, max_length=spans[4][0]).frames == frames[: spans[4][0]]
    with pytest.raises(SegmentCorruptionError, match="boundary"):
        read_segment(disk, path, max_length=spans[4][0] + 1)
    with pytest.raises(SegmentCorruptionError):
        read_segment(disk, path, max_length=len(frames) + 1)


# -- reopening after a crash ---------------------------------------------------------------


def test_open_for_append_truncates_past_the_durable_length_and_continues() -> None:
    disk = _disk()
    path = segment_path(D, 3, 50)
    w = SegmentWriter.create(disk, path, topic_id=3, base_seq=50, salt=SALT)
    a = _frames(50, 3)
    w.append(a)
    durable = w.sync()
    w.append(_frames(53, 2))  # never synced: the manifest does not know these
    disk.crash(seed=11)
    w = open_for_append(disk, path, durable_length=durable)
    assert (w.length, w.synced_length, w.frame_count) == (len(a), len(a), 3)
    assert len(disk.read_bytes(path)) == HEADER_SIZE + len(a)
    b = _frames(53, 4)
    w.append(b)
    w.seal()
    data = read_segment(disk, path)
    assert data.frames == a + b
    assert data.sealed
    assert SegmentBuffer.from_frames(data.frames, 50, SALT).count == 7


def test_open_for_append_with_missing_durable_bytes_raises() -> None:
    disk = _disk()
    path = segment_path(D, 3, 50)
    w = SegmentWriter.create(disk, path, topic_id=3, base_seq=50, salt=SALT)
    w.append(_frames(50, 2))
    w.sync()
    with pytest.raises(SegmentCorruptionError):
        SegmentWriter.open_for_append(disk, path, durable_length=w.length + 1)


def test_crash_during_seal_leaves_a_readable_unsealed_segment() -> None:
    probe = _disk()
    start = probe.ops
    _write_sealed(probe)
    total = probe.ops - start
    for crash_at in range(1, total + 1):
        disk = _disk()
        disk.crash_after = disk.ops + crash_at
        with pytest.raises(SimulatedCrash):
            _write_sealed(disk)
        disk.crash(seed=crash_at)
        path = segment_path(D, 7, 100)
        if not disk.exists(path):
            continue
        data = read_segment(disk, path)  # never raises: sealed only when the index landed
        if data.sealed:
            assert data.frames == _write_sealed(_disk())[1]


def test_remove_segment_removes_data_index_and_tags() -> None:
    disk = _disk()
    path, _ = _write_sealed(disk)
    for leftover in (".tags", ".tags.tmp", ".idx.tmp"):  # the tag index (tag_index.py), temps
        disk.open(path + leftover, create=True).close()
    disk.sync_dir(D)
    remove_segment(disk, path)
    assert disk.listdir(D) == []
    remove_segment(disk, path)  # idempotent
    disk.crash(seed=0)
    assert disk.listdir(D) == []


def test_header_layout_is_stable() -> None:
    disk = _disk()
    path, _ = _write_sealed(disk)
    raw = disk.read_bytes(path)[:HEADER_SIZE]
    magic, version, size, salt, topic, base = struct.unpack_from("<8sHHIQQ", raw)
    assert (magic, version, size, salt, topic, base) == (b"TOPICSEG", 1, 40, SALT, 7, 100)
    idx = disk.read_bytes(path + ".idx")
    assert idx[:8] == b"TOPICIDX"
    assert len(idx) == 40 + 4 * 10 + 4


def test_golden_vector() -> None:
    """Format version 1 header bytes; any change must bump SEGMENT_FORMAT_VERSION."""
    disk = _disk()
    path = segment_path(D, 7, 100)
    SegmentWriter.create(disk, path, topic_id=7, base_seq=100, salt=0xC0FFEE).close()
    assert disk.read_bytes(path).hex() == (
        "544f50494353454701002800eeffc0000700000000000000640000000000000000000000053bf651"
    )
