"""Client methods declared once for both drivers (issue 16).

A method of :class:`~topics.client._api.ClientAPI` is written once: its signature, its
docstring and the argument plumbing that turns a call into a *plan* (a
:class:`~topics.client._protocol.Call`, steps for :mod:`topics.consumer`'s drivers, or a
:class:`Plan` object). Each client finishes plans its own way: :class:`topics.Client`
runs them and returns the result, :class:`topics.AsyncClient` returns a coroutine (or an
async iterator).

Rules:
1. At class creation (``ClientAPI.__init_subclass__``) each client gets a plain function
   per method, carrying the declared signature, name and docstring, so ``help()``,
   ``inspect.signature`` and IDEs that introspect see the real parameters; the async
   client's request methods are ``async def``.
2. For type checkers the class attribute is a :class:`Twin` descriptor whose ``__get__``
   is overloaded on the client type: ``Client().write`` is ``Callable[P, WriteResult]`` and
   ``AsyncClient().write`` is ``Callable[P, Coroutine[Any, Any, WriteResult]]``, ``P``
   being the declared parameters (a ParamSpec), so ``mypy --strict`` checks both exactly.
3. A request method costs one extra Python call over a hand-written one (the build); no
   argument is repacked beyond the ``*args, **kwargs`` of that call.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Coroutine, Generator, Iterator
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    Protocol,
    Self,
    TypeVar,
    overload,
)

from topics.consumer import Effect, Emit, adrive, aiterate, drive, iterate

from ._protocol import Call

if TYPE_CHECKING:
    from ._client_like import AsyncClientLike, ClientLike

__all__ = ["Plan", "Steps", "Stream", "Twin", "plan", "request", "steps", "stream"]

P = ParamSpec("P")
T = TypeVar("T")
Y = TypeVar("Y")
S = TypeVar("S")
A = TypeVar("A")
S_co = TypeVar("S_co", covariant=True)
A_co = TypeVar("A_co", covariant=True)
# The client classes, by what this module needs of them: a method read off the class
# (``Client.write``) still takes that class as its first argument.
C = TypeVar("C", bound="ClientLike")
AC = TypeVar("AC", bound="AsyncClientLike")

Steps = Generator[Effect, Any, T]
"""What a multi-step method builds: steps that end with the method's result."""

Stream = Generator[Effect | Emit[Y], Any, None]
"""What an iterator method builds: steps that emit the iterator's items."""


class Plan(Protocol[S_co, A_co]):
    """What a method builds when each client makes something of its own of it (a watch,
    a work iterator)."""

    def sync(self, client: ClientLike) -> S_co: ...

    def aio(self, client: AsyncClientLike) -> A_co: ...


