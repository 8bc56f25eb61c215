"""Type stubs for the compiled core (``topics._core._ext``); ``_pure`` matches them exactly.

The core owns the byte-level work that runs once per record or per byte: the record
frame codec, CRC32C, the JSON syntax check for raw payloads, the in-memory segment
(frames + seq->offset index), response splicing and the tag trie. It does no I/O,
reads no clock and decides no policy: the engine passes every number in.

Record frame (little-endian), format version 1::

    off  size  field
    0    4     frame_len   total bytes of this frame, header and trailer included
    4    4     crc         CRC32C seeded with the segment/file salt over bytes [0:4]
                           and [8:frame_len-1] (length field + body; not the trailer)
    8    1     kind        1 = record
    9    1     reserved    0
    10   2     node_len    bytes of $node (0 = absent)
    12   2     tag_len     bytes of $tag  (0 = absent)
    14   2     reserved    0
    16   4     meta_len    bytes of meta JSON (0 = absent)
    20   4     data_len    bytes of data JSON (>= 1: data is always present, maybe `null`)
    24   8     seq         u64
    32   8     ts_ms       i64, commit time in ms since the epoch
    40   ...   node | tag | meta | data   (node/tag raw UTF-8; meta/data raw JSON text)
    end-1 1    flags       trailer, NOT covered by the CRC: 0 = live, 1 = deleted
                           (flipped in place by a delete, so a sealed segment on disk
                           can record a deletion without re-encoding the frame)
"""

import array
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Protocol

Buffer = bytes | bytearray | memoryview

class _Keep(Protocol):
    """A render filter: ``parts`` bit 1 node, 2 tag, 4 meta, 8 data (what it reads)."""

    parts: int
    def __call__(
        self, node: bytes | None, tag: bytes | None, meta: bytes | None, data: bytes | None, /
    ) -> bool: ...

FORMAT_VERSION: Final[int]  # 1
FRAME_HEADER_SIZE: Final[int]  # 40
FRAME_TRAILER_SIZE: Final[int]  # 1
KIND_RECORD: Final[int]  # 1
FLAG_LIVE: Final[int]  # 0
FLAG_DELETED: Final[int]  # 1
RENDER_DATA: Final[int]  # 1: include "data" in rendered records
RENDER_META: Final[int]  # 2: include "meta" (when the record has one)
RENDER_TAGS: Final[int]  # 4: include "$tag" (when the record has one)

class FrameError(ValueError):
    """The one error of the core: bad record input, or bytes that are not valid frames.

    Attributes:
        index: position of the offending record in the batch (or frame in a buffer), -1 if none.
        field: "data" | "meta" | "tag" | "node" | "record" | "frame".
        reason: "missing" | "type" | "json" | "empty" | "too_large" | "meta_keys" |
            "meta_reserved" | "truncated" | "crc" | "seq" | "kind".
    """

    index: int
    field: str
    reason: str
    def __init__(
        self, message: str, index: int = -1, field: str = "frame", reason: str = "frame"
    ) -> None: ...

def crc32c(data: Buffer, crc: int = 0) -> int:
    """CRC-32C (Castagnoli), chainable like zlib.crc32: crc32c(b, crc32c(a)) == crc32c(a + b)."""

def json_check(data: Buffer) -> int:
    """Check that ``data`` is exactly one JSON value (RFC 8259, valid UTF-8, surrounding
    whitespace allowed, no NaN/Infinity, strings without raw control characters).

    Returns the number of top-level members when the value is an object, else -1.
    Raises FrameError(field="data", reason="json") with the byte offset in the message.
    """

