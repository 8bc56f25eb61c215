"""How the Engine facade hands a public method to the plain class that owns it.

``Engine.write = Via("_writes", Writes.write)`` declares that ``engine.write(...)`` is
``engine._writes.write(...)``. The signature and the docstring (the API reference) are
written once, on the method that does the work; the facade is the table of which part owns
which name.

Rules:
1. At class creation the descriptor replaces itself with a plain function of the public
   name whose ``__doc__`` and ``inspect.signature`` are the owning method's, so ``help()``,
   ``inspect`` and the synchronous facade (frontends/inproc.py) see the real parameters.
2. A coroutine method's public name is a coroutine function too (``inspect`` and the
   frameworks that ask it see what the method is); the forward costs one call, as the
   hand-written delegations it replaces did.
3. For type checkers, ``__get__`` gives the owning method's parameters and result, bound
   (on an instance) or taking the facade first (on the class).
"""

from __future__ import annotations

import functools
import inspect
import operator
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

__all__ = ["Via"]

P = ParamSpec("P")
T = TypeVar("T")
Part = TypeVar("Part")
Owner = TypeVar("Owner")


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

        functools.update_wrapper(forward, method)  # __doc__, __wrapped__ (the signature)
        forward.__name__ = name
        forward.__qualname__ = f"{owner.__qualname__}.{name}"
        forward.__module__ = owner.__module__
        setattr(owner, name, forward)

    @overload
    def __get__(self, obj: None, owner: type[Owner]) -> Callable[Concatenate[Owner, P], T]: ...
    @overload
    def __get__(self, obj: object, owner: type[Any]) -> Callable[P, T]: ...
    def __get__(self, obj: object, owner: type[Any]) -> Any:
        raise TypeError("reached only before __set_name__ replaced the descriptor")
