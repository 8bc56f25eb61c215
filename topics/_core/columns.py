"""The diff-page column builder: ``record_columns``, compiled when built.

Re-exports the compiled ``_columns`` module when it is built, else the pure-Python
``_columns_pure`` fallback (identical results, much slower). ``TOPICS_PURE_PYTHON=1``
forces the fallback, as for ``topics._core``; ``IMPLEMENTATION`` says which one was
loaded ("cython" or "pure").
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

__all__ = [
    "IMPLEMENTATION",
    "KIND_BOOL",
    "KIND_FLOAT",
    "KIND_INT",
    "KIND_STRING",
    "KIND_TEXT",
    "WANT_ALL",
    "WANT_DATA",
    "WANT_LINES",
    "WANT_META",
    "WANT_NODE",
    "WANT_TAG",
    "data_fields",
    "record_columns",
]

IMPLEMENTATION: str

if TYPE_CHECKING:
    # mypy reads the compiled module's interface from _columns.pyi.
    from ._columns import (
        KIND_BOOL,
        KIND_FLOAT,
        KIND_INT,
        KIND_STRING,
        KIND_TEXT,
        WANT_ALL,
        WANT_DATA,
        WANT_LINES,
        WANT_META,
        WANT_NODE,
        WANT_TAG,
        data_fields,
        record_columns,
    )
else:

    def _load():
        if os.environ.get("TOPICS_PURE_PYTHON", "") not in ("", "0"):
            from . import _columns_pure

            return _columns_pure, "pure"
        try:
            from . import _columns
        except ImportError:  # not built (e.g. a source checkout): use the fallback
            from . import _columns_pure

            return _columns_pure, "pure"
        return _columns, "cython"

    _impl, IMPLEMENTATION = _load()
    globals().update({name: getattr(_impl, name) for name in __all__ if name != "IMPLEMENTATION"})
    del _impl, _load
