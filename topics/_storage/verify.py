"""``topics verify``: check every checksum, index and manifest of a data directory, read-only.

Role: the integrity checker behind ``topics verify DATA_DIR`` (topics/cli/verify_cmd.py),
built so that an online scrub can run it one file at a time: :func:`check_file` checks one
file and returns its findings, :func:`verify_data_dir` walks the whole directory. The byte
walkers are ``verify_frames.py``, the manifest reading ``verify_view.py``; what each
severity means for an operator is docs/OPERATIONS.md, "Checking a data directory".

Rules:
1. Safe beside a running server: every file is opened read-only through the ``Fs`` seam,
   the directory lock is never taken, nothing is written.
2. A file that vanishes between the listing and its read was removed by a checkpoint
   (superseded segments, a trimmed WAL): not damage, skipped. A segment the newest manifest
   lists and that is missing is reported only if it is still listed after a second look.
3. A segment not yet sealed is read only up to the length its manifest recorded: a live
   writer may be appending past it. A torn tail of the NEWEST WAL file is what a crash or a
   write in progress leaves: ``advice``. A bad frame in an older WAL file, or one with
   valid frames after it in the newest, is ``data``.
4. A finding's seq range is never narrower than the seqs at risk. When the checker had to
   bound it from the manifest (the next segment's base, the topic's head) instead of from
   the file, it says ``widened``.
5. Severities: ``fatal`` — the server cannot start (no manifest validates); ``data`` —
   records or log entries cannot be read back (or recovery would refuse the file);
   ``advice`` — nothing lost (the heads table, leftovers, a torn WAL tail).
"""

from __future__ import annotations

import array
import struct
from dataclasses import dataclass

from topics._core import crc32c

from .fs import Fs, RealFs, StorageCorruptionError
from .heads import HEADS_FILE
from .manifest import manifest_name, read_manifest_body
from .segment_files import parse_segment_name
from .tag_index import read_tag_index
from .verify_findings import SEVERITIES, Checked, Finding
from .verify_frames import IndexView, decode_index, walk_segment
from .verify_view import (
    MANIFEST_DIR,
    SEGMENTS_DIR,
    ManifestView,
    SegmentEntry,
    load_view,
)
from .verify_wal import WAL_DIR, check_wal, check_wal_dir
from .wal_reader import wal_file_name, wal_files

__all__ = [
    "SEVERITIES",
    "Finding",
    "ManifestView",
    "Checked",
    "VerifyReport",
    "check_file",
    "check_file_counted",
    "load_view",
    "verify_data_dir",
]

