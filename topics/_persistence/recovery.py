"""Recovery: manifest -> segments -> WAL replay, into a TopicRegistry.

Role: rebuild the engine's state from a data directory, for the engine (which then
writes) and for ``topics.Reader`` (read-only, beside a live writer).

Rules:
1. The newest valid manifest is the base; its segments are read up to their recorded
   durable lengths only (bytes past that are not known to be complete).
2. WAL entries after the manifest's covered LSN are replayed in order through the same
   ``TopicLog`` operations the engine used (docs: entries.py rules 1-4), streaming.
3. A torn tail of the newest WAL file ends the log (repaired when writable). Corruption
   anywhere else in the WAL raises for a read-only Reader; a writer (``repair=True``)
   skips the entries it cannot read and isolates what they held (``wal_damage.py``):
   ``corrupt`` gaps, a ``wal`` Damage, the server starts. A segment that fails its checks
   is quarantined (issue 32, ``log/damaged.py``, ``cold.py`` rule 4): the engine starts,
   its readable records are served and readers get a ``corrupt`` tombstone over the rest.
4. After replay a topic whose durable watermark is above its head had a write in flight
   at the crash (a quiet topic logs a HEAD entry that lowers its watermark to its head,
   entries.py rule 5, so it keeps its head exactly). Its head moves to the watermark, so no
   seq is ever handed out twice; records that survived stay readable (the jump never moves
   the eviction floor). What the skipped seqs mean depends on the class:
   ``fsync`` — every acknowledged write is on disk, so they held at most writes nobody was
   told of: the skip is silent (a HEAD entry). ``disk``/``memory`` — they may have held
   acknowledged records of the un-synced tail: a gap marker with reason ``crash`` on the
   last one reports ``[old head + 1, watermark]`` to readers that reach it (a GAP entry).
   ``ephemeral`` — it stores nothing, so its floor moves past its head instead (rule 6).
   The jump is logged (synced) before the engine serves, so a later recovery replays it at
   the same seq. It is a writer's decision (``repair=True``): a read-only Reader beside a
   live writer keeps the recovered head, since the writer still owns those seqs.
4a. When the process died but the system did not (same boot), the heads table
   (``heads.py``) says how far each topic really handed out seqs: the head moves only
   there, never to the watermark, so a skip covers exactly the seqs that were handed out
   and lost, and a topic that lost nothing keeps its head with no tombstone (a written
   WAL entry is in the page cache, which a killed process does not take with it). A HEAD
   entry then lowers the watermark to the new head.
5. Running recovery twice on the same directory gives the same state.
6. ``ephemeral`` records are never stored: a topic whose checkpoint says it held live
   records comes back empty with its eviction floor at head+1 (readers below get a
   tombstone with reason ``restart``: the loss is involuntary for them, and it is what
   the class promises, not capacity; ``_log`` rule 3a).
7. With ``repair=True``, segment files that no manifest on disk lists (neither the loaded
   one nor the older generation kept as its fallback) are removed before the engine
   writes again: files of a checkpoint that crashed before its manifest, and files of
   dropped segments whose removal was deferred (store rule: kept while the previous
   manifest lists them) or lost. Nothing else would ever remove them. Files only the
   fallback generation lists are returned in ``Recovered.files`` too, so the store drops
   them once a newer manifest supersedes that fallback.
8. A sealed segment of a ``disk``/``fsync`` topic whose counters the manifest recorded
   is not read: it becomes a ``ColdSegment`` (``log/cold_segment.py``) read through the
   cache when a read needs it, so start-up time and memory do not grow with history.
   One sealed before counters were recorded is read once and then goes cold too.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._core import SegmentBuffer, frame_seq, iter_frames
from .._storage import entries
from .._storage.damage import Damage, DamageRegistry
from .._storage.fs import Fs, StorageCorruptionError
from .._storage.manifest import (
    load_manifest,
    manifest_generations,
    manifest_name,
    read_manifest_body,
)
from .._storage.segment_cache import SegmentCache
from .._storage.segment_files import parse_segment_name, read_segment, segment_path
from .._storage.wal_reader import scan_wal, wal_files
from ..config import parse_config
from ..log.cold_log import swap_in_cold
from ..log.cold_segment import ColdSegment, ColdSource
from ..log.damaged import note_damage
from ..log.gap_markers import GapMarker
from ..log.producer_state import (
    ProducerState,
    decode_append_producer,
    decode_producer,
    load_producers,
)
from ..log.registry import TopicRegistry
from ..log.topic_log import TopicLog
from ..types import TombstoneReason
from .cold import COLD_CLASSES, cold_from_buffer, cold_from_manifest, damaged_at_recovery
from .segment_work import SegmentFileState
from .store import StorePaths
from .wal_damage import WalSkips

__all__ = ["Recovered", "StaleManifestError", "recover"]

_log = logging.getLogger("topics.storage")


class StaleManifestError(StorageCorruptionError):
    """The WAL no longer holds the entries right after the manifest's covered LSN."""


