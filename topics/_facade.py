"""How the Engine facade hands a public method to the plain class that owns it.

``Engine.write = Via("_writes", Writes.write)`` declares that ``engine.write(...)`` is
``engine._writes.write(...)``. The signature and the docstring (the API reference) are
written once, on the method that does the work; the facade is the table of which part owns
which name.

Rules:
1. At class creation the descriptor replaces itself with a plain function of the public
   name whose ``__doc__`` and ``inspect.signature`` are the owning method's, so ``help()``,
   ``inspect`` and the synchronous facade (frontends/inproc.py) see the real parameters on
   the class. A coroutine method's public name is a coroutine function too.
2. :func:`bind_parts`, called once the facade's parts exist, sets each name on the
   instance to the owning part's bound method: a call through the facade costs what a
   call to the part costs (no forwarding frame, no repacking of arguments), on the hot
   paths (``write``, ``diff``) too. The class-level function of rule 1 stays for the
   class's readers (``help(Engine)``) and for a facade used before it is bound.
3. For type checkers, ``__get__`` gives the owning method's parameters and result, bound
   (on an instance) or taking the facade first (on the class).
"""

from __future__ import annotations

import functools
import inspect
import operator
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

__all__ = ["Via", "bind_parts", "place"]

P = ParamSpec("P")
T = TypeVar("T")
Part = TypeVar("Part")
Owner = TypeVar("Owner")

#: The class attribute holding a facade class's table: public name -> (part, method name).
_TABLE = "_via_table"


class Via(Generic[Part, P, T]):
    """A facade method that calls ``method`` on the facade's attribute ``part``."""

    def __init__(self, part: str, method: Callable[Concatenate[Part, P], T]) -> None:
        self.part = part
        self.method = method

    def __set_name__(self, owner: type[Any], name: str) -> None:
        method = self.method
        get_part = operator.attrgetter(self.part)
        forward: Callable[..., Any]
        if inspect.iscoroutinefunction(method):

            async def forward(facade: Any, /, *args: Any, **kwargs: Any) -> Any:
                return await method(get_part(facade), *args, **kwargs)

        else:

            def forward(facade: Any, /, *args: Any, **kwargs: Any) -> Any:
                return method(get_part(facade), *args, **kwargs)

        place(owner, name, forward, method)
        table = owner.__dict__.get(_TABLE)
        if table is None:
            table = {}
            setattr(owner, _TABLE, table)
        table[name] = (self.part, method.__name__)

    @overload
    def __get__(self, obj: None, owner: type[Owner]) -> Callable[Concatenate[Owner, P], T]: ...
    @overload
    def __get__(self, obj: object, owner: type[Any]) -> Callable[P, T]: ...
    def __get__(self, obj: object, owner: type[Any]) -> Any:
        raise TypeError("reached only before __set_name__ replaced the descriptor")


def place(owner: type[Any], name: str, fn: Callable[..., Any], like: Callable[..., Any]) -> None:
    """Make ``fn`` the method ``name`` of ``owner``, showing ``like``'s docstring and
    signature (``__wrapped__``) under its own name: rule 1, and the synchronous facade's
    forwards (frontends/inproc.py)."""
    functools.update_wrapper(fn, like)
    fn.__name__ = name
    fn.__qualname__ = f"{owner.__qualname__}.{name}"
    fn.__module__ = owner.__module__
    setattr(owner, name, fn)


def bind_parts(facade: object) -> None:
    """Set every ``Via`` name of ``facade``'s class on ``facade`` to its part's bound
    method (rule 2). Call it once, after the parts are built."""
    table: dict[str, tuple[str, str]] = getattr(type(facade), _TABLE)
    for name, (part, method) in table.items():
        setattr(facade, name, getattr(getattr(facade, part), method))
