"""``topics router put`` creates an absent source and dest (contract §6, issue 19)."""

from __future__ import annotations

import json
import time

from .conftest import Run


def test_router_put_creates_its_source_and_dest(topics_cli: Run) -> None:
    n = time.monotonic_ns()
    src, dst = f"cli-auto-src-{n}", f"cli-auto-dst-{n}"
    out = topics_cli("router", "put", "--source", src, "--dest", dst)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"created router {src}->{dst}: {src} -> {dst}\n"
    for topic in (src, dst):
        stat = topics_cli("--json", "stat", topic)
        assert stat.returncode == 0, stat.stderr
        assert json.loads(stat.stdout)["head_seq"] == 0
    refused = topics_cli("router", "put", "--source", f"{src}x", "--dest", f"{dst}x",
                         "--no-create-dest")  # fmt: skip
    assert refused.returncode == 3  # not found: the dest may not be created
    assert topics_cli("stat", f"{src}x").returncode == 3  # and no source was made either