@dataclass(slots=True)
class Recovered:
    registry: TopicRegistry
    generation: int
    covered_lsn: int
    last_lsn: int
    last_file_no: int
    files: dict[tuple[int, int], SegmentFileState] = field(default_factory=dict)
    deleted: dict[tuple[int, int], set[int]] = field(default_factory=dict)
    # Store extensions: their manifest sections, and their WAL entries in log order.
    extension_sections: dict[str, Any] = field(default_factory=dict)
    extension_entries: list[tuple[int, bytes]] = field(default_factory=list)
    # This recovery's head jumps (the engine logs them, synced, before serving): gap
    # markers, and topics whose head moved silently (logged as HEAD entries).
    new_gaps: list[tuple[TopicLog, GapMarker]] = field(default_factory=list)
    new_heads: list[TopicLog] = field(default_factory=list)


def recover(
    fs: Fs,
    paths: StorePaths,
    *,
    repair: bool,
    progress: Callable[[float], None] | None = None,
    handed_out: Mapping[int, int] | None = None,
    cold: ColdSource | None = None,
    damage: DamageRegistry | None = None,
) -> Recovered:
    """Rebuild state from ``paths.root``; ``repair`` truncates a torn WAL tail (writers only).

    ``handed_out``: topic id -> the head each topic had reached when the last process
    died, when known for sure (``heads.read_heads``, rule 4a). ``cold``: where sealed
    segments are read from on demand (rule 8; the store passes its cache). ``damage``:
    where a damaged WAL file or manifest generation that recovery worked around is
    reported (rule 3).
    """
    if cold is None:
        cold = ColdSource(fs, paths.segments, SegmentCache())
    cold.recovering = True  # whole-segment loads while the WAL replays (cold_segment rule 6)
    try:
        return _recover(fs, paths, repair, progress or (lambda _: None), handed_out, cold, damage)
    finally:
        cold.recovering = False


def _recover(
    fs: Fs,
    paths: StorePaths,
    repair: bool,
    report: Callable[[float], None],
    handed_out: Mapping[int, int] | None,
    cold: ColdSource,
    damage: DamageRegistry | None,
) -> Recovered:
    generation, body = _load_base(fs, paths, damage)
    registry = TopicRegistry()
    registry.next_id = int(body.get("next_topic_id", 1))
    out = Recovered(registry, generation, int(body["covered_lsn"]), int(body["covered_lsn"]), -1)
    out.extension_sections = dict(body.get("extensions") or {})
    topics = body["topics"]
    for i, topic in enumerate(topics):
        _load_topic(fs, paths, topic, out, cold)
        report(0.5 * (i + 1) / max(1, len(topics)))
    if repair and fs.exists(paths.segments):
        _remove_unlisted_segments(fs, paths, out)
    skips = _replay_wal(fs, paths, out, repair, damage) if fs.exists(paths.wal) else None
    if repair:
        if skips is not None and skips.lost:
            for log, marker in skips.corrupt_heads(registry.topics.values(), handed_out):
                if marker is not None:
                    out.new_gaps.append((log, marker))
                out.new_heads.append(log)
        for log in registry.topics.values():
            if log.watermark > log.head:
                _repair_head(log, out, handed_out)
    report(1.0)
    return out


