"""``SegmentBuffer``: a run of record frames, its seq index and its render path."""

from __future__ import annotations

import re
import struct
from bisect import bisect_left
from typing import Protocol

from ._pure_format import (
    FLAG_DELETED,
    FLAG_LIVE,
    FRAME_HEADER_SIZE,
    I64,
    RENDER_DATA,
    RENDER_META,
    RENDER_TAGS,
    U32,
    U32S,
    U64,
    Buffer,
    FrameError,
    as_bytes,
    int_in,
)
from ._pure_frames import check_frame
from ._pure_trie import TagTrie


class _Keep(Protocol):
    """A render filter: ``parts`` bit 1 node, 2 tag, 4 meta, 8 data (what it reads)."""

    parts: int

    def __call__(
        self, node: bytes | None, tag: bytes | None, meta: bytes | None, data: bytes | None, /
    ) -> bool: ...


_ESCAPE_RE = re.compile(rb'[\x00-\x1f"\\]')
_ESCAPES = {i: b"\\u%04x" % i for i in range(32)}
_ESCAPES.update({0x22: b'\\"', 0x5C: b"\\\\", 8: b"\\b", 9: b"\\t", 10: b"\\n"})
_ESCAPES.update({12: b"\\f", 13: b"\\r"})


def _escape(raw: bytes) -> bytes:
    return _ESCAPE_RE.sub(lambda m: _ESCAPES[m.group()[0]], raw)


