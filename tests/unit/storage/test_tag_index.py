"""Tag index files (topics/_storage/tag_index.py): bytes round-trip, every kind of damage
is caught, lookups answer exactly what the TagTrie would, and a checkpoint writes the file
when it seals a tagged segment (and removes it with the segment)."""

from __future__ import annotations

import struct
from pathlib import Path
from types import SimpleNamespace

import pytest
import ujson
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.fakedisk import FakeDisk, SimulatedCrash
from topics import open_engine
from topics._clock import ManualClock
from topics._core import SegmentBuffer, TagTrie, crc32c, encode_batch
from topics._persistence.segment_work import segment_work
from topics._storage.fs import Fs, RealFs
from topics._storage.segment_files import (
    SegmentCorruptionError,
    SegmentWriter,
    index_size,
    parse_segment_name,
    read_segment,
    segment_path,
)
from topics._storage.tag_index import (
    TagIndex,
    decode_tag_index,
    encode_tag_index,
    read_tag_index,
    tag_index_path,
    tagged_frames,
    write_tag_index,
)
from topics.engine import Engine
from topics.log import topic_log as _log

D = "/data/segments"
SALT = 0xC0FFEE
LIMITS = (1 << 20, 1 << 16, 64, 256, 256)
EXAMPLE = [(0, b"b"), (1, b"a"), (3, b"ab"), (4, b"b")]
IDENT = {"topic_id": 7, "base_seq": 100, "salt": SALT}


def _disk() -> FakeDisk:
    disk = FakeDisk()
    disk.makedirs(D)
    return disk


def _plant(disk: FakeDisk, path: str) -> None:
    """A durable file of junk at ``path``."""
    handle = disk.open(path, create=True)
    handle.write_at(0, b"junk")
    handle.sync_all()
    handle.close()
    disk.sync_dir(path.rsplit("/", 1)[0])


def _example() -> bytes:
    return encode_tag_index(7, 100, SALT, EXAMPLE)


def _decode(raw: bytes, **kwargs: int) -> TagIndex:
    return decode_tag_index(raw, path="x.seg.tags", **{**IDENT, **kwargs})


def _resealed(raw: bytes, salt: int = SALT) -> bytes:
    """``raw`` with its checksum made valid again (to reach the checks behind it)."""
    body = raw[:-4]
    return body + struct.pack("<I", crc32c(body, salt))


# -- the format ----------------------------------------------------------------------------


def test_golden_vector_tag_index() -> None:
    """Format version 1; any change must bump TAG_INDEX_FORMAT_VERSION."""
    assert _example().hex() == (
        "544f50494354414701000000eeffc0000700000000000000640000000000000003000000040000"
        "00"  # header: TOPICTAG, v1, salt, topic 7, base 100, 3 tags, 4 entries
        "010000000300000004000000"  # tag ends: "a" | "ab" | "b"
        "010000000200000004000000"  # entry ends
        "01000000030000000000000004000000"  # entries: a -> 1, ab -> 3, b -> 0, 4
        "61616262"  # tags: a ab b
        "c8402856"  # CRC-32C seeded with the salt
    )


def test_layout_sizes() -> None:
    raw = encode_tag_index(1, 2, 3, [(i, b"tag%d" % (i % 10)) for i in range(100)])
    # header, 8 per tag, 4 per entry, the tag bytes, the CRC
    assert len(raw) == 40 + 8 * 10 + 4 * 100 + 4 * 10 + 4
    magic, version, _, salt, topic, base, ntags, nentries = struct.unpack_from("<8sHHIQQII", raw)
    assert (magic, version, salt, topic, base, ntags, nentries) == (
        b"TOPICTAG",
        1,
        3,
        1,
        2,
        10,
        100,
    )


def test_round_trip_lookups() -> None:
    index = _decode(_example())
    assert (index.ntags, len(index)) == (3, 4)
    assert index.tags() == [b"a", b"ab", b"b"]
    assert list(index.exact(b"b")) == [0, 4]
    assert list(index.exact(b"a")) == [1]
    assert list(index.exact(b"")) == []
    assert list(index.exact(b"abc")) == []
    assert index.prefix(b"a") == [1, 3]
    assert index.prefix(b"ab") == [3]
    assert index.prefix(b"") == [0, 1, 3, 4]
    assert index.prefix(b"c") == []
    assert index.prefix(b"abc") == []
    assert 40 < index.nbytes < 1000