def _load_base(
    fs: Fs, paths: StorePaths, damage: DamageRegistry | None
) -> tuple[int, dict[str, Any]]:
    """Rule 1: the newest valid manifest (generation 0, empty, in a fresh directory);
    newer generations that do not validate are reported."""
    failed: list[tuple[str, str]] = []
    loaded = load_manifest(fs, paths.manifest, failed) if fs.exists(paths.manifest) else None
    if loaded is None:
        return 0, {"covered_lsn": 0, "topics": []}
    if damage is not None:
        for name, why in failed:
            damage.report(_manifest_damage(name, why, loaded[0]))
    return loaded


def _replay_wal(
    fs: Fs, paths: StorePaths, out: Recovered, repair: bool, damage: DamageRegistry | None
) -> WalSkips:
    """Rules 2-3: replay the WAL after the manifest's covered LSN into ``out``."""
    replay = _Replay(out)
    skips = replay.skips = WalSkips(paths.root, out.covered_lsn, damage, replay.by_id.keys)
    # Only a writer skips damaged entries: a Reader beside it would read the same
    # bytes differently from one retry to the next, so it refuses them (rule 3).
    scan = scan_wal(
        fs,
        paths.wal,
        from_lsn=out.covered_lsn + 1,
        repair=repair,
        on_skip=skips.add if repair else None,
    )
    for entry in scan:
        if entry.lsn != out.last_lsn + 1 and not (
            entry.lsn > out.last_lsn and skips.explains(out.last_lsn + 1, entry.lsn - 1)
        ):
            # A reader raced a checkpoint that trimmed the WAL (it retries with the
            # newer manifest); for the writer this means lost WAL files.
            raise StaleManifestError(
                f"WAL continues at LSN {entry.lsn} but the manifest covers up to {out.covered_lsn}",
                path=paths.wal,
            )
        replay.apply(entry.entry_type, entry.payload)
        out.last_lsn = entry.lsn
    out.last_lsn = max(out.last_lsn, skips.max_lsn)  # new entries go above the lost ones
    skips.log_orphans()
    # Listed after the scan: a repair may have removed a newest file with a torn header.
    numbers = wal_files(fs, paths.wal)
    out.last_file_no = numbers[-1] if numbers else -1
    return skips


def _repair_head(log: TopicLog, out: Recovered, handed_out: Mapping[int, int] | None) -> None:
    """Rule 4 for one topic whose durable watermark is above its recovered head."""
    known = handed_out.get(log.topic_id) if handed_out is not None else None
    head = log.watermark if known is None else min(max(known, log.head), log.watermark)
    marker = _jump(log, head)
    if marker is not None:
        out.new_gaps.append((log, marker))
    if log.config.durability != "ephemeral" and (marker is None or head < log.watermark):
        # A HEAD entry after the jump lowers the watermark to the new head (rule 4a), so
        # a second crash does not jump again over seqs this one proved were never used.
        log.watermark = log.head
        out.new_heads.append(log)


def _jump(log: TopicLog, head: int) -> GapMarker | None:
    """Move the head past seqs that may have been handed out but were not recovered
    (rule 4). Returns the gap marker that reports them, if they may have held records
    someone was told of."""
    if head <= log.head:
        return None
    durability = log.config.durability
    if durability == "ephemeral":
        log.skip_to(head)  # it stores nothing: the loss is reported to readers below
        log.restart_floor = log.cap_floor
        return None
    if durability == "fsync":
        log.skip_silently(head)  # no acknowledged record can be among them
        return None
    # The marker sits ON the last skipped seq (never on a fresh one): a later recovery that
    # replays appends after this skip must find ``head`` exactly where this one left it.
    lost_from = log.head + 1
    log.head = head - 1
    return log.add_gap("crash", head - lost_from + 1, lost_from, head)


def _manifest_damage(name: str, why: str, loaded: int) -> Damage:
    detail = (
        f"this manifest generation does not validate; recovery loaded generation {loaded} "
        "instead and replayed the WAL from there, so nothing is lost; the next checkpoint "
        "writes a new generation"
    )
    return Damage(f"manifest/{name}", "manifest", why, offset=0, detail=detail)


