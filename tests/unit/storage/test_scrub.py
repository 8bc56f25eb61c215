"""The online scrub (topics/ops/scrub.py): paces, finds rot, and stays quiet beside a
live writer."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support.datadir_damage import SEG_HEADER, build, copy, flip_bit, segments
from topics._storage.damage import DamageRegistry
from topics._storage.fs import RealFs
from topics.engine import open_engine
from topics.ops.scrub import Scrub
from topics.settings import Limits


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("scrub") / "data"
    build(path)
    return path


@pytest.fixture
def data(pristine: Path, tmp_path: Path) -> Path:
    return copy(pristine, tmp_path / "data")


class FakeTime:
    """The scrub's sleep: no real waiting, and a log of the bytes read by each moment."""

    def __init__(self, scrub_of: list[Scrub]) -> None:
        self.now = 0.0
        self.scrub_of = scrub_of
        self.samples: list[tuple[float, int]] = []

    async def sleep(self, seconds: float) -> None:
        self.samples.append((self.now, self.scrub_of[0].bytes_total))
        self.now += seconds


async def _inline(fn: Any) -> Any:
    return fn()


def _app(topics: dict[str, Any] | None = None) -> Any:
    return types.SimpleNamespace(
        damage=DamageRegistry(), registry=types.SimpleNamespace(topics=topics or {})
    )


def _scrub(app: Any, root: Path, rate: int) -> tuple[Scrub, FakeTime]:
    holder: list[Scrub] = []
    clock = FakeTime(holder)
    scrub = Scrub(app, RealFs(), str(root), rate, sleep=clock.sleep, run_sync=_inline)
    holder.append(scrub)
    return scrub, clock


async def test_a_pass_reads_at_most_the_budget_per_second(data: Path) -> None:
    rate = 1000
    scrub, clock = _scrub(_app(), data, rate)
    read = await scrub.one_pass()
    assert read == scrub.bytes_total > 20_000
    assert scrub.passes_total == 1
    # When each file is read, the bytes read before it fit the time slept so far.
    before = 0
    for now, done in clock.samples:
        assert before <= rate * now + 1e-6
        before = done
    assert read <= rate * clock.now + 1e-6
    assert scrub.app.damage.entries() == []
    files = list((data / "segments").glob("*.seg")) + sorted((data / "wal").iterdir())[:-1]
    assert len(clock.samples) == len(files)  # every segment and every closed WAL file


async def test_it_reports_a_flipped_bit_in_a_sealed_segment_and_a_bad_index(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sealed = [s for s in segments(data) if s.sealed]
    seg, other = sealed[0], sealed[-1]
    flip_bit(data / seg.rel, SEG_HEADER + seg.offsets[1] + 30)
    flip_bit(data / f"{other.rel}.idx", 60)
    quarantined: list[tuple[Any, Any, Any]] = []
    damaged = types.ModuleType("topics.log.damaged")
    damaged.quarantine = lambda log, s, d: quarantined.append((log, s, d))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "topics.log.damaged", damaged)
    topic_id, base = (int(x, 16) for x in seg.rel[9:-4].split("-"))
    held = types.SimpleNamespace(base_seq=base)
    log = types.SimpleNamespace(topic_id=topic_id, segments=[held])
    scrub, _ = _scrub(_app({seg.topic: log}), data, 1 << 20)
    await scrub.one_pass()
    found = {d.path: d for d in scrub.app.damage.entries()}
    assert set(found) == {seg.rel, f"{other.rel}.idx"}
    assert found[seg.rel].kind == "segment"
    assert found[seg.rel].first_seq is not None
    assert found[seg.rel].first_seq <= seg.seqs[1]
    assert found[f"{other.rel}.idx"].kind == "index"
    assert [(q[0], q[1], q[2].path) for q in quarantined] == [(log, held, seg.rel)]
    await scrub.one_pass()  # a second pass finds the same files: one entry each
    assert len(scrub.app.damage) == 2


async def test_a_healthy_directory_under_a_writer_and_checkpoints_reports_nothing(
    tmp_path: Path,
) -> None:
    limits = Limits(scrub_bytes_per_s=64 << 20)
    async with open_engine(str(tmp_path / "data"), limits=limits) as engine:
        scrub = engine._durability.scrub
        assert scrub is not None
        for name in ("a", "b"):
            await engine.put_topic(name, {"durability": "disk"})
        with trio.fail_after(60):
            n = 0
            while scrub.passes_total < 6:
                for name in ("a", "b"):
                    batch = [{"data": {"n": n, "pad": "x" * 200}, "tag": f"t{n % 3}"}] * 20
                    await engine.write(name, batch)
                n += 1
                if n % 5 == 0:  # floors move, segments drop, delete flags flip in place
                    await engine.delete_records("a", before_seq=n * 10)
                    await engine.delete_records("b", match="t1")
                    await engine._store.checkpoint(engine._registry)
                await trio.sleep(0.001)
        assert scrub.bytes_total > 0
        assert engine._app.damage.entries() == []
        gauges = engine.storage_gauges()
        assert gauges["topics_scrub_passes_total"] >= 6
        assert gauges["topics_scrub_bytes_total"] == scrub.bytes_total


async def test_the_scrub_is_off_by_default(tmp_path: Path) -> None:
    async with open_engine(str(tmp_path / "data")) as engine:
        assert engine._durability.scrub is None
        assert engine.storage_gauges()["topics_scrub_bytes_total"] == 0
    assert Limits.from_env({"TOPICS_SCRUB_BYTES_PER_S": "4096"}).scrub_bytes_per_s == 4096
    with pytest.raises(ValueError, match="scrub_bytes_per_s"):
        Limits(scrub_bytes_per_s=-1)