# File headers, as segment_files.py and heads.py write them.
_SEG_HEADER = struct.Struct("<8sHHIQQII")  # magic, version, size, salt, topic, base, 0, crc
_HEADER_SIZE = 40
_HEADS_HEADER = struct.Struct("<8sI4x16s")  # magic, version, boot id
_HEADS_SLOT = 16
_FRAME_PROBLEMS = {"crc": "crc", "truncated": "truncated", "kind": "bad frame", "seq": "seq"}


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What :func:`verify_data_dir` found."""

    data_dir: str
    files_checked: int = 0
    bytes_checked: int = 0
    findings: tuple[Finding, ...] = ()
    manifest_generation: int | None = None  # the newest that validates
    error: str | None = None  # why the check could not run (or not completely)

    @property
    def ran(self) -> bool:
        return self.error is None

    @property
    def damaged(self) -> bool:
        """Any finding worse than advice."""
        return any(f.severity != "advice" for f in self.findings)


def check_file(fs: Fs, data_dir: str, rel_path: str, view: ManifestView) -> list[Finding]:
    """Check one file of ``data_dir`` (``rel_path`` as :func:`verify_data_dir` lists them:
    ``segments/…seg`` also checks its index and tag index) against ``view`` (from
    :func:`load_view`). A file that no longer exists has no findings (rule 2); a name that
    is not the engine's is ignored.

    Raises:
        OSError: the file could not be read (permission denied, an I/O error).
    """
    return _check(fs, data_dir.rstrip("/"), rel_path, view).findings


def check_file_counted(fs: Fs, data_dir: str, rel_path: str, view: ManifestView) -> Checked:
    """:func:`check_file`, with how many bytes it read (the online scrub paces by them)."""
    return _check(fs, data_dir.rstrip("/"), rel_path, view)


def _check(fs: Fs, root: str, rel: str, view: ManifestView) -> Checked:
    folder, _, name = rel.rpartition("/")
    try:
        if name.endswith(".tmp"):
            return _leftover(rel) if folder in ("", SEGMENTS_DIR, MANIFEST_DIR) else Checked()
        if folder == SEGMENTS_DIR:
            return _check_segment_name(fs, root, name, view)
        if folder == WAL_DIR and name.endswith(".wal"):
            numbers = wal_files(fs, f"{root}/{WAL_DIR}")
            newest = bool(numbers) and name == wal_file_name(numbers[-1])
            return check_wal(fs, root, rel, newest=newest)
        if folder == MANIFEST_DIR and name.startswith("MANIFEST-"):
            return _check_manifest(fs, root, rel, view)
        if rel == HEADS_FILE:
            return _check_heads(fs, root)
    except FileNotFoundError:  # rule 2
        return Checked()
    return Checked()


def _leftover(rel: str) -> Checked:
    return Checked(
        [
            Finding(
                rel,
                _kind_of(rel),
                "leftover temp file",
                "advice",
                "a write in progress, or one a crash interrupted; the next write of that "
                "file replaces it",
            )
        ]
    )


def _kind_of(rel: str) -> str:
    if rel.startswith(f"{MANIFEST_DIR}/"):
        return "manifest"
    if rel.startswith(f"{SEGMENTS_DIR}/"):
        return "index" if ".idx" in rel else "tags" if ".tags" in rel else "segment"
    return "heads"


# -- segments ---------------------------------------------------------------------------


def _check_segment_name(fs: Fs, root: str, name: str, view: ManifestView) -> Checked:
    """A ``.seg`` with its sidecars, or one sidecar (an index or tag index) alone."""
    for suffix, kind in ((".idx", "index"), (".tags", "tags")):
        if name.endswith(suffix):
            seg_name = name[: -len(suffix)]
            if parse_segment_name(seg_name) is None:
                return Checked()
            if not fs.exists(f"{root}/{SEGMENTS_DIR}/{seg_name}"):
                rel = f"{SEGMENTS_DIR}/{name}"
                problem, detail = "orphan", "its segment is gone (a removal a crash cut short)"
                return Checked([Finding(rel, kind, problem, "advice", detail)], files=1)
            whole = _check_segment(fs, root, seg_name, view)
            whole.findings = [f for f in whole.findings if f.kind == kind]
            return whole
    return _check_segment(fs, root, name, view)


def _check_segment(fs: Fs, root: str, name: str, view: ManifestView) -> Checked:
    """One segment file with its index and tag index (rules 3-4). Kept whole: the
    header, the frame walk and the index comparison share the file's handle and the
    widened seq range each finding carries, and read as one check in this order."""
    owner = parse_segment_name(name)
    if owner is None:
        return Checked()
    topic_id, base = owner
    rel = f"{SEGMENTS_DIR}/{name}"
    path = f"{root}/{rel}"
    entry = view.segments.get(owner)
    topic = view.topics.get(topic_id)
    if entry is None:
        if not fs.exists(path):
            return Checked()
        detail = (
            "no valid manifest lists it: a checkpoint in progress, or a leftover that "
            "the next recovery removes"
        )
        finding = Finding(rel, "segment", "unlisted", "advice", detail, topic, topic_id, base)
        return Checked([finding], files=1)
    out = Checked(files=1)
    at = _SegFinding(rel, entry)
    idx = _read_whole(fs, path + ".idx")
    index: IndexView | str | None = None
    trusted_index: IndexView | None = None
    if idx is not None:
        out.files += 1
        out.bytes += len(idx)
        index = decode_index(idx)
        if isinstance(index, IndexView) and _index_names(index, entry):
            at.last, at.widened = base + len(index.offsets) - 1, False
            trusted_index = index
    handle = fs.open(path)
    try:
        size = handle.size()
        header = handle.read_at(0, _HEADER_SIZE)
        out.bytes += len(header)
        problem = _segment_header_problem(header, entry)
        if problem is not None:
            out.findings.append(at.finding("segment", "header", problem, offset=0))
            return out
        # Sealed (the index exists): it never changes again; a valid index says how long
        # it is. Unsealed: only the recorded durable prefix (rule 3).
        if trusted_index is not None:
            length = trusted_index.frames_length
        else:
            length = size - _HEADER_SIZE if idx is not None else entry.length
        walk = walk_segment(handle, _HEADER_SIZE, length, entry.salt, base)
        out.bytes += walk.bytes_read
    finally:
        handle.close()
    if walk.bad is None and at.widened:
        at.last, at.widened = base + len(walk.offsets) - 1, False
    if walk.bad is not None:
        bad = walk.bad
        out.findings.append(
            at.finding(
                "segment",
                _FRAME_PROBLEMS.get(bad.problem, bad.problem),
                f"frame {bad.frame} (seq {base + bad.frame}) {bad.detail}; the frames "
                "after it cannot be read back either",
                offset=_HEADER_SIZE + bad.offset,
                first=base + bad.frame,
            )
        )
    elif index is None and entry.sealed and not entry.fallback:
        detail = "the manifest says sealed but the index file is gone; the frames check out"
        out.findings.append(at.finding("index", "missing", detail, severity="advice"))
    elif index is not None:
        mismatch = _index_problem(index, entry, size - _HEADER_SIZE, walk.offsets)
        if mismatch is not None:
            out.findings.append(at.finding("index", *mismatch))
    frames = len(walk.offsets) if walk.bad is None else None
    out.findings.extend(_check_tags(fs, path, at, frames))
    return out


@dataclass(slots=True)
class _SegFinding:
    """Builds the findings of one segment: its topic and seq range (rule 4)."""

    rel: str
    entry: SegmentEntry
    last: int | None = None
    widened: bool = True

    def __post_init__(self) -> None:
        self.last = self.entry.last_seq

    def finding(
        self,
        kind: str,
        problem: str,
        detail: str,
        *,
        severity: str = "data",
        offset: int | None = None,
        first: int | None = None,
    ) -> Finding:
        path = self.rel if kind == "segment" else f"{self.rel}.{'idx' if kind == 'index' else kind}"
        e = self.entry
        return Finding(
            path,
            kind,
            problem,
            severity,
            detail,
            e.topic,
            e.topic_id,
            e.base if first is None else first,
            self.last,
            self.widened,
            offset,
        )


def _segment_header_problem(raw: bytes, entry: SegmentEntry) -> str | None:
    if len(raw) < _HEADER_SIZE:
        return f"the file is {len(raw)} bytes, shorter than its header"
    magic, version, size, salt, topic_id, base, _, crc = _SEG_HEADER.unpack(raw)
    if magic != b"TOPICSEG" or crc32c(raw[:-4]) != crc:
        return "bad segment header checksum"
    if version != 1 or size != _HEADER_SIZE:
        return f"unsupported segment version {version}"
    if (topic_id, base, salt) != (entry.topic_id, entry.base, entry.salt):
        return "the header names another topic, base seq or salt than its name and manifest"
    return None


def _read_whole(fs: Fs, path: str) -> bytes | None:
    try:
        handle = fs.open(path)
    except FileNotFoundError:
        return None
    try:
        return handle.read_at(0, handle.size())
    finally:
        handle.close()


def _index_problem(
    view: IndexView | str, entry: SegmentEntry, length: int, offsets: array.array[int]
) -> tuple[str, str] | None:
    if isinstance(view, str):
        return "crc" if "checksum" in view else "header", f"{view}; the frames check out"
    if not _index_names(view, entry):
        return "index mismatch", "the index names another salt, topic or base seq"
    if view.frames_length != length or view.offsets != offsets:
        return "index mismatch", (
            f"the segment has {length} frame bytes in {len(offsets)} frames; its index says "
            f"{view.frames_length} bytes in {len(view.offsets)} frames"
        )
    return None


def _index_names(view: IndexView, entry: SegmentEntry) -> bool:
    return (view.salt, view.topic_id, view.base_seq) == (entry.salt, entry.topic_id, entry.base)


def _check_tags(fs: Fs, seg_path: str, at: _SegFinding, frames: int | None) -> list[Finding]:
    """A segment's tag index (``tag_index.py``): advice only, since the frames carry the
    same tags and a tag delete falls back to them (``log/cold_segment.py``)."""
    entry = at.entry
    try:
        read_tag_index(
            fs,
            seg_path,
            topic_id=entry.topic_id,
            base_seq=entry.base,
            salt=entry.salt,
            frame_count=frames,
        )
    except FileNotFoundError:
        return []
    except (StorageCorruptionError, ValueError) as exc:
        return [at.finding("tags", "bad tag index", str(exc), severity="advice")]
    return []


# -- manifests and the heads table ----------------------------------------------------------


def _check_manifest(fs: Fs, root: str, rel: str, view: ManifestView) -> Checked:
    name = rel.rpartition("/")[2]
    stem = name[len("MANIFEST-") :]
    try:
        generation = int(stem, 16)
    except ValueError:
        return Checked()
    if name != manifest_name(generation):
        return Checked()
    path = f"{root}/{rel}"
    handle = fs.open(path)  # FileNotFoundError: superseded meanwhile (rule 2)
    try:
        size = handle.size()
    finally:
        handle.close()
    body = read_manifest_body(fs, path, generation)
    if not isinstance(body, str) and generation in view.problems:
        body = view.problems[generation]  # checksums fine, but not a manifest load_view reads
    out = Checked(files=1, bytes=size)
    if isinstance(body, str):
        if view.cannot_start or view.newest_valid is None:
            severity, more = "fatal", "no manifest validates: the server cannot start"
        else:
            severity = "data"
            more = f"generation {view.newest_valid} is valid and is the one recovery loads"
        problem = "truncated" if "short" in body or "truncated" in body else "crc"
        if "version" in body or "generation" in body or "JSON" in body or "body" in body:
            problem = "header"
        out.findings.append(
            Finding(rel, "manifest", problem, severity, f"{body}; {more}", offset=0)
        )
    return out


def _check_heads(fs: Fs, root: str) -> Checked:
    raw = _read_whole(fs, f"{root}/{HEADS_FILE}")
    if raw is None:
        return Checked()
    out = Checked(files=1, bytes=len(raw))
    why = "advice for crash recovery only: without it recovery uses the durable watermark"
    if len(raw) < _HEADS_HEADER.size:
        out.findings.append(Finding(HEADS_FILE, "heads", "truncated", "advice", why, offset=0))
        return out
    magic, version, _ = _HEADS_HEADER.unpack_from(raw)
    if magic != b"TOPICSHD" or version != 1:
        out.findings.append(Finding(HEADS_FILE, "heads", "header", "advice", why, offset=0))
    elif (len(raw) - _HEADS_HEADER.size) % _HEADS_SLOT:
        out.findings.append(
            Finding(HEADS_FILE, "heads", "size", "advice", f"not a whole number of slots; {why}")
        )
    return out


# -- the whole directory ----------------------------------------------------------------


def verify_data_dir(fs: Fs | None, data_dir: str) -> VerifyReport:
    """Check every file of ``data_dir`` (rules 1-5); never raises for what it finds on disk.

    ``error`` in the report says why the check could not run, or not over every file
    (not a directory, permission denied, not a topics data directory).
    """
    fs = fs if fs is not None else RealFs()
    root = data_dir.rstrip("/") or "/"
    try:
        top = fs.listdir(root)
    except OSError as exc:
        return VerifyReport(data_dir, error=f"cannot list {data_dir}: {exc.strerror or exc}")
    if not {MANIFEST_DIR, WAL_DIR, SEGMENTS_DIR} & set(top):
        return VerifyReport(
            data_dir,
            error=f"{data_dir} is not a topics data directory (no manifest, wal or segments)",
        )
    try:
        view = load_view(fs, root)
    except OSError as exc:
        return VerifyReport(data_dir, error=f"cannot read the manifests: {exc}")
    total = Checked()
    errors: list[str] = []
    wal_numbers: list[int] = []
    wal_lsns: dict[int, tuple[int, int]] = {}
    for rel in _listing(fs, root, top, errors):
        try:
            got = _check(fs, root, rel, view)
        except OSError as exc:
            errors.append(f"cannot read {rel}: {exc.strerror or exc}")
            continue
        total.findings.extend(got.findings)
        total.files += got.files
        total.bytes += got.bytes
        if rel.startswith(f"{WAL_DIR}/"):
            number = int(rel[len(WAL_DIR) + 1 : -4], 16)
            wal_numbers.append(number)
            if got.lsns is not None:
                wal_lsns[number] = got.lsns
    total.findings.extend(check_wal_dir(fs, root, wal_numbers, wal_lsns, view.covered_lsn))
    total.findings.extend(_missing_segments(fs, root, view))
    total.findings = _second_look(fs, root, total.findings)
    if view.cannot_start:
        total.findings.append(
            Finding(
                f"{MANIFEST_DIR}/",
                "manifest",
                "no valid manifest",
                "fatal",
                "manifest files exist but none validates: the server cannot start from this "
                "directory; restore it from a backup",
            )
        )
    return VerifyReport(
        data_dir,
        files_checked=total.files,
        bytes_checked=total.bytes,
        findings=tuple(total.findings),
        manifest_generation=view.newest_valid,
        error="; ".join(errors) or None,
    )


def _listing(fs: Fs, root: str, top: list[str], errors: list[str]) -> list[str]:
    """Every file the checker looks at, relative to ``root``; WAL files in number order."""
    out = [name for name in top if name in (HEADS_FILE, f"{HEADS_FILE}.tmp")]
    for folder in (MANIFEST_DIR, SEGMENTS_DIR):
        if folder in top:
            try:
                names = fs.listdir(f"{root}/{folder}")
            except OSError as exc:
                errors.append(f"cannot list {folder}: {exc.strerror or exc}")
                continue
            present = set(names)
            # A segment's check covers its index and tag index: list those only alone.
            out.extend(
                f"{folder}/{name}"
                for name in names
                if not (name.endswith((".idx", ".tags")) and name.rsplit(".", 1)[0] in present)
            )
    if WAL_DIR in top:
        try:
            out.extend(f"{WAL_DIR}/{wal_file_name(n)}" for n in wal_files(fs, f"{root}/{WAL_DIR}"))
        except OSError as exc:
            errors.append(f"cannot list {WAL_DIR}: {exc.strerror or exc}")
    return out


def _missing_segments(fs: Fs, root: str, view: ManifestView) -> list[Finding]:
    """Segments the newest valid manifest lists that are not on disk, after a second look
    (rule 2: a checkpoint may have dropped them and written a newer manifest meanwhile)."""
    gone = [e for e in view.segments.values() if not e.fallback and not _exists(fs, root, e)]
    if not gone:
        return []
    again = load_view(fs, root).segments
    out = []
    for e in gone:
        now = again.get((e.topic_id, e.base))
        if now is None or now.fallback or _exists(fs, root, e):
            continue
        rel = f"{SEGMENTS_DIR}/{_seg_name(e)}"
        detail = "the newest valid manifest lists it; recovery cannot load this topic"
        out.append(Finding(rel, "segment", "missing", "data", detail, e.topic, e.topic_id,
                           e.base, e.last_seq, True))  # fmt: skip
    return out


def _second_look(fs: Fs, root: str, findings: list[Finding]) -> list[Finding]:
    """Drop what a running server finished meanwhile: a segment a newer manifest lists by
    now, a temp file that was renamed or removed (otherwise every check beside a live
    server would report the checkpoint in flight)."""
    transient = ("unlisted", "leftover temp file")
    if not any(f.problem in transient for f in findings):
        return findings
    listed = load_view(fs, root).segments
    keep = []
    for f in findings:
        if f.problem in transient:
            owner = parse_segment_name(f.path.rpartition("/")[2])
            if not fs.exists(f"{root}/{f.path}") or (owner is not None and owner in listed):
                continue
        keep.append(f)
    return keep


def _seg_name(e: SegmentEntry) -> str:
    return f"{e.topic_id:016x}-{e.base:016x}.seg"


def _exists(fs: Fs, root: str, e: SegmentEntry) -> bool:
    return fs.exists(f"{root}/{SEGMENTS_DIR}/{_seg_name(e)}")