def _remove_unlisted_segments(fs: Fs, paths: StorePaths, out: Recovered) -> None:
    """Rule 7."""
    listed = set(out.files)
    for generation in manifest_generations(fs, paths.manifest):
        if generation == out.generation:
            continue
        body = read_manifest_body(fs, f"{paths.manifest}/{manifest_name(generation)}", generation)
        if isinstance(body, str):
            continue  # does not validate: never loaded, so it needs nothing
        for topic in body.get("topics", ()):
            for seg in topic.get("segments", ()):
                key = (int(topic["id"]), int(seg["base"]))
                listed.add(key)
                if key not in out.files:  # the store removes it once no manifest needs it
                    path = segment_path(paths.segments, *key)
                    out.files[key] = SegmentFileState(path, 0, True)
    removed = False
    for name in fs.listdir(paths.segments):
        stem = name
        for suffix in (".tmp", ".idx", ".tags"):  # .seg.idx.tmp, .seg.tags.tmp too
            if stem.endswith(suffix):
                stem = stem[: -len(suffix)]
        owner = parse_segment_name(stem)
        if owner is not None and owner not in listed:
            fs.remove(f"{paths.segments}/{name}")
            removed = True
    if removed:
        fs.sync_dir(paths.segments)


def _load_topic(
    fs: Fs, paths: StorePaths, topic: dict[str, Any], out: Recovered, cold: ColdSource
) -> None:
    config = parse_config(topic["config"], None, topic["name"])
    log = TopicLog(topic["name"], int(topic["id"]), config)
    stays_hot = config.durability not in COLD_CLASSES
    damaged = _load_segments(fs, paths, topic, log, out, cold)
    log.head = int(topic["head"])
    log.watermark = int(topic["watermark"])
    log.cap_floor = int(topic["cap_floor"])
    log.ttl_floor = int(topic["ttl_floor"])
    log.last_ts = int(topic["last_ts"])
    log.last_write_ts = topic.get("last_write_ts")
    log.last_read_ts = topic.get("last_read_ts")
    log.finish_load(int(topic["earliest"]))
    if not stays_hot:
        for one in list(log.segments):
            state = out.files.get((log.topic_id, one.base_seq))
            if type(one) is SegmentBuffer and one.sealed and state is not None and state.sealed:
                # Sealed by a version that did not record its counters: read once, here.
                swap_in_cold(log, one, cold_from_buffer(cold, log, one, set()))
    log.producers = load_producers(topic.get("producers"))
    log.restore_gaps(
        [GapMarker(int(g[0]), g[1], int(g[2]), int(g[3]), int(g[4])) for g in topic.get("gaps", ())]
    )
    for bad in damaged:
        _keep_quarantined(log, bad)
    log.restart_floor = int(topic.get("restart_floor", 0))
    if config.durability == "ephemeral" and int(topic["earliest"]) <= log.head:
        log.cap_floor = log.restart_floor = max(log.cap_floor, log.head + 1)  # rule 6
    out.registry.add(log)


def _load_segments(
    fs: Fs,
    paths: StorePaths,
    topic: dict[str, Any],
    log: TopicLog,
    out: Recovered,
    cold: ColdSource,
) -> list[ColdSegment]:
    """Adopt ``topic``'s listed segments into ``log`` (rule 8); returns the quarantined."""
    stays_hot = log.config.durability not in COLD_CLASSES
    infos = topic["segments"]
    damaged: list[ColdSegment] = []
    for k, seg_info in enumerate(infos):
        base, length = int(seg_info["base"]), int(seg_info["length"])
        path = segment_path(paths.segments, log.topic_id, base)
        quarantined = "damaged" in seg_info and "live" in seg_info
        if seg_info["sealed"] and "live" in seg_info and (not stays_hot or quarantined):
            # Rule 8: the manifest holds what the log needs; the frames stay in the file.
            held = cold_from_manifest(cold, log, seg_info, int(topic["earliest"]))
            log.adopt_segment(held)
            out.files[(log.topic_id, base)] = SegmentFileState(path, length, True)
            if held.damaged is not None:
                damaged.append(held)
            continue
        end = int(infos[k + 1]["base"]) if k + 1 < len(infos) else int(topic["head"]) + 1
        seg, whole = _read_listed(fs, cold, log, seg_info, path, end, k + 1 == len(infos))
        log.adopt_segment(seg)
        if isinstance(seg, ColdSegment):
            damaged.append(seg)  # its file is never written again: as if sealed
        sealed = isinstance(seg, ColdSegment) or (bool(seg_info["sealed"]) and whole)
        out.files[(log.topic_id, base)] = SegmentFileState(path, length, sealed)
    return damaged


