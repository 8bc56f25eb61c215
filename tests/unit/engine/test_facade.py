"""The Engine facade's table (topics/_facade.py): each public name is its owner's method."""

from __future__ import annotations

import inspect

import pytest
import trio

from topics._facade import Via, bind_parts
from topics.engine import Engine, open_engine
from topics.ops.writes import Writes
from topics.routers.ops import Routers


def _table() -> dict[str, object]:
    found: dict[str, object] = {}
    for name, value in inspect.getmembers(Engine):
        wrapped = getattr(value, "__wrapped__", None)
        if not name.startswith("_") and wrapped is not None:
            found[name] = wrapped
    return found


def test_every_public_method_shows_its_owners_signature_and_docstring() -> None:
    table = _table()
    assert {"write", "diff", "claim", "put_router", "list_routers", "create_watch"} <= set(table)
    for name, owner in table.items():
        method = getattr(Engine, name)
        assert method.__qualname__ == f"Engine.{name}"
        assert method.__module__ == "topics.engine"
        assert method.__doc__, name
        assert method.__doc__ == owner.__doc__, name
        assert inspect.signature(method) == inspect.signature(owner), name
        assert inspect.iscoroutinefunction(method) == inspect.iscoroutinefunction(owner), name
    assert inspect.iscoroutinefunction(Engine.write)
    assert not inspect.iscoroutinefunction(Engine.open_watch)


def test_the_descriptor_replaces_itself_and_calls_the_part() -> None:
    class Part:
        def __init__(self, tag: str) -> None:
            self.tag = tag

        def echo(self, value: int, *, twice: bool = False) -> str:
            """Echo."""
            return f"{self.tag}:{value * 2 if twice else value}"

        async def later(self, value: int) -> int:
            await trio.lowlevel.checkpoint()
            return value + 1

    class Facade:
        def __init__(self) -> None:
            self._part = Part("p")

        echo = Via("_part", Part.echo)
        later = Via("_part", Part.later)

    assert not isinstance(Facade.__dict__["echo"], Via)
    facade = Facade()  # unbound: the class's forwards serve it
    assert facade.echo(2, twice=True) == "p:4"
    assert Facade.echo.__doc__ == "Echo."
    with pytest.raises(TypeError):
        facade.echo(2, 3)  # type: ignore[misc]  # twice is keyword-only, as on the owner
    assert trio.run(facade.later, 1) == 2
    bind_parts(facade)
    assert facade.echo(3) == "p:3"
    assert vars(facade)["echo"].__self__ is facade._part
    assert trio.run(facade.later, 2) == 3


async def test_a_method_reaches_the_engine_it_is_called_on() -> None:
    async with open_engine() as one, open_engine() as two:
        # Bound at construction (_facade rule 2): the part's own method, no forward.
        assert one.write.__func__ is Writes.write  # type: ignore[attr-defined]
        assert one.write.__self__ is one._writes  # type: ignore[attr-defined]
        assert one.list_routers.__func__ is Routers.list_routers  # type: ignore[attr-defined]
        await one.write("t", [{"data": 1}])
        assert (await one.get_topic("t")).head_seq == 1
        assert (await two.list_topics()).topics == []
