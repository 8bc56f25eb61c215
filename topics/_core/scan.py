"""The write-body splitter: ``split_write_body`` and ``BodyError``, compiled when built.

Re-exports the compiled ``_scan`` module when it is built, else the pure-Python
``_scan_pure`` fallback (identical behaviour, much slower). ``TOPICS_PURE_PYTHON=1``
forces the fallback, as for ``topics._core``; ``IMPLEMENTATION`` says which one was
loaded ("cython" or "pure"). Callers catch ``scan.BodyError``: each implementation has
its own class.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

__all__ = ["IMPLEMENTATION", "MAX_DEPTH", "BodyError", "split_write_body"]

IMPLEMENTATION: str

if TYPE_CHECKING:
    # mypy reads the compiled module's interface from _scan.pyi.
    from ._scan import MAX_DEPTH, BodyError, split_write_body
else:

    def _load():
        if os.environ.get("TOPICS_PURE_PYTHON", "") not in ("", "0"):
            from . import _scan_pure

            return _scan_pure, "pure"
        try:
            from . import _scan
        except ImportError:  # not built (e.g. a source checkout): use the fallback
            from . import _scan_pure

            return _scan_pure, "pure"
        return _scan, "cython"

    _impl, IMPLEMENTATION = _load()
    MAX_DEPTH = _impl.MAX_DEPTH
    BodyError = _impl.BodyError
    split_write_body = _impl.split_write_body
    del _impl, _load
