"""What a user sees when the data source fails: its own message, not a traceback first.

Role: PySpark sends a Python data source's exception to the JVM as the text
``traceback.TracebackException.format`` makes of it (``pyspark.util.
handle_worker_exception``), and the driver raises it wrapped in Spark's own preamble
(``[PYTHON_DATA_SOURCE_ERROR] Failed to ...:`` or ``An exception was thrown from the
Python worker:``). Our message came last, after a traceback of the data source's internals
that tells a user nothing. ``handle_worker_exception`` formats the exception alone
(``format_exception_only``) when ``SPARK_HIDE_TRACEBACK`` is set, which it reads when it
handles the exception, and every PySpark worker that runs a data source method (the
planner, the stream reader's runner, the executor's reader and writer) exits right after
handling one.

Rules:
1. An error the data source raises *for the user* (``USER_ERRORS``: a bad option, a gap
   with ``on_gap=fail``, a record that does not fit ``data_schema`` under FAILFAST, the
   engine's or server's refusal, a missing data directory) sets ``SPARK_HIDE_TRACEBACK``
   as it leaves a data source entry point (``@message_first``), so the user's exception
   reads ``<Spark's preamble> topics.spark...Error: <our message>``.
2. Only in a PySpark worker process (its ``__main__`` is a ``pyspark`` module), which
   exits after the error: a program that calls the readers itself keeps its environment.
3. Any other exception (a bug) keeps its traceback.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast

from ..errors import TopicsError
from ._options import OptionError
from ._rows import BadRecordError, GapError

__all__ = ["USER_ERRORS", "message_first"]

#: Exceptions whose message is written for the user (rule 1).
USER_ERRORS: tuple[type[BaseException], ...] = (
    OptionError,
    GapError,
    BadRecordError,
    TopicsError,
    FileNotFoundError,
)

F = TypeVar("F", bound=Callable[..., Any])


def message_first(fn: F) -> F:
    """Decorate a data source entry point (a function or a generator function) so a
    user-facing error leaving it reaches the user message first (rules 1-3)."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def generate(*args: Any, **kwargs: Any) -> Any:
            try:
                return (yield from fn(*args, **kwargs))
            except USER_ERRORS:
                _hide_traceback()
                raise

        return cast(F, generate)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS:
            _hide_traceback()
            raise

    return cast(F, call)


def _hide_traceback() -> None:
    main = getattr(sys.modules.get("__main__"), "__spec__", None)
    if main is not None and main.name.startswith("pyspark."):  # rule 2
        os.environ["SPARK_HIDE_TRACEBACK"] = "1"