def encode_batch(
    records: Sequence[Mapping[str, object]],
    first_seq: int,
    ts_ms: int,
    default_node: str | None,
    salt: int,
    limits: tuple[int, int, int, int, int],
    dumps: Callable[[object], str],
    server_meta: type | None = None,
) -> tuple[bytes, list[bytes | None] | None]:
    """Validate and encode a write batch into concatenated record frames.

    Each record is a mapping with "data" (required; may be None = JSON null) and optional
    "tag", "node" (str), "meta" (a dict, or raw JSON bytes of an object). Keys that are
    absent or None count as absent; other keys are ignored. ``data`` given as
    bytes/bytearray/memoryview is taken as already-encoded JSON text and checked with
    json_check; any other value is encoded with ``dumps`` and the result checked too (so
    NaN/Infinity never reach storage). ``meta`` must encode to a JSON object. A record
    without "node" takes ``default_node``. Seqs are first_seq, first_seq+1, ... in order.

    ``limits`` = (max_record_bytes, max_meta_bytes, max_meta_keys, max_tag_bytes,
    max_node_bytes): data+meta bytes over max_record_bytes -> reason "too_large" on field
    "record"; meta over max_meta_bytes -> "too_large" on "meta"; more than max_meta_keys
    top-level keys -> "meta_keys"; tag/node longer in UTF-8 bytes -> "too_large"; an empty
    tag/node string -> "empty"; a wrong type -> "type"; a str that cannot be UTF-8 encoded
    (lone surrogates) -> "type"; dumps raising TypeError/ValueError/OverflowError -> "type"
    on "data"/"meta".

    ``server_meta`` given (a type) makes the batch a client's: a meta whose top-level keys
    include one beginning with "$" (written plainly or as the escape \\u0024) -> reason
    "meta_reserved" on "meta", its message naming the decoded key, unless the meta's exact
    type is ``server_meta`` (bytes the server stamped itself). Checked after the meta's JSON
    and object type, before its key count; the JSON scan notes such a key as it passes, so
    the check costs no pass of its own. None (the default): meta keys are not looked at.

    All-or-nothing: the whole batch is validated before anything is returned; the first
    failing record raises FrameError with its index.

    Returns (frames, tags): the frames as one bytes object (all flags 0), and the per-record
    tag bytes (None where untagged), or None when no record has a tag.
    """

def iter_frames(buf: Buffer, salt: int, verify: bool = True) -> list[tuple[int, int]]:
    """Walk concatenated frames; return [(offset, frame_len), ...] for every whole frame.

    Stops at the end of ``buf``. A frame that does not fit or (with verify) fails its CRC,
    or has a bad kind/length, raises FrameError(reason="truncated"|"crc"|"kind", index=i)
    whose message names the offset; callers decide whether that is a torn tail or corruption.
    """

def frame_offsets(buf: Buffer, salt: int, verify: bool = True, start: int = 0) -> array.array[int]:
    """Walk frames exactly as iter_frames does (same FrameError); return the offset of
    each frame plus ``start`` as ``array("I")``, with no Python object per frame.

    Raises ValueError for a negative ``start``, OverflowError when ``start + len(buf)``
    passes a u32 (a segment's frames stay under 4 GiB).
    """

def encode_wal_frames(frames: Sequence[tuple[int, int, bytes]], salt: int) -> bytearray:
    """Encode ``(lsn, entry_type, payload)`` triples as consecutive WAL frames under the
    file ``salt`` (layout and CRC in docs/STORAGE_FORMATS.md, "WAL", Frame).

    Raises ValueError for an lsn that is not a u64, an entry_type that is not a u8 or a
    payload over a u32, TypeError for a payload that is not bytes; nothing is encoded then.
    """

def frame_seq(buf: Buffer, offset: int = 0) -> int:
    """The seq field of the frame starting at ``offset``."""

