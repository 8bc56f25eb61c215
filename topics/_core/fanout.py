"""One frame to many non-blocking sockets: ``write_each``, compiled when built.

Re-exports the compiled ``_fanout`` module when it is built, else the pure-Python
``_fanout_pure`` fallback (identical results). ``TOPICS_PURE_PYTHON=1`` forces the
fallback, as for ``topics._core``; ``IMPLEMENTATION`` says which one was loaded.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

__all__ = ["IMPLEMENTATION", "write_each"]

IMPLEMENTATION: str

if TYPE_CHECKING:
    from ._fanout import write_each
else:

    def _load():
        if os.environ.get("TOPICS_PURE_PYTHON", "") not in ("", "0"):
            from . import _fanout_pure

            return _fanout_pure, "pure"
        try:
            from . import _fanout
        except ImportError:  # not built (e.g. a source checkout): use the fallback
            from . import _fanout_pure

            return _fanout_pure, "pure"
        return _fanout, "cython"

    _impl, IMPLEMENTATION = _load()
    write_each = _impl.write_each
    del _impl, _load