def _read_listed(
    fs: Fs,
    cold: ColdSource,
    log: TopicLog,
    seg_info: dict[str, Any],
    path: str,
    end: int,
    last: bool,
) -> tuple[SegmentBuffer | ColdSegment, bool]:
    """A listed segment recovery reads (rule 8's exceptions) and whether its file is
    whole; quarantined (``cold.py`` rule 4) when it fails its checks, its seqs running to
    ``end`` (exclusive; a guess from the head when it is the ``last``)."""
    base, length = int(seg_info["base"]), int(seg_info["length"])
    try:
        data = read_segment(fs, path, verify=True, max_length=length)
        if len(data.frames) != length:
            raise StorageCorruptionError(
                f"segment {path} holds {len(data.frames)} bytes; the manifest recorded {length}",
                path=path,
            )
        # read_segment checked every CRC already; checking again would double the cost.
        seg = SegmentBuffer.from_frames(data.frames, base, int(seg_info["salt"]), verify=False)
        whole = data.sealed
    except StorageCorruptionError as exc:
        prev_ts = log.segments[-1].last_ts if log.segments else -1
        found = damaged_at_recovery(cold, log, seg_info, end, last, prev_ts)
        if isinstance(found, ColdSegment):
            return found, True
        # The frames are whole: only the index failed (a sealed 0.1.0 segment).
        _log.warning("%s; its frames are whole, so it is served from them", exc)
        seg, whole = found, True
    if seg_info["sealed"]:
        seg.seal()
    return seg, whole


def _keep_quarantined(log: TopicLog, seg: ColdSegment) -> None:
    """Restore a quarantine (``log/damaged.py``): its ``corrupt`` marker and its report;
    a damaged segment that retiring below ``earliest`` took out goes back (its file
    stays while nothing passes it, damaged.py rule 3)."""
    assert seg.damaged is not None
    if seg not in log.segments:
        i = bisect.bisect_left(log.bases, seg.base_seq)
        seg.retired, seg.live_count, seg.live_bytes = seg.count, 0, 0
        log.segments.insert(i, seg)
        log.bases.insert(i, seg.base_seq)
    if seg.damaged.last_seq is not None and seg.damaged.last_seq >= log.evict_floor:
        note_damage(log, seg, seg.damaged)
    else:
        seg.source.damage.report(seg.damaged)


