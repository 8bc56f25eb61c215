"""``topics tail --group``: a consumer group's named cursor, resumed and committed."""

from __future__ import annotations

import itertools

import topics

from .conftest import Run, ServerProcess
from .test_cli import no_ts

_n = itertools.count(1)


def _name(prefix: str) -> str:
    return f"{prefix}-grp-{next(_n)}"


def test_tail_group_resumes_after_what_it_printed(
    topics_cli: Run, cli_server: ServerProcess
) -> None:
    t = _name("tail")
    with topics.Client(cli_server.base_url) as client:
        client.write(t, [{"data": i} for i in range(1, 6)])
        first = topics_cli("tail", t, "--group", "billing", "--from", "0", "--count", "2")
        assert first.returncode == 0, first.stderr
        assert no_ts(first.stdout) == [f"{t}  1  1", f"{t}  2  2"]
        assert client.get_cursor(t, "billing").seq == 2  # committed what it printed
        again = topics_cli("tail", t, "--group", "billing", "--count", "2")
        assert again.returncode == 0, again.stderr
        assert no_ts(again.stdout) == [f"{t}  3  3", f"{t}  4  4"]
        assert client.get_cursor(t, "billing").seq == 4
        other = topics_cli("tail", t, "--group", "audit", "--from", "0", "--count", "1")
        assert no_ts(other.stdout) == [f"{t}  1  1"]  # another group, its own cursor
        assert [(c.cursor, c.seq) for c in client.list_cursors(t)] == [("audit", 1), ("billing", 4)]


def test_tail_without_group_commits_nothing(topics_cli: Run, cli_server: ServerProcess) -> None:
    t = _name("nogroup")
    with topics.Client(cli_server.base_url) as client:
        client.write(t, [{"data": 1}])
        assert topics_cli("tail", t, "--from", "0", "--count", "1").returncode == 0
        assert client.list_cursors(t) == []