class SegmentBuffer:
    """An in-memory run of record frames with consecutive seqs base_seq, base_seq+1, ...

    Holds the frame bytes exactly as they would sit in a segment file, plus the
    seq->offset index (u32 offsets; index i is seq base_seq + i). Indexes below
    ``retired`` have been retired (evicted, expired or deleted as a prefix) and are never
    live again. Live = index >= retired and trailer flag == 0.
    """

    def __init__(self, base_seq: int, salt: int) -> None: ...
    @property
    def base_seq(self) -> int: ...
    @property
    def salt(self) -> int: ...
    @property
    def count(self) -> int:
        """Frames held (live or not). The next seq this segment accepts is base_seq+count."""
    @property
    def nbytes(self) -> int:
        """Bytes of frames held."""
    @property
    def live_count(self) -> int: ...
    @property
    def live_bytes(self) -> int:
        """Sum of frame_len over live frames."""
    @property
    def retired(self) -> int:
        """Index of the first non-retired frame (0..count)."""
    @property
    def sealed(self) -> bool: ...
    @property
    def last_ts(self) -> int:
        """ts of the last frame, or -1 when empty."""
    def append(self, frames: Buffer) -> int:
        """Append whole frames (as produced by encode_batch; CRC is not re-checked).

        Their seqs must continue this segment (base_seq + count, +1, ...) and their ts must
        not decrease; otherwise FrameError(reason="seq") and nothing is appended. Returns the
        number of frames appended. Raises ValueError when sealed.
        """
    def seal(self) -> None:
        """Freeze: shrink the buffers to fit; later appends raise ValueError."""
    def frame_len(self, i: int) -> int: ...
    def ts_at(self, i: int) -> int: ...
    def tag_at(self, i: int) -> bytes | None: ...
    def node_at(self, i: int) -> bytes | None: ...
    def is_live(self, i: int) -> bool: ...
    def offset_of(self, i: int) -> int: ...
    def frame(self, i: int) -> bytes:
        """A copy of frame i's bytes (trailer included)."""
    def decode(
        self, i: int
    ) -> tuple[int, int, bytes | None, bytes | None, bytes | None, bytes, bool]:
        """(seq, ts_ms, node, tag, meta, data, live) of frame i (meta None when absent)."""
    def mark_deleted(self, i: int, trie: TagTrie | None = None) -> int:
        """Flip frame i's trailer to deleted. If it was live: update live counters, discard its
        (tag, seq) from ``trie`` when given, and return its frame_len; else return 0."""
    def retire_to(self, i: int, trie: TagTrie | None = None) -> tuple[int, int, int]:
        """Retire indexes [retired, i) (i clamped to [retired, count]).

        For every live frame retired: drop it from the live counters and discard its
        (tag, seq) from ``trie`` when given. Trailer flags are not changed.
        Returns (live_frames_retired, live_bytes_retired, last_live_index_retired or -1).
        """
    def first_live(self, start: int) -> int:
        """First live index >= max(start, retired); count if none."""
    def first_ts_at_least(self, ts_ms: int) -> int:
        """First index whose ts >= ts_ms (binary search; ts is non-decreasing); count if none."""
    def render(
        self,
        start: int,
        limit: int,
        max_bytes: int,
        skip_nodes: frozenset[bytes] | None,
        flags: int,
        stop: int = -1,
        keep: _Keep | None = None,
    ) -> tuple[bytes, int, int, int]:
        """Render live records from index max(start, retired) as JSON objects joined by ",".

        ``keep`` (a ``where`` predicate, topics/query/where.py) is called with a live frame's
        ``(node, tag, meta, data)`` bytes after the node check, each None when absent or
        when bit 1/2/4/8 of ``keep.parts`` is clear; a frame it refuses is examined but not
        emitted, exactly like a node-skipped one.

        Walks forward; a deleted frame is skipped without counting. Every live frame counts
        as examined; one whose node is in ``skip_nodes`` is examined but not emitted. Stops
        after ``limit`` examined frames, or as soon as the emitted bytes reach ``max_bytes``
        (checked after each emitted record, so at least one record is emitted when any is
        examined and not skipped), or at index ``stop`` (exclusive; -1: the end of the
        segment).

        Each record renders as (keys in this order, absent ones omitted)::

            {"$seq":S,"$ts":T,"$node":"N","$tag":"G","data":D,"meta":M}

        node and tag are JSON-escaped strings; data and meta are spliced verbatim.
        "$tag" only with RENDER_TAGS, "data" only with RENDER_DATA, "meta" only with
        RENDER_META and when present. No surrounding brackets, no trailing comma.

        Returns (fragment, emitted, examined, next_index) where next_index is one past the
        last frame walked (examined or skipped as deleted).
        """
    def view(self) -> memoryview:
        """Read-only view of the frame bytes [0:nbytes] (what a segment file holds)."""
    @classmethod
    def from_frames(
        cls, buf: Buffer, base_seq: int, salt: int, verify: bool = True
    ) -> SegmentBuffer:
        """Rebuild a segment from frame bytes (e.g. read back from disk): index the frames,
        honour trailer flags (deleted frames are not live), check seqs are consecutive from
        base_seq and (with verify) every CRC. Raises FrameError on any mismatch."""

class TagTrie:
    """Tag -> ascending seqs, with exact and trailing-prefix lookup that never scans all tags.

    A compressed radix tree over tag bytes; each node with entries keeps its seqs in
    ascending order. Seqs for one tag are added in increasing order.
    """

    def __init__(self) -> None: ...
    def __len__(self) -> int:
        """Number of (tag, seq) entries."""
    @property
    def ntags(self) -> int:
        """Distinct tags holding at least one entry."""
    def add(self, tag: bytes, seq: int) -> None: ...
    def add_batch(self, tags: Sequence[bytes | None], first_seq: int) -> None:
        """add(tags[i], first_seq + i) for every non-None tag."""
    def discard(self, tag: bytes, seq: int) -> bool:
        """Remove one entry; cheap when seq is the tag's smallest. Returns whether it existed."""
    def pop_exact(self, tag: bytes, below: int) -> list[int]:
        """Remove and return (ascending) every seq < below stored under exactly ``tag``."""
    def pop_prefix(self, prefix: bytes, below: int) -> list[int]:
        """Remove and return (ascending) every seq < below whose tag starts with ``prefix``
        (an empty prefix matches every tagged entry)."""
    def count_exact(self, tag: bytes) -> int: ...
    def count_prefix(self, prefix: bytes) -> int: ...
    def clear(self) -> None: ...
