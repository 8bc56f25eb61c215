"""A power cut at every call of the fault workload never leaves a sealed segment whose
frames carry tags without a valid tag index (topics/_storage/tag_index.py rule 2).

The workload (test_engine_faults.workload) writes tagged records to topic ``f`` and
untagged ones to ``c`` on tiny segments, so its checkpoints seal tagged, untagged and
partly deleted segments. The crashed image is examined as it lies, before recovery
would tidy it: sealed means the index is there, and then the tags file must be too.
"""

from __future__ import annotations

import pytest

from tests.crash.test_engine_faults import count_ops, crash_at
from tests.support.fakedisk import FakeDisk
from topics._core import SegmentBuffer
from topics._storage.segment_files import parse_segment_name, read_segment
from topics._storage.tag_index import read_tag_index, tagged_frames

pytestmark = pytest.mark.crash

SEGMENTS = "/data/segments"


def _check_image(disk: FakeDisk) -> tuple[int, int]:
    """(sealed tagged segments, sealed untagged ones) on the image, each checked."""
    tagged_n = untagged_n = 0
    if not disk.exists(SEGMENTS):
        return 0, 0
    for name in disk.listdir(SEGMENTS):
        ident = parse_segment_name(name)
        path = f"{SEGMENTS}/{name}"
        if ident is None or not disk.exists(path + ".idx"):
            continue
        data = read_segment(disk, path)
        seg = SegmentBuffer.from_frames(data.frames, data.base_seq, data.salt)
        tagged = tagged_frames(seg)
        if not tagged:
            untagged_n += 1
            assert not disk.exists(path + ".tags"), f"{name}: untagged, yet a tags file"
            continue
        tagged_n += 1
        index = read_tag_index(
            disk,
            path,
            topic_id=data.topic_id,
            base_seq=data.base_seq,
            salt=data.salt,
            frame_count=seg.count,
        )
        assert index.prefix(b"") == [i for i, _ in tagged], name
        for i, tag in tagged:
            assert i in index.exact(tag), (name, i, tag)
    return tagged_n, untagged_n


async def test_every_crash_point_leaves_sealed_tagged_segments_with_their_tags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, total = await count_ops(monkeypatch)
    seen_tagged = seen_untagged = 0
    for n in range(1, total + 2):
        for torn in (False, True):
            disk, _, _ = await crash_at(n, n, torn=torn)
            try:
                tagged_n, untagged_n = _check_image(disk)
            except BaseException as exc:
                exc.add_note(f"crash before op {n}/{total} ({'torn' if torn else 'untorn'})")
                raise
            seen_tagged = max(seen_tagged, tagged_n)
            seen_untagged = max(seen_untagged, untagged_n)
    assert seen_tagged, "the workload sealed no tagged segment"
    assert seen_untagged, "the workload sealed no untagged segment"
