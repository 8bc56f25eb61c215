"""Compare-and-append (``expected_head_seq``) and producer fencing (``producer_id`` +
``epoch``) on writes: contract §2 as extended by issue 19, topics/ops/producers.py rules 1-5,
docs/SEMANTICS.md rules 19b-19c. Persistence across clean restarts and power cuts is at the
end (FakeDisk images keep only what was durable)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.support.fakedisk import FakeDisk
from topics._clock import ManualClock
from topics._storage.fs import Fs
from topics.engine import Engine, open_engine
from topics.errors import (
    HeadMismatchError,
    InvalidRequestError,
    ProducerFencedError,
    ThrottledError,
    TopicNotFoundError,
)

from ._support import START_MS, recs, snapshot, with_limits

# -- compare-and-append ---------------------------------------------------------------------


async def test_expected_head_appends_only_at_that_head(engine: Engine) -> None:
    first = await engine.write("t", recs("a", "b"), expected_head_seq=0)  # absent: head 0
    assert (first.created, first.seqs) == (True, [1, 2])
    before = await snapshot(engine, "t")
    with pytest.raises(HeadMismatchError) as info:
        await engine.write("t", recs("c"), expected_head_seq=1)
    assert info.value.status == 409
    assert info.value.detail == {"topic": "t", "expected_head_seq": 1, "head_seq": 2}
    assert await snapshot(engine, "t") == before  # nothing appended
    assert (await engine.write("t", recs("c"), expected_head_seq=2)).seqs == [3]


async def test_head_is_the_highest_seq_handed_out_whatever_was_deleted(engine: Engine) -> None:
    await engine.write("t", recs(1, 2, 3))
    await engine.delete_records("t", before_seq=4)  # empty now, head still 3
    with pytest.raises(HeadMismatchError):
        await engine.write("t", recs(4), expected_head_seq=0)
    assert (await engine.write("t", recs(4), expected_head_seq=3)).seqs == [4]


async def test_a_mismatch_on_an_absent_topic_creates_nothing(engine: Engine) -> None:
    with pytest.raises(HeadMismatchError):
        await engine.write("t", recs(1), expected_head_seq=5)
    with pytest.raises(TopicNotFoundError):
        await engine.get_topic("t")


async def test_a_retried_compare_and_append_is_deduped_not_refused(engine: Engine) -> None:
    await engine.write("t", recs(1))
    done = await engine.write("t", recs(2), expected_head_seq=1, idempotency_key="b2")
    again = await engine.write("t", recs(2), expected_head_seq=1, idempotency_key="b2")
    assert (again.deduped, again.seqs) == (True, done.seqs)


@pytest.mark.parametrize("bad", [-1, "3", True, 1.5])
async def test_a_bad_expected_head_is_invalid_request(engine: Engine, bad: object) -> None:
    with pytest.raises(InvalidRequestError) as info:
        await engine.write("t", recs(1), expected_head_seq=bad)  # type: ignore[arg-type]
    assert info.value.detail == {"field": "expected_head_seq"}


# -- producer fencing -----------------------------------------------------------------------


async def test_an_older_epoch_is_fenced_and_appends_nothing(engine: Engine) -> None:
    await engine.write("t", recs(1), producer_id="p", epoch=1)
    await engine.write("t", recs(2), producer_id="p", epoch=2)
    await engine.write("t", recs(3), producer_id="p", epoch=2)  # the same epoch goes on
    before = await snapshot(engine, "t")
    with pytest.raises(ProducerFencedError) as info:
        await engine.write("t", recs("zombie"), producer_id="p", epoch=1)
    assert info.value.status == 409
    assert info.value.detail == {
        "topic": "t",
        "producer_id": "p",
        "epoch": 1,
        "current_epoch": 2,
    }
    assert await snapshot(engine, "t") == before
    # other producers, and the same producer on another topic, are not fenced
    await engine.write("t", recs(4), producer_id="q", epoch=0)
    await engine.write("u", recs(1), producer_id="p", epoch=1)


async def test_the_last_batch_is_deduped_after_the_idempotency_window(
    engine: Engine, clock: ManualClock
) -> None:
    await engine.put_topic("t", {"idempotency_window_ms": 1000})
    await engine.write("t", recs(0))
    first = await engine.write("t", recs(1, 2), producer_id="p", epoch=1, idempotency_key="b7")
    clock.advance(60_000)  # far past the window
    retry = await engine.write("t", recs(1, 2), producer_id="p", epoch=2, idempotency_key="b7")
    assert (retry.deduped, retry.seqs) == (True, first.seqs)
    # the deduped retry from epoch 2 still fenced epoch 1
    with pytest.raises(ProducerFencedError):
        await engine.write("t", recs(9), producer_id="p", epoch=1)
    # without producer_id only the window applies: b7 left it, so it appends
    clock.advance(1)
    assert (await engine.write("t", recs(3), idempotency_key="b7")).deduped is False
    new = await engine.write("t", recs(3), producer_id="p", epoch=2, idempotency_key="b8")
    assert new.deduped is False


async def test_a_fenced_retry_is_refused_even_with_its_key(engine: Engine) -> None:
    await engine.write("t", recs(1), producer_id="p", epoch=1, idempotency_key="k")
    await engine.write("t", recs(2), producer_id="p", epoch=2)
    with pytest.raises(ProducerFencedError):
        await engine.write("t", recs(1), producer_id="p", epoch=1, idempotency_key="k")


async def test_fencing_and_compare_and_append_together(engine: Engine) -> None:
    await engine.write("t", recs(1), producer_id="p", epoch=3, expected_head_seq=0)
    with pytest.raises(ProducerFencedError):  # fencing is checked first
        await engine.write("t", recs(2), producer_id="p", epoch=2, expected_head_seq=0)
    with pytest.raises(HeadMismatchError):
        await engine.write("t", recs(2), producer_id="p", epoch=4, expected_head_seq=0)
    # a refused write changes no producer state: epoch 3 is not fenced by the epoch-4 try
    await engine.write("t", recs(2), producer_id="p", epoch=3, expected_head_seq=1)


@pytest.mark.parametrize(
    ("producer_id", "epoch", "field"),
    [
        ("p", None, "epoch"),
        (None, 1, "producer_id"),
        ("", 1, "producer_id"),
        ("p" * 257, 1, "producer_id"),
        (7, 1, "producer_id"),
        ("p", -1, "epoch"),
        ("p", "1", "epoch"),
        ("p", True, "epoch"),
    ],
)
async def test_bad_producer_arguments_are_invalid_request(
    engine: Engine, producer_id: object, epoch: object, field: str
) -> None:
    with pytest.raises(InvalidRequestError) as info:
        await engine.write("t", recs(1), producer_id=producer_id, epoch=epoch)  # type: ignore[arg-type]
    assert info.value.detail == {"field": field}
    assert (await engine.list_topics()).topics == []


@with_limits(max_producers_per_topic=2)
async def test_producer_ids_per_topic_are_capped(engine: Engine) -> None:
    await engine.write("t", recs(1), producer_id="a", epoch=0)
    await engine.write("t", recs(2), producer_id="b", epoch=0)
    with pytest.raises(ThrottledError) as info:
        await engine.write("t", recs(3), producer_id="c", epoch=0)
    assert info.value.detail == {"limit": "max_producers_per_topic", "max": 2}
    await engine.write("t", recs(3), producer_id="a", epoch=1)  # known ids go on


# -- persistence (_producers rule 3) -----------------------------------------------------------

ROOT = "/data"


@asynccontextmanager
async def opened(where: Path | FakeDisk) -> AsyncIterator[Engine]:
    fs: Fs | None = where if isinstance(where, FakeDisk) else None
    path = ROOT if isinstance(where, FakeDisk) else str(where)
    async with open_engine(path, clock=ManualClock(START_MS), fs=fs) as engine:
        yield engine


async def _fence_two_epochs(engine: Engine, durability: str) -> list[int]:
    await engine.put_topic("t", {"durability": durability})
    await engine.write("t", recs(1), producer_id="p", epoch=1, idempotency_key="k1")
    last = await engine.write("t", recs(2, 3), producer_id="p", epoch=2, idempotency_key="k2")
    assert last.seqs is not None
    return last.seqs


@pytest.mark.parametrize("durability", ["ephemeral", "memory", "disk", "fsync"])
async def test_an_acknowledged_fence_survives_a_power_cut(durability: str) -> None:
    disk = FakeDisk()
    async with opened(disk) as engine:
        seqs = await _fence_two_epochs(engine, durability)
        image = disk.clone()  # only what was durable: the epoch-raising write was synced
    async with opened(image) as engine:
        with pytest.raises(ProducerFencedError) as info:
            await engine.write("t", recs("zombie"), producer_id="p", epoch=1)
        assert info.value.detail["current_epoch"] == 2
        if durability != "ephemeral":  # its records (and their batch) do not survive
            retry = await engine.write(
                "t", recs(2, 3), producer_id="p", epoch=3, idempotency_key="k2"
            )
            assert (retry.deduped, retry.seqs) == (True, seqs)


async def test_producer_state_survives_a_checkpoint_and_a_clean_restart(tmp_path: Path) -> None:
    async with opened(tmp_path) as engine:
        seqs = await _fence_two_epochs(engine, "disk")
        await engine.write("u", recs(1), producer_id="p", epoch=5)
        assert engine._store is not None
        await engine._store.checkpoint(engine._registry)
        await engine.write("u", recs(2), producer_id="p", epoch=6)  # in the WAL only
    async with opened(tmp_path) as engine:
        with pytest.raises(ProducerFencedError):
            await engine.write("t", recs(0), producer_id="p", epoch=1)
        with pytest.raises(ProducerFencedError):
            await engine.write("u", recs(0), producer_id="p", epoch=5)
        retry = await engine.write("t", recs(2, 3), producer_id="p", epoch=2, idempotency_key="k2")
        assert (retry.deduped, retry.seqs) == (True, seqs)
        await engine.delete_topic("t")  # a new instance of the name knows no producer
        assert (await engine.write("t", recs(0), producer_id="p", epoch=0)).seqs == [1]
