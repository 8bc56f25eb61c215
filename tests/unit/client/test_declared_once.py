"""The clients' methods are declared once (topics/client/_api.py) and the embedded facade
forwards the Engine's: what each handle shows (help(), inspect, coroutine-ness) is the real
signature, and the step drivers that run multi-step methods behave as plain code would."""

from __future__ import annotations

import inspect
from collections.abc import Generator
from contextlib import aclosing
from typing import Any

import pytest
import trio

import topics
from topics.client import AsyncClient, Client
from topics.consumer import Emit, Sleep, Step, adrive, aiterate, drive, iterate

_OWN = {"close", "aclose", "ws", "http", "sync_twin"}


def _public(cls: type) -> dict[str, Any]:
    return {
        name: member
        for name, member in vars(cls).items()
        if not name.startswith("_") and name not in _OWN and callable(member)
    }


def test_both_clients_have_the_declared_methods_with_real_signatures() -> None:
    sync, aio = _public(Client), _public(AsyncClient)
    assert sorted(sync) == sorted(aio)
    assert {"write", "diff", "consume", "iter_topics", "watch", "work", "run_worker"} <= set(sync)
    for name in sync:
        s, a = inspect.signature(sync[name]), inspect.signature(aio[name])
        assert s.parameters == a.parameters, name
        assert next(iter(s.parameters)) == "self"
        assert sync[name].__qualname__ == f"Client.{name}"
        assert sync[name].__doc__, name
    write = inspect.signature(Client.write)
    assert "idempotency_key" in write.parameters
    assert not any(p.kind is p.VAR_KEYWORD for p in write.parameters.values())
    assert write.return_annotation == "WriteResult"
    assert inspect.signature(AsyncClient.write).return_annotation == "WriteResult"
    assert inspect.signature(Client.iter_topics).return_annotation == "Iterator[TopicSummary]"
    assert inspect.signature(AsyncClient.watch).return_annotation == "AsyncWatchIterator"
    assert inspect.iscoroutinefunction(AsyncClient.write)
    assert inspect.iscoroutinefunction(AsyncClient.run_worker)
    assert not inspect.iscoroutinefunction(AsyncClient.work)
    assert not inspect.iscoroutinefunction(Client.write)
    assert "async for" in (AsyncClient.watch.__doc__ or "")


def test_sync_engine_methods_are_the_engines() -> None:
    for name in ("put_topic", "write", "diff", "claim", "ack", "put_cursor", "list_routers"):
        mine, theirs = getattr(topics.SyncEngine, name), getattr(topics.Engine, name)
        assert inspect.signature(mine) == inspect.signature(theirs), name
        assert not inspect.iscoroutinefunction(mine)
    with topics.open(None) as db:
        assert db.write("t", [{"data": 1}], return_seqs=False).seqs is None
        with pytest.raises(TypeError):
            db.write("t", [{"data": 1}], no_such_option=True)  # type: ignore[call-arg]


class Handle:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def ok(self, value: int) -> int:
        self.calls.append("ok")
        return value

    def fail(self) -> int:
        raise KeyError("boom")


class AsyncHandle(Handle):
    async def ok(self, value: int) -> int:  # type: ignore[override]
        await trio.lowlevel.checkpoint()
        return super().ok(value)


def _steps() -> Generator[Step | Sleep | Emit[int], Any, str]:
    first = yield lambda h: h.ok(1)
    yield Emit(first)
    try:
        yield lambda h: h.fail()
    except KeyError:
        yield Emit(2)
    yield Sleep(0)
    return "done"


def _result_only() -> Generator[Step, Any, int]:
    value: int = yield lambda h: h.ok(5)
    yield lambda h: h.fail()
    return value  # not reached: the KeyError propagates


def test_sync_drivers_send_answers_and_throw_errors_into_the_steps() -> None:
    run = iterate(Handle(), _steps())
    assert list(run) == [1, 2]
    assert drive(Handle(), (s for s in [lambda h: h.ok(3)])) is None
    with pytest.raises(KeyError):
        drive(Handle(), _result_only())
    with pytest.raises(TypeError, match="emitted"):
        drive(Handle(), _steps())  # type: ignore[arg-type]


async def test_async_drivers_await_answers() -> None:
    items = [item async for item in aiterate(AsyncHandle(), _steps())]  # type: ignore[arg-type]
    assert items == [1, 2]
    with pytest.raises(KeyError):
        await adrive(AsyncHandle(), _result_only())
    closed: list[bool] = []

    def endless() -> Generator[Step | Emit[int], Any, None]:
        try:
            while True:
                yield Emit((yield lambda h: h.ok(7)))
        finally:
            closed.append(True)

    async with aclosing(aiterate(AsyncHandle(), endless())) as run:
        async for item in run:
            assert item == 7
            break
    assert closed == [True]  # leaving the loop closes the steps (their finally runs)