def test_an_empty_index_round_trips() -> None:
    index = _decode(encode_tag_index(7, 100, SALT, []))
    assert (index.ntags, len(index), index.prefix(b""), list(index.exact(b"a"))) == (0, 0, [], [])


def test_encode_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="ascend"):
        encode_tag_index(7, 100, SALT, [(3, b"a"), (3, b"b")])
    with pytest.raises(ValueError, match="ascend"):
        encode_tag_index(7, 100, SALT, [(-1, b"a")])
    with pytest.raises(ValueError, match="ascend"):
        encode_tag_index(7, 100, SALT, [(1 << 32, b"a")])
    with pytest.raises(ValueError, match="empty"):
        encode_tag_index(7, 100, SALT, [(0, b"")])
    with pytest.raises(TypeError, match="not bytes"):
        encode_tag_index(7, 100, SALT, [(0, "a")])  # type: ignore[list-item]


# -- damage ----------------------------------------------------------------------------------


def test_every_flipped_bit_is_caught() -> None:
    raw = _example()
    for bit in range(len(raw) * 8):
        bad = bytearray(raw)
        bad[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(SegmentCorruptionError, match=r"x\.seg\.tags"):
            _decode(bytes(bad))


def test_every_truncation_is_caught() -> None:
    raw = _example()
    for length in range(len(raw)):
        with pytest.raises(SegmentCorruptionError):
            _decode(raw[:length])
    with pytest.raises(SegmentCorruptionError):
        _decode(raw + b"\0")


@pytest.mark.parametrize("field", ["topic_id", "base_seq", "salt"])
def test_a_tag_index_of_another_segment_is_refused(field: str) -> None:
    with pytest.raises(SegmentCorruptionError, match=r"x\.seg\.tags"):
        _decode(_example(), **{field: IDENT[field] + 1})
    if field != "salt":  # a wrong salt already fails the seeded checksum
        with pytest.raises(SegmentCorruptionError, match="beside segment"):
            _decode(_example(), **{field: IDENT[field] + 1})


def test_checksum_valid_nonsense_is_still_refused() -> None:
    raw = _example()
    cases = {
        "not a tag index": b"TOPICIDX" + raw[8:],
        "unsupported tag index version 2": raw[:8] + b"\x02" + raw[9:],
        "too short": raw[:32] + struct.pack("<II", 3, 1000) + raw[40:],
        "do not add up": raw[:32] + struct.pack("<II", 2, 4) + raw[40:],
    }
    for message, bad in cases.items():
        with pytest.raises(SegmentCorruptionError, match=message):
            _decode(_resealed(bad))
    with pytest.raises(SegmentCorruptionError, match="frame 4 of a segment of 4"):
        _decode(raw, frame_count=4)
    assert len(_decode(raw, frame_count=5)) == 4


# -- the Fs seam -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fake", "real"])
def test_write_read_round_trip(kind: str, tmp_path: Path) -> None:
    fs: Fs = RealFs() if kind == "real" else _disk()
    seg = segment_path(str(tmp_path) if kind == "real" else D, 7, 100)
    assert tag_index_path(seg) == seg + ".tags"
    with pytest.raises(FileNotFoundError):
        read_tag_index(fs, seg, **IDENT)
    write_tag_index(fs, seg, _example(), sync_dir=True)
    write_tag_index(fs, seg, _example())  # replaces, leaves no temp file
    assert not fs.exists(seg + ".tags.tmp")
    assert read_tag_index(fs, seg, **IDENT).prefix(b"") == [0, 1, 3, 4]
    with pytest.raises(SegmentCorruptionError, match=r"\.seg\.tags"):
        read_tag_index(fs, seg, topic_id=8, base_seq=100, salt=SALT)


def test_write_alone_is_durable_only_with_sync_dir() -> None:
    seg = segment_path(D, 7, 100)
    for sync_dir in (False, True):
        disk = _disk()
        disk.sync_dir(D)
        write_tag_index(disk, seg, _example(), sync_dir=sync_dir)
        disk.crash(seed=0)
        assert disk.exists(seg + ".tags") == sync_dir
        if sync_dir:
            assert disk.read_bytes(seg + ".tags") == _example()


def _frames(first_seq: int, tags: list[str | None]) -> bytes:
    records = [{"data": i, "tag": tag} for i, tag in enumerate(tags)]
    frames, _ = encode_batch(records, first_seq, 1_700_000_000_000, None, SALT, LIMITS, ujson.dumps)
    return frames


def test_tagged_frames_lists_deleted_frames_too() -> None:
    seg = SegmentBuffer(100, SALT)
    seg.append(_frames(100, ["x", None, "y", "x", None]))
    seg.mark_deleted(2)
    seg.seal()
    assert tagged_frames(seg) == [(0, b"x"), (2, b"y"), (3, b"x")]
    empty = SegmentBuffer(5, SALT)
    assert tagged_frames(empty) == []


def _seal_with_tags(disk: FakeDisk, tags: list[str | None]) -> str:
    """What a checkpoint's seal does: frames synced, the tags file, then the index."""
    path = segment_path(D, 7, 100)
    writer = SegmentWriter.create(disk, path, topic_id=7, base_seq=100, salt=SALT)
    writer.append(_frames(100, tags))
    writer.sync()
    seg = SegmentBuffer.from_frames(_frames(100, tags), 100, SALT)
    write_tag_index(disk, path, encode_tag_index(7, 100, SALT, tagged_frames(seg)))
    writer.seal()
    return path


def test_a_crash_anywhere_in_a_seal_leaves_a_sealed_segment_with_its_tags() -> None:
    """Rule 2 at the file level: index present => tags file present and valid."""
    tags: list[str | None] = ["a", None, "b", "a"]
    probe = _disk()
    start = probe.ops
    _seal_with_tags(probe, tags)
    total = probe.ops - start
    sealed = 0
    for crash_at in range(1, total + 2):  # total + 1: the power stays on
        for torn in (False, True):
            disk = _disk()
            disk.crash_after = disk.ops + crash_at
            try:
                _seal_with_tags(disk, tags)
            except SimulatedCrash:
                assert crash_at <= total
            disk.crash(seed=crash_at, torn=torn)
            path = segment_path(D, 7, 100)
            if disk.exists(path + ".idx"):
                sealed += 1
                assert read_segment(disk, path).sealed
                index = read_tag_index(disk, path, **IDENT, frame_count=4)
                assert index.prefix(b"") == [0, 2, 3]
                assert list(index.exact(b"a")) == [0, 3]
    assert sealed == 2  # only a finished seal (its directory fsync) shows the index


# -- lookups answer what the trie answers --------------------------------------------------

_TAGS = st.binary(min_size=1, max_size=3).map(lambda b: bytes(c % 3 + 0x61 for c in b))


@st.composite
def _tagged(draw: st.DrawFn) -> list[tuple[int, bytes]]:
    indexes = sorted(draw(st.sets(st.integers(0, 400), max_size=60)))
    return [(i, draw(_TAGS)) for i in indexes]


@settings(max_examples=150, deadline=None)
@given(
    tagged=_tagged(),
    queries=st.lists(st.binary(max_size=3), max_size=6),
    base=st.integers(0, 1 << 40),
)
def test_lookups_match_the_tag_trie(
    tagged: list[tuple[int, bytes]], queries: list[bytes], base: int
) -> None:
    index = decode_tag_index(
        encode_tag_index(1, base, SALT, tagged), path="p", topic_id=1, base_seq=base, salt=SALT
    )
    assert len(index) == len(tagged)
    asked = [*queries, *{tag for _, tag in tagged}, *{tag[:1] for _, tag in tagged}, b""]
    for query in asked:
        for exact in (True, False):
            trie = TagTrie()
            for i, tag in tagged:
                trie.add(tag, base + i)
            below = base + 1000
            seqs = trie.pop_exact(query, below) if exact else trie.pop_prefix(query, below)
            got = list(index.exact(query)) if exact else index.prefix(query)
            assert got == [s - base for s in seqs], (query, exact)


# -- the checkpoint ----------------------------------------------------------------------------


async def _checkpoint(engine: Engine) -> None:
    store = engine._store
    assert store is not None
    await store.checkpoint(engine._registry)


def _sealed_on_disk(disk: FakeDisk) -> dict[str, SegmentBuffer]:
    out = {}
    for name in disk.listdir(D):
        if parse_segment_name(name) is not None and disk.exists(f"{D}/{name}.idx"):
            data = read_segment(disk, f"{D}/{name}")
            out[f"{D}/{name}"] = SegmentBuffer.from_frames(data.frames, data.base_seq, data.salt)
    return out


async def test_a_checkpoint_writes_the_tags_file_when_it_seals_a_tagged_segment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_log, "SEGMENT_TARGET_BYTES", 300)
    disk = FakeDisk()
    async with open_engine("/data", clock=ManualClock(1_700_000_000_000), fs=disk) as engine:
        for name in ("tagged", "plain", "mixed"):
            await engine.put_topic(name, {"durability": "disk"})
        for i in range(12):
            await engine.write("tagged", [{"data": i, "tag": f"t{i % 4}"}, {"data": -i}])
            await engine.write("plain", [{"data": i}])
            await engine.write("mixed", [{"data": i, "tag": "m"} if i % 6 == 0 else {"data": i}])
        await engine.delete_records("tagged", match="t1")  # deleted frames stay listed
        # Leftovers of seals that never finished: replaced, or removed for untagged ones.
        for name in ("tagged", "plain", "mixed"):
            log = engine._registry.topics[name]
            for seg in log.segments:
                if seg.sealed:
                    _plant(disk, segment_path(D, log.topic_id, seg.base_seq) + ".tags")
        await _checkpoint(engine)
        tagged_segments = 0
        for path, seg in _sealed_on_disk(disk).items():
            tagged = tagged_frames(seg)
            if not tagged:
                assert not disk.exists(path + ".tags"), path
                continue
            tagged_segments += 1
            topic_id, base = parse_segment_name(path.rsplit("/", 1)[1]) or (0, 0)
            index = read_tag_index(
                disk, path, topic_id=topic_id, base_seq=base, salt=seg.salt, frame_count=seg.count
            )
            assert index.prefix(b"") == [i for i, _ in tagged]
            for i, tag in tagged:
                assert i in index.exact(tag)
        assert tagged_segments >= 3
        assert not [n for n in disk.listdir(D) if n.endswith(".tmp")]


