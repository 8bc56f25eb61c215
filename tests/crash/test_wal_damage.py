"""Issue 32: a WAL file that cannot be replayed costs the entries it held, not the start.

The engine writes to fsync topics over a FakeDisk with small WAL files and loses power
(no checkpoint, so recovery must replay the WAL); the test then damages a WAL file the
way a disk does (a flipped bit, a zeroed page, a cut file) and opens the engine again:
it starts, the seqs the damaged entries held get a ``corrupt`` tombstone, every other
record is there, writes go on above every seq handed out, and the engine's damage
registry holds one ``wal`` Damage whose log line names the file, the offset and
``topics verify``.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
import ujson

from tests.support.fakedisk import FakeDisk, SimulatedCrash
from topics._clock import ManualClock
from topics._core import frame_seq, iter_frames
from topics._storage import entries
from topics._storage.wal import Wal
from topics._storage.wal_reader import WalEntry, scan_wal, wal_files, wal_path
from topics.engine import Engine, open_engine

pytestmark = pytest.mark.crash

ROOT = "/data"
WAL = f"{ROOT}/wal"
START_MS = 1_700_000_000_000
TOPICS = ("a", "b", "q")


@pytest.fixture(autouse=True)
def small_wal_files(monkeypatch: pytest.MonkeyPatch) -> None:
    create = Wal.create.__func__  # type: ignore[attr-defined]

    def small(cls: type[Wal], *args: Any, **kwargs: Any) -> Wal:
        kwargs["max_file_bytes"] = 2048
        wal: Wal = create(cls, *args, **kwargs)
        return wal

    monkeypatch.setattr(Wal, "create", classmethod(small))


async def _crashed_disk(rounds: int = 40) -> tuple[FakeDisk, dict[str, dict[int, Any]]]:
    """Writes to ``a`` and ``b`` every round and to ``q`` once, then a power loss."""
    disk = FakeDisk()
    acked: dict[str, dict[int, Any]] = {t: {} for t in TOPICS}
    try:
        with trio.fail_after(20):
            async with open_engine(ROOT, clock=ManualClock(START_MS), fs=disk) as engine:
                for name in TOPICS:
                    await engine.put_topic(name, {"durability": "fsync"})
                for r in range(rounds):
                    for name in ("a", "b") if r != rounds // 2 else TOPICS:
                        data = {"r": r, "t": name, "pad": "x" * 40}
                        res = await engine.write(name, [{"data": data}])
                        acked[name][res.first_seq] = data
                disk.crash_after = disk.ops + 1
                await engine.write("a", [{"data": "never acked"}])
    except BaseException as exc:  # only the simulated power loss is expected
        if not _is_crash(exc):
            raise
    disk.crash(0, torn=False)
    return disk, acked


def _is_crash(exc: BaseException) -> bool:
    if isinstance(exc, SimulatedCrash):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_is_crash(e) for e in exc.exceptions)
    return exc.__cause__ is not None and _is_crash(exc.__cause__)


def _appends(disk: FakeDisk) -> list[tuple[WalEntry, int, range]]:
    """Every APPEND entry in the WAL with its topic id and the seqs it holds."""
    out = []
    for e in scan_wal(disk, WAL, repair=False):
        if e.entry_type == entries.APPEND:
            a = entries.decode_append(e.payload)
            first = frame_seq(a.frames, 0)
            n = len(iter_frames(a.frames, a.salt, verify=False))
            out.append((e, a.topic_id, range(first, first + n)))
    return out


async def _read_all(engine: Engine, topic: str) -> tuple[dict[int, Any], list[Any]]:
    records: dict[int, Any] = {}
    stones = []
    cursor = 0
    while True:
        page = await engine.diff(topic, from_seq=cursor, limit=1000)
        if page.tombstone is not None:
            stones.append(page.tombstone)
        for rec in ujson.loads(page.records_json):
            records[rec["$seq"]] = rec["data"]
        cursor = page.next_from_seq
        if page.caught_up:
            return records, stones


async def _check(
    engine: Engine, acked: dict[str, dict[int, Any]], lost: dict[str, set[int]]
) -> dict[str, list[Any]]:
    """Every acked record outside ``lost`` is there; every lost seq is under a corrupt
    tombstone; a write lands above every seq handed out."""
    out = {}
    for name in TOPICS:
        records, stones = await _read_all(engine, name)
        want = {s: d for s, d in acked[name].items() if s not in lost.get(name, set())}
        assert {s: records[s] for s in want if s in records} == want, name
        corrupt = [t for t in stones if t.reason == "corrupt"]
        covered = {s for t in corrupt for s in range(t.gap_from, t.gap_to + 1)}
        assert lost.get(name, set()) <= covered, (name, corrupt)
        assert not covered & set(want), name  # never over a record that is there
        res = await engine.write(name, [{"data": "after"}])
        assert res.first_seq > max([*acked[name], *covered, 0])
        out[name] = corrupt
    return out


def _topic_ids(disk: FakeDisk) -> dict[int, str]:
    names = {}
    for e in scan_wal(disk, WAL, repair=False):
        if e.entry_type == entries.TOPIC_PUT:
            body = entries.decode_topic_put(e.payload)
            names[int(body["id"])] = body["name"]
    return names


def _wal_damage(engine: Engine) -> list[Any]:
    return [d for d in engine._app.damage.entries() if d.kind == "wal"]


async def test_a_flipped_bit_in_an_older_file_costs_that_entry_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    disk, acked = await _crashed_disk()
    names = _topic_ids(disk)
    newest = wal_files(disk, WAL)[-1]
    victim, _, seqs = next(
        x for x in _appends(disk)[10:] if x[0].file_no != newest and names[x[1]] == "a"
    )
    path = wal_path(WAL, victim.file_no)
    at = victim.offset + 30
    disk.poke(path, at, bytes([disk.read_bytes(path)[at] ^ 0x10]))
    caplog.set_level(logging.ERROR, logger="topics.storage")
    async with open_engine(ROOT, clock=ManualClock(START_MS), fs=disk) as engine:
        corrupt = await _check(engine, acked, {"a": set(seqs)})
        # Exactly the entry's seqs: the next append of ``a`` said where its head was.
        assert [(t.gap_from, t.gap_to) for t in corrupt["a"]] == [(seqs[0], seqs[-1])]
        assert corrupt["b"] == []
        [damage] = _wal_damage(engine)
        assert damage.path == f"wal/{path.rpartition('/')[2]}"
        assert damage.offset == victim.offset
        assert damage.widened
        assert "may reappear" in damage.detail
    line = next(r.getMessage() for r in caplog.records if damage.path in r.getMessage())
    assert f"offset {victim.offset}" in line
    assert "topics verify" in line


async def test_a_zeroed_page_in_an_older_file_skips_to_the_next_valid_frame() -> None:
    disk, acked = await _crashed_disk()
    names = _topic_ids(disk)
    files = wal_files(disk, WAL)
    appends = _appends(disk)
    victim_file = files[len(files) // 2]
    start = next(e.offset for e, _, _ in appends if e.file_no == victim_file) + 10
    disk.poke(wal_path(WAL, victim_file), start, bytes(600))
    lost: dict[str, set[int]] = {}
    for e, tid, seqs in appends:
        end = e.offset + len(e.payload) + 20
        if e.file_no == victim_file and e.offset < start + 600 and end > start:
            lost.setdefault(names[tid], set()).update(seqs)
    assert sum(map(len, lost.values())) >= 3
    async with open_engine(ROOT, clock=ManualClock(START_MS), fs=disk) as engine:
        await _check(engine, acked, lost)
        assert len(_wal_damage(engine)) == 1


async def test_a_cut_older_file_skips_to_the_next_file() -> None:
    disk, acked = await _crashed_disk()
    names = _topic_ids(disk)
    files = wal_files(disk, WAL)
    victim_file = files[1]
    path = wal_path(WAL, victim_file)
    appends = [x for x in _appends(disk) if x[0].file_no == victim_file]
    cut = appends[len(appends) // 2][0].offset + 5
    disk.open(path, write=True).truncate(cut)
    lost: dict[str, set[int]] = {}
    for e, tid, seqs in appends:
        if e.offset + 5 >= cut:
            lost.setdefault(names[tid], set()).update(seqs)
    async with open_engine(ROOT, clock=ManualClock(START_MS), fs=disk) as engine:
        await _check(engine, acked, lost)
        [damage] = _wal_damage(engine)
        assert damage.problem.startswith("truncated")


async def test_damage_in_the_middle_of_the_newest_file_keeps_the_frames_after_it() -> None:
    disk, acked = await _crashed_disk()
    names = _topic_ids(disk)
    newest = wal_files(disk, WAL)[-1]
    in_newest = [x for x in _appends(disk) if x[0].file_no == newest]
    assert len(in_newest) >= 3
    victim, tid, seqs = in_newest[0]
    path = wal_path(WAL, newest)
    disk.poke(path, victim.offset + 1, b"\xff")  # a garbage length
    async with open_engine(ROOT, clock=ManualClock(START_MS), fs=disk) as engine:
        await _check(engine, acked, {names[tid]: set(seqs)})
        assert len(_wal_damage(engine)) == 1


async def test_a_topic_with_no_entry_after_the_damage_gets_a_widened_corrupt_range() -> None:
    """``q`` was written once; its only append is the one lost, so nothing later says
    where its head was: the range is widened past its watermark, and said to be."""
    disk, acked = await _crashed_disk()
    names = _topic_ids(disk)
    victim, _, seqs = next(x for x in _appends(disk) if names[x[1]] == "q")
    assert victim.file_no != wal_files(disk, WAL)[-1]
    path = wal_path(WAL, victim.file_no)
    disk.poke(path, victim.offset + 25, b"\x00\x01")
    async with open_engine(ROOT, clock=ManualClock(START_MS), fs=disk) as engine:
        corrupt = await _check(engine, acked, {"q": set(seqs)})
        [stone] = corrupt["q"]
        assert stone.gap_from == seqs[0]
        # ``b`` had no entry in the damaged frame, but nothing proves that: a later append
        # of it did, so it keeps its exact head with no tombstone.
        assert corrupt["b"] == []
    # The recovery logged the corrupt gap (synced): a second power loss before any
    # checkpoint replays it with the same reason.
    disk.crash(1, torn=False)
    async with open_engine(ROOT, clock=ManualClock(START_MS), fs=disk) as engine:
        _, stones = await _read_all(engine, "q")
        assert any(t.reason == "corrupt" and t.gap_from == seqs[0] for t in stones)


async def test_a_topic_created_in_the_damaged_entries_is_missing_and_said_to_be(
    caplog: pytest.LogCaptureFixture,
) -> None:
    disk, acked = await _crashed_disk()
    put = next(
        e
        for e in scan_wal(disk, WAL, repair=False)
        if e.entry_type == entries.TOPIC_PUT and entries.decode_topic_put(e.payload)["name"] == "q"
    )
    assert put.file_no != wal_files(disk, WAL)[-1]
    disk.poke(wal_path(WAL, put.file_no), put.offset + 25, b"\xaa")
    caplog.set_level(logging.ERROR, logger="topics.storage")
    async with open_engine(ROOT, clock=ManualClock(START_MS), fs=disk) as engine:
        assert "q" not in engine._registry.topics
        for name in ("a", "b"):
            records, _ = await _read_all(engine, name)
            assert {s: records[s] for s in acked[name]} == acked[name]
        [damage] = _wal_damage(engine)
        assert "topic creations" in damage.detail
    assert any("append to topics no readable entry" in r.getMessage() for r in caplog.records)
