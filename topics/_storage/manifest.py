"""The checkpoint manifest: the engine's metadata, replaced atomically, two generations kept.

Role: a checkpoint writes the engine's metadata (topic configs and ids, heads, floors,
segment lists with durable lengths, router cursors, the WAL LSN it covers) as one JSON
body; recovery loads the newest valid one and replays the WAL from there. The body is
opaque here. Payloads are never in it, so a checkpoint costs the same at any data size.
(docs/STORAGE_FORMATS.md, "Manifest"; docs/ARCHITECTURE.md, "Durability": checkpoints write
it, and recovery loads it first.)

Rule 1: a manifest file is only ever created under a temporary name, written, fsynced,
  and then renamed to ``MANIFEST-<generation>`` (then the directory is synced). So a
  final name always points at bytes that were durable before the name existed.
Rule 2: every file carries magic, version, generation, body length and a CRC32C of the
  body, plus a CRC of the header; ``load_manifest`` trusts nothing that fails them.
Rule 3: after a new generation is durable, older generations are removed except the one
  just before it, so a newest file that rots still leaves a valid previous one.
  Consequence for the engine: keep the WAL (and any segment files) that the *previous*
  manifest still needs, i.e. trim the WAL only behind the older kept manifest's LSN.
Rule 4: ``load_manifest`` returns the newest generation that validates, falling back to
  older ones; temp files are never read. When manifest files exist but none validates it
  raises rather than returning None: None means "fresh data directory", and claiming that
  would silently throw away every topic.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import ujson

from topics._core import crc32c

from .fs import Fs, StorageCorruptionError

__all__ = [
    "MANIFEST_FORMAT_VERSION",
    "ManifestCorruptionError",
    "load_manifest",
    "manifest_generations",
    "write_manifest",
]

MANIFEST_MAGIC = b"TOPICMAN"
MANIFEST_FORMAT_VERSION = 1
# magic, version, reserved, generation, body_len, body_crc, header_crc
_HEADER = struct.Struct("<8sHHQIII")
HEADER_SIZE = _HEADER.size  # 32
_PREFIX = "MANIFEST-"
_TMP_SUFFIX = ".tmp"
# A manifest is metadata only; anything near this is a bug (or garbage in the length).
MAX_BODY_BYTES = 1 << 30


class ManifestCorruptionError(StorageCorruptionError):
    """Manifest files exist but none of them validates (Rule 4)."""


def manifest_name(generation: int) -> str:
    return f"{_PREFIX}{generation:016x}"


def manifest_generations(fs: Fs, dir: str) -> list[int]:
    """Generations with a final (non-temp) manifest file in ``dir``, ascending."""
    out = []
    for name in fs.listdir(dir):
        stem = name[len(_PREFIX) :]
        if name.startswith(_PREFIX) and len(stem) == 16 and stem == stem.lower():
            try:
                out.append(int(stem, 16))
            except ValueError:
                continue
    return sorted(out)


def _encode(generation: int, body: dict[str, Any]) -> bytes:
    data = ujson.dumps(body, ensure_ascii=False, escape_forward_slashes=False).encode()
    if len(data) > MAX_BODY_BYTES:
        raise ValueError(f"manifest body of {len(data)} bytes is over {MAX_BODY_BYTES}")
    head = _HEADER.pack(
        MANIFEST_MAGIC, MANIFEST_FORMAT_VERSION, 0, generation, len(data), crc32c(data), 0
    )
    head = head[:-4] + struct.pack("<I", crc32c(head[:-4]))
    return head + data


def write_manifest(fs: Fs, dir: str, generation: int, body: dict[str, Any]) -> None:
    """Durably replace the manifest with ``body`` as ``generation``.

    Blocks (several fsyncs): call it from a worker thread. Writing a generation that
    already exists (e.g. re-using the number of a newest file that failed to validate)
    replaces it atomically.

    Args:
        fs: the file system seam.
        dir: the directory holding manifests (must exist).
        generation: one more than the generation loaded or last written (>= 1).
        body: JSON-serialisable metadata (ujson).

    Raises:
        ValueError: a bad generation, or a body too large.
        OSError: a write, fsync or rename failed; the previous manifest is untouched.
    """
    if generation < 1:
        raise ValueError("manifest generations start at 1")
    data = _encode(generation, body)
    final = f"{dir}/{manifest_name(generation)}"
    tmp = final + _TMP_SUFFIX
    if fs.exists(tmp):
        # A fresh inode, never one whose earlier write or fsync may have failed.
        fs.remove(tmp)
    handle = fs.open(tmp, create=True)
    try:
        handle.write_at(0, data)
        # Bytes durable before the name (Rule 1): otherwise a crash after the rename
        # could leave the final name pointing at a hole.
        handle.sync_all()
    finally:
        handle.close()
    fs.rename(tmp, final)
    fs.sync_dir(dir)
    _remove_old(fs, dir, generation)


def _remove_old(fs: Fs, dir: str, generation: int) -> None:
    older = [g for g in manifest_generations(fs, dir) if g < generation]
    # Keep the newest older one (Rule 3). Removals are not synced: a removal lost in a
    # crash leaves an extra old generation, which load_manifest never prefers.
    for g in older[:-1]:
        fs.remove(f"{dir}/{manifest_name(g)}")
    for name in fs.listdir(dir):
        if name.startswith(_PREFIX) and name.endswith(_TMP_SUFFIX):
            fs.remove(f"{dir}/{name}")


def load_manifest(
    fs: Fs, dir: str, failed: list[tuple[str, str]] | None = None
) -> tuple[int, dict[str, Any]] | None:
    """The newest manifest that validates, as ``(generation, body)``.

    Args:
        failed: when given, gets ``(file name, why)`` of every newer generation that did
            not validate (recovery reports them: it fell back past them).

    Returns:
        None when ``dir`` holds no manifest at all (a fresh data directory).

    Raises:
        ManifestCorruptionError: manifest files exist, but none validates; the message
            names each file and what the operator can do.
    """
    generations = manifest_generations(fs, dir)
    problems: list[tuple[str, str]] = []
    for generation in reversed(generations):
        name = manifest_name(generation)
        result = read_manifest_body(fs, f"{dir}/{name}", generation)
        if isinstance(result, dict):
            if failed is not None:
                failed.extend(problems)
            return generation, result
        problems.append((name, result))
    if problems:
        raise ManifestCorruptionError(
            _refusal(dir, problems),
            path=f"{dir}/{manifest_name(generations[-1])}",
            offset=0,
        )
    return None


def _refusal(dir: str, problems: list[tuple[str, str]]) -> str:
    """Why the data directory cannot be opened and the operator's three ways out."""
    data_dir = os.path.dirname(dir.rstrip("/")) or "."
    files = ", ".join(f"{dir}/{name} ({why})" for name, why in problems)
    newer = any(why.startswith("unsupported format version") for _, why in problems)
    hint = "; an unsupported format version means a newer release wrote it" if newer else ""
    return (
        f"no manifest validates: {files}; without one no topic can be found{hint}. "
        f"Run `topics verify {data_dir}` to see the damage, then restore the newest backup "
        f"with `topics restore FILE {data_dir}`; moving {dir} aside lets the server start, "
        "but EMPTY: it gives up every topic and record in this directory"
    )


def read_manifest_body(fs: Fs, path: str, generation: int) -> dict[str, Any] | str:
    """The body, or why the file does not validate."""
    handle = fs.open(path)
    try:
        raw = handle.read_at(0, HEADER_SIZE)
        if len(raw) < HEADER_SIZE:
            return "short header"
        magic, version, _, gen, body_len, body_crc, head_crc = _HEADER.unpack(raw)
        if magic != MANIFEST_MAGIC or crc32c(raw[:-4]) != head_crc:
            return "bad header checksum"
        if version != MANIFEST_FORMAT_VERSION:
            return f"unsupported format version {version}"
        if gen != generation:
            return f"header says generation {gen}"
        if body_len > MAX_BODY_BYTES:
            return f"body length {body_len} too large"
        data = handle.read_at(HEADER_SIZE, body_len)
    finally:
        handle.close()
    if len(data) != body_len or crc32c(data) != body_crc:
        return "truncated or checksum-bad body"
    try:
        body = ujson.loads(data)
    except ValueError as exc:
        return f"body is not JSON: {exc}"
    if not isinstance(body, dict):
        return "body is not a JSON object"
    return body