class _Replay:
    """Applies WAL entries to the recovered registry (rule 2)."""

    def __init__(self, out: Recovered) -> None:
        self.out = out
        self.by_id: dict[int, TopicLog] = {
            log.topic_id: log for log in out.registry.topics.values()
        }
        self.skips: WalSkips | None = None

    def _resolve(self, log: TopicLog) -> TombstoneReason:
        """The reason for seqs this topic's head jumps over here: ``corrupt`` when the
        first entry of it after a skipped run shows the run held some of its seqs
        (wal_damage.py rule 2), else ``crash``."""
        if self.skips is None or log.topic_id not in self.skips.unresolved:
            return "crash"
        self.skips.unresolved.discard(log.topic_id)
        return "corrupt"

    def apply(self, kind: int, payload: bytes) -> None:
        if kind >= entries.FIRST_EXTENSION_ENTRY:
            self.out.extension_entries.append((kind, bytes(payload)))
            return
        if kind == entries.TOPIC_PUT:
            self._topic_put(entries.decode_topic_put(payload))
            return
        if kind == entries.APPEND:
            self._append(entries.decode_append(payload))
            return
        if kind == entries.APPEND_PRODUCER:
            self._append_producer(payload)
            return
        if kind == entries.PRODUCER:
            tid, pid, state = decode_producer(payload)
            owner = self.by_id.get(tid)
            if owner is not None:
                owner.producers[pid] = state
            return
        values = entries.decode_u64s(payload)
        log = self.by_id.get(values[0])
        if log is None:
            return  # the topic was deleted later in the log, or before the checkpoint
        if kind == entries.TOPIC_DELETE:
            self.out.registry.remove(log.name)
            del self.by_id[log.topic_id]
        elif kind == entries.GAP:
            self._gap(log, values)
        elif kind == entries.HEAD:
            self._head(log, values[1])
        elif kind == entries.WATERMARK:
            log.watermark = max(log.watermark, values[1])
        elif kind == entries.DELETE_BEFORE:
            log.delete_before(min(values[1], log.head + 1))
        elif kind == entries.DELETE_SEQS:
            seqs = list(values[1:])
            self._note_deleted(log, seqs)
            log.delete_seqs(seqs)
        elif kind == entries.EXPIRE:
            log.replay_expiry(values[1], values[2])
        else:
            raise StorageCorruptionError(f"unknown WAL entry type {kind}", path="wal")

    def _gap(self, log: TopicLog, values: tuple[int, ...]) -> None:
        # A head jump an earlier recovery logged: redo it at the same seq.
        seq, lost_from, lost_to = values[1], values[2], values[3]
        damaged = self._resolve(log) == "corrupt" or entries.gap_is_corrupt(values)
        if seq > log.head:
            log.head = seq - 1
            reason: TombstoneReason = "corrupt" if damaged else "crash"
            log.add_gap(reason, lost_to - lost_from + 1, lost_from, lost_to)

    def _head(self, log: TopicLog, head: int) -> None:
        # Exactly this head, nothing handed out above it (entries.py rule 5). Above the
        # replayed head only after a silent jump, or for an ephemeral topic's records.
        if log.config.durability == "ephemeral":
            if head > log.head:  # records handed out in memory, gone (rule 6)
                log.skip_to(head)
                log.restart_floor = log.cap_floor
        elif self._resolve(log) == "corrupt" and head > log.head:
            # The skipped run may have held appends up to this head: not silent.
            lost_from = log.head + 1
            log.head = head - 1
            log.add_gap("corrupt", head - lost_from + 1, lost_from, head)
        else:
            log.skip_silently(head)
        log.watermark = head

    def _topic_put(self, body: dict[str, Any]) -> None:
        name, topic_id = body["name"], int(body["id"])
        config = parse_config(body["config"], None, name)
        log = self.by_id.get(topic_id)
        if log is None:
            old = self.out.registry.get(name)
            if old is not None:  # an older instance of the name, deleted by the checkpoint's time
                self.out.registry.remove(name)
                self.by_id.pop(old.topic_id, None)
            log = TopicLog(name, topic_id, config)
            self.out.registry.add(log)
            self.by_id[topic_id] = log
        log.config = config
        log.watermark = max(log.watermark, int(body.get("watermark", 0)))
        if config.discard == "old":
            log.evict_to_caps()

    def _append(self, entry: entries.AppendEntry) -> None:
        log = self.by_id.get(entry.topic_id)
        if log is None:
            if self.skips is not None and self.skips.lost:
                self.skips.orphans += 1
            return
        n = len(iter_frames(entry.frames, entry.salt, verify=False))
        first = frame_seq(entry.frames, 0)
        reason = self._resolve(log)
        if first > log.head + 1:
            # Seqs never logged (appended while the topic was ephemeral, before a crash,
            # or in WAL entries that cannot be read) held records: report them.
            lost_from = log.head + 1
            log.head = first - 2
            log.add_gap(reason, first - lost_from, lost_from, first - 1)
        log.replay_append(entry.frames, entry.salt, first, n)
        log.last_write_ts = log.last_ts
        if log.config.discard == "old":
            log.evict_to_caps()

    def _append_producer(self, payload: bytes) -> None:
        """An append and its producer's state, together (entries.py rule 6)."""
        tid, salt, claim, key, frames = decode_append_producer(payload)
        self._append(entries.AppendEntry(tid, salt, frames))
        log = self.by_id.get(tid)
        if log is not None:
            first = frame_seq(frames, 0)
            last = first + len(iter_frames(frames, salt, verify=False)) - 1
            log.producers[claim.producer_id] = ProducerState(claim.epoch, key, first, last)

    def _note_deleted(self, log: TopicLog, seqs: list[int]) -> None:
        for seq in seqs:
            loc = log.locate(seq)
            if loc is not None:
                seg = log.segments[loc[0]]
                self.out.deleted.setdefault((log.topic_id, seg.base_seq), set()).add(loc[1])
