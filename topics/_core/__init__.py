"""The byte-level core of topics: frame codec, CRC32C, JSON check, segments, tag trie.

Re-exports the compiled ``_ext`` module when it is built, else the pure-Python ``_pure``
fallback (identical behaviour, much slower). ``TOPICS_PURE_PYTHON=1`` forces the fallback;
``IMPLEMENTATION`` says which one was loaded ("cython" or "pure").
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

__all__ = [
    "FLAG_DELETED",
    "FLAG_LIVE",
    "FORMAT_VERSION",
    "FRAME_HEADER_SIZE",
    "FRAME_TRAILER_SIZE",
    "IMPLEMENTATION",
    "KIND_RECORD",
    "RENDER_DATA",
    "RENDER_META",
    "RENDER_TAGS",
    "Buffer",
    "FrameError",
    "SegmentBuffer",
    "TagTrie",
    "crc32c",
    "encode_batch",
    "encode_wal_frames",
    "frame_offsets",
    "frame_seq",
    "iter_frames",
    "json_check",
]

IMPLEMENTATION: str

if TYPE_CHECKING:
    # mypy reads the compiled module's interface from _ext.pyi.
    from ._ext import (
        FLAG_DELETED,
        FLAG_LIVE,
        FORMAT_VERSION,
        FRAME_HEADER_SIZE,
        FRAME_TRAILER_SIZE,
        KIND_RECORD,
        RENDER_DATA,
        RENDER_META,
        RENDER_TAGS,
        Buffer,
        FrameError,
        SegmentBuffer,
        TagTrie,
        crc32c,
        encode_batch,
        encode_wal_frames,
        frame_offsets,
        frame_seq,
        iter_frames,
        json_check,
    )
else:

    def _load():
        if os.environ.get("TOPICS_PURE_PYTHON", "") not in ("", "0"):
            from . import _pure

            return _pure, "pure"
        try:
            from . import _ext
        except ImportError:  # not built (e.g. a source checkout): use the fallback
            from . import _pure

            return _pure, "pure"
        return _ext, "cython"

    _impl, IMPLEMENTATION = _load()
    globals().update({name: getattr(_impl, name) for name in __all__ if name != "IMPLEMENTATION"})
    del _impl, _load