class Twin(Generic[P, S, A]):
    """A method declared once (module docstring): ``S`` on the sync client, ``A`` on the
    async one."""

    def __init__(
        self,
        build: Callable[..., Any],
        sync: Callable[[Any, Any], Any] | None,
        aio: Callable[[Any, Any], Any] | None,
        *,
        awaited: bool,
        aio_doc: str | None = None,
    ) -> None:
        self.build = build
        self._sync = sync
        self._aio = aio
        self._awaited = awaited
        self._aio_doc = aio_doc
        self.__doc__ = build.__doc__

    @overload
    def __get__(self, obj: None, owner: type[C]) -> Callable[Concatenate[C, P], S]: ...
    @overload
    def __get__(self, obj: None, owner: type[AC]) -> Callable[Concatenate[AC, P], A]: ...
    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(self, obj: ClientLike, owner: type[Any]) -> Callable[P, S]: ...
    @overload
    def __get__(self, obj: AsyncClientLike, owner: type[Any]) -> Callable[P, A]: ...
    def __get__(self, obj: object, owner: type[Any]) -> Any:
        if obj is None:
            return self
        # Reached only on a class that did not say which driver it is (rule 1).
        raise TypeError(f"{type(obj).__name__} is neither a sync nor an async client")

    def method(self, owner: type[Any], name: str, is_async: bool) -> Callable[..., Any]:
        """The plain function ``owner.<name>`` is (rule 1)."""
        build = self.build
        finish = self._aio if is_async else self._sync
        fn: Callable[..., Any]
        if finish is None and is_async:  # a request (rule 3): the driver's own _run

            async def fn(client: Any, /, *args: Any, **kwargs: Any) -> Any:
                return await client._run(build(client, *args, **kwargs))

        elif finish is None:

            def fn(client: Any, /, *args: Any, **kwargs: Any) -> Any:
                return client._run(build(client, *args, **kwargs))

        elif is_async and self._awaited:

            async def fn(client: Any, /, *args: Any, **kwargs: Any) -> Any:
                return await finish(client, build(client, *args, **kwargs))

        else:

            def fn(client: Any, /, *args: Any, **kwargs: Any) -> Any:
                return finish(client, build(client, *args, **kwargs))

        fn.__name__ = name
        fn.__qualname__ = f"{owner.__qualname__}.{name}"
        fn.__module__ = owner.__module__
        fn.__doc__ = self._aio_doc if is_async and self._aio_doc else build.__doc__
        sig = inspect.signature(build)
        first, *rest = sig.parameters.values()
        # A build with **options marks self positional-only for the ParamSpec; the method
        # need not show it.
        sig = sig.replace(parameters=[first.replace(kind=first.POSITIONAL_OR_KEYWORD), *rest])
        returns = _returns(sig.return_annotation, is_async)
        coroutine = "Coroutine[Any, Any, "
        if is_async and isinstance(returns, str) and returns.startswith(coroutine):
            returns = returns[len(coroutine) : -1]
        fn.__signature__ = sig.replace(return_annotation=returns)  # type: ignore[union-attr]
        return fn


def _returns(annotation: object, is_async: bool) -> object:
    """What a client's method says it returns, read from the build's annotation:
    ``Call[X]``/``Steps[X]`` give ``X``; ``Stream[X]`` gives ``Iterator[X]`` or
    ``AsyncIterator[X]``; ``Plan[X, Y]`` gives ``X`` or ``Y``."""
    if not isinstance(annotation, str) or not annotation.endswith("]"):
        return annotation
    kind, _, inner = annotation[:-1].partition("[")
    if kind == "Stream":
        return f"{'AsyncIterator' if is_async else 'Iterator'}[{inner}]"
    if kind == "Plan":
        depth = 0
        for i, ch in enumerate(inner):
            depth += ch == "["
            depth -= ch == "]"
            if ch == "," and depth == 0:
                return (inner[i + 1 :] if is_async else inner[:i]).strip()
    return inner


def request(
    build: Callable[Concatenate[Any, P], Call[T]],
) -> Twin[P, T, Coroutine[Any, Any, T]]:
    """A method that is one request: the build returns its :class:`Call`."""
    return Twin(build, None, None, awaited=True)


def steps(
    build: Callable[Concatenate[Any, P], Steps[T]],
) -> Twin[P, T, Coroutine[Any, Any, T]]:
    """A method of several requests (and callbacks): the build returns its steps."""
    return Twin(build, drive, adrive, awaited=True)


def stream(
    build: Callable[Concatenate[Any, P], Stream[Y]],
) -> Twin[P, Iterator[Y], AsyncIterator[Y]]:
    """An iterator method: the build returns steps that emit its items."""
    return Twin(build, iterate, aiterate, awaited=False)


def _plan_sync(client: ClientLike, built: Plan[Any, Any]) -> Any:
    return built.sync(client)


def _plan_aio(client: AsyncClientLike, built: Plan[Any, Any]) -> Any:
    return built.aio(client)


def plan(
    *, awaited: bool, aio_doc: str | None = None
) -> Callable[[Callable[Concatenate[Any, P], Plan[S, A]]], Twin[P, S, A]]:
    """A method whose build returns a :class:`Plan`; ``awaited``: the async client's
    method is ``async def`` (the plan's ``aio`` returns a coroutine); ``aio_doc``: the
    async client's docstring, where it says something else."""

    def declare(build: Callable[Concatenate[Any, P], Plan[S, A]]) -> Twin[P, S, A]:
        return Twin(build, _plan_sync, _plan_aio, awaited=awaited, aio_doc=aio_doc)

    return declare
