"""A sealed segment that lives in its file: the log holds its counters, not its bytes (issue 31).

Role: once a checkpoint has written and sealed a ``disk``/``fsync`` topic's segment and
the manifest lists it, the store swaps the in-memory ``SegmentBuffer`` for a
``ColdSegment``. It answers every question the log and the subsystems ask of a segment
(``TopicLog`` and the queue, router and watch code call the same methods on both kinds),
from a few integers when it can and otherwise from the segment's frames, loaded through
the store's byte-bounded cache (``_storage/segment_cache.py``).

Rules:
1. What stays in memory is per segment, never per record: seq range, salt, last ``$ts``,
   the live count and bytes, the retired prefix, whether the segment has tags, the sparse
   block index (rule 6), and the frame indexes deleted since the last checkpoint flipped
   their flags on disk (``pending``; emptied by that checkpoint, ``store.py``).
2. The loaded copy is made to agree with those counters: the retired prefix and the
   pending deletes are applied to every copy read from the file, so evicting it loses
   nothing (segment_cache rule 2).
3. The file may hold MORE delete flags than the counters know: a checkpoint newer than the
   manifest recovery loaded flipped them before it failed, and the WAL still holds those
   deletes. The first load adopts the file's flags and moves the owner's ``count`` and
   ``bytes`` by the difference, which is what recovery did when it read every segment;
   the replayed delete then finds the record already gone. Fewer flags than counted is
   a bug, logged, and the counters win (a deleted record is never revived).
4. Questions answered without the file: ``first_live``/``is_live`` when nothing or
   everything after the retired prefix is live, and retiring a whole segment whose
   records are all live (cap and TTL drop old segments without reading them).
5. A file that cannot be read fails the one call that needed it with
   ``StorageUnavailableError`` (503, retry): the server stays up and the next call reads
   again.
6. Reads load one block (about ``BLOCK_BYTES`` of whole frames) rather than the whole
   segment, so a diff far back reads about what it returns. Blocks are found with a
   sparse index kept in the segment (each block's first frame and byte offset: a few
   dozen bytes), built from the index file on first use or from the frames when the
   segment goes cold. Changes (deletes, retiring part of a segment) and everything
   during recovery load the whole segment, where rule 3's check runs: once recovery has
   replayed the WAL the file's flags are the truth, so a block needs no such check.
   Every cached copy of a frame takes a change made to it.
7. Frames or a header that fail their checks quarantine the segment (``damaged.py``):
   from the first bad frame on is ``damaged``, the only copy is the readable prefix
   (whole, no blocks), the records past it stop counting (``on_adjust``) and the owner
   is told (``on_damage``). An index in the range is never live, nor read again.
"""

from __future__ import annotations

import array
import bisect
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._core import FrameError, SegmentBuffer, frame_offsets
from .._storage.damage import Damage, DamageRegistry
from .._storage.fs import Fs, StorageCorruptionError
from .._storage.sealed_reads import read_sealed_frames, read_sealed_offsets
from .._storage.segment_cache import SegmentCache
from .._storage.segment_files import segment_path
from ..errors import StorageUnavailableError
from .cold_damage import find_damage, load_readable, readable

if TYPE_CHECKING:
    from .._core._ext import _Keep as Keep

__all__ = ["ColdSegment", "ColdSource", "Segment", "is_cold"]

log = logging.getLogger("topics.storage")

# What a cached copy costs beyond its frames: the u32 offset per frame and the object.
_PER_FRAME = 4
_OVERHEAD = 128

#: The unit of a cold read (rule 6): the frames that start within one aligned 64 KiB of
#: the segment's frame bytes. A diff of 1,000 records of ~100 B spans two or three: 64 KiB
#: read ~10 % less per cold diff than 128 KiB (fewer bytes past the window) and 32 KiB no
#: better (more calls), docs/BENCHMARKS_NOTES.md. The tiny cache test pass
#: (scripts/test) shrinks it with ``_TOPICS_TEST_BLOCK_BYTES``.
BLOCK_BYTES = int(os.environ.get("_TOPICS_TEST_BLOCK_BYTES") or 64 << 10)


