"""Pure-Python core: the fallback for, and reference oracle of, ``topics._core._ext``.

Behaviour (results, error index/field/reason and messages) matches the compiled module
exactly; ``_ext.pyi`` documents the interface. Clarity wins over speed here: the compiled
module is the fast path and is tested against this one.

The code lives in one module per concern, as the compiled module's does in its include
files: _pure_format (sizes, flags, FrameError, CRC32C), _pure_json, _pure_encode,
_pure_frames, _pure_segment and _pure_trie. This module is the one they present.

Choices the stub leaves open, shared by both implementations:
- encode_batch validates each record in the order data, meta, tag, node, record size.
  With ujson's dumps it encodes a batch's data values in one dumps(list) call and its dict
  metas in another, split per value (see _pure_json.split_array), and falls back to one
  call per value when that fails or does not split cleanly; other dumps are called per
  value.
- json_check rejects nesting deeper than 512 and reports the offset of the first byte
  that cannot continue a valid document (the lead byte of a bad UTF-8 sequence).
- iter_frames checks truncation, then length, then CRC, then kind/reserved/flags.
"""

from __future__ import annotations

from ._pure_encode import encode_batch as encode_batch
from ._pure_format import FLAG_DELETED as FLAG_DELETED
from ._pure_format import FLAG_LIVE as FLAG_LIVE
from ._pure_format import FORMAT_VERSION as FORMAT_VERSION
from ._pure_format import FRAME_HEADER_SIZE as FRAME_HEADER_SIZE
from ._pure_format import FRAME_TRAILER_SIZE as FRAME_TRAILER_SIZE
from ._pure_format import KIND_RECORD as KIND_RECORD
from ._pure_format import RENDER_DATA as RENDER_DATA
from ._pure_format import RENDER_META as RENDER_META
from ._pure_format import RENDER_TAGS as RENDER_TAGS
from ._pure_format import Buffer as Buffer
from ._pure_format import FrameError as FrameError
from ._pure_format import crc32c as crc32c
from ._pure_frames import encode_wal_frames as encode_wal_frames
from ._pure_frames import frame_offsets as frame_offsets
from ._pure_frames import frame_seq as frame_seq
from ._pure_frames import iter_frames as iter_frames
from ._pure_json import json_check as json_check
from ._pure_segment import SegmentBuffer as SegmentBuffer
from ._pure_trie import TagTrie as TagTrie

# Each public function and class names this module as its home, as every name of the
# compiled module names topics._core._ext: reprs, pickles (FrameError) and the tests that
# compare what each implementation defines see one module, not the files behind it.
for _public in (
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
):
    _public.__module__ = __name__
del _public
