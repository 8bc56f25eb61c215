"""What ``topics verify`` reads from the manifests before it looks at any other file.

Role: the newest manifest that validates names each topic and lists its segments with
their recorded lengths; the checker needs that to bound what it reads of a live segment, to
name the topic and seqs a damaged file holds, and to tell a listed file that is missing
from a leftover nobody needs. Read-only, like the rest of the checker (``verify.py``).

Rules:
1. Generations are tried newest first, exactly as ``load_manifest`` does; a file that does
   not validate is kept as a problem (the checker reports it), never read further.
2. A segment the newest valid manifest lists is described by that manifest. A segment only
   an older valid generation lists is still described (recovery falls back to that
   generation when the newest rots, and keeps its files), marked ``fallback``.
3. A segment's seq range ends one below the next listed segment's base, or at the topic's
   head for its last segment: never narrower than the seqs it can hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .fs import Fs
from .manifest import manifest_generations, manifest_name, read_manifest_body

__all__ = ["MANIFEST_DIR", "SEGMENTS_DIR", "ManifestView", "SegmentEntry", "load_view"]

# The data directory's layout (``topics._persistence.store.StorePaths``, a layer above).
MANIFEST_DIR = "manifest"
SEGMENTS_DIR = "segments"


@dataclass(frozen=True, slots=True)
class SegmentEntry:
    """One segment as a manifest lists it."""

    topic_id: int
    topic: str
    base: int
    length: int  # frame bytes recorded durable
    salt: int
    sealed: bool
    last_seq: int | None  # rule 3; None when the manifest gives no bound
    fallback: bool  # listed only by an older generation (rule 2)


@dataclass(frozen=True, slots=True)
class ManifestView:
    """The manifests of one data directory, as the checker sees them."""

    generations: tuple[int, ...] = ()  # final manifest files present, ascending
    newest_valid: int | None = None
    covered_lsn: int | None = None  # of the newest valid one
    problems: Mapping[int, str] = field(default_factory=dict)  # generation -> why invalid
    topics: Mapping[int, str] = field(default_factory=dict)  # topic id -> name
    segments: Mapping[tuple[int, int], SegmentEntry] = field(default_factory=dict)

    @property
    def cannot_start(self) -> bool:
        """Manifests exist but none validates: recovery refuses the directory."""
        return bool(self.generations) and self.newest_valid is None


def load_view(fs: Fs, root: str) -> ManifestView:
    """Read every manifest generation under ``root`` (rules 1-2).

    Raises:
        OSError: a manifest could not be read (other than one removed meanwhile).
    """
    mdir = f"{root}/{MANIFEST_DIR}"
    if not fs.exists(mdir):
        return ManifestView()
    generations = manifest_generations(fs, mdir)
    problems: dict[int, str] = {}
    bodies: list[tuple[int, dict[str, Any]]] = []
    for generation in reversed(generations):
        try:
            body = read_manifest_body(fs, f"{mdir}/{manifest_name(generation)}", generation)
        except FileNotFoundError:  # superseded by a checkpoint since the listing
            continue
        if isinstance(body, str):
            problems[generation] = body
        else:
            bodies.append((generation, body))
    topics: dict[int, str] = {}
    segments: dict[tuple[int, int], SegmentEntry] = {}
    valid: list[tuple[int, int]] = []  # (generation, covered LSN), newest first
    for generation, body in bodies:
        try:  # parse into copies: a body that fails halfway adds nothing
            more_topics, more_segments = dict(topics), dict(segments)
            _add_body(body, more_topics, more_segments, fallback=bool(valid))
            covered = int(body["covered_lsn"])
        except (KeyError, TypeError, ValueError) as exc:
            # CRC-valid but not the shape recovery reads (a bug, or another version).
            problems[generation] = f"the body does not describe topics ({exc!r})"
            continue
        topics, segments = more_topics, more_segments
        valid.append((generation, covered))
    present = tuple(sorted([*problems, *(g for g, _ in valid)]))
    return ManifestView(
        generations=present,
        newest_valid=valid[0][0] if valid else None,
        covered_lsn=valid[0][1] if valid else None,
        problems=problems,
        topics=topics,
        segments=segments,
    )


def _add_body(
    body: dict[str, Any],
    topics: dict[int, str],
    segments: dict[tuple[int, int], SegmentEntry],
    *,
    fallback: bool,
) -> None:
    for topic in body.get("topics", ()):
        topic_id, name = int(topic["id"]), str(topic["name"])
        topics.setdefault(topic_id, name)
        listed = sorted(topic.get("segments", ()), key=lambda s: int(s["base"]))
        head = int(topic.get("head", 0))
        for i, seg in enumerate(listed):
            base = int(seg["base"])
            if (topic_id, base) in segments:
                continue
            last = int(listed[i + 1]["base"]) - 1 if i + 1 < len(listed) else head
            segments[(topic_id, base)] = SegmentEntry(
                topic_id=topic_id,
                topic=name,
                base=base,
                length=int(seg["length"]),
                salt=int(seg["salt"]),
                sealed=bool(seg["sealed"]),
                last_seq=last if last >= base else None,
                fallback=fallback,
            )