class ColdSource:
    """What the cold segments of one store share: its file system, segments directory,
    cache, and the registry of damaged files (``_storage/damage.py``, issue 32)."""

    __slots__ = ("cache", "damage", "fs", "recovering", "segments_dir")

    def __init__(
        self,
        fs: Fs,
        segments_dir: str,
        cache: SegmentCache,
        damage: DamageRegistry | None = None,
    ) -> None:
        self.fs = fs
        self.segments_dir = segments_dir
        self.cache = cache
        self.damage = damage if damage is not None else DamageRegistry()
        # True while recovery replays the WAL: reads then load whole segments (rule 6).
        self.recovering = False


class ColdSegment:
    """A sealed segment read from its file on demand (the module docstring's rules)."""

    __slots__ = (
        "base_seq",
        "blocks",
        "count",
        "damaged",
        "header_ok",
        "index_ok",
        "last_ts",
        "live_bytes",
        "live_count",
        "nbytes",
        "on_adjust",
        "on_damage",
        "pending",
        "retired",
        "salt",
        "source",
        "tagged",
        "topic_id",
    )

    sealed = True

    def __init__(
        self,
        source: ColdSource,
        topic_id: int,
        base_seq: int,
        salt: int,
        *,
        count: int,
        nbytes: int,
        last_ts: int,
        live_count: int,
        live_bytes: int,
        retired: int,
        tagged: bool | None,
        pending: set[int] | None = None,
        on_adjust: Callable[[int, int], None] | None = None,
    ) -> None:
        self.source = source
        self.topic_id = topic_id
        self.base_seq = base_seq
        self.salt = salt
        self.count = count
        self.nbytes = nbytes
        self.last_ts = last_ts
        self.live_count = live_count
        self.live_bytes = live_bytes
        self.retired = retired
        # True: a tags file sits beside the segment; False: no frame has a tag; None:
        # unknown (sealed before tag files existed): derive it from the frames.
        self.tagged = tagged
        self.pending: set[int] = pending if pending is not None else set()
        # Told (live records, live bytes) the file's flags took away (rule 3).
        self.on_adjust = on_adjust
        # False once the index file proved missing or damaged: whole loads only (rule 6).
        self.index_ok = True
        self.header_ok = False  # the file's header was checked once (blocks skip it then)
        # Each block's first frame and byte offset (rule 6), once known.
        self.blocks: tuple[array.array[int], array.array[int]] | None = None
        # The unreadable seqs (rule 7), and who is told when a load finds them.
        self.damaged: Damage | None = None
        self.on_damage: Callable[[ColdSegment, Damage], None] | None = None

    @classmethod
    def from_buffer(
        cls,
        source: ColdSource,
        topic_id: int,
        seg: SegmentBuffer,
        *,
        tagged: bool | None,
        pending: set[int],
        on_adjust: Callable[[int, int], None] | None = None,
    ) -> ColdSegment:
        """The cold twin of a sealed in-memory segment whose file is sealed and synced;
        the buffer itself goes into the cache (it is the freshest copy there is)."""
        cold = cls(
            source,
            topic_id,
            seg.base_seq,
            seg.salt,
            count=seg.count,
            nbytes=seg.nbytes,
            last_ts=seg.last_ts,
            live_count=seg.live_count,
            live_bytes=seg.live_bytes,
            retired=seg.retired,
            tagged=tagged,
            pending=pending,
            on_adjust=on_adjust,
        )
        if seg.nbytes > BLOCK_BYTES:
            cold.blocks = sparse_blocks(frame_offsets(seg.view(), seg.salt, verify=False))
        source.cache.put(cold.key, seg, cold._cost())
        return cold

    # -- identity -------------------------------------------------------------------

    @property
    def key(self) -> tuple[int, int]:
        return (self.topic_id, self.base_seq)

    @property
    def path(self) -> str:
        return segment_path(self.source.segments_dir, self.topic_id, self.base_seq)

    def _cost(self) -> int:
        return self.nbytes + _PER_FRAME * self.count + _OVERHEAD

    # -- the loaded copy (rules 2, 3, 5) --------------------------------------------

    def loaded(self) -> SegmentBuffer:
        """The segment's frames, from the cache or read from the file now."""
        buf = self.source.cache.get(self.key)
        if buf is None:
            buf = self._load()
            self.source.cache.put(self.key, buf, self._cost())
        return buf  # type: ignore[return-value]

    def _load(self) -> SegmentBuffer:
        if self.damaged is not None:
            return self.adopt(load_readable(self))
        path = self.path
        buf: SegmentBuffer | None = None
        try:
            frames = read_sealed_frames(
                self.source.fs,
                path,
                topic_id=self.topic_id,
                base_seq=self.base_seq,
                salt=self.salt,
                length=self.nbytes,
            )
            buf = SegmentBuffer.from_frames(frames, self.base_seq, self.salt, verify=True)
        except OSError as exc:
            self.source.cache.load_errors += 1
            raise StorageUnavailableError.for_read(path, exc) from exc
        except (FrameError, StorageCorruptionError):
            pass
        if buf is None or buf.count != self.count:
            self.source.cache.load_errors += 1
            buf = load_readable(self)  # rule 7
        return self.adopt(buf)

    def adopt(self, buf: SegmentBuffer) -> SegmentBuffer:
        """Rules 2 and 3 for a whole copy just read (or a damaged one's readable prefix)."""
        buf.seal()
        buf.retire_to(min(self.retired, buf.count), None)
        for i in self.pending:
            if i < buf.count:
                buf.mark_deleted(i, None)
        self._agree(buf)
        return buf

    def _agree(self, buf: SegmentBuffer) -> None:
        """Rule 3."""
        dn = buf.live_count - self.live_count
        db = buf.live_bytes - self.live_bytes
        if dn == 0 and db == 0:
            return
        if dn > 0:
            log.error(
                "segment %s has %d more live records than counted; keeping the count",
                self.path,
                dn,
            )
            return
        self.live_count += dn
        self.live_bytes += db
        if self.on_adjust is not None:
            self.on_adjust(dn, db)

    # -- counters answered from memory (rule 4) --------------------------------------

    def _dense(self) -> bool:
        """Every record after the retired prefix is live."""
        return self.live_count == self.count - self.retired

    def first_live(self, start: int) -> int:
        start = max(start, self.retired)
        if start >= self.count or self.live_count == 0:
            return self.count
        if self._dense():
            return start
        while start < self.count:
            buf, first = self._piece(start)
            if start >= first + buf.count:
                return self.count  # past a damaged segment's readable prefix (rule 7)
            j = buf.first_live(start - first)
            if j < buf.count:
                return first + j
            start = first + buf.count
        return self.count

    def is_live(self, i: int) -> bool:
        if i < self.retired or i >= self.count or self.live_count == 0 or i in self.pending:
            return False
        if self._dense():
            return True
        buf, first = self._piece(i)
        return i - first < buf.count and buf.is_live(i - first)

    def retire_to(self, i: int, trie: object = None) -> tuple[int, int, int]:
        """As ``SegmentBuffer.retire_to``; a cold segment's tags are not in the trie."""
        i = min(max(i, self.retired), self.count)
        if i <= self.retired:
            return 0, 0, -1
        if self.live_count == 0 or (i == self.count and self._dense()):
            out = (self.live_count, self.live_bytes, self.count - 1 if self.live_count else -1)
            cached = self.source.cache.peek(self.key)
            if cached is not None:
                cached.retire_to(i, None)  # type: ignore[attr-defined]
            self._drop_blocks()
            self.retired = i
            self.live_count = 0 if i == self.count else self.live_count
            self.live_bytes = 0 if i == self.count else self.live_bytes
            self._forget_pending()
            return out
        buf = self.loaded()
        n, size, last = buf.retire_to(min(i, buf.count), None)
        self.retired = i if i >= buf.count else buf.retired  # (past a damaged prefix)
        self.live_count -= n
        self.live_bytes -= size
        self._forget_pending()
        self._drop_blocks()
        return n, size, last

    def _forget_pending(self) -> None:
        # A retired frame stays retired on every reload: its pending flag is not needed
        # to rebuild the live set (the store keeps its own list of flags to write).
        if self.pending:
            self.pending = {i for i in self.pending if i >= self.retired}

    def mark_deleted(self, i: int, trie: object = None) -> int:
        if i < self.retired or i >= readable(self) or i in self.pending or self.live_count == 0:
            return 0
        buf, first = self._piece(i)  # whole during recovery (rule 3)
        if i - first >= buf.count:
            return 0  # found damaged just now (rule 7)
        size = buf.mark_deleted(i - first, None)
        for other, at in self._copies(i):
            if other is not buf:
                other.mark_deleted(i - at, None)
        if size:
            self.live_count -= 1
            self.live_bytes -= size
            self.pending.add(i)
        return int(size)

    def flushed(self, idxs: set[int]) -> None:
        """A checkpoint made these delete flags durable in the file (rule 1)."""
        if self.pending:
            self.pending -= idxs

    def seal(self) -> None:
        """Already sealed."""

    def append(self, frames: object) -> int:
        raise ValueError(f"segment {self.path} is sealed")

    # -- everything else reads the frames ------------------------------------------

    def _blocks(self) -> tuple[array.array[int], array.array[int]] | None:
        """The sparse block index (rule 6): each block's first frame and its byte offset,
        from the index file the first time, then kept (a few dozen bytes per segment);
        None when the index is unusable: read whole segments."""
        if self.blocks is not None or not self.index_ok:
            return self.blocks
        try:
            offsets = read_sealed_offsets(
                self.source.fs,
                self.path,
                topic_id=self.topic_id,
                base_seq=self.base_seq,
                salt=self.salt,
                count=self.count,
                length=self.nbytes,
            )
        except (FileNotFoundError, StorageCorruptionError) as exc:
            log.warning("index of %s unusable (%s); reading it whole", self.path, exc)
            self.index_ok = False
            return None
        except OSError as exc:
            self.source.cache.load_errors += 1
            raise StorageUnavailableError.for_read(self.path + ".idx", exc) from exc
        self.blocks = sparse_blocks(offsets)
        return self.blocks

    def _block_of(self, i: int) -> int:
        assert self.blocks is not None
        return bisect.bisect_right(self.blocks[0], i) - 1

    def _piece(self, i: int) -> tuple[SegmentBuffer, int]:
        """A loaded copy holding frame ``i`` and the index of its first frame (rule 6)."""
        cache = self.source.cache
        whole = cache.peek(self.key)
        small = self.nbytes <= BLOCK_BYTES or self.damaged is not None  # (rule 7)
        if whole is not None or small or self.source.recovering:
            return self.loaded(), 0
        if self._blocks() is None:
            return self.loaded(), 0
        block = self._block_of(i)
        key = (self.topic_id, self.base_seq, block)
        piece: Any = cache.get(key)
        if piece is None:
            piece = self._load_block(block)
            if piece is None:  # quarantined (rule 7), or only the index was wrong
                return self.loaded(), 0
            cache.put(key, piece, piece[0].nbytes + _PER_FRAME * piece[0].count + _OVERHEAD)
        return piece  # type: ignore[no-any-return]

    def _load_block(self, block: int) -> tuple[SegmentBuffer, int] | None:
        assert self.blocks is not None
        firsts, offs = self.blocks
        first, start = firsts[block], offs[block]
        last = block + 1 == len(firsts)
        end = self.count if last else firsts[block + 1]
        stop = self.nbytes if last else offs[block + 1]
        path = self.path
        try:
            frames = read_sealed_frames(
                self.source.fs,
                path,
                topic_id=self.topic_id,
                base_seq=self.base_seq,
                salt=self.salt,
                length=stop - start,
                start=start,
                check_header=not self.header_ok,
            )
            buf = SegmentBuffer.from_frames(frames, self.base_seq + first, self.salt, verify=True)
        except OSError as exc:
            self.source.cache.load_errors += 1
            raise StorageUnavailableError.for_read(path, exc) from exc
        except (FrameError, StorageCorruptionError):
            buf = None
        if buf is None or buf.count != end - first:
            # Bad frames quarantine the segment; if the file is whole, the index was wrong.
            self.source.cache.load_errors += 1
            self.index_ok = find_damage(self)
            self.blocks = None
            return None
        self.header_ok = True
        buf.seal()
        if self.retired > first:
            buf.retire_to(self.retired - first, None)
        for p in self.pending:
            if first <= p < end:
                buf.mark_deleted(p - first, None)
        return buf, first

    def _copies(self, i: int) -> list[tuple[SegmentBuffer, int]]:
        """Every cached copy holding frame ``i`` (rule 6: a change reaches them all)."""
        cache = self.source.cache
        out: list[tuple[SegmentBuffer, int]] = []
        whole: Any = cache.peek(self.key)
        if whole is not None:
            out.append((whole, 0))
        if self.blocks is not None:
            piece: Any = cache.peek((self.topic_id, self.base_seq, self._block_of(i)))
            if piece is not None:
                out.append(piece)
        return out

    def _drop_blocks(self) -> None:
        """Forget the cached blocks (a change was made to the whole copy only)."""
        if self.blocks is not None:
            cache = self.source.cache
            for block in range(len(self.blocks[0])):
                cache.discard((self.topic_id, self.base_seq, block))

    def frame_len(self, i: int) -> int:
        buf, first = self._piece(i)
        return buf.frame_len(i - first)

    def ts_at(self, i: int) -> int:
        buf, first = self._piece(i)
        return buf.ts_at(i - first)

    def tag_at(self, i: int) -> bytes | None:
        buf, first = self._piece(i)
        return buf.tag_at(i - first)

    def node_at(self, i: int) -> bytes | None:
        buf, first = self._piece(i)
        return buf.node_at(i - first)

    def offset_of(self, i: int) -> int:
        buf, first = self._piece(i)
        if first == 0 and buf.count == self.count:
            return buf.offset_of(i)  # the whole segment
        assert self.blocks is not None
        return self.blocks[1][self._block_of(i)] + buf.offset_of(i - first)

    def frame(self, i: int) -> bytes:
        buf, first = self._piece(i)
        return buf.frame(i - first)

    def decode(
        self, i: int
    ) -> tuple[int, int, bytes | None, bytes | None, bytes | None, bytes, bool]:
        buf, first = self._piece(i)
        return buf.decode(i - first)

    def first_ts_at_least(self, ts_ms: int) -> int:
        return self.loaded().first_ts_at_least(ts_ms)

    def view(self) -> memoryview:
        return self.loaded().view()

    def render(
        self,
        start: int,
        limit: int,
        max_bytes: int,
        skip_nodes: frozenset[bytes] | None,
        flags: int,
        stop: int = -1,
        keep: Keep | None = None,
    ) -> tuple[bytes, int, int, int]:
        """As ``SegmentBuffer.render``, block by block (rule 6)."""
        end = self.count if stop < 0 else min(stop, self.count)
        i = max(start, self.retired)
        if i >= end or self.live_count == 0:
            # Nothing live from here: walk to the end (or ``stop``) without reading.
            return b"", 0, 0, max(start, end)
        parts: list[bytes] = []
        emitted = examined = size = 0
        while i < end and examined < limit and size < max_bytes:
            buf, first = self._piece(i)
            if i >= first + buf.count:  # a damaged segment's range holds nothing (rule 7)
                i = end
                break
            local_stop = min(end - first, buf.count)
            frag, e, x, nxt = buf.render(
                i - first, limit - examined, max_bytes - size, skip_nodes, flags, local_stop, keep
            )
            if e:
                parts.append(frag)
                size += len(frag)
            emitted += e
            examined += x
            i = first + nxt
            if nxt < local_stop:
                break  # the limit or the byte budget ended it inside this block
        return b",".join(parts), emitted, examined, i


def sparse_blocks(offsets: array.array[int]) -> tuple[array.array[int], array.array[int]]:
    """From every frame's offset, each block's first frame and byte offset: a block holds
    the frames that start within one aligned ``BLOCK_BYTES`` of the frame bytes."""
    firsts, starts = array.array("I"), array.array("I")
    i, n = 0, len(offsets)
    while i < n:
        firsts.append(i)
        starts.append(offsets[i])
        i = bisect.bisect_left(offsets, (offsets[i] // BLOCK_BYTES + 1) * BLOCK_BYTES, i + 1)
    return firsts, starts


def is_cold(seg: object) -> bool:
    """Whether ``seg`` is a :class:`ColdSegment` (the log's segments are one of two kinds)."""
    return type(seg) is ColdSegment


#: A log's segment: in memory (the open tail, and sealed ones until a checkpoint wrote
#: them, or every segment of a ``memory``/``ephemeral`` topic) or in its file.
Segment = SegmentBuffer | ColdSegment