async def test_recovery_removes_tags_files_of_unlisted_segments() -> None:
    disk = FakeDisk()
    clock = ManualClock(1_700_000_000_000)
    async with open_engine("/data", clock=clock, fs=disk) as engine:
        await engine.write("t", [{"data": 1, "tag": "a"}])
        await _checkpoint(engine)
    listed = set(disk.listdir(D))
    stray = segment_path(D, 0xFFFF, 1)
    for suffix in (".tags", ".tags.tmp", ".idx.tmp"):
        _plant(disk, stray + suffix)
    async with open_engine("/data", clock=clock, fs=disk):
        pass
    assert set(disk.listdir(D)) == listed


def test_the_space_check_counts_the_tags_file_of_a_seal() -> None:
    """segment_work's ``grows`` covers a tags file of one 12-byte tag per frame."""
    seg = SegmentBuffer(100, SALT)
    seg.append(_frames(100, [f"order-{i:06d}" for i in range(50)]))
    log = SimpleNamespace(topic_id=7)
    open_work = segment_work({}, D, log, seg, {})  # type: ignore[arg-type]
    assert (open_work.seal, open_work.tags_of) == (False, None)
    seg.seal()
    work = segment_work({}, D, log, seg, {})  # type: ignore[arg-type]
    assert work.tags_of is seg
    tags_file = encode_tag_index(7, 100, SALT, tagged_frames(seg))
    assert work.grows >= len(work.data) + index_size(seg.count) + len(tags_file)