class SegmentBuffer:
    """An in-memory run of record frames with consecutive seqs (see ``_ext.pyi``)."""

    def __init__(self, base_seq: int, salt: int) -> None:
        self._base_seq = int_in(base_seq, 0, U64, "base_seq")
        self._salt = int_in(salt, 0, U32, "salt")
        self._buf = bytearray()
        self._offsets: list[int] = []
        self._live_count = 0
        self._live_bytes = 0
        self._retired = 0
        self._sealed = False

    @property
    def base_seq(self) -> int:
        return self._base_seq

    @property
    def salt(self) -> int:
        return self._salt

    @property
    def count(self) -> int:
        return len(self._offsets)

    @property
    def nbytes(self) -> int:
        return len(self._buf)

    @property
    def live_count(self) -> int:
        return self._live_count

    @property
    def live_bytes(self) -> int:
        return self._live_bytes

    @property
    def retired(self) -> int:
        return self._retired

    @property
    def sealed(self) -> bool:
        return self._sealed

    @property
    def last_ts(self) -> int:
        return self.ts_at(len(self._offsets) - 1) if self._offsets else -1

    def _extend(self, frames: Buffer, verify: bool) -> int:
        data = as_bytes(frames)
        spans: list[tuple[int, int]] = []
        next_seq = self._base_seq + len(self._offsets)
        last_ts = self.last_ts if self._offsets else -I64
        off = 0
        while off < len(data):  # like iter_frames, but the first bad frame wins
            i = len(spans)
            spans.append((off, check_frame(data, off, i, self._salt, verify)))
            seq, ts = struct.unpack_from("<Qq", data, off + 24)
            if seq != next_seq + i or ts < last_ts:
                raise FrameError(f"frame {i} at offset {off}: seq", i, "frame", "seq")
            last_ts = ts
            off += spans[-1][1]
        if len(self._buf) + len(data) > U32:
            raise ValueError("segment would exceed 4 GiB")
        base = len(self._buf)
        try:
            self._buf += data
        except BufferError:  # a view() is exported: leave it the old bytes
            self._buf = self._buf + data
        for off, size in spans:
            self._offsets.append(base + off)
            if data[off + size - 1] == FLAG_LIVE:
                self._live_count += 1
                self._live_bytes += size
        return len(spans)

    def append(self, frames: Buffer) -> int:
        if self._sealed:
            raise ValueError("segment is sealed")
        return self._extend(frames, False)

    def seal(self) -> None:
        self._sealed = True

    def _offset(self, i: int) -> int:
        if not 0 <= i < len(self._offsets):
            raise IndexError(f"frame index {i} out of range")
        return self._offsets[i]

    def _parts(self, i: int) -> tuple[int, int, bytes, bytes, bytes, bytes]:
        """(offset, frame_len, node, tag, meta, data) of frame i; absent parts are b""."""
        off = self._offset(i)
        size, nlen, tlen, _, mlen, dlen = struct.unpack_from("<I6xHHHII", self._buf, off)
        parts: list[bytes] = []
        pos = off + FRAME_HEADER_SIZE
        for n in (nlen, tlen, mlen, dlen):
            parts.append(bytes(self._buf[pos : pos + n]))
            pos += n
        node, tag, meta, data = parts
        return off, size, node, tag, meta, data

    def frame_len(self, i: int) -> int:
        return self._parts(i)[1]

    def ts_at(self, i: int) -> int:
        return int(struct.unpack_from("<q", self._buf, self._offset(i) + 32)[0])

    def tag_at(self, i: int) -> bytes | None:
        return self._parts(i)[3] or None

    def node_at(self, i: int) -> bytes | None:
        return self._parts(i)[2] or None

    def _flag(self, i: int) -> int:
        off = self._offsets[i]
        size: int = U32S.unpack_from(self._buf, off)[0]
        return self._buf[off + size - 1]

    def is_live(self, i: int) -> bool:
        self._offset(i)
        return i >= self._retired and self._flag(i) == FLAG_LIVE

    def offset_of(self, i: int) -> int:
        return self._offset(i)

    def frame(self, i: int) -> bytes:
        off, size = self._parts(i)[:2]
        return bytes(self._buf[off : off + size])

    def decode(
        self, i: int
    ) -> tuple[int, int, bytes | None, bytes | None, bytes | None, bytes, bool]:
        off, _, node, tag, meta, data = self._parts(i)
        seq, ts = struct.unpack_from("<Qq", self._buf, off + 24)
        return seq, ts, node or None, tag or None, meta or None, data, self.is_live(i)

    def _unlive(self, i: int, trie: TagTrie | None) -> int:
        size = self.frame_len(i)
        self._live_count -= 1
        self._live_bytes -= size
        tag = self.tag_at(i) if trie is not None else None
        if trie is not None and tag is not None:
            trie.discard(tag, self._base_seq + i)
        return size

    def mark_deleted(self, i: int, trie: TagTrie | None = None) -> int:
        off, size = self._parts(i)[:2]
        live = self.is_live(i)
        self._buf[off + size - 1] = FLAG_DELETED
        return self._unlive(i, trie) if live else 0

    def retire_to(self, i: int, trie: TagTrie | None = None) -> tuple[int, int, int]:
        stop = min(max(i, self._retired), len(self._offsets))
        frames = nbytes = 0
        last = -1
        for j in range(self._retired, stop):
            if self._flag(j) == FLAG_LIVE:
                frames += 1
                nbytes += self._unlive(j, trie)
                last = j
        self._retired = stop
        return frames, nbytes, last

    def first_live(self, start: int) -> int:
        i = max(start, self._retired)
        while i < len(self._offsets) and self._flag(i) != FLAG_LIVE:
            i += 1
        return min(i, len(self._offsets))

    def first_ts_at_least(self, ts_ms: int) -> int:
        return bisect_left(range(len(self._offsets)), ts_ms, key=self.ts_at)

    def _render_one(self, i: int, flags: int) -> bytes:
        seq, ts, node, tag, meta, data, _ = self.decode(i)
        out = [b'{"$seq":%d,"$ts":%d' % (seq, ts)]
        if node is not None:
            out.append(b',"$node":"%s"' % _escape(node))
        if flags & RENDER_TAGS and tag is not None:
            out.append(b',"$tag":"%s"' % _escape(tag))
        if flags & RENDER_DATA:
            out.append(b',"data":' + data)
        if flags & RENDER_META and meta is not None:
            out.append(b',"meta":' + meta)
        out.append(b"}")
        return b"".join(out)

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
        parts: list[bytes] = []
        size = -1  # the first record has no separating comma
        examined = 0
        count = len(self._offsets) if stop < 0 else min(stop, len(self._offsets))
        i = min(max(start, self._retired), count)
        while i < count and examined < limit:
            i += 1
            if self._flag(i - 1) != FLAG_LIVE:
                continue
            examined += 1
            node = self.node_at(i - 1)
            if skip_nodes and node is not None and node in skip_nodes:
                continue
            if keep is not None:
                _, _, _, tag, meta, data, _ = self.decode(i - 1)
                if not keep(node, tag, meta, data):
                    continue
            parts.append(self._render_one(i - 1, flags))
            size += len(parts[-1]) + 1
            if size >= max_bytes:
                break
        return b",".join(parts), len(parts), examined, i

    def view(self) -> memoryview:
        return memoryview(self._buf).toreadonly()

    @classmethod
    def from_frames(
        cls, buf: Buffer, base_seq: int, salt: int, verify: bool = True
    ) -> SegmentBuffer:
        segment = cls(base_seq, salt)
        segment._extend(buf, verify)
        return segment
